package fleet

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// The systemd units in deploy/systemd are what docs/fleet.md tells an
// operator to install, and what the fleet's tests start their processes
// from. Here: systemd itself accepts them (systemd-analyze verify, with
// the binary where the unit says), their commands are ones the binary
// takes, and they keep the promises the docs make of them.
func TestSystemdUnits(t *testing.T) {
	testenv.Long(t)
	testenv.Tools(t, "systemd-analyze", "go")
	bin, _ := binaries(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		file, instance, command string
		needs                   map[string]string
	}{
		{"patchbot-watch.service", "", "watch", map[string]string{
			"User": "patchbot", "KillSignal": "SIGTERM", "Restart": "on-failure", "NoNewPrivileges": "yes",
			"ProtectSystem": "strict", "ReadWritePaths": "/var/lib/patchbot"}},
		{"patchbot-worker@.service", "kvm-7", "worker", map[string]string{
			"KillSignal": "SIGTERM", "KillMode": "mixed", "Restart": "on-failure", "Environment": "PATCHBOT_CACHE=/var/cache/patchbot"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			u := readUnit(t, tc.file)
			for _, s := range []string{"Unit", "Service", "Install"} {
				if u[s] == nil {
					t.Errorf("no [%s] section", s)
				}
			}
			for k, want := range tc.needs {
				if got := u.get("Service", k); got != want {
					t.Errorf("%s=%q, want %q", k, got, want)
				}
			}
			if got := u.get("Install", "WantedBy"); got != "multi-user.target" {
				t.Errorf("WantedBy=%q", got)
			}
			// A stop gives the worker time to abandon its stage, destroy
			// its VMs and give its job back.
			if n, err := strconv.Atoi(u.get("Service", "TimeoutStopSec")); err != nil || n < 30 {
				t.Errorf("TimeoutStopSec=%q, want 30 or more seconds", u.get("Service", "TimeoutStopSec"))
			}
			argv, _ := u.command(t, bin, tc.instance, map[string]string{
				"/etc/patchbot/patchbot.yaml": "/dev/null", "/etc/patchbot/worker.yaml": "/dev/null"})
			if argv[1] != tc.command {
				t.Fatalf("ExecStart runs %q, want patchbot %s", argv[1:], tc.command)
			}
			// The binary takes the unit's flags (help ends the parse after them).
			out, err := exec.Command(argv[0], append(argv[1:], "-h")...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "usage: patchbot "+tc.command) {
				t.Errorf("patchbot %s with the unit's flags: %v\n%s", strings.Join(argv[1:], " "), err, out)
			}
			// systemd's own reading, with the binary where the unit names it.
			raw, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			name := tc.file
			if tc.instance != "" {
				name = strings.Replace(tc.file, "@.", "@"+tc.instance+".", 1)
			}
			p := filepath.Join(dir, name)
			os.WriteFile(p, []byte(strings.ReplaceAll(string(raw), "/usr/local/bin/patchbot", bin)), 0o644)
			// verify loads the units ours pull in too, and speaks of their
			// faults as well (libvirt 11's libvirtd.service asks for a
			// newer systemd than bookworm's): only what it says of ours
			// counts.
			out, _ = exec.Command("systemd-analyze", "verify", p).CombinedOutput()
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if strings.Contains(line, name) || strings.Contains(line, p) {
					t.Errorf("systemd-analyze verify %s:\n%s", name, out)
					break
				}
			}
		})
	}
}
