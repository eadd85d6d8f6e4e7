package vmrunner

// Over 600 lines on purpose: this is the libvirt backend whole, as qemu.go
// is the other one: the pool over a connection, the domain it defines,
// the agent's and the console's streams, and the stop events, which all
// share one libvirtVM.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// DefaultURI is the libvirt connection used when Config.URI is empty: the
// local system daemon over its unix socket.
const DefaultURI = "qemu:///system"

func init() {
	register("libvirt", newLibvirtPool)
}

func newLibvirtPool(cfg Config) (Pool, error) {
	uri := cfg.URI
	if uri == "" {
		uri = DefaultURI
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("libvirt: bad URI %q: %w", uri, err)
	}
	remote, err := checkURI(u)
	if err != nil {
		return nil, err
	}
	if err := checkBoot(cfg.Boot); err != nil {
		return nil, err
	}
	conn, err := libvirt.ConnectToURI(u)
	if err != nil {
		return nil, &InfraError{Op: "connect to libvirt at " + redactURI(u), Err: err}
	}
	label, err := dacLabel(conn)
	if err != nil {
		conn.Disconnect()
		return nil, err
	}
	if label.uid == 0 {
		conn.Disconnect()
		return nil, &InfraError{Op: "libvirt at " + redactURI(u), Err: fmt.Errorf("it runs QEMU as root (DAC label %s): give QEMU an unprivileged user in that host's qemu.conf", label)}
	}
	evCtx, stopWatching := context.WithCancel(context.Background())
	stops, err := watchStops(evCtx, conn)
	if err != nil {
		cfg.Log.Warn("libvirt: no lifecycle events; a stopped domain is judged by its console", "err", err)
	}
	if remote {
		cfg.Log.Info("libvirt: remote host: console and agent through the libvirt connection; kernel, initramfs and disks must be at the same paths there", "uri", redactURI(u))
	}
	p := newPool("libvirt", cfg, func(s Spec, dir string) (hypervisor, error) {
		boot, kernel, hz, err := bootPath(cfg.Boot, s)
		if err != nil {
			return nil, err
		}
		return &libvirtVM{conn: conn, spec: s, dir: dir, remote: remote, label: label, stops: stops, boot: boot, kernel: kernel, hz: hz, log: cfg.Log}, nil
	})
	p.onClose = func() error {
		stopWatching()
		return conn.Disconnect()
	}
	return p, nil
}

