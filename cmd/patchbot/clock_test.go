package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/internal/testenv"
)

// The built binary runs a suite on instruction-counted time at another
// shift as a user asks for it (--clock icount:0, as vm.clock): the
// result records the clock the guest got. A clock it does not know is a
// usage error that names the forms it takes.
func TestBinarySuiteRunClock(t *testing.T) {
	bin := buildBinary(t)
	for _, bad := range []string{"icount:11", "tsc"} {
		r := runBinary(t, bin, nil, "suite", "run", "--suites", "readahead", "--kernel", "/nonexistent", "--clock", bad)
		wantUsageError(t, r, "--clock "+bad, bad, "icount:N")
	}
	testenv.NeedsVM(t)
	testenv.NeedsKernel(t)
	testenv.Tools(t, "mksquashfs")
	k, err := images.DefaultKernel(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "suite", "run", "--suites", "readahead", "--profile", "quick", "--runs", "1",
		"--clock", "icount:0", "--kernel", k.BzImage, "--json")
	cmd.Env = os.Environ()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("suite run --clock icount:0: %v\n%s", err, errOut.String())
	}
	var got struct {
		Results []struct {
			Clock  string            `json:"clock"`
			Accel  string            `json:"accel"`
			Rounds []json.RawMessage `json:"rounds"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("its JSON: %v\n%s", err, out.String())
	}
	if len(got.Results) != 1 || len(got.Results[0].Rounds) != 1 {
		t.Fatalf("results %+v, want one kernel's one round", got.Results)
	}
	if r := got.Results[0]; r.Accel == "tcg" && r.Clock != "icount:0" {
		t.Errorf("the guest's clock %q under TCG, want icount:0\n%s", r.Clock, errOut.String())
	}
	if !strings.Contains(errOut.String(), "instruction-counted time") && got.Results[0].Accel == "tcg" {
		t.Errorf("the progress does not say the guests keep instruction-counted time:\n%s", errOut.String())
	}
}
