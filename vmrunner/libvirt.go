package vmrunner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
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
	conn, err := libvirt.ConnectToURI(u)
	if err != nil {
		return nil, &InfraError{Op: "connect to libvirt at " + uri, Err: err}
	}
	// On a remote host the console file and the agent socket would be out
	// of reach: there both go over TCP to that host instead.
	tcpHost := u.Hostname()
	if tcpHost != "" {
		cfg.Log.Info("libvirt: remote host: console and agent over TCP; kernel, initramfs and disks must be at the same paths there", "uri", uri)
	}
	p := newPool("libvirt", cfg, func(s Spec, dir string) (hypervisor, error) {
		return &libvirtVM{conn: conn, spec: s, dir: dir, tcpHost: tcpHost}, nil
	})
	p.onClose = conn.Disconnect
	return p, nil
}

// libvirtVM is one transient domain. It is created with AUTODESTROY, so
// libvirtd destroys it if our connection goes away (a crash of patchbot).
type libvirtVM struct {
	conn *libvirt.Libvirt
	spec Spec
	dir  string
	// tcpHost, for a remote libvirtd, is where the guest's console and
	// agent port listen (TCP ports conPort and agentPort); empty for the
	// local daemon, which uses a console file and a unix socket.
	tcpHost            string
	conPort, agentPort int
	conCopy            net.Conn

	mu        sync.Mutex
	dom       *libvirt.Domain
	done      chan struct{}
	destroyed bool // by us, not by the guest
	pollErr   error
}

func (v *libvirtVM) socket() string { return v.dir + "/agent.sock" }

// domainXML is the domain: direct kernel boot, a serial console to a
// file, the agent's virtio-serial channel on a unix socket, no network.
// A guest reset or power-off destroys it (-no-reboot in QEMU terms).
func (v *libvirtVM) domainXML(name string) (string, error) {
	port0 := uint(0)
	conSource := &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: v.spec.ConsoleLog}}
	agentSource := &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind", Path: v.socket()}}
	var raw *libvirtxml.DomainChardevProtocol
	if v.tcpHost != "" {
		conSource = &libvirtxml.DomainChardevSource{TCP: &libvirtxml.DomainChardevSourceTCP{Mode: "bind", Host: v.tcpHost, Service: fmt.Sprint(v.conPort)}}
		agentSource = &libvirtxml.DomainChardevSource{TCP: &libvirtxml.DomainChardevSourceTCP{Mode: "bind", Host: v.tcpHost, Service: fmt.Sprint(v.agentPort)}}
		raw = &libvirtxml.DomainChardevProtocol{Type: "raw"}
	}
	d := &libvirtxml.Domain{
		Type:   "qemu",
		Name:   name,
		Memory: &libvirtxml.DomainMemory{Value: uint(v.spec.MemMiB), Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: uint(v.spec.CPUs)},
		OS: &libvirtxml.DomainOS{
			Type:    &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
			Kernel:  v.spec.Kernel,
			Initrd:  v.spec.Initramfs,
			Cmdline: strings.TrimSpace(baseCmdline + " " + v.spec.Cmdline),
		},
		// What the qemu backend gets by default: ACPI (libvirt passes
		// -no-acpi without it, and SMP guests then see one CPU) and
		// TCG's most capable CPU model.
		Features:   &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}, APIC: &libvirtxml.DomainFeatureAPIC{}},
		CPU:        &libvirtxml.DomainCPU{Mode: "maximum"},
		OnPoweroff: "destroy",
		OnReboot:   "destroy",
		OnCrash:    "destroy",
		// QEMU runs as root with no relabelling: the kernel, the
		// initramfs and the disks are shared, read-only, by many VMs.
		SecLabel: []libvirtxml.DomainSecLabel{{Type: "static", Model: "dac", Relabel: "no", Label: "+0:+0"}},
		Devices: &libvirtxml.DomainDeviceList{
			Controllers: []libvirtxml.DomainController{{Type: "usb", Model: "none"}},
			MemBalloon:  &libvirtxml.DomainMemBalloon{Model: "none"},
			Serials: []libvirtxml.DomainSerial{{
				Source:   conSource,
				Protocol: raw,
				Target:   &libvirtxml.DomainSerialTarget{Port: &port0},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source:   agentSource,
				Protocol: raw,
				Target:   &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: proto.Port}},
			}},
		},
	}
	for i, disk := range v.spec.Disks {
		d.Devices.Disks = append(d.Devices.Disks, libvirtxml.DomainDisk{
			Device:   "disk",
			Driver:   &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
			Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: disk}},
			Target:   &libvirtxml.DomainDiskTarget{Dev: fmt.Sprintf("vd%c", 'a'+i), Bus: "virtio"},
			ReadOnly: &libvirtxml.DomainDiskReadOnly{},
		})
	}
	return d.Marshal()
}

