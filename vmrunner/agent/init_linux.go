package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// Main is the guest's /init: it prepares the system, then serves the host
// forever. It never returns while it is PID 1: init exiting panics the
// kernel, which would be blamed on the patch.
func Main(h Handler) {
	log.SetPrefix("patchbot-agent: ")
	log.SetFlags(0)
	setupConsole()
	mountAll()
	loadModules()
	h.KernelRelease = kernelRelease()
	if h.PowerOff == nil {
		h.PowerOff = powerOff
	}
	os.Setenv("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")

	for attempt := 0; ; attempt++ {
		port, err := openPort(10 * time.Second)
		if err != nil {
			// The host sees no "ready" and reports the console line.
			log.Printf("no agent port: %v; powering off", err)
			powerOff()
		}
		err = Serve(context.Background(), port, h)
		port.Close()
		// A read error or EOF means the host went away; the host may
		// connect again, so keep serving.
		if err != nil {
			log.Printf("serve: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setupConsole gives init stdio on the console when the kernel could not
// (the initramfs holds /dev/console, so normally it could).
func setupConsole() {
	if _, err := unix.FcntlInt(1, unix.F_GETFD, 0); err == nil {
		return
	}
	os.Mkdir("/dev", 0o755)
	unix.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	if f, err := os.OpenFile("/dev/console", os.O_RDWR, 0); err == nil {
		for fd := 0; fd < 3; fd++ {
			unix.Dup2(int(f.Fd()), fd)
		}
	}
}

type mount struct{ source, target, fstype, data string }

// mounts are what the suites and the agent read. Tracing and debug
// filesystems are optional: a kernel without them still boots, and the
// suites report the counters as missing.
var mounts = []mount{
	{"proc", "/proc", "proc", ""},
	{"sysfs", "/sys", "sysfs", ""},
	{"devtmpfs", "/dev", "devtmpfs", ""},
	{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
	{"tmpfs", "/run", "tmpfs", "mode=0755"},
	{"tracefs", "/sys/kernel/tracing", "tracefs", ""},
	{"debugfs", "/sys/kernel/debug", "debugfs", ""},
}

func mountAll() {
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			log.Printf("mkdir %s: %v", m.target, err)
			continue
		}
		err := unix.Mount(m.source, m.target, m.fstype, 0, m.data)
		if err != nil && !errors.Is(err, unix.EBUSY) {
			log.Printf("mount %s on %s: %v", m.fstype, m.target, err)
		}
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// loadModules loads every module in /lib/modules/$(uname -r)/modules.dep,
// each after the modules it depends on. There is no modprobe in the guest.
func loadModules() {
	dir := filepath.Join("/lib/modules", kernelRelease())
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return // a kernel with everything built in
	}
	defer f.Close()
	deps := map[string][]string{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		order = append(order, mod)
		deps[mod] = strings.Fields(rest)
	}
	loaded := map[string]bool{}
	var load func(mod string)
	load = func(mod string) {
		if loaded[mod] {
			return
		}
		loaded[mod] = true
		// modules.dep lists every dependency, direct and indirect,
		// nearest last: load from the end.
		d := deps[mod]
		for i := len(d) - 1; i >= 0; i-- {
			load(d[i])
		}
		if err := loadModule(filepath.Join(dir, mod)); err != nil {
			log.Printf("load %s: %v", mod, err)
		}
	}
	for _, m := range order {
		load(m)
	}
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.FinitModule(int(f.Fd()), "", 0)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// openPort finds the agent's virtio-serial port. Without udev there is no
// /dev/virtio-ports/ symlink, so look the name up in sysfs and make it.
// A host that can reach only consoles (a remote libvirt, through its
// authenticated connection) names a virtio console instead with
// patchbot.agent=hvcN on the kernel command line.
func openPort(wait time.Duration) (*os.File, error) {
	if tty := cmdlineValue(proto.ConsoleParam); tty != "" {
		return openConsole(tty, wait)
	}
	link := "/dev/virtio-ports/" + proto.Port
	deadline := time.Now().Add(wait)
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil || strings.TrimSpace(string(b)) != proto.Port {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			os.MkdirAll(filepath.Dir(link), 0o755)
			os.Symlink(dev, link)
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err == nil {
				return f, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("port %s not found in /sys/class/virtio-ports (is virtio_console loaded?)", proto.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdlineValue returns the value of key=value on the kernel command line.
func cmdlineValue(key string) string {
	b, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// openConsole opens /dev/<name> (only a plain hvc name is taken) and
// makes it raw: no echo, no line editing, no newline translation, so the
// JSON lines pass unchanged.
func openConsole(name string, wait time.Duration) (*os.File, error) {
	if !strings.HasPrefix(name, "hvc") || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("%s=%q: want a virtio console such as hvc0", proto.ConsoleParam, name)
	}
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile("/dev/"+name, os.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
			if err == nil {
				makeRaw(t)
				err = unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("raw mode on /dev/%s: %w", name, err)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("console /dev/%s: %w (is virtio_console loaded?)", name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// makeRaw is cfmakeraw(3).
func makeRaw(t *unix.Termios) {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
}

// powerOff ends the VM: the host runs QEMU with -no-reboot (libvirt with
// on_reboot=destroy), so a restart stops it without needing ACPI.
func powerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {} // reboot does not return; if it did, init must not exit
}
