package vmrunner

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// checkConfined checks, on a booted VM, how its QEMU is confined: whom
// it runs as, its seccomp filter, and that it cannot change the files it
// was given. bootAndCheck calls it, so every real boot in the tests
// checks it without a boot of its own.
func checkConfined(t *testing.T, vm Instance) {
	t.Helper()
	switch hv := vm.(*machine).hv.(type) {
	case *qemuVM:
		checkQEMUJail(t, hv)
	case *libvirtVM:
		checkLibvirtDomain(t, hv)
	default:
		t.Fatalf("no confinement check for %T", hv)
	}
}

// checkQEMUJail: QEMU runs as the VM user (as root) or as us, with a
// seccomp filter, no new privileges, no capabilities, its own network
// namespace, bounded address space and no file writes; its kernel and
// initramfs are sealed copies and its disks read-only descriptors.
func checkQEMUJail(t *testing.T, q *qemuVM) {
	t.Helper()
	pid := qemuPID(t, q.cmd.Process.Pid)
	st := procStatus(t, pid)
	wantUID := os.Getuid()
	if wantUID == 0 {
		wantUID = q.jail.uid
		if wantUID == 0 {
			t.Fatal("the jail's uid is 0")
		}
	}
	for _, f := range []string{"Uid", "Gid"} {
		for _, id := range strings.Fields(st[f]) { // real, effective, saved, fs
			if f == "Uid" && id != strconv.Itoa(wantUID) || id == "0" {
				t.Errorf("QEMU %s = %q, want %d throughout and never 0", f, st[f], wantUID)
				break
			}
		}
	}
	if st["Seccomp"] != "2" || st["NoNewPrivs"] != "1" {
		t.Errorf("QEMU Seccomp %q NoNewPrivs %q, want 2 (filter) and 1", st["Seccomp"], st["NoNewPrivs"])
	}
	if st["CapEff"] != "0000000000000000" {
		t.Errorf("QEMU CapEff = %s, want none", st["CapEff"])
	}
	if st["Groups"] != "" {
		t.Errorf("QEMU Groups = %q, want none (TCG needs no /dev/kvm)", st["Groups"])
	}
	ours, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink(filepath.Join("/proc", itoa(pid), "ns/net"))
	if err != nil || theirs == ours {
		t.Errorf("QEMU network namespace %q (err %v), ours %q: want its own", theirs, err, ours)
	}
	limits, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "limits"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Max address space         %d", uint64(q.addressSpaceMiB())<<20),
		"Max file size             0",
		"Max core file size        0",
	} {
		if !strings.Contains(string(limits), want) {
			t.Errorf("QEMU limits lack %q:\n%s", want, limits)
		}
	}

	// What QEMU holds: sealed memfds for the kernel and the initramfs
	// (nobody can write them, QEMU included) and read-only descriptors
	// of the disks.
	fdDir := filepath.Join("/proc", itoa(pid), "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	memfds, disks := 0, 0
	for _, e := range ents {
		fd := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(target, "/memfd:patchbot-"):
			memfds++
			f, err := os.OpenFile(fd, os.O_RDWR, 0)
			if err != nil {
				t.Errorf("reopening QEMU's %s: %v", target, err)
				continue
			}
			_, werr := f.WriteAt([]byte{0}, 0)
			f.Close()
			if werr == nil {
				t.Errorf("QEMU's %s (fd %s) can be written", target, e.Name())
			}
		case isOneOf(target, q.spec.Disks):
			disks++
			info, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "fdinfo", e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if mode := fdAccMode(t, string(info)); mode != os.O_RDONLY {
				t.Errorf("QEMU holds disk %s (fd %s) with access mode %d, want read-only", target, e.Name(), mode)
			}
		}
	}
	wantMemfds := 1
	if q.spec.Initramfs != "" {
		wantMemfds++
	}
	if memfds != wantMemfds || disks < len(q.spec.Disks) {
		t.Errorf("QEMU holds %d sealed copies and %d disk descriptors, want %d and at least %d", memfds, disks, wantMemfds, len(q.spec.Disks))
	}
	// And the disks cannot be reopened for writing by QEMU's user.
	if os.Geteuid() == 0 {
		for _, d := range q.spec.Disks {
			if err := tryWriteAs(q.jail.uid, q.jail.gid, d); err == nil {
				t.Errorf("QEMU's user %d can write disk %s", q.jail.uid, d)
			}
		}
	}
}

