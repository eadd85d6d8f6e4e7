package initramfs

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

func debianKernel(t *testing.T) string {
	t.Helper()
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(ks) == 0 {
		testenv.Missing(t, "no /boot/vmlinuz-* (scripts/install-deps.sh installs linux-image-amd64)")
	}
	return ks[len(ks)-1]
}

func TestKernelRelease(t *testing.T) {
	k := debianKernel(t)
	rel, err := KernelRelease(k)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimPrefix(filepath.Base(k), "vmlinuz-"); rel != want {
		t.Errorf("KernelRelease(%s) = %q, want %q", k, rel, want)
	}
	if _, err := KernelRelease("initramfs.go"); err == nil {
		t.Error("KernelRelease of a Go file succeeded")
	}
}

// listing unpacks an archive with cpio(1), the independent reader.
func listing(t *testing.T, archive string) string {
	t.Helper()
	testenv.Tools(t, "cpio")
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel takes an uncompressed archive (and so does cpio): a
	// gzip one would start with 1f 8b.
	if !bytes.HasPrefix(raw, []byte("070701")) {
		t.Fatalf("%s does not start with a newc cpio header: % x", archive, raw[:min(8, len(raw))])
	}
	cmd := exec.Command("cpio", "-itv")
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	return string(out)
}

func TestBuildWithModulesAndFiles(t *testing.T) {
	k := debianKernel(t)
	mods, err := ModulesFor(k)
	if err != nil || mods == nil {
		t.Fatalf("ModulesFor(%s) = %v, %v", k, mods, err)
	}
	agent := filepath.Join(t.TempDir(), "agent")
	os.WriteFile(agent, []byte("#!/bin/true\n"), 0o755)
	opts := Options{
		Agent:    agent,
		CacheDir: t.TempDir(),
		Modules:  mods,
		Files:    []File{{Path: "/etc/patchbot/hello", Data: []byte("hi")}},
	}
	p, err := Build(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ls := listing(t, p)
	for _, want := range []string{
		"dev/console", " init", "etc/patchbot/hello",
		"lib/modules/" + mods.Release + "/modules.dep",
		"kernel/drivers/char/virtio_console.ko",
		"kernel/drivers/virtio/virtio_ring.ko", // a dependency, not asked for
	} {
		if !strings.Contains(ls, want) {
			t.Errorf("archive lacks %q:\n%s", want, ls)
		}
	}
	if !strings.Contains(ls, "crw-------") {
		t.Errorf("dev/console is not a character device:\n%s", ls)
	}

	again, err := Build(context.Background(), opts)
	if err != nil || again != p {
		t.Errorf("second Build = %q, %v; want the cached %q", again, err, p)
	}
	opts.Files[0].Data = []byte("changed")
	other, err := Build(context.Background(), opts)
	if err != nil || other == p {
		t.Errorf("Build with other contents = %q, %v; want a new archive", other, err)
	}
}

func TestModuleErrors(t *testing.T) {
	k := debianKernel(t)
	mods, _ := ModulesFor(k)
	if mods == nil {
		t.Skip("no module tree")
	}
	mods.Names = []string{"no_such_module"}
	_, err := mods.files()
	if err == nil || !strings.Contains(err.Error(), "no_such_module") {
		t.Errorf("unknown module: err = %v", err)
	}
}

func TestBuildAgentIsStatic(t *testing.T) {
	testenv.Long(t) // builds the agent
	t.Setenv("PATCHBOT_CACHE", t.TempDir())
	p, err := BuildAgent(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	// A static binary has no program interpreter (ld.so) to ask for.
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("agent %s is dynamically linked", p)
		}
	}
}