// checkURI refuses transports that would carry the guest's agent and
// console unauthenticated to another host, and says whether the host is
// remote (its files out of our reach).
func checkURI(u *url.URL) (remote bool, err error) {
	host := u.Hostname()
	if host == "" || isLoopback(host) {
		return false, nil
	}
	transport := "tls" // a host without a transport: libvirt's default
	if _, t, ok := strings.Cut(u.Scheme, "+"); ok {
		transport = t
	}
	switch transport {
	case "ssh", "libssh", "libssh2", "tls":
		return true, nil
	case "tcp":
		return false, fmt.Errorf("libvirt: %s: plain TCP to another host is unauthenticated and unencrypted, and the guest's agent and console would travel over it; use qemu+ssh://%s/… or qemu+tls://%s/…", redactURI(u), host, host)
	}
	return false, fmt.Errorf("libvirt: %s: transport %q is not supported (use qemu+ssh:// or qemu+tls://)", redactURI(u), transport)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redactURI drops a password from a URI before it is logged.
func redactURI(u *url.URL) string { return u.Redacted() }

// dacID is a DAC label: the uid and gid QEMU runs as.
type dacID struct{ uid, gid int }

func (d dacID) String() string { return fmt.Sprintf("+%d:+%d", d.uid, d.gid) }

// dacLabel is the user libvirtd runs QEMU domains as by default (its
// qemu.conf user and group), from the host's capabilities.
func dacLabel(conn *libvirt.Libvirt) (dacID, error) {
	raw, err := conn.Capabilities()
	if err != nil {
		return dacID{}, &InfraError{Op: "libvirt capabilities", Err: err}
	}
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(string(raw)); err != nil {
		return dacID{}, &InfraError{Op: "libvirt capabilities", Err: err}
	}
	for _, m := range caps.Host.SecModel {
		if m.Name != "dac" {
			continue
		}
		for _, l := range m.Labels {
			if l.Type != "qemu" {
				continue
			}
			var d dacID
			if _, err := fmt.Sscanf(l.Value, "+%d:+%d", &d.uid, &d.gid); err != nil {
				return dacID{}, &InfraError{Op: "libvirt capabilities", Err: fmt.Errorf("DAC base label %q: %w", l.Value, err)}
			}
			return d, nil
		}
	}
	return dacID{}, &InfraError{Op: "libvirt capabilities", Err: errors.New("no DAC base label for qemu domains")}
}

// libvirtVM is one transient domain. It is created with AUTODESTROY, so
// libvirtd destroys it if our connection goes away (a crash of patchbot).
type libvirtVM struct {
	conn *libvirt.Libvirt
	spec Spec
	dir  string
	// remote: the host's files are out of reach, so the console and the
	// agent's channel are consoles streamed through the libvirt
	// connection (authenticated: ssh or TLS), and the kernel, initramfs
	// and disks are named by their paths there.
	remote bool
	label  dacID       // the user libvirt runs QEMU as
	stops  *stopEvents // nil when the daemon gives no events
	boot   string      // BootPVH or BootLegacy
	kernel string      // the file booted (a private copy, locally)
	hz     int         // the PVH kernel's CONFIG_HZ, 0 if unknown (kernelHZ)
	initrd string
	disks  []string
	// handedOut: the local copies are made (on the first start).
	handedOut bool

	mu        sync.Mutex
	dom       *libvirt.Domain
	done      chan struct{}
	destroyed bool // by us, not by the guest
	pollErr   error
	agent     io.ReadWriteCloser // the remote agent stream, until dialled
	streams   []io.Closer
	ends      []*streamEnd // the remote consoles' streams, for finish
	finishes  []finished   // how each destroy's finish ended them
	log       *slog.Logger
}

func (v *libvirtVM) socket() string { return filepath.Join(v.dir, "agent.sock") }

// handout gives QEMU's user what it needs of the local host: the VM's
// directory (for the agent's socket and the console), and private copies
// of the kernel, initramfs and disks in it. The cache stays closed to
// that user (0600 files under 0700 directories), and no shared file is
// chowned, so no other VM can read this one's. The copies stay ours,
// readable by QEMU's group only (0440): an owner could chmod them
// writable, a group member cannot.
func (v *libvirtVM) handout() error {
	chown := func(p string, uid int, mode os.FileMode) error {
		if err := os.Chown(p, uid, v.label.gid); err != nil {
			return fmt.Errorf("giving %s to QEMU's user %s (patchbot needs root for libvirt's system daemon): %w", p, v.label, err)
		}
		return os.Chmod(p, mode)
	}
	own := func(p string, mode os.FileMode) error { return chown(p, v.label.uid, mode) }
	share := func(p string) error { return chown(p, -1, 0o440) }
	if err := own(v.dir, 0o700); err != nil {
		return err
	}
	if err := reachable(v.dir); err != nil {
		return err
	}
	cp := func(src, name string) (string, error) {
		dst := filepath.Join(v.dir, name)
		if err := copyImage(src, dst); err != nil {
			return "", err
		}
		return dst, share(dst)
	}
	var err error
	if v.kernel, err = cp(v.kernel, "kernel"); err != nil {
		return err
	}
	if v.spec.Initramfs != "" {
		if v.initrd, err = cp(v.spec.Initramfs, "initramfs"); err != nil {
			return err
		}
	}
	for i, d := range v.spec.Disks {
		c, err := cp(d, fmt.Sprintf("disk%d.img", i))
		if err != nil {
			return err
		}
		v.disks = append(v.disks, c)
	}
	con, err := os.OpenFile(v.spec.ConsoleLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	con.Close()
	return own(v.spec.ConsoleLog, 0o600)
}

// reachable checks that every directory above dir lets others through:
// QEMU runs as another user and must reach the files in dir.
func reachable(dir string) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("libvirt runs QEMU as another user, who cannot pass %s (%s): choose a work directory others may traverse", p, st.Mode().Perm())
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// copyImage copies src (not followed if a link, a regular file) to a new
// file dst.
func copyImage(src, dst string) error {
	in, err := openImage(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// User aliases of the remote mode's consoles.
const (
	aliasConsole = "ua-console"
	aliasAgent   = "ua-agent"
)

// domainXML is the domain: direct kernel boot, a serial console to a
// file, the agent's virtio-serial channel on a unix socket, no network.
// A guest reset or power-off destroys it (-no-reboot in QEMU terms).
func (v *libvirtVM) domainXML(name string) (string, error) {
	port0 := uint(0)
	cmdline := baseCmdline
	machine := "pc"
	features := &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}}
	var addr *libvirtxml.DomainAddress
	if v.boot == BootPVH {
		// libvirt 9.0 drives microvm when every device sits on
		// virtio-mmio; without <acpi/> it passes -no-acpi and the CPUs
		// come from the MP table.
		machine, features = "microvm", nil
		addr = &libvirtxml.DomainAddress{VirtioMMIO: &libvirtxml.DomainAddressVirtioMMIO{}}
		// Domains run under TCG (type "qemu"); a remote host's PVH
		// guest keeps a jiffy clock, and suites refuse to time
		// workloads on it.
		cmdline += " " + pvhCmdline(!v.remote, v.hz)
	}
	d := &libvirtxml.Domain{
		Type:   "qemu",
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: uint(v.spec.MemMiB), Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: uint(v.spec.CPUs)},
		OS: &libvirtxml.DomainOS{
			Type:   &libvirtxml.DomainOSType{Arch: "x86_64", Machine: machine, Type: "hvm"},
			Kernel: v.kernel,
			Initrd: v.initrd,
		},
		// ACPI on pc: libvirt passes -no-acpi without it, and an SMP
		// guest then sees one CPU. TCG's most capable CPU model.
		Features:   features,
		CPU:        &libvirtxml.DomainCPU{Mode: "maximum"},
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Controllers: []libvirtxml.DomainController{{Type: "usb", Model: "none"}},
			MemBalloon:  &libvirtxml.DomainMemBalloon{Model: "none"},
		},
	}
	if v.remote {
		// The remote host's own unprivileged QEMU user (checked not to be
		// root), relabelling the files at their paths there.
		d.OS.Initrd = v.spec.Initramfs
		cmdline += " " + proto.ConsoleParam + "=hvc0"
		d.Devices.Serials = []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port0},
			Alias:  &libvirtxml.DomainAlias{Name: aliasConsole},
		}}
		d.Devices.Consoles = []libvirtxml.DomainConsole{{
			Source: &libvirtxml.DomainChardevSource{Pty: &libvirtxml.DomainChardevSourcePty{}},
			Target: &libvirtxml.DomainConsoleTarget{Type: "virtio"},
			Alias:  &libvirtxml.DomainAlias{Name: aliasAgent},
		}}
	} else {
		// QEMU runs as libvirt's unprivileged user, given its own copies;
		// libvirt must not relabel (chown) anything.
		d.SecLabel = []libvirtxml.DomainSecLabel{{Type: "static", Model: "dac", Relabel: "no", Label: v.label.String()}}
		d.Devices.Serials = []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: v.spec.ConsoleLog}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port0},
		}}
		d.Devices.Channels = []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: v.socket()}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: proto.Port}},
		}}
	}
	d.OS.Cmdline = strings.TrimSpace(cmdline + " " + v.spec.Cmdline)
	if addr != nil {
		d.Devices.Controllers = append(d.Devices.Controllers, libvirtxml.DomainController{Type: "virtio-serial", Address: addr})
	}
	disks := v.disks
	if v.remote {
		disks = v.spec.Disks
	}
	for i, disk := range disks {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{
			Device:   "disk",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: disk}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: fmt.Sprintf("vd%c", 'a'+i), Bus: "virtio"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
			Address:  addr,
		})
	}
	return d.Marshal()
}

