package dnstest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// Resolver is a real DNS server, Debian's dnsmasq, on loopback: it answers
// the TXT records it is given itself, and forwards the names of the
// unreachable zones to a name server that never answers (a socket on
// loopback that reads every query and drops it, as a firewall or a dead
// host does), so that a lookup of them gets no answer at all. What a
// signing domain whose DNS is down looks like to patchbot.
//
//	r := dnstest.StartDnsmasq(t, map[string]string{k.Name(): k.TXT}, "unreachable.test")
//	cfg.DKIM.DNS = r.Addr
type Resolver struct {
	Addr string // 127.0.0.1:port, UDP and TCP

	dropped *net.UDPConn
	cmd     *exec.Cmd
	log     bytes.Buffer
}

// StartDnsmasq starts dnsmasq with txt (name -> record) and the zones
// whose name server never answers, until the test ends. It skips the test
// when dnsmasq is not installed (Debian's dnsmasq-base;
// scripts/install-deps.sh installs it).
func StartDnsmasq(t testing.TB, txt map[string]string, unreachable ...string) *Resolver {
	t.Helper()
	bin := testenv.Tool(t, "dnsmasq")
	hole, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	go func() { // read and drop every query
		buf := make([]byte, 4096)
		for {
			if _, _, err := hole.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	r := &Resolver{dropped: hole}
	t.Cleanup(func() { hole.Close() })
	for try := 0; ; try++ {
		port := freeUDPAndTCP(t)
		args := []string{"--keep-in-foreground", "--no-resolv", "--no-hosts", "--conf-file=/dev/null", "--pid-file=",
			"--listen-address=127.0.0.1", "--bind-interfaces", fmt.Sprintf("--port=%d", port),
			"--dns-forward-max=10000", "--cache-size=0", "--log-facility=-"}
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		for _, z := range unreachable {
			args = append(args, fmt.Sprintf("--server=/%s/%s", z, strings.Replace(hole.LocalAddr().String(), ":", "#", 1)))
		}
		for name, rec := range txt {
			args = append(args, fmt.Sprintf("--txt-record=%s,%s", name, rec))
		}
		r.cmd = exec.Command(bin, args...)
		r.cmd.Stdout, r.cmd.Stderr = &r.log, &r.log
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := r.cmd.Start(); err != nil {
			t.Fatalf("starting dnsmasq: %v", err)
		}
		r.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		if r.up() {
			break
		}
		r.cmd.Process.Kill()
		r.cmd.Wait()
		if try == 5 {
			t.Fatalf("dnsmasq did not start:\n%s", r.log.String())
		}
	}
	t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
	return r
}

// up waits until dnsmasq answers on TCP.
func (r *Resolver) up() bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", r.Addr); err == nil {
			c.Close()
			return true
		}
		if r.cmd.ProcessState != nil {
			return false
		}
	}
	return false
}

// freeUDPAndTCP is a loopback port free for both.
func freeUDPAndTCP(t testing.TB) int {
	for {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		u.Close()
		if err == nil {
			l.Close()
			return port
		}
	}
}
