package vmrunner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/images/initramfs"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/reports"
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
	// The reply that quotes it.
	run := &reports.Run{
		Thread:     reports.Thread{Subject: "[PATCH] squashfs: print a 16 MiB console line, then panic", MessageID: "<flood@example.org>", Author: "Mallory Hostile <mallory@example.org>"},
		BaseCommit: base.Commit, PatchedCommit: k.Head, Finished: time.Now(), Series: 1,
		Failure:  &reports.Failure{Stage: reports.StageBoot, Detail: be.Reason, Excerpt: string(be.Excerpt)},
		Commands: []string{"patchbot run --msgid flood@example.org"},
	}
	reply, err := reports.Render(run, reports.ReplyOptions{From: "patchbot <patchbot@example.org>"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reply body %d bytes", len(reply.Body))
	if len(reply.Body) > reports.MaxBody || strings.ContainsAny(reply.Body, "\x1b\x07") {
		t.Errorf("reply body of %d bytes (cap %d), or with a control character", len(reply.Body), reports.MaxBody)
	}
}
