package images

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
)

// outcome is everything known about one finished sandboxed command.
type outcome struct {
	op       string      // the command, for messages
	err      error       // patchbot could not run it at all
	ctx      error       // why the context ended, if it did
	wait     error       // from Wait: nil, an *exec.ExitError, or worse
	status   bwrapStatus // what bwrap said of its command
	oomKills int         // processes the kernel killed at the memory limit
	pidsMax  int         // forks refused at the process limit
	diskFull bool        // the object tree's file system had no room left
	// overOutput: the watchdog stopped the command, its object tree past
	// Limits.Output or Limits.Files.
	overOutput bool
	// overForks: the command was stopped at its pids group's first
	// refused fork (cgroup.watchForks).
	overForks bool
	usage     Usage  // what the command used (the object tree, memory, time)
	limits    Limits // what it was allowed
	scan      *scan  // what the output showed
}

// cause is a sign in a build's output that the machine, not the code,
// stopped it.
type cause int

const (
	causeNoSpace cause = iota
	causeMemory
	causeLimit
	causeKilled
	numCauses
)

// causeOf looks for the messages that the C library, the shell, make and
// gcc print when the machine runs out of something. A patch can print them
// too; that only makes its failure look like ours (retried, not mailed),
// never the other way round.
func causeOf(line string) (cause, bool) {
	switch {
	case strings.Contains(line, "No space left on device"), strings.Contains(line, "Disk quota exceeded"):
		return causeNoSpace, true
	case strings.Contains(line, "ut of memory"), strings.Contains(line, "Cannot allocate memory"),
		strings.Contains(line, "memory exhausted"):
		return causeMemory, true
	case strings.Contains(line, "Resource temporarily unavailable"), strings.Contains(line, "Cannot fork"),
		strings.Contains(line, "File size limit exceeded"):
		return causeLimit, true
	case strings.Contains(line, "Killed signal terminated program"),
		strings.Contains(line, "***") && strings.HasSuffix(line, "Killed"),
		line == "Killed":
		return causeKilled, true
	}
	return 0, false
}

// limit is an *InfraError for a command stopped at a limit (or by the
// machine's room running out), with what it used: a patched build compares
// it with its base's (blame by comparison, limits.go).
func (o *outcome) limit(resource string, err error) error {
	u := o.usage
	return &InfraError{Op: o.op, Err: err, usage: &u, resource: resource}
}

// rootCause says whose fault a finished command's failure is, from the
// facts first (the context, the exit status and signal, the cgroup's
// counters, the file system's free space) and then from the output. It is
// the only place that decides: a time limit, a full disk, a kill for
// memory, a refused fork, a signal, or a sandbox that did not start are an
// *InfraError (wrapping ErrTimeout, ErrNoSpace, ErrOutOfMemory, ErrLimit,
// ErrKilled); a command that ran and failed on its own is a *BuildError
// with its error lines, and one that failed without any error line is an
// *InfraError too. log is the build log's path.
func rootCause(o *outcome, log string) error {
	switch {
	case o.err != nil:
		var ie *InfraError
		if errors.As(o.err, &ie) {
			return o.err
		}
		return infra("running "+o.op, o.err)
	case o.overOutput:
		return o.limit("output", fmt.Errorf("%w: its object tree reached %s in %d files (limits %s, %d files)",
			ErrOutput, formatBytes(o.usage.Output), o.usage.Files, formatBytes(o.limits.Output), o.limits.Files))
	case o.overForks:
		return o.limit("processes", fmt.Errorf("%w: %d fork(s) refused at the build's process limit, where it was stopped", ErrLimit, o.pidsMax))
	case errors.Is(o.ctx, context.DeadlineExceeded):
		return o.limit("time", ErrTimeout)
	case o.ctx != nil:
		// Stopped by us (SIGINT, a shutdown): not the code's failure.
		return infra(o.op, o.ctx)
	case o.wait == nil:
		return nil
	}
	var exit *exec.ExitError
	if !errors.As(o.wait, &exit) {
		return infra("waiting for "+o.op, o.wait)
	}
	if !o.status.ran {
		return infra("starting the build sandbox", fmt.Errorf("%v: %s", o.wait, strings.Join(o.scan.head, " / ")))
	}
	hint := func(c cause) error {
		if h := o.scan.hints[c]; h != "" {
			return errors.New(h)
		}
		return nil
	}
	sig := syscall.Signal(0)
	if o.status.exit > 128 && o.status.exit < 128+65 {
		sig = syscall.Signal(o.status.exit - 128)
	}
	switch {
	case o.oomKills > 0:
		return o.limit("memory", fmt.Errorf("%w: the kernel killed %d process(es) at the build's memory limit", ErrOutOfMemory, o.oomKills))
	case o.pidsMax > 0:
		return o.limit("processes", fmt.Errorf("%w: %d fork(s) refused at the build's process limit", ErrLimit, o.pidsMax))
	case o.diskFull:
		return o.limit("disk", fmt.Errorf("%w: the object tree's file system is full", ErrNoSpace))
	case sig == syscall.SIGXFSZ:
		return o.limit("file size", fmt.Errorf("%w: a file reached the build's size limit", ErrLimit))
	case hint(causeNoSpace) != nil:
		// The object tree's file system has room (diskFull above): what
		// filled up was the sandbox's own /tmp or /dev/shm, sized limits
		// of the build's, or nothing and the build only printed it. Either
		// way it is no sign of the machine's disk (limits.go).
		return o.limit("tmp", fmt.Errorf("%w: %v", ErrNoSpace, hint(causeNoSpace)))
	case hint(causeMemory) != nil:
		return o.limit("memory", fmt.Errorf("%w: %v", ErrOutOfMemory, hint(causeMemory)))
	case hint(causeLimit) != nil:
		return o.limit("processes", fmt.Errorf("%w: %v", ErrLimit, hint(causeLimit)))
	case sig != 0:
		return infra(o.op, fmt.Errorf("%w: by signal %d (%v)", ErrKilled, int(sig), sig))
	case hint(causeKilled) != nil:
		return infra(o.op, fmt.Errorf("%w: %v", ErrKilled, hint(causeKilled)))
	case len(o.scan.errors) == 0 && o.scan.more == 0 && o.scan.beyond == 0:
		// Code that does not build says so: gcc, ld or make's "Error N"
		// for the rule that failed. A make that stopped without any of
		// them (an object tree it cannot enter, a tool missing) is not
		// shown to be the patch's, and a reply would blame it with no
		// evidence.
		return infra(o.op, fmt.Errorf("it failed (%v) without a compiler, linker or make error line: %s",
			o.wait, strings.Join(o.scan.head, " / ")))
	}
	return &BuildError{Lines: o.scan.excerpt(), Log: log}
}
