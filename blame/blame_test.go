package blame

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

type patchErr struct{}

func (patchErr) Error() string { return "does not build" }
func (patchErr) Blame() Blame  { return Patch }

type infraErr struct{}

func (infraErr) Error() string { return "disk full" }
func (infraErr) Blame() Blame  { return Infra }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Blame
	}{
		{"nil", nil, None},
		{"unclassified", errors.New("something"), Infra},
		{"cancelled", context.Canceled, Infra},
		{"patch", patchErr{}, Patch},
		{"wrapped patch", fmt.Errorf("building: %w", patchErr{}), Patch},
		{"infra", infraErr{}, Infra},
		{"patch on the patched kernel", On(Patched, patchErr{}), Patch},
		{"patch error on the base kernel", On(Base, patchErr{}), Infra},
		{"wrapped base failure", fmt.Errorf("suite x: %w", On(Base, fmt.Errorf("boot: %w", patchErr{}))), Infra},
		{"unclassified on the patched kernel", On(Patched, errors.New("vm died")), Infra},
		{"infra on the patched kernel", On(Patched, infraErr{}), Infra},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestKernelOf(t *testing.T) {
	err := fmt.Errorf("run: %w", On(Base, patchErr{}))
	if k := KernelOf(err); k != Base {
		t.Errorf("KernelOf = %q, want base", k)
	}
	if k := KernelOf(patchErr{}); k != "" {
		t.Errorf("KernelOf(no kernel) = %q, want empty", k)
	}
	if On(Base, nil) != nil {
		t.Error("On(nil) is not nil")
	}
}
