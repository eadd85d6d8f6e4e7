package images

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeBzImage has the boot signature and the setup header's magic.
func fakeBzImage() []byte {
	b := make([]byte, 8192)
	b[0x1fe], b[0x1ff] = 0x55, 0xaa
	copy(b[0x202:], "HdrS")
	return b
}

func TestArtifacts(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	os.WriteFile(secret, []byte("root:secret\n"), 0o600)
	tests := []struct {
		name  string
		make  func(obj string) error // lays out obj/arch/x86/boot/bzImage
		why   string                 // in the badArtifact; "" for a good one
		limit int64
	}{
		{name: "a kernel", make: func(obj string) error {
			return os.WriteFile(filepath.Join(obj, "arch/x86/boot/bzImage"), fakeBzImage(), 0o644)
		}},
		{name: "a link to a secret", why: "symbolic link", make: func(obj string) error {
			return os.Symlink(secret, filepath.Join(obj, "arch/x86/boot/bzImage"))
		}},
		{name: "below a linked directory", why: "symbolic link", make: func(obj string) error {
			os.RemoveAll(filepath.Join(obj, "arch/x86/boot"))
			os.WriteFile(filepath.Join(filepath.Dir(secret), "bzImage"), fakeBzImage(), 0o644)
			return os.Symlink(filepath.Dir(secret), filepath.Join(obj, "arch/x86/boot"))
		}},
		{name: "a FIFO", why: "not a regular file", make: func(obj string) error {
			return syscall.Mkfifo(filepath.Join(obj, "arch/x86/boot/bzImage"), 0o644)
		}},
		{name: "a directory", why: "not a regular file", make: func(obj string) error {
			return os.Mkdir(filepath.Join(obj, "arch/x86/boot/bzImage"), 0o755)
		}},
		{name: "missing", why: "missing", make: func(string) error { return nil }},
		{name: "not a kernel", why: "not an x86 kernel image", make: func(obj string) error {
			return os.WriteFile(filepath.Join(obj, "arch/x86/boot/bzImage"), []byte("root:secret\n"), 0o644)
		}},
		{name: "too large", why: "over the", limit: 4096, make: func(obj string) error {
			return os.WriteFile(filepath.Join(obj, "arch/x86/boot/bzImage"), fakeBzImage(), 0o644)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := filepath.Join(t.TempDir(), "obj")
			os.MkdirAll(filepath.Join(obj, "arch/x86/boot"), 0o755)
			if err := tt.make(obj); err != nil {
				t.Fatal(err)
			}
			a := bzImageArtifact
			if tt.limit > 0 {
				a.max = tt.limit
			}
			dir := t.TempDir()
			p, err := copyArtifact(obj, a, dir)
			var bad *badArtifact
			if tt.why == "" {
				if err != nil {
					t.Fatalf("copyArtifact: %v", err)
				}
				fi, _ := os.Stat(p)
				data, _ := os.ReadFile(p)
				if fi.Mode().Perm() != 0o600 || !bytes.Equal(data, fakeBzImage()) {
					t.Errorf("copy %s: mode %v, %d bytes", p, fi.Mode().Perm(), len(data))
				}
				return
			}
			if !errors.As(err, &bad) || !strings.Contains(bad.why, tt.why) {
				t.Errorf("copyArtifact = %v, want a bad artifact that %s", err, tt.why)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 0 {
				t.Errorf("something was copied: %v", entries)
			}
		})
	}
}
