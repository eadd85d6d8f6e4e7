package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// The fleet: one coordinator (watch) reads mail, queues jobs, collects the
// workers' results and sends the replies; workers (patchbot worker, or the
// one inside watch) claim the jobs that fit them. They meet in the store.

// DetectCaps says what this host can run with the config's VM shape: KVM
// when /dev/kvm opens and no earlier run found it hanging guests on this
// boot (else TCG), the online CPUs, the memory, the config's libvirt URIs,
// and the suites (only, if given, those named: a host whose kernels lack
// a suite's config leaves it out).
func DetectCaps(cfg Config, only []string) store.Caps {
	c := store.Caps{Accel: "tcg", CPUs: runtime.NumCPU(), MemMiB: memMiB(), LibvirtURIs: cfg.VM.URIs}
	if kvmUsable() {
		c.Accel = "kvm"
	}
	if len(only) > 0 {
		c.Suites = append(c.Suites, only...)
	} else if all, err := suites.All(); err == nil {
		for _, s := range all {
			c.Suites = append(c.Suites, s.Name)
		}
	}
	return c
}

// kvmUsable: /dev/kvm opens, and vmrunner has not found KVM hanging guests
// since the host booted (it leaves a file saying so, for later processes).
func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	id, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	_, err = os.Stat(filepath.Join(os.TempDir(), "patchbot-kvm-hangs-"+strings.TrimSpace(string(id))))
	return err != nil
}

func memMiB() int {
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

// needsOf is what a test job needs of a worker: its suites, the VM shape
// of the config for the base and the patched kernel at once (an A/B pair
// always runs on one host, both VMs up, rounds interleaved), and KVM when
// the fleet asks for it.
func needsOf(cfg Config, names []string) store.Needs {
	return store.Needs{KVM: cfg.Fleet.RequireKVM, CPUs: cfg.VM.CPUs, MemMiB: 2 * cfg.VM.MemMiB, Suites: names}
}

// runFileName is what a stored run file's path elements may be: they
// come from a worker's run directory, written by builds and guests.
var runFileName = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}$`)

// CollectRuns writes the runs that workers stored into the state
// directory's runs/, where the dashboard and `patchbot reply` read them,
// and forgets the stored copies. A run is written beside its place and
// renamed into it, so that a reader never sees half of one. A file whose
// name is not a plain relative path is left out, and logged. It returns
// how many runs it wrote.
func CollectRuns(ctx context.Context, cfg Config, st *store.Store, log *slog.Logger) (int, error) {
	runs := filepath.Join(cfg.StateDir, "runs")
	if err := os.MkdirAll(runs, 0o700); err != nil {
		return 0, fmt.Errorf("creating the runs directory: %w", err)
	}
	const batch = 100
	n := 0
	for ctx.Err() == nil {
		ids, err := st.PendingRuns(ctx, batch)
		if err != nil {
			return n, err
		}
		for _, id := range ids {
			files, err := st.RunFiles(ctx, id)
			if err != nil {
				return n, err
			}
			skipped, err := writeRun(runs, fmt.Sprintf("job-%d", id), files)
			if err != nil {
				return n, fmt.Errorf("writing the run of job %d: %w", id, err)
			}
			if len(skipped) > 0 {
				log.Error("files of a run left out: their names are not plain relative paths", "job", id, "names", skipped)
			}
			if err := st.DeleteRunFiles(ctx, id); err != nil {
				return n, err
			}
			n++
		}
		if len(ids) < batch {
			break
		}
	}
	return n, ctx.Err()
}

// writeRun writes a run's files into runs/name, replacing what was there,
// and returns the names it left out.
func writeRun(runs, name string, files []store.RunFile) (skipped []string, err error) {
	tmp := filepath.Join(runs, ".incoming-"+name)
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	for _, f := range files {
		if !plainPath(f.Name) {
			skipped = append(skipped, fmt.Sprintf("%q", f.Name))
			continue
		}
		p := filepath.Join(tmp, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			return nil, err
		}
	}
	dst := filepath.Join(runs, name)
	if _, err := os.Lstat(dst); err == nil {
		// An earlier attempt's run, written before a crash kept the job
		// from ending: the new one replaces it.
		old := filepath.Join(runs, ".old-"+name)
		os.RemoveAll(old)
		if err := os.Rename(dst, old); err != nil {
			return nil, err
		}
		defer os.RemoveAll(old)
	}
	return skipped, os.Rename(tmp, dst)
}

// plainPath says whether a stored run file's name is a clean relative
// path of plain names: no "..", no leading "/" or ".", nothing odd.
func plainPath(name string) bool {
	if path.Clean(name) != name || strings.HasPrefix(name, "/") {
		return false
	}
	for _, el := range strings.Split(name, "/") {
		if !runFileName.MatchString(el) {
			return false
		}
	}
	return true
}
