package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Blame by comparison. A hostile patch can make its own build reach a
// limit: fill the disk, fork or allocate without end, hang, write
// gigabytes. Such a failure looks like the machine's (a limit, a full
// disk), and the machine's failures are retried, not mailed: a patch
// could so cost a worker hours a series and get no answer. So a patched
// build that stops at a limit is compared with its base, which was built
// on the same machine under the same limits, from scratch (a patched
// build is incremental, and asks far less of every limit):
//
//   - time, memory, output: what the base's build used (its time, peak
//     memory, object tree) fits the patched build's limit -> the patch's;
//     processes, file size, /tmp: the base's build finished under the same
//     limit -> the patch's; "No space
//     left on device" while the object tree's file system has room is the
//     sandbox's /tmp or /dev/shm (or only words): a limit of the build's
//     too, never the machine's disk;
//   - disk: the object tree's file system filled, and the patched build
//     itself wrote more than the whole base's object tree -> the patch's;
//     a disk that filled while it wrote less is the machine's;
//   - a limit the base was not held to (a record made under larger
//     limits), a signal from outside, anything else -> the machine's.
//
// The patch's failure is built once more, to be sure; when it stops at a
// limit again, it is a *BuildError whose Limit says which limit, what the
// build reached and what the base used. Only then is it mailed.
//
// Time is judged at once, against the host's own cold build of the whole
// kernel. A patched build is incremental: even a patch to a header that
// every file includes recompiles no more than a cold build does (a
// patched build has no ccache, a cold one an empty ccache). So a patched
// build gets PatchedTimeFactor times the longest base build of its config
// on this host, at least PatchedTimeMin (the host may be busier than it
// was then), and a build that runs past that is the patch's, answered
// once: it is not built again, and the daemon does not retry it. Without
// a base build of the config on record (a record from before times were
// kept), the builder's own limit holds and the rule above applies.

// The time a patched build gets, from the host's cold build of its config.
const (
	PatchedTimeFactor = 4
	PatchedTimeMin    = 30 * time.Minute
)

// patchedTimeout is the time limit of a patched build on base, and the
// cold build time it was drawn from (0 when none is on record: the
// builder's own limit).
func (b *Builder) patchedTimeout(base *Build) (limit, cold time.Duration) {
	cold = coldestBuild(filepath.Join(b.Cache, "kernels"), base.ConfigHash)
	if d := buildTime(base); d > cold {
		cold = d
	}
	if cold <= 0 {
		return b.timeout(), 0
	}
	return min(b.timeout(), max(PatchedTimeMin, time.Duration(PatchedTimeFactor)*cold)), cold
}

// buildTime is how long a build took, from its record (a cache hit's
// Duration is the hit's).
func buildTime(bd *Build) time.Duration {
	if bd.Usage != nil && bd.Usage.Duration > 0 {
		return bd.Usage.Duration
	}
	if !bd.Cached {
		return bd.Duration
	}
	if rec, err := loadBuild(bd.Dir); err == nil {
		return rec.Duration
	}
	return 0
}

// coldestBuild is the longest base build of the config hash on record in
// the cache's kernels directory: the host's cold build (the first build
// of a config fills ccache; later bases of it take less).
func coldestBuild(kernels, configHash string) time.Duration {
	ents, err := os.ReadDir(kernels)
	if err != nil {
		return 0
	}
	var longest time.Duration
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		bd, err := loadBuild(filepath.Join(kernels, e.Name()))
		if err != nil || bd.Series != 0 || bd.ConfigHash != configHash {
			continue
		}
		bd.Cached = true
		longest = max(longest, buildTime(bd))
	}
	return longest
}

// Limit is a limit a patched build stopped at and its base kept within.
type Limit struct {
	Resource string `json:"resource"` // "time", "memory", "processes", "file size", "output", "disk"
	Limit    string `json:"limit"`    // the limit, e.g. "2h0m0s", "4.0 GiB"
	Used     string `json:"used"`     // what the patched build reached
	Base     string `json:"base"`     // what the base's build used under the same limit
	// Once: the build was stopped once, at a time limit drawn from the
	// host's cold build of the whole kernel, and not built again.
	Once bool `json:"once,omitempty"`
}

func (l *Limit) String() string {
	if l.Once {
		return fmt.Sprintf("the build stopped at its %s limit (%s): %s; %s", l.Resource, l.Limit, l.Used, l.Base)
	}
	return fmt.Sprintf("the build stopped at its %s limit (%s) twice: %s; the base kernel's build, under the same limit, %s",
		l.Resource, l.Limit, l.Used, l.Base)
}

// baseLimits are the limits base was built under: its record's, or for a
// record made before they were kept, the default limits (which were the
// same then).
func baseLimits(base *Build) (Limits, time.Duration) {
	l, t := DefaultLimits, 2*time.Hour
	if base.Limits != nil {
		l = base.Limits.withDefaults()
	}
	if base.Timeout > 0 {
		t = base.Timeout
	}
	return l, t
}

