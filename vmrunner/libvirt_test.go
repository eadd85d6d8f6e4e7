package vmrunner

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

func libvirtTestPool(t *testing.T) Pool {
	t.Helper()
	return libvirtTestPoolWith(t, Config{})
}

func libvirtTestPoolWith(t *testing.T, cfg Config) Pool {
	t.Helper()
	needQEMU(t)
	needLibvirtd(t)
	cfg.WorkDir = traversableDir(t)
	p, err := New("libvirt", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// traversableDir is a temporary directory libvirt's QEMU user can pass
// through (t.TempDir's parent is 0700).
func traversableDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "patchbot-libvirt-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestLibvirtBootDebianKernel(t *testing.T) {
	bootAndCheck(t, libvirtTestPool(t), debianKernel(t))
}

func TestLibvirtDomainXML(t *testing.T) {
	spec := Spec{Name: "x", Kernel: "/k", Initramfs: "/i", Cmdline: "quiet", CPUs: 3, MemMiB: 300, Disks: []string{"/a.img", "/b.img"}, ConsoleLog: "/w/console.log"}
	for _, tc := range []struct {
		name     string
		vm       *libvirtVM
		want     []string
		wantNone []string
	}{{
		name: "legacy",
		vm:   &libvirtVM{spec: spec, dir: "/w", label: dacID{64055, 107}, boot: BootLegacy, kernel: "/w/kernel", initrd: "/w/initramfs", disks: []string{"/w/disk0.img", "/w/disk1.img"}},
		want: []string{
			`<domain type="qemu">`, `machine="pc"`, `<kernel>/w/kernel</kernel>`, `<initrd>/w/initramfs</initrd>`,
			`<cmdline>console=ttyS0 panic=-1 quiet</cmdline>`, `<vcpu>3</vcpu>`, `<memory unit="MiB">300</memory>`,
			`<serial type="file">`, `<source path="/w/console.log"`, `<source mode="bind" path="/w/agent.sock"`,
			`name="org.patchbot.agent.0"`, `<target dev="vda" bus="virtio"`, `<source file="/w/disk0.img"`, `<target dev="vdb" bus="virtio"`,
			`<readonly>`, `<on_reboot>destroy</on_reboot>`, `<acpi>`, `<cpu mode="maximum">`,
			`<seclabel type="static" model="dac" relabel="no"><label>+64055:+107</label>`,
		},
		wantNone: []string{"<interface", "+0:+0", `file="/a.img"`, "<kernel>/k<"},
	}, {
		name: "pvh",
		vm:   &libvirtVM{spec: spec, dir: "/w", label: dacID{64055, 107}, boot: BootPVH, kernel: "/w/kernel", initrd: "/w/initramfs", disks: []string{"/w/disk0.img", "/w/disk1.img"}},
		want: []string{
			`machine="microvm"`, `<cmdline>` + strings.TrimSpace("console=ttyS0 panic=-1 reboot=t "+TCGClockCmdline(0)) + ` quiet</cmdline>`,
			`<controller type="virtio-serial"><address type="virtio-mmio"></address>`, `<address type="virtio-mmio"></address></disk>`,
			`<seclabel type="static" model="dac" relabel="no"><label>+64055:+107</label>`,
		},
		wantNone: []string{"<interface", "+0:+0", "<acpi>"},
	}, {
		// A remote host's TSC rate cannot be measured from here.
		name:     "remote pvh",
		vm:       &libvirtVM{spec: spec, dir: "/w", remote: true, label: dacID{64055, 107}, boot: BootPVH, kernel: "/k"},
		want:     []string{`<cmdline>console=ttyS0 panic=-1 reboot=t patchbot.agent=hvc0 quiet</cmdline>`},
		wantNone: []string{"tsc_early_khz", "tsc=reliable"},
	}, {
		name: "remote",
		vm:   &libvirtVM{spec: spec, dir: "/w", remote: true, label: dacID{64055, 107}, boot: BootLegacy, kernel: "/k"},
		want: []string{
			`<kernel>/k</kernel>`, `<initrd>/i</initrd>`, `<source file="/a.img"`,
			`<cmdline>console=ttyS0 panic=-1 patchbot.agent=hvc0 quiet</cmdline>`,
			`<serial type="pty">`, `<alias name="ua-console">`, `<console type="pty">`, `<target type="virtio">`, `<alias name="ua-agent">`,
		},
		// No TCP listener, no label of ours: the remote host's own
		// unprivileged QEMU user.
		wantNone: []string{"<interface", `type="tcp"`, "<seclabel", "agent.sock"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			xml, err := tc.vm.domainXML("patchbot-x")
			if err != nil {
				t.Fatal(err)
			}
			xml = regexp.MustCompile(`>\s+<`).ReplaceAllString(xml, "><")
			for _, want := range tc.want {
				if !strings.Contains(xml, want) {
					t.Errorf("domain XML lacks %s:\n%s", want, xml)
				}
			}
			for _, bad := range tc.wantNone {
				if strings.Contains(xml, bad) {
					t.Errorf("domain XML has %s:\n%s", bad, xml)
				}
			}
		})
	}
}

// Cancelling a boot, a boot past its deadline and closing the pool leave
// no domain behind.
func TestLibvirtCancelAndCloseDestroy(t *testing.T) {
	p := libvirtTestPool(t)
	k := debianKernel(t)
	u, _ := url.Parse(DefaultURI)
	conn, err := libvirt.ConnectToURI(u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Disconnect()
	gone := func(vm Instance) error {
		v := vm.(*machine).hv.(*libvirtVM)
		if v.dom == nil {
			return errors.New("no domain was created")
		}
		if _, err := conn.DomainLookupByName(v.dom.Name); !isNoDomain(err) {
			return errors.New("domain " + v.dom.Name + " still exists")
		}
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	vm, err := p.Create(ctx, Spec{Name: "cancel", Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(time.Second, cancel)
	if _, err := vm.Boot(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Boot after cancel: err = %v, want context.Canceled", err)
	}
	if err := gone(vm); err != nil {
		t.Errorf("after a cancelled boot: %v", err)
	}
	vm.Close()

	vm2, err := p.Create(context.Background(), Spec{Name: "hang", Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256, BootTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = vm2.Boot(context.Background())
	var be *BootError
	if !errors.As(err, &be) || !strings.HasPrefix(be.Reason, "hang") {
		t.Errorf("Boot past the deadline: err = %v, want a hang BootError", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("pool Close: %v", err)
	}
	if err := gone(vm2); err != nil {
		t.Errorf("after pool Close: %v", err)
	}
}

func TestLibvirtBadURIIsInfra(t *testing.T) {
	_, err := New("libvirt", Config{URI: "qemu+tcp://127.0.0.1:1/system"})
	if !IsInfra(err) {
		t.Errorf("New with an unreachable URI: err = %v, want an InfraError", err)
	}
}

// Plain TCP to another host would carry the agent and the console in the
// clear, unauthenticated: refused before any connection is tried.
func TestCheckURI(t *testing.T) {
	for _, tc := range []struct {
		uri    string
		remote bool
		err    string // part of the error; "" for none
	}{
		{"qemu:///system", false, ""},
		{"qemu+unix:///system", false, ""},
		{"qemu+tcp://127.0.0.1/system", false, ""},
		{"qemu+tcp://localhost:16509/system", false, ""},
		{"qemu+tcp://[::1]/system", false, ""},
		{"qemu+ssh://root@lab.example.org/system", true, ""},
		{"qemu+libssh2://lab.example.org/system", true, ""},
		{"qemu+tls://lab.example.org/system", true, ""},
		{"qemu://lab.example.org/system", true, ""}, // libvirt's default: TLS
		{"qemu+tcp://lab.example.org/system", false, "plain TCP"},
		{"qemu+tcp://user:hunter2@10.0.0.5/system", false, "use qemu+ssh://10.0.0.5"},
		{"qemu+ext://lab.example.org/system", false, "not supported"},
	} {
		t.Run(tc.uri, func(t *testing.T) {
			u, err := url.Parse(tc.uri)
			if err != nil {
				t.Fatal(err)
			}
			remote, err := checkURI(u)
			if tc.err == "" {
				if err != nil || remote != tc.remote {
					t.Errorf("checkURI = %v, %v; want %v, nil", remote, err, tc.remote)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("checkURI err = %v, want one saying %q", err, tc.err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the password: %v", err)
			}
			// And New refuses it the same way, without dialling.
			if _, err := New("libvirt", Config{URI: tc.uri}); err == nil || IsInfra(err) {
				t.Errorf("New(%s) err = %v, want the refusal", tc.uri, err)
			}
		})
	}
}

func TestLibvirtBootMinimalKernel(t *testing.T) {
	p := libvirtTestPool(t)
	bootAndCheck(t, p, minimalKernel(t))
}

// The transport for a remote libvirtd (console and agent as consoles
// streamed through the libvirt connection, nothing listening on TCP),
// tried against the local daemon. As on a remote host, the files are
// used at their paths, relabelled by libvirt for its own QEMU user. Each
// end of a VM ends both streams with a finish (libvirtd deadlocks now
// and then otherwise): after a power-off, once the guest's side has hung
// up; before a destroy (a reboot, a close), acknowledged by libvirtd.
func TestLibvirtStreamTransport(t *testing.T) {
	p := libvirtTestPool(t)
	pp := p.(*pool)
	local := pp.newHV
	var vms []*libvirtVM
	var warned bytes.Buffer // the VMs' warnings; a failed finish is one
	pp.newHV = func(s Spec, dir string) (hypervisor, error) {
		hv, err := local(s, dir)
		if err == nil {
			hv.(*libvirtVM).remote = true
			hv.(*libvirtVM).log = slog.New(slog.NewTextHandler(&warned, &slog.HandlerOptions{Level: slog.LevelWarn}))
			vms = append(vms, hv.(*libvirtVM))
		}
		return hv, err
	}
	finishes := func(v *libvirtVM) []finished {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.finishes
	}
	consoles := []string{"serial console", "agent console"}

	k := minimalKernel(t)
	shared := traversableDir(t)
	k.bzImage = copyTo(t, k.bzImage, filepath.Join(shared, "bzImage"))
	if k.vmlinux != "" {
		copyTo(t, k.vmlinux, filepath.Join(shared, "vmlinux"))
	}
	k.initramfs = copyTo(t, k.initramfs, filepath.Join(shared, "initramfs"))
	bootAndCheckDisks(t, p, k, []string{rawDisk(t, shared, "first"), rawDisk(t, shared, "second")})
	if len(vms) != 1 {
		t.Fatalf("%d VMs made, want 1", len(vms))
	}
	// The guest powered off: libvirtd hung up both streams first.
	if f := finishes(vms[0]); len(f) != 1 || f[0].running {
		t.Errorf("after a power-off: finishes %+v, want one, of a stopped domain", f)
	} else {
		for _, name := range consoles {
			if err := f[0].ends[name]; !errors.Is(err, errEndedFirst) {
				t.Errorf("after a power-off, the %s's stream: %v, want it ended by libvirtd's hang-up", name, err)
			}
		}
	}

	// A reboot and a close destroy a running domain: each finish is
	// acknowledged before it, and the reboot's new streams carry the agent.
	ctx := context.Background()
	vm, err := p.Create(ctx, Spec{Name: "reboot", Kernel: k.bzImage, Initramfs: k.initramfs, CPUs: 2, MemMiB: 256, BootTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Boot(ctx); err != nil {
		vm.Close()
		t.Fatalf("Boot: %v\nconsole:\n%s", err, vm.Console())
	}
	if _, err := vm.Reboot(ctx); err != nil {
		vm.Close()
		t.Fatalf("Reboot: %v\nconsole:\n%s", err, vm.Console())
	}
	if _, err := vm.Do(ctx, proto.Request{Op: proto.OpInfo}, nil); err != nil {
		t.Errorf("the agent after a reboot: %v", err)
	}
	if err := vm.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	f := finishes(vms[1])
	if len(f) != 2 {
		t.Fatalf("finishes %+v, want two (the reboot's, the close's)", f)
	}
	for i, fi := range f {
		for _, name := range consoles {
			if err, ok := fi.ends[name]; !fi.running || !ok || err != nil {
				t.Errorf("destroy %d of a running domain, the %s's stream: running %v, %v; want its finish acknowledged", i+1, name, fi.running, err)
			}
		}
	}
	if strings.Contains(warned.String(), "finish failed") {
		t.Errorf("a finish was logged as failed:\n%s", &warned)
	}
}

// finish waits finishWait in all, not finishWait for the first silent
// stream and forever for the next: a daemon that acknowledges nothing
// must not hang a destroy.
func TestFinishBoundsEveryEnd(t *testing.T) {
	silent := func(name string) *streamEnd {
		return &streamEnd{name: name, in: io.NopCloser(nil), done: make(chan struct{})}
	}
	acked := &streamEnd{name: "acked", done: make(chan struct{})}
	acked.in = closeFunc(func() error { close(acked.done); return nil }) // acknowledged at once
	ends := []*streamEnd{silent("serial console"), acked, silent("agent console")}
	got := make(chan map[string]error, 1)
	start := time.Now()
	go func() { got <- (&libvirtVM{}).finish(ends) }()
	select {
	case m := <-got:
		if took := time.Since(start); took < finishWait {
			t.Errorf("finish returned after %s, before its %s", took, finishWait)
		}
		for _, name := range []string{"serial console", "agent console"} {
			if err := m[name]; err == nil || !strings.Contains(err.Error(), "no answer") {
				t.Errorf("%s: %v, want no answer", name, err)
			}
		}
		if err, ok := m["acked"]; !ok || err != nil {
			t.Errorf("acked: %v (present %v), want nil", err, ok)
		}
	case <-time.After(3 * finishWait):
		t.Fatalf("finish still waiting after %s", 3*finishWait)
	}
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }
