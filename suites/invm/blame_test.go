package invm

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/blame"
	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/vmrunner"
)

// A kernel that panics at boot is the patch's fault only when it is the
// patched kernel; the same panic on the base kernel is the
// infrastructure's. The fake backend scripts the panic; the blame comes
// from the types all the way up, not from wording.
func TestBootFailureBlamesTheKernelThatFailed(t *testing.T) {
	spec := fakeKernels(t)
	for _, tc := range []struct {
		name        string
		tester      Tester
		wantKernel  blame.Kernel
		wantBlame   blame.Blame
		wantBootErr bool
	}{
		{"base panics", Tester{BaseCmdline: "fake.panic"}, blame.Base, blame.Infra, true},
		{"patched panics", Tester{PatchedCmdline: "fake.panic"}, blame.Patched, blame.Patch, true},
		{"patched VM does not start", Tester{PatchedCmdline: "fake.nostart"}, "", blame.Infra, false},
		// Where the base booted, a patched kernel whose VM fails once it
		// runs is booted again, and then it is the kernel's (compared).
		{"patched VM fails as it runs, twice", Tester{PatchedCmdline: "fake.crash"}, blame.Patched, blame.Patch, true},
		{"base VM fails as it runs", Tester{BaseCmdline: "fake.crash"}, blame.Base, blame.Infra, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tester.VM = VMConfig{Backend: "fake"}
			_, err := tc.tester.Test(context.Background(), spec)
			if err == nil {
				t.Fatal("Test succeeded, want a boot failure")
			}
			if got := blame.Of(err); got != tc.wantBlame {
				t.Errorf("blame.Of(%v) = %q, want %q", err, got, tc.wantBlame)
			}
			if tc.wantKernel != "" && blame.KernelOf(err) != tc.wantKernel {
				t.Errorf("KernelOf = %q, want %q", blame.KernelOf(err), tc.wantKernel)
			}
			var be *vmrunner.BootError
			if errors.As(err, &be) != tc.wantBootErr {
				t.Errorf("BootError in the chain: %v, want %v (%v)", !tc.wantBootErr, tc.wantBootErr, err)
			}
			if be != nil && be.Limit != "" && (!strings.Contains(be.Reason, "twice") || !strings.Contains(be.Reason, "the base kernel was ready in")) {
				t.Errorf("the compared failure does not say what the base did: %q", be.Reason)
			}
		})
	}
}

// The VMs' launch lines go to the Tester's log, not to the process's
// default one: `patchbot run` on a terminal gives a warnings-only log, a
// daemon its structured one.
func TestLaunchLinesGoToTheTestersLog(t *testing.T) {
	spec := fakeKernels(t)
	var mine, def bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	defer slog.SetDefault(old)

	tester := Tester{VM: VMConfig{Backend: "fake"}, PatchedCmdline: "fake.panic",
		Log: slog.New(slog.NewTextHandler(&mine, nil))}
	if _, err := tester.Test(context.Background(), spec); err == nil {
		t.Fatal("the patched kernel's scripted panic was not reported")
	}
	for _, name := range []string{"base", "patched"} {
		if !strings.Contains(mine.String(), `msg="vm launched" name=`+name) {
			t.Errorf("the tester's log has no launch line for %s:\n%s", name, mine.String())
		}
	}
	if def.Len() != 0 {
		t.Errorf("the default log got lines meant for the tester's:\n%s", def.String())
	}
}

// fakeKernels is a one-round locks spec whose two "kernels" only the fake
// backend can boot.
func fakeKernels(t *testing.T) Spec {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"base", "patched"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not a kernel"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Spec{Suite: "locks", Plan: FixedPlan("quick", 1, nil),
		Base:    &images.Build{BzImage: filepath.Join(dir, "base")},
		Patched: &images.Build{BzImage: filepath.Join(dir, "patched")}}
}

// The patched kernel's oops as it prepares a suite is the patch's,
// carries the kernel's report and says which suite; it ends the run within
// seconds, not at the run deadline. (The fake backend runs no rounds: its
// trouble in a round is vmrunner's TestTroubleEndsTheRound.)
func TestTroubleInASuiteIsThePatchs(t *testing.T) {
	spec := fakeKernels(t)
	tester := Tester{VM: VMConfig{Backend: "fake"}, PatchedCmdline: "fake.trouble=oops@0"}
	start := time.Now()
	_, err := tester.Test(context.Background(), spec)
	var be *vmrunner.BootError
	if !errors.As(err, &be) || be.Report == nil || !blame.IsPatch(err) || blame.KernelOf(err) != blame.Patched {
		t.Fatalf("err = %v, want the patched kernel's report, the patch's fault", err)
	}
	if be.Suite != "locks" || be.Op != "prepare-suite" || be.Report.Title != "kernel BUG in squashfs_cache_get" {
		t.Errorf("trouble %q in %s %s", be.Report.Title, be.Op, be.Suite)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the run ended %s after it began", took)
	}
	// The same on the base kernel is the infrastructure's.
	tester = Tester{VM: VMConfig{Backend: "fake"}, BaseCmdline: "fake.trouble=oops@0"}
	if _, err := tester.Test(context.Background(), spec); blame.Of(err) != blame.Infra || blame.KernelOf(err) != blame.Base {
		t.Errorf("the base kernel's oops: blame %q on %q, want the infrastructure's on the base", blame.Of(err), blame.KernelOf(err))
	}
}