// baseOutput is the size and files of the base's object tree: from its
// record, or measured.
func baseOutput(base *Build) (bytes int64, files int) {
	if base.Usage != nil && base.Usage.Output > 0 {
		return base.Usage.Output, base.Usage.Files
	}
	return treeUse(filepath.Join(base.Dir, treeDir, outDir), DefaultLimits.Files)
}

// compare says whether err, a patched build's failure on base, is a
// limit the base kept within under the same limits, and which. timeout is
// the patched build's time limit, cold the host's cold build time it was
// drawn from (0: none).
func (b *Builder) compare(base *Build, err error, timeout, cold time.Duration) *Limit {
	var ie *InfraError
	if !errors.As(err, &ie) || ie.resource == "" && !errors.Is(err, ErrTimeout) {
		return nil
	}
	lim := b.Limits.withDefaults()
	bl, bt := baseLimits(base)
	var u Usage
	if ie.usage != nil {
		u = *ie.usage
	}
	// A cache hit's Duration is the hit's; the record has the build's.
	built := buildTime(base)
	took := "finished"
	if built > 0 {
		took = "finished in " + built.Round(time.Second).String()
	}
	peak := took
	if base.Usage != nil && base.Usage.Memory > 0 {
		peak = fmt.Sprintf("peaked at %s", formatBytes(base.Usage.Memory))
	}
	switch {
	case errors.Is(err, ErrTimeout):
		if timeout <= 0 {
			timeout = b.timeout()
		}
		if cold > 0 && cold < timeout {
			return &Limit{Resource: "time", Limit: timeout.String(), Used: "it was still running when stopped", Once: true,
				Base: fmt.Sprintf("a cold build of the whole kernel took %s on this host (the limit is %d times that, at least %s)",
					cold.Round(time.Second), PatchedTimeFactor, PatchedTimeMin)}
		}
		// What the base took is measured: it must fit the limit the
		// patched build had (a test's 30 s does not hold a cold build).
		if built <= 0 && timeout < bt || built > 0 && built >= timeout {
			return nil
		}
		return &Limit{Resource: "time", Limit: timeout.String(), Used: "it was still running when stopped", Base: took}
	case ie.resource == "memory":
		if base.Usage != nil && base.Usage.Memory > 0 {
			if base.Usage.Memory >= lim.Memory {
				return nil
			}
		} else if lim.Memory < bl.Memory {
			return nil
		}
		return &Limit{Resource: "memory", Limit: formatBytes(lim.Memory), Used: firstLineOf(ie.Err.Error()), Base: peak}
	case ie.resource == "processes":
		if lim.Processes < bl.Processes {
			return nil
		}
		return &Limit{Resource: "processes", Limit: fmt.Sprintf("%d", lim.Processes), Used: firstLineOf(ie.Err.Error()), Base: took}
	case ie.resource == "file size":
		if lim.FileSize < bl.FileSize {
			return nil
		}
		return &Limit{Resource: "file size", Limit: formatBytes(lim.FileSize), Used: "a file reached it", Base: took}
	case ie.resource == "tmp":
		if lim.Tmp < bl.Tmp {
			return nil
		}
		return &Limit{Resource: "/tmp", Limit: fmt.Sprintf("%s of /tmp, 16 MiB of /dev/shm", formatBytes(lim.Tmp)),
			Used: fmt.Sprintf("%s, while its object tree's file system had room", firstLineOf(ie.Err.Error())), Base: took}
	case ie.resource == "output":
		// Measured: the base's object tree must fit the patched build's
		// limits.
		bytes, files := baseOutput(base)
		if bytes >= lim.Output || files >= lim.Files {
			return nil
		}
		return &Limit{Resource: "output", Limit: fmt.Sprintf("%s, %d files", formatBytes(lim.Output), lim.Files),
			Used: fmt.Sprintf("its object tree reached %s in %d files", formatBytes(u.Output), u.Files),
			Base: fmt.Sprintf("left %s in %d files in its object tree", formatBytes(bytes), files),
		}
	case ie.resource == "disk":
		whole, _ := baseOutput(base)
		if whole <= 0 || u.Grew <= whole {
			return nil // it wrote no more than a whole base build: the disk was short
		}
		return &Limit{Resource: "disk", Limit: fmt.Sprintf("the %s its file system had free when it started", formatBytes(u.FreeAtStart)),
			Used: fmt.Sprintf("it wrote %s and filled it", formatBytes(u.Grew)),
			Base: fmt.Sprintf("wrote %s in all", formatBytes(whole)),
		}
	}
	return nil
}

// limitError is the patch's failure at a limit: a BuildError whose lines
// say which limit and what the build showed.
func limitError(l *Limit, err error, log string) *BuildError {
	lines := []string{quoteLine("patchbot: " + l.String())}
	var ie *InfraError
	if errors.As(err, &ie) {
		lines = append(lines, quoteLine("patchbot: "+ie.Error()))
	}
	return &BuildError{Lines: lines, Log: log, Limit: l, cause: err}
}