func (v *libvirtVM) start(ctx context.Context) (launch, error) {
	suffix := make([]byte, 4)
	rand.Read(suffix)
	name := "patchbot-" + safeName(v.spec.Name) + "-" + hex.EncodeToString(suffix)
	flags := libvirt.DomainStartAutodestroy
	if v.tcpHost != "" {
		// Paused until the console is connected: QEMU drops what a TCP
		// console prints while no one listens.
		flags |= libvirt.DomainStartPaused
	}
	if err := os.WriteFile(v.spec.ConsoleLog, nil, 0o644); err != nil {
		return launch{}, &InfraError{Op: "create console log", Err: err}
	}
	var (
		l   launch
		dom libvirt.Domain
	)
	// Remote ports are picked at random; a clash fails the start, so try
	// other ports a few times.
	for attempt := 0; ; attempt++ {
		if v.tcpHost != "" {
			v.conPort, v.agentPort = randomPort(), randomPort()
		}
		xml, err := v.domainXML(name)
		l = launch{accel: "tcg", repro: xml}
		if err != nil {
			return l, fmt.Errorf("libvirt: domain XML: %w", err)
		}
		dom, err = v.conn.DomainCreateXML(xml, flags)
		if err == nil {
			break
		}
		if v.tcpHost == "" || attempt == 2 {
			return l, &InfraError{Op: "create libvirt domain " + name, Err: err}
		}
	}
	done := make(chan struct{})
	v.mu.Lock()
	v.dom, v.done = &dom, done
	v.mu.Unlock()
	go v.poll(dom, done)
	if v.tcpHost != "" {
		if err := v.copyConsole(ctx); err != nil {
			return l, &InfraError{Op: "connect to the console of " + name, Err: err}
		}
		if err := v.conn.DomainResume(dom); err != nil {
			return l, &InfraError{Op: "resume " + name, Err: err}
		}
	}
	return l, nil
}

// randomPort picks a port for a remote chardev.
func randomPort() int {
	var b [2]byte
	rand.Read(b[:])
	return 20000 + (int(b[0])<<8|int(b[1]))%20000
}

// copyConsole connects to the remote TCP console and appends what it says
// to the local console file, until the domain stops.
func (v *libvirtVM) copyConsole(ctx context.Context) error {
	addr := net.JoinHostPort(v.tcpHost, fmt.Sprint(v.conPort))
	var conn net.Conn
	var err error
	for i := 0; i < 100; i++ {
		var d net.Dialer
		if conn, err = d.DialContext(ctx, "tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(v.spec.ConsoleLog, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		conn.Close()
		return err
	}
	v.mu.Lock()
	v.conCopy = conn
	v.mu.Unlock()
	go func() {
		io.Copy(f, conn)
		f.Close()
	}()
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
	var d net.Dialer
	if v.tcpHost != "" {
		return d.DialContext(ctx, "tcp", net.JoinHostPort(v.tcpHost, fmt.Sprint(v.agentPort)))
	}
	return d.DialContext(ctx, "unix", v.socket())
}

func (v *libvirtVM) stopped() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done == nil {
		return closedChan
	}
	return v.done
}

// exitStatus: libvirt does not tell a guest reset from QEMU dying once a
// transient domain is gone; a console with the kernel's banner means the
// guest ran, so its stopping is put on the kernel.
func (v *libvirtVM) exitStatus() (bool, error, []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.pollErr != nil {
		return false, fmt.Errorf("libvirt: watching the domain: %w", v.pollErr), nil
	}
	if v.destroyed {
		return false, errors.New("libvirt: the domain was destroyed"), nil
	}
	con := (&console{path: v.spec.ConsoleLog}).bytes()
	if strings.Contains(string(con), "Linux version") {
		return true, nil, nil
	}
	return false, errors.New("libvirt: the domain stopped before the kernel printed anything"), nil
}

func (v *libvirtVM) destroy() error {
	v.mu.Lock()
	dom, done, conCopy := v.dom, v.done, v.conCopy
	v.destroyed = v.destroyed || dom != nil
	v.mu.Unlock()
	if conCopy != nil {
		defer conCopy.Close()
	}
	if dom == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
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
