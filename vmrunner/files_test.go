package vmrunner

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A verdict planted where anyone can write (the old /tmp file, or a file
// in a directory others may change) does not force TCG; one patchbot
// wrote in its own directory does.
func TestKVMVerdictOnlyFromPrivateDir(t *testing.T) {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		t.Skip("no /dev/kvm to open: TCG is chosen for that reason alone")
	} else {
		f.Close()
	}
	was := kvmBroken.Load()
	kvmBroken.Store(false)
	t.Cleanup(func() { kvmBroken.Store(was) })

	planted := filepath.Join(os.TempDir(), "patchbot-kvm-hangs-"+bootID())
	if _, err := os.Stat(planted); err != nil {
		if err := os.WriteFile(planted, []byte("planted\n"), 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(planted) })
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)).Warn
	dir := filepath.Join(t.TempDir(), "run")
	if err := privateDir(dir); err != nil {
		t.Fatal(err)
	}
	a := &accelState{dir: dir, log: quiet}
	if accel, _ := a.pick(); accel != "kvm" {
		t.Fatalf("with %s planted: pick = %s, want kvm (the probe)", planted, accel)
	}

	// Planted in our directory but writable by others, or as a link:
	// ignored too.
	v := a.verdictFile()
	for _, plant := range []func() error{
		func() error { return os.WriteFile(v, []byte("x"), 0o666) },
		func() error { return os.Symlink(planted, v) },
	} {
		os.Remove(v)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		os.Chmod(v, 0o666) // WriteFile's mode is masked by the umask
		if accel, _ := a.pick(); accel != "kvm" {
			t.Errorf("with a foreign %s: pick = %s, want kvm", v, accel)
		}
	}
	os.Remove(v)

	// Our own verdict holds for later processes.
	if !a.markBad("test") {
		t.Fatal("markBad refused")
	}
	if !readPrivate(v) {
		t.Fatalf("markBad did not leave a private %s", v)
	}
	kvmBroken.Store(false) // as in a new process
	if accel, _ := a.pick(); accel != "tcg" {
		t.Errorf("after markBad: pick = %s, want tcg", accel)
	}
}

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	if err := privateDir(filepath.Join(base, "a", "b")); err != nil {
		t.Errorf("a new directory: %v", err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := privateDir(filepath.Join(open, "x")); err == nil {
		t.Error("a directory under a world-writable, non-sticky one was accepted")
	}
	if err := privateDir(open); err == nil {
		t.Error("a world-writable directory was accepted")
	}
	link := filepath.Join(base, "link")
	os.Symlink(filepath.Join(base, "a"), link)
	if err := privateDir(link); err == nil {
		t.Error("a link was accepted")
	}
}

// note is one ELF note, padded.
func note(owner string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	name := append([]byte(owner), 0)
	binary.Write(&b, binary.LittleEndian, [3]uint32{uint32(len(name)), uint32(len(desc)), typ})
	b.Write(name)
	b.Write(make([]byte, (4-len(name)%4)%4))
	b.Write(desc)
	b.Write(make([]byte, (4-len(desc)%4)%4))
	return b.Bytes()
}

func TestHasNote(t *testing.T) {
	entry := []byte{0x10, 0x06, 0, 1}
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"pvh", note("Xen", xenNotePhys32Entry, entry), true},
		{"after others", append(note("GNU", 3, make([]byte, 20)), note("Xen", xenNotePhys32Entry, entry)...), true},
		{"other Xen note", note("Xen", 17, entry), false},
		{"other owner", note("Linux", xenNotePhys32Entry, entry), false},
		{"truncated", note("Xen", xenNotePhys32Entry, entry)[:14], false},
		{"empty", nil, false},
	} {
		if got := hasNote(tc.data, binary.LittleEndian, "Xen", xenNotePhys32Entry); got != tc.want {
			t.Errorf("%s: hasNote = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The default kernel's vmlinux has the PVH entry; its bzImage is not an
// ELF; a spec finds the vmlinux beside the bzImage.
func TestPVHKernel(t *testing.T) {
	k := minimalKernel(t)
	if k.vmlinux == "" {
		t.Fatal("the default kernel's build keeps no vmlinux")
	}
	if ok, err := hasPVHEntry(k.vmlinux); !ok || err != nil {
		t.Errorf("hasPVHEntry(vmlinux) = %v, %v; want true", ok, err)
	}
	if ok, err := hasPVHEntry(k.bzImage); ok || !errors.Is(err, errNotELF) {
		t.Errorf("hasPVHEntry(bzImage) = %v, %v; want false, not an ELF", ok, err)
	}
	if got, why := pvhKernel(Spec{Kernel: k.bzImage}); got != k.vmlinux {
		t.Errorf("pvhKernel(bzImage) = %q (%s), want %s", got, why, k.vmlinux)
	}
	lone := copyTo(t, k.bzImage, filepath.Join(t.TempDir(), "bzImage"))
	if got, why := pvhKernel(Spec{Kernel: lone}); got != "" || !strings.Contains(why, "no vmlinux") {
		t.Errorf("pvhKernel(a lone bzImage) = %q, %q; want none, no vmlinux", got, why)
	}
}

func TestSealedCopy(t *testing.T) {
	p := filepath.Join(t.TempDir(), "k")
	os.WriteFile(p, []byte("kernel bytes"), 0o600)
	m, err := sealedCopy(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.WriteAt([]byte("X"), 0); err == nil {
		t.Error("the sealed copy can be written")
	}
	got, _ := io.ReadAll(io.NewSectionReader(m, 0, 1<<20))
	if string(got) != "kernel bytes" {
		t.Errorf("copy holds %q", got)
	}
	seals, err := unix.FcntlInt(m.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_WRITE == 0 {
		t.Errorf("seals = %#x, %v", seals, err)
	}
	if _, err := sealedCopy(t.TempDir()); err == nil {
		t.Error("a directory was copied")
	}
}

func TestCappedWriter(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	w := &cappedWriter{f: f, left: 10}
	for _, s := range []string{"12345", "67890", "abc", "def"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	f.Close()
	got, _ := os.ReadFile(f.Name())
	if !strings.HasPrefix(string(got), "1234567890\n[patchbot: console output beyond") || strings.Contains(string(got), "abc") ||
		strings.Count(string(got), "dropped") != 1 {
		t.Errorf("capped console = %q", got)
	}
}

// The KVM verdict lives in the run directory (by default /run/patchbot
// as root), never under /tmp; a run directory others could change is not
// used at all.
func TestQEMUVerdictLivesInRunDir(t *testing.T) {
	needQEMU(t)
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	for _, tc := range []struct {
		name, runDir, want string
	}{
		{"default", "", defaultRunDir()},
		{"given", filepath.Join(t.TempDir(), "run"), ""},
		{"under a world-writable directory", filepath.Join(open, "run"), "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			switch want {
			case "":
				want = tc.runDir
			case "none":
				want = ""
			}
			p, err := New("qemu", Config{WorkDir: t.TempDir(), RunDir: tc.runDir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Close()
			acc := vm.(*machine).hv.(*qemuVM).acc
			if acc.dir != want {
				t.Errorf("verdict directory %q, want %q", acc.dir, want)
			}
			if os.Geteuid() == 0 && tc.name == "default" && acc.dir != "/run/patchbot" {
				t.Errorf("as root the verdict directory is %q, want /run/patchbot", acc.dir)
			}
			if v := acc.verdictFile(); want != "" && (!strings.HasPrefix(v, want+"/") || strings.HasPrefix(v, os.TempDir()+"/patchbot-kvm")) {
				t.Errorf("verdict file %q, want it in %s", v, want)
			}
			if want == "" && acc.verdictFile() != "" {
				t.Errorf("verdict file %q under a directory others can change", acc.verdictFile())
			}
		})
	}
}

func TestHZFromInitialJiffies(t *testing.T) {
	for _, tt := range []struct {
		v    uint64
		want int
	}{
		{1<<32 - 300*100, 100}, {1<<32 - 300*250, 250}, {1<<32 - 300*300, 300}, {1<<32 - 300*1000, 1000},
		{4294892296, 250}, // what a CONFIG_HZ=250 vmlinux holds
		{0, 0}, {1 << 32, 0}, {1<<32 - 301, 0}, {1<<32 - 300, 0}, {1<<32 - 300*20000, 0},
	} {
		if got := hzFromInitialJiffies(tt.v); got != tt.want {
			t.Errorf("hzFromInitialJiffies(%d) = %d, want %d", tt.v, got, tt.want)
		}
	}
}

// kernelHZ reads the real kernel's tick rate from its ELF; its .config,
// beside it in the cache, says what the rate must be.
func TestKernelHZ(t *testing.T) {
	k := minimalKernel(t)
	if k.vmlinux == "" {
		t.Skip("the default kernel has no vmlinux")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(k.bzImage), "config"))
	if err != nil {
		t.Fatal(err)
	}
	var want int
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CONFIG_HZ="); ok {
			want, _ = strconv.Atoi(v)
		}
	}
	if want == 0 {
		t.Fatal("no CONFIG_HZ in the kernel's config")
	}
	if got := kernelHZ(k.vmlinux); got != want {
		t.Errorf("kernelHZ(%s) = %d, want CONFIG_HZ=%d", k.vmlinux, got, want)
	}
	if got := kernelHZ(k.bzImage); got != 0 {
		t.Errorf("kernelHZ of a bzImage = %d, want 0 (not an ELF)", got)
	}
}
