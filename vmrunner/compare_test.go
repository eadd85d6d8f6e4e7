package vmrunner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Which boot failures are compared with the base (Recheck), and what the
// compared failure says (Compared).
func TestCompareBootWithTheBase(t *testing.T) {
	p, err := New("fake", Config{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	boot := func(cmdline string) error {
		vm, err := p.Create(context.Background(), Spec{Kernel: fakeKernel(t), Cmdline: cmdline, BootTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer vm.Close()
		_, err = vm.Boot(context.Background())
		return err
	}
	base := Info{BootDuration: 1100 * time.Millisecond}
	for _, tc := range []struct {
		cmdline string
		recheck bool
		limit   string
	}{
		{"fake.panic", false, ""},        // the kernel's at once
		{"fake.nostart", false, ""},      // the VM never ran the kernel: nobody's proof
		{"fake.hang", true, "time"},      // no answer within the deadline
		{"fake.crash", true, "the VM's"}, // the hypervisor failed as the kernel ran
	} {
		t.Run(tc.cmdline, func(t *testing.T) {
			err := boot(tc.cmdline)
			if Recheck(err) != tc.recheck {
				t.Fatalf("Recheck(%v) = %v, want %v", err, !tc.recheck, tc.recheck)
			}
			got := Compared(err, Spec{CPUs: 2, MemMiB: 1024}, base)
			var be *BootError
			switch {
			case !tc.recheck && got != err:
				t.Errorf("Compared changed an error it does not compare: %v", got)
			case tc.recheck && (!errors.As(got, &be) || be.Limit != tc.limit || !IsBoot(got)):
				t.Errorf("Compared = %v, want a BootError at the %s limit", got, tc.limit)
			case tc.recheck && !strings.Contains(be.Reason, "the base kernel was ready in 1.1s in a VM of the same shape (2 vCPUs, 1024 MiB, 1m0s to boot)"):
				t.Errorf("reason %q", be.Reason)
			}
		})
	}
}
