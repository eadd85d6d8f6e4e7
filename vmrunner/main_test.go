package vmrunner

import (
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
)

// libvirtSocket is where the local libvirtd listens.
const libvirtSocket = "/run/libvirt/libvirt-sock"

var (
	daemonsOnce sync.Once
	daemons     []*exec.Cmd // started by these tests, stopped in TestMain
	daemonsErr  string
)

// needLibvirtd makes sure a local libvirtd runs: scripts/test.sh starts
// one; when it did not (go test run by hand), start virtlogd and libvirtd
// in the foreground as our children and stop them after the tests.
func needLibvirtd(t testing.TB) {
	t.Helper()
	testenv.NeedsVM(t)
	if !libvirtdUp() {
		testenv.Tools(t, "libvirtd", "virtlogd")
		testenv.Root(t) // to start libvirtd
	}
	daemonsOnce.Do(func() {
		if libvirtdUp() {
			return
		}
		for _, name := range []string{"virtlogd", "libvirtd"} {
			cmd := exec.Command(name)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
			if err := cmd.Start(); err != nil {
				daemonsErr = "start " + name + ": " + err.Error()
				return
			}
			daemons = append(daemons, cmd)
		}
		for i := 0; i < 100; i++ {
			if libvirtdUp() {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		daemonsErr = "libvirtd started but " + libvirtSocket + " did not appear in 10s"
	})
	if daemonsErr != "" {
		testenv.Missing(t, "%s", daemonsErr)
	}
}

// libvirtdUp reports whether libvirtd answers on its socket; a socket
// file left by a killed daemon does not count.
func libvirtdUp() bool {
	c, err := net.DialTimeout("unix", libvirtSocket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(daemons) - 1; i >= 0; i-- {
		daemons[i].Process.Signal(syscall.SIGTERM)
		daemons[i].Wait()
	}
	os.Exit(code)
}
