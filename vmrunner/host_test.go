package vmrunner

import (
	"os"
	"path/filepath"
	"testing"
)

// The verdict a pool keeps when KVM hung a guest makes the host say it has
// no KVM until it reboots; a verdict someone else could have planted does
// not.
func TestKVMUsableReadsTheVerdict(t *testing.T) {
	dir := t.TempDir()
	if err := privateDir(dir); err != nil {
		t.Fatal(err)
	}
	before := KVMUsable(dir)
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); (err == nil) != before {
		t.Fatalf("KVMUsable = %v with no verdict, /dev/kvm opens: %v", before, err == nil)
	} else if err == nil {
		f.Close()
	}
	verdict := filepath.Join(dir, "kvm-hangs-"+bootID())
	if err := writePrivate(verdict, []byte("hung\n")); err != nil {
		t.Fatal(err)
	}
	if KVMUsable(dir) {
		t.Error("KVM usable with this boot's verdict that it hangs guests")
	}
	os.Chmod(verdict, 0o666) // anyone's to write: planted
	if KVMUsable(dir) != before {
		t.Error("a verdict others could write decided")
	}
}

func TestHostMemMiB(t *testing.T) {
	if m := HostMemMiB(); m < 64 {
		t.Errorf("HostMemMiB = %d", m)
	}
}
