package vmrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KVMUsable says whether this host's VMs can use KVM: /dev/kvm opens, and
// no boot since the host started found KVM hanging guests (the verdict a
// pool keeps in its Config.RunDir; "" is the default directory). A fleet's
// worker says so when it registers, so that jobs that need KVM go
// elsewhere.
func KVMUsable(runDir string) bool {
	if runDir == "" {
		runDir = defaultRunDir()
	}
	if runDir != "" && readPrivate(filepath.Join(runDir, "kvm-hangs-"+bootID())) {
		return false
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// HostMemMiB is this host's memory (MemTotal) in MiB, 0 when unknown.
func HostMemMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kib int
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kib); err == nil {
			return kib / 1024
		}
	}
	return 0
}
