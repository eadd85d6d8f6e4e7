package images

import (
	"errors"
	"fmt"
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

// Limit is a limit a patched build stopped at and its base kept within.
type Limit struct {
	Resource string `json:"resource"` // "time", "memory", "processes", "file size", "output", "disk"
	Limit    string `json:"limit"`    // the limit, e.g. "2h0m0s", "4.0 GiB"
	Used     string `json:"used"`     // what the patched build reached
	Base     string `json:"base"`     // what the base's build used under the same limit
}

func (l *Limit) String() string {
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
// limit the base kept within under the same limits, and which.
func (b *Builder) compare(base *Build, err error) *Limit {
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
	built := base.Duration
	if base.Usage != nil && base.Usage.Duration > 0 {
		built = base.Usage.Duration
	} else if rec, err := loadBuild(base.Dir); err == nil && base.Cached {
		built = rec.Duration
	}
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
		// What the base took is measured: it must fit the limit the
		// patched build had (a test's 30 s does not hold a cold build).
		if built <= 0 && b.timeout() < bt || built > 0 && built >= b.timeout() {
			return nil
		}
		return &Limit{Resource: "time", Limit: b.timeout().String(), Used: "it was still running when stopped", Base: took}
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
