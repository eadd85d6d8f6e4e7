package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/intake"
)

// The database's password comes from a file only patchbot can read.
func TestOpenStoreRefusesAnOpenPasswordFile(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte("secret\n"), 0o644)
	cfg := Default()
	cfg.StateDir = t.TempDir()
	cfg.Database, cfg.DatabasePasswordFile = "postgres://patchbot@127.0.0.1:1/patchbot", pw
	if _, err := cfg.OpenStore(); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("OpenStore with a 0644 password file: %v", err)
	}
}

// A test job asks a worker for the config's VM shape for both kernels at
// once, KVM when the fleet requires it, and its suites; a check asks for
// nothing (the coordinator runs it).
func TestDeskRows(t *testing.T) {
	cfg := Default()
	cfg.VM.CPUs, cfg.VM.MemMiB, cfg.Fleet.RequireKVM = 4, 3000, true
	d := cfg.Desk()
	test, err := d.Row(intake.Job{Dedupe: "series:a", Trigger: "list", Test: &intake.Request{Profile: "quick"}, Suites: []string{"locks"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := test.Needs; !n.KVM || n.CPUs != 4 || n.MemMiB != 6000 || strings.Join(n.Suites, " ") != "locks" || test.Kind != "test" {
		t.Errorf("a test's row: %s, needs %+v", test.Kind, n)
	}
	var req intake.Request
	if err := json.Unmarshal(test.Request, &req); err != nil || req.Profile != "quick" {
		t.Errorf("the request kept: %+v, %v", req, err)
	}
	check, err := d.Row(intake.Job{Dedupe: "check:a", Trigger: "incomplete", Check: &intake.Check{}})
	if err != nil {
		t.Fatal(err)
	}
	if check.Kind != "check" || check.Needs.CPUs != 0 || check.Needs.KVM {
		t.Errorf("a check's row: %s, needs %+v", check.Kind, check.Needs)
	}
}
