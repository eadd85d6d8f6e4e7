package images

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// A patchbot killed mid-build leaves its groups behind; the next one
// removes them, and only those of dead processes.
func TestRemoveStaleCgroups(t *testing.T) {
	testenv.Root(t)
	if !cgroupsUsable() {
		t.Skip("cgroup v1 memory and pids are not mounted here")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	groups := func(pid int) []string {
		return groupOf(fmt.Sprintf("build-%d-999999", pid)).dirs()
	}
	stale, live := groups(dead.Process.Pid), groups(os.Getpid())
	for _, d := range append(append([]string{}, stale...), live...) {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(d) })
	}
	removeStaleCgroups()
	for _, d := range stale {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s of a dead process is still there (%v)", d, err)
		}
	}
	for _, d := range live {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s of a live process was removed: %v", d, err)
		}
	}
}
