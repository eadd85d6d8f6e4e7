package vmrunner

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/internal/testenv"
)

// kernel is a kernel to boot in tests, with an initramfs that fits it.
type kernel struct {
	name      string
	bzImage   string
	vmlinux   string // beside bzImage, for PVH boot; "" if there is none
	initramfs string
}

// debianKernel is the distribution kernel at /boot (linux-image-amd64),
// whose virtio drivers are modules packed into its initramfs. It is
// there only to be booted.
func debianKernel(t testing.TB) kernel {
	t.Helper()
	testenv.NeedsVM(t)
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		testenv.Missing(t, "no /boot/vmlinuz-*: scripts/install-deps.sh installs linux-image-amd64")
	}
	k := ks[len(ks)-1]
	rd, err := initramfs.ForKernel(context.Background(), k, initramfs.Options{})
	if err != nil {
		t.Fatalf("initramfs for %s: %v", k, err)
	}
	return kernel{name: "debian", bzImage: k, initramfs: rd}
}

var (
	minimalOnce sync.Once
	minimal     kernel
	minimalErr  error
)

// minimalKernel is images' default kernel (tinyconfig plus the VM and
// suite fragments, everything built in). A cold build takes about ten
// minutes; it is cached and shared with images' own tests through a lock.
func minimalKernel(t testing.TB) kernel {
	t.Helper()
	testenv.NeedsKernel(t)
	minimalOnce.Do(func() {
		b, err := images.DefaultKernel(context.Background(), nil)
		if err != nil {
			minimalErr = err
			return
		}
		rd, err := initramfs.ForKernel(context.Background(), b.BzImage, initramfs.Options{})
		if err != nil {
			minimalErr = err
			return
		}
		minimal = kernel{name: "minimal", bzImage: b.BzImage, vmlinux: b.Vmlinux, initramfs: rd}
	})
	if minimalErr != nil {
		t.Fatalf("default kernel: %v", minimalErr)
	}
	return minimal
}

// needQEMU gates a test that starts QEMU, even only to see it fail.
func needQEMU(t testing.TB) {
	t.Helper()
	testenv.NeedsVM(t)
}

// rawDisk makes a small raw image in dir holding text at its start, to find it
// again in the guest.
func rawDisk(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, text+".img")
	b := make([]byte, 1<<20)
	copy(b, text)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// alive reports whether a process exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ..."; Z is a zombie: dead, not yet reaped.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

func itoa(n int) string { return strconv.Itoa(n) }

// copyTo copies src to dst (mode 0644) and returns dst.
func copyTo(t testing.TB, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// procStatus reads /proc/PID/status into a map of field to value.
func procStatus(t testing.TB, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}
