package images

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DryRun is a builder that builds nothing: it takes Delay per kernel and
// writes a placeholder "kernel" into Dir, with a line in Dir/builds.log.
// It is the build stage of a dry run (the config's dry_run:), which
// rehearses a fleet's plumbing (database, roles, network, workers, mail)
// without build tools or a kernel tree, and it is what the fleet's many-jobs
// tests build with. Its kernels boot nowhere but on the fake VM backend.
type DryRun struct {
	Dir   string
	Delay time.Duration
}

// DryRunCommit is the commit a dry run's kernels say they were built from.
var DryRunCommit = strings.Repeat("d", 40)

func (b *DryRun) build(ctx context.Context, name string) (string, error) {
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-time.After(b.Delay):
	}
	if err := os.MkdirAll(b.Dir, 0o755); err != nil {
		return "", infra("dry run: making its directory", err)
	}
	p := filepath.Join(b.Dir, name)
	if err := os.WriteFile(p, []byte("dry run: not a kernel\n"), 0o644); err != nil {
		return "", infra("dry run: writing its kernel", err)
	}
	f, err := os.OpenFile(filepath.Join(b.Dir, "builds.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return "", infra("dry run: logging its build", err)
	}
	defer f.Close()
	fmt.Fprintln(f, name)
	return p, nil
}

// Choose always chooses the kernel: base.
func (b *DryRun) Choose(ctx context.Context, w Want) (*Choice, error) {
	return &Choice{Tree: DefaultTree, How: ByDefault}, nil
}

// Base "builds" the base kernel.
func (b *DryRun) Base(ctx context.Context, base Base) (*Build, error) {
	p, err := b.build(ctx, "base")
	if err != nil {
		return nil, err
	}
	return &Build{BzImage: p, Commit: DryRunCommit, ConfigHash: "dry-run", Compiler: "none (dry run)"}, nil
}

// Patched "builds" the patched kernel; the patches are not applied.
func (b *DryRun) Patched(ctx context.Context, base *Build, patches [][]byte) (*Build, error) {
	p, err := b.build(ctx, "patched")
	if err != nil {
		return nil, err
	}
	return &Build{BzImage: p, Commit: base.Commit, Head: strings.Repeat("e", 40), ConfigHash: base.ConfigHash,
		Compiler: base.Compiler, Series: len(patches)}, nil
}