func (v *libvirtVM) start(ctx context.Context) (launch, error) {
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := "patchbot-" + safeName(v.spec.Name) + "-" + hex.EncodeToString(suffix)
	flags := libvirt.DomainStartAutodestroy
	if v.remote {
		// Paused until the consoles are connected: a pty drops what the
		// guest prints while no one listens. The console is copied from
		// its stream into the log.
		flags |= libvirt.DomainStartPaused
		if err := os.WriteFile(v.spec.ConsoleLog, nil, 0o600); err != nil {
			return launch{}, &InfraError{Op: "create console log", Err: err}
		}
	} else if !v.handedOut {
		// Counted in the boot time: copying is part of starting.
		if err := v.handout(); err != nil {
			return launch{}, &InfraError{Op: "hand the VM its files", Err: err}
		}
		v.handedOut = true
	} else if err := os.Truncate(v.spec.ConsoleLog, 0); err != nil {
		// A stale console from an earlier attempt would be read as this boot's.
		return launch{}, &InfraError{Op: "truncate console log", Err: err}
	}
	xml, err := v.domainXML(name)
	l := launch{accel: "tcg", boot: v.boot, repro: xml}
	if err != nil {
		return l, fmt.Errorf("libvirt: domain XML: %w", err)
	}
	dom, err := v.conn.DomainCreateXML(xml, flags)
	if err != nil {
		return l, &InfraError{Op: "create libvirt domain " + name, Err: err}
	}
	done := make(chan struct{})
	v.mu.Lock()
	v.dom, v.done, v.destroyed = &dom, done, false // a reboot's start follows our destroy
	v.mu.Unlock()
	go v.poll(dom, done)
	if v.remote {
		if err := v.openStreams(dom); err != nil {
			return l, &InfraError{Op: "open the consoles of " + name, Err: err}
		}
		if err := v.conn.DomainResume(dom); err != nil {
			return l, &InfraError{Op: "resume " + name, Err: err}
		}
	}
	return l, nil
}

