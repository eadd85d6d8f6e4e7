package vmrunner

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
)

func libvirtTestPool(t *testing.T) Pool {
	t.Helper()
	needQEMU(t)
	needLibvirtd(t)
	p, err := New("libvirt", Config{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestLibvirtBootDebianKernel(t *testing.T) {
	bootAndCheck(t, libvirtTestPool(t), debianKernel(t))
}

func TestLibvirtDomainXML(t *testing.T) {
	v := &libvirtVM{spec: Spec{Name: "x", Kernel: "/k", Initramfs: "/i", Cmdline: "quiet", CPUs: 3, MemMiB: 300, Disks: []string{"/a.img", "/b.img"}, ConsoleLog: "/w/console.log"}, dir: "/w"}
	xml, err := v.domainXML("patchbot-x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<domain type="qemu">`, `<kernel>/k</kernel>`, `<initrd>/i</initrd>`,
		`<cmdline>console=ttyS0 panic=-1 quiet</cmdline>`, `<vcpu>3</vcpu>`, `<memory unit="MiB">300</memory>`,
		`<serial type="file">`, `<source path="/w/console.log"`, `<source mode="bind" path="/w/agent.sock"`,
		`name="org.patchbot.agent.0"`, `<target dev="vda" bus="virtio"`, `<target dev="vdb" bus="virtio"`,
		`<readonly>`, `<on_reboot>destroy</on_reboot>`, `<acpi>`, `<cpu mode="maximum">`,
	} {
		if !strings.Contains(xml, want) {
			t.Errorf("domain XML lacks %s:\n%s", want, xml)
		}
	}
	if strings.Contains(xml, "<interface") {
		t.Errorf("domain XML has a network interface:\n%s", xml)
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

func TestLibvirtBootMinimalKernel(t *testing.T) {
	p := libvirtTestPool(t)
	bootAndCheck(t, p, minimalKernel(t))
}

// The transport for a remote libvirtd (console and agent over TCP, the
// domain started paused until the console listens), tried against the
// local daemon on the loopback address.
func TestLibvirtTCPTransport(t *testing.T) {
	p := libvirtTestPool(t)
	pp := p.(*pool)
	local := pp.newHV
	pp.newHV = func(s Spec, dir string) (hypervisor, error) {
		hv, err := local(s, dir)
		if err == nil {
			hv.(*libvirtVM).tcpHost = "127.0.0.1"
		}
		return hv, err
	}
	bootAndCheck(t, p, debianKernel(t))
}