// checkLibvirtDomain: the domain's QEMU runs as libvirt's unprivileged
// user with seccomp, under the DAC label read from the host; locally it
// is given copies it can read but not change.
func checkLibvirtDomain(t *testing.T, v *libvirtVM) {
	t.Helper()
	if v.label.uid == 0 {
		t.Fatalf("libvirt's DAC label is %s", v.label)
	}
	pidText, err := os.ReadFile("/run/libvirt/qemu/" + v.dom.Name + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	st := procStatus(t, pid)
	for _, id := range strings.Fields(st["Uid"]) {
		if id != strconv.Itoa(v.label.uid) {
			t.Errorf("libvirt's QEMU runs with Uid %q, want %d throughout", st["Uid"], v.label.uid)
			break
		}
	}
	if st["Seccomp"] != "2" {
		t.Errorf("libvirt's QEMU Seccomp = %q, want 2 (filter)", st["Seccomp"])
	}

	u, _ := url.Parse(DefaultURI)
	conn, err := libvirt.ConnectToURI(u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Disconnect()
	live, err := conn.DomainGetXMLDesc(*v.dom, 0)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(live); err != nil {
		t.Fatal(err)
	}
	var dac *libvirtxml.DomainSecLabel
	for i := range d.SecLabel {
		if d.SecLabel[i].Model == "dac" {
			dac = &d.SecLabel[i]
		}
	}
	switch {
	case dac == nil:
		t.Errorf("the live domain has no DAC seclabel:\n%s", live)
	case dac.Label != v.label.String():
		t.Errorf("the live domain's DAC label is %q, want %s", dac.Label, v.label)
	case !v.remote && (dac.Type != "static" || dac.Relabel != "no"):
		t.Errorf("the live domain's DAC seclabel is type %q relabel %q, want static, no (nothing shared is chowned)", dac.Type, dac.Relabel)
	}
	if v.remote || os.Geteuid() != 0 {
		// Remote: that host's libvirt relabels the files at their paths
		// (see docs/vmrunner.md).
		return
	}
	for _, p := range append([]string{v.kernel, v.initrd}, v.disks...) {
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, v.dir+"/") {
			t.Errorf("the domain is given %s, not a copy in its directory %s", p, v.dir)
		}
		if err := tryWriteAs(v.label.uid, v.label.gid, p); err == nil {
			t.Errorf("libvirt's QEMU user %s can write its copy %s", v.label, p)
		}
		if err := tryReadAs(v.label.uid, v.label.gid, p); err != nil {
			t.Errorf("libvirt's QEMU user %s cannot read its copy %s: %v", v.label, p, err)
		}
	}
}

func isOneOf(s string, list []string) bool {
	for _, l := range list {
		if s == l {
			return true
		}
	}
	return false
}

// fdAccMode is O_RDONLY, O_WRONLY or O_RDWR from a /proc/PID/fdinfo file.
func fdAccMode(t *testing.T, fdinfo string) int {
	t.Helper()
	for _, line := range strings.Split(fdinfo, "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q: %v", v, err)
			}
			return int(n) & 3
		}
	}
	t.Fatalf("no flags in fdinfo:\n%s", fdinfo)
	return -1
}

// tryWriteAs tries, as uid:gid, to make path writable (an owner could)
// and to open it for appending: nil means the user can change it.
func tryWriteAs(uid, gid int, path string) error {
	return runAs(uid, gid, `chmod u+w "$1" 2>/dev/null; : >> "$1"`, path)
}

func tryReadAs(uid, gid int, path string) error {
	return runAs(uid, gid, `head -c 1 "$1" > /dev/null`, path)
}

func runAs(uid, gid int, script, path string) error {
	out, err := exec.Command("setpriv", "--reuid="+itoa(uid), "--regid="+itoa(gid), "--clear-groups", "--",
		"/bin/sh", "-c", script, "sh", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