// openStreams connects the serial console (appended to the console log)
// and the agent's console through the libvirt connection. Both are
// bidirectional, so that destroy can end each with a finish of its own
// before the domain goes (finish).
func (v *libvirtVM) openStreams(dom libvirt.Domain) error {
	con, err := os.OpenFile(v.spec.ConsoleLog, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	cw := &cappedWriter{f: con, left: maxConsole}
	// Nothing is typed into the serial console; conIn only ends it.
	conInR, conInW := io.Pipe()
	conEnd := &streamEnd{name: "serial console", in: conInW, done: make(chan struct{})}
	go func() {
		conEnd.err = v.conn.DomainOpenConsoleBidirectional(dom, libvirt.OptString{aliasConsole}, conInR, cw, 0)
		con.Close()
		close(conEnd.done)
	}()
	// host → guest through toGuest, guest → host through fromGuest.
	toGuestR, toGuestW := io.Pipe()
	fromGuestR, fromGuestW := io.Pipe()
	agentEnd := &streamEnd{name: "agent console", in: toGuestW, out: fromGuestR, done: make(chan struct{})}
	go func() {
		agentEnd.err = v.conn.DomainOpenConsoleBidirectional(dom, libvirt.OptString{aliasAgent}, toGuestR, fromGuestW, 0)
		close(agentEnd.done)
		fromGuestW.CloseWithError(orEOF(agentEnd.err))
	}()
	s := &stream{r: fromGuestR, w: toGuestW, closers: []io.Closer{toGuestR, toGuestW, fromGuestR}}
	v.mu.Lock()
	v.agent = s
	v.streams = append(v.streams, s, conInR, conInW)
	v.ends = []*streamEnd{conEnd, agentEnd}
	v.mu.Unlock()
	// A console that cannot be opened fails at once; give both a moment.
	select {
	case <-conEnd.done:
		return fmt.Errorf("serial console: %w", conEnd.err)
	case <-agentEnd.done:
		return fmt.Errorf("agent console: %w", orEOF(agentEnd.err))
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

// orEOF is err, or io.EOF for a stream that ended without one.
func orEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// streamEnd is one remote console's stream, as finish ends it: in is its
// host → guest half, out the reader of its guest → host half (nil for
// the serial console, whose output goes to the log); done is closed when
// the stream's call returned, with err.
type streamEnd struct {
	name string
	in   io.Closer
	out  io.Reader // nil: nothing to drain
	done chan struct{}
	err  error // set before done is closed
}

// finishWait bounds how long destroy waits for libvirtd to acknowledge
// the consoles' finishes before it destroys the domain all the same.
const finishWait = 5 * time.Second

// freedGrace is how long destroy lets libvirtd free the consoles of a
// domain that stopped by itself before it ends their streams (finish).
//
// It is a wait, not an acknowledgement, and a persistent domain would
// not make it one. libvirtd frees a domain's consoles with the domain
// object (qemuDomainObjPrivateFree), so a persistent domain keeps them
// until its undefine. But a stream libvirtd hung up has already ended
// the client library's call (the empty packet is its end of stream), so
// libvirtd's confirmation of our finish reaches no one: nothing would
// order that finish, handled in the daemon's event loop, before an
// undefine handled by one of its workers.
const freedGrace = 2 * time.Second

// errEndedFirst: a console's stream ended from libvirtd's side (the
// domain stopped) before finish ended it.
var errEndedFirst = errors.New("ended before its finish")

// finish ends the remote consoles' streams, each with a finish, and
// returns how each ended: nil when libvirtd acknowledged it.
//
// libvirtd (11.3) deadlocks when a console's stream closes just as the
// domain's consoles are freed, which happens when a transient domain is
// gone: closing a stream takes its lock, then the consoles'; freeing the
// consoles takes their lock, then each open stream's. Every later call
// to the daemon then hangs. It happened in a CI run (2026-12-07): our
// end of the streams was closed just after the guest powered off. A
// stream closes on its client's finish or abort (libvirtd only tells
// the client of a hang-up, and waits for it), so the client decides
// when: destroy ends the streams while the domain runs, or, after a
// domain stopped by itself, once its consoles are freed (freedGrace).
func (v *libvirtVM) finish(ends []*streamEnd) map[string]error {
	got := map[string]error{}
	for _, e := range ends {
		select {
		case <-e.done:
			got[e.name] = fmt.Errorf("%w (%v)", errEndedFirst, e.err)
		default:
		}
		e.in.Close() // EOF: the client library sends the stream's finish
		if e.out != nil {
			// Keep reading what the guest still sends: the connection
			// delivers the finish's answer after it.
			go io.Copy(io.Discard, e.out)
		}
	}
	// Closed, not sent on: every end still waiting sees it.
	expired := make(chan struct{})
	defer time.AfterFunc(finishWait, func() { close(expired) }).Stop()
	for _, e := range ends {
		if _, ok := got[e.name]; ok {
			continue
		}
		select {
		case <-e.done:
		case <-expired:
		}
		select { // an end that answered in time counts, even when checked after
		case <-e.done:
			got[e.name] = e.err
		default:
			got[e.name] = fmt.Errorf("no answer to its finish within %s", finishWait)
		}
	}
	return got
}

// stream is the agent's console as a connection.
type stream struct {
	r       io.Reader
	w       io.Writer
	closers []io.Closer
	once    sync.Once
}

func (s *stream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *stream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *stream) Close() error {
	s.once.Do(func() {
		for _, c := range s.closers {
			c.Close()
		}
	})
	return nil
}

// poll closes done when the domain is gone or shut off. Transient domains
// vanish when they stop, so a lookup error means stopped.
func (v *libvirtVM) poll(dom libvirt.Domain, done chan struct{}) {
	defer close(done)
	for {
		state, _, err := v.conn.DomainGetState(dom, 0)
		if err != nil {
			if !isNoDomain(err) {
				v.mu.Lock()
				v.pollErr = err
				v.mu.Unlock()
			}
			return
		}
		if libvirt.DomainState(state) == libvirt.DomainShutoff || libvirt.DomainState(state) == libvirt.DomainCrashed {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isNoDomain(err error) bool {
	var le libvirt.Error
	return errors.As(err, &le) && le.Code == uint32(libvirt.ErrNoDomain)
}

func (v *libvirtVM) dial(ctx context.Context) (io.ReadWriteCloser, error) {
	if v.remote {
		return handOver(&v.mu, &v.agent, "libvirt: the agent's console was already taken or not opened")
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", v.socket())
}

func (v *libvirtVM) stopped() <-chan struct{} { return stoppedOf(&v.mu, &v.done) }

// exitStatus tells a guest that ended its VM (a reset under -no-reboot,
// a power-off: libvirt's "shutdown" stop) from QEMU failing or being
// killed (the OOM killer: "failed"), by the domain's lifecycle event.
// Without one (events unavailable) it falls back on the console: a
// kernel banner means the guest ran, so its stopping is put on it.
func (v *libvirtVM) exitStatus() (bool, error, []byte) {
	v.mu.Lock()
	pollErr, destroyed, dom := v.pollErr, v.destroyed, v.dom
	v.mu.Unlock()
	if pollErr != nil {
		return false, fmt.Errorf("libvirt: watching the domain: %w", pollErr), nil
	}
	if destroyed {
		return false, errors.New("libvirt: the domain was destroyed"), nil
	}
	if dom != nil && v.stops != nil {
		if detail, ok := v.stops.wait(dom.Name, time.Second); ok {
			switch libvirt.DomainEventStoppedDetailType(detail) {
			case libvirt.DomainEventStoppedShutdown, libvirt.DomainEventStoppedCrashed:
				return true, nil, nil
			case libvirt.DomainEventStoppedFailed:
				return false, errors.New("libvirt: QEMU failed or was killed"), nil
			default:
				return false, fmt.Errorf("libvirt: the domain stopped (%s)", libvirt.DomainEventStoppedDetailType(detail)), nil
			}
		}
	}
	if (&console{path: v.spec.ConsoleLog}).alive() {
		return true, nil, nil
	}
	return false, errors.New("libvirt: the domain stopped before the kernel printed anything"), nil
}

// stopEvents records how each domain stopped, from libvirt's lifecycle
// events.
type stopEvents struct {
	mu      sync.Mutex
	details map[string]int32
	changed chan struct{} // closed and replaced on every record
}

func watchStops(ctx context.Context, conn *libvirt.Libvirt) (*stopEvents, error) {
	evs, err := conn.LifecycleEvents(ctx)
	if err != nil {
		return nil, err
	}
	s := &stopEvents{details: map[string]int32{}, changed: make(chan struct{})}
	go func() {
		for ev := range evs {
			if libvirt.DomainEventType(ev.Event) != libvirt.DomainEventStopped {
				continue
			}
			s.mu.Lock()
			s.details[ev.Dom.Name] = ev.Detail
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
		}
	}()
	return s, nil
}

// wait returns how the domain stopped, waiting up to d for the event
// (it may trail the domain's disappearance), and forgets it.
func (s *stopEvents) wait(name string, d time.Duration) (int32, bool) {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		detail, ok := s.details[name]
		changed := s.changed
		if ok {
			delete(s.details, name)
		}
		s.mu.Unlock()
		if ok {
			return detail, true
		}
		select {
		case <-changed:
		case <-deadline:
			return 0, false
		}
	}
}

func (v *libvirtVM) destroy() error {
	v.mu.Lock()
	dom, done, streams, ends := v.dom, v.done, v.streams, v.ends
	v.streams, v.ends = nil, nil
	v.destroyed = v.destroyed || dom != nil
	v.mu.Unlock()
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	if dom == nil {
		return nil
	}
	stopped := false
	select {
	case <-done:
		stopped = true
	default:
	}
	if len(ends) > 0 {
		if stopped {
			time.Sleep(freedGrace)
		}
		got := v.finish(ends)
		for name, err := range got {
			if err != nil && !errors.Is(err, errEndedFirst) {
				// Not acknowledged: the destroy goes on, and this is
				// what to look at if libvirtd stops answering later.
				v.log.Warn("libvirt: a console stream's finish failed", "domain", dom.Name, "console", name, "running", !stopped, "err", err)
			}
		}
		v.mu.Lock()
		v.finishes = append(v.finishes, finished{running: !stopped, ends: got})
		v.mu.Unlock()
	}
	if stopped {
		return nil
	}
	if err := v.conn.DomainDestroy(*dom); err != nil && !isNoDomain(err) {
		return &InfraError{Op: "destroy libvirt domain " + dom.Name, Err: err}
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return &InfraError{Op: "destroy libvirt domain " + dom.Name, Err: errors.New("still present 10s after destroy")}
	}
	return nil
}

// finished is how a destroy's finish ended the remote consoles' streams.
type finished struct {
	running bool             // the domain still ran
	ends    map[string]error // by console
}
