package vmrunner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/internal/testenv"
)

// A patch whose kernel writes a 16 MiB line straight to the serial port
// (no newline) and then panics, built through the real path and booted
// under QEMU: the boot is the kernel's fault, ends when the VM does, and
// its evidence is bounded (the excerpt, the reply quoting it), escaped,
// and scanned once.
func TestHostileConsoleFlood(t *testing.T) {
	testenv.NeedsKernel(t)
	testenv.NeedsVM(t)
	ctx := context.Background()
	base, err := images.DefaultKernel(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := images.DefaultBuilder(nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Cache = filepath.Join(t.TempDir(), "cache") // the test's builds stay out of the shared cache
	raw, err := os.ReadFile("../testdata/hostile/console-flood.patch")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	k, err := b.Patched(ctx, base, [][]byte{raw})
	if err != nil {
		t.Fatalf("the patched kernel does not build: %v", err)
	}
	built := time.Since(start)
	rd, err := initramfs.ForKernel(ctx, k.BzImage, initramfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := qemuTestPool(t)
	vm, err := p.Create(ctx, Spec{Kernel: k.BzImage, Initramfs: rd, MemMiB: 512, BootTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	start = time.Now()
	_, err = vm.Boot(ctx)
	booted := time.Since(start)
	var be *BootError
	if !errors.As(err, &be) {
		t.Fatalf("Boot: %v (%T), want a BootError", err, err)
	}
	t.Logf("built in %s; boot ended in %s: %s; excerpt %d bytes", built.Round(time.Second), booted.Round(time.Second), be.Reason, len(be.Excerpt))
	if len(be.Excerpt) > excerptBytes+256 {
		t.Errorf("excerpt of %d bytes", len(be.Excerpt))
	}
	if !bytes.Contains(be.Excerpt, []byte("[line cut: ")) {
		t.Errorf("the 16 MiB line is not cut in the excerpt:\n%.2000s", be.Excerpt)
	}
	if be.Reason == "kernel panic" && !bytes.Contains(be.Excerpt, []byte("hostile: after a 16 MiB console line")) {
		t.Errorf("a panic without its message:\n%.2000s", be.Excerpt)
	}
	// What a reply quotes of it is escaped already: reports caps the reply
	// itself (TestReplyBoundedWorstCase).
	if bytes.ContainsAny(be.Excerpt, "\x1b\x07") {
		t.Errorf("a control character in the excerpt:\n%q", be.Excerpt[:min(len(be.Excerpt), 2000)])
	}
}
