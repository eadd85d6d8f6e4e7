package images

import (
	"errors"
	"fmt"
	"strings"

	"github.com/patchbot/patchbot/blame"
)

// Errors carry blame. ApplyError and BuildError are the patch's fault and
// hold the evidence to quote back to the author; InfraError is ours (a
// missing tool, a full disk, a broken cache) and must never be mailed to an
// author as their fault.

// ApplyError says that a series does not apply to its base.
type ApplyError struct {
	Index   int    // 1-based position of the failing patch in the series
	Subject string // its subject line, as git am printed it
	Hunk    string // the hunk git could not place (git apply -v's report)
	Output  []byte // git am's own output
}

// Blame: a series that does not apply is the patch's.
func (e *ApplyError) Blame() blame.Blame { return blame.Patch }

func (e *ApplyError) Error() string {
	return fmt.Sprintf("patch %d (%q) does not apply", e.Index, e.Subject)
}

// BuildError says that a patched kernel does not build: make failed on
// its own (rootCause found no sign of the machine's failure), or the build
// handed back an artifact that is not what it should be (a link, a
// device, a file too large or of the wrong kind).
type BuildError struct {
	// Lines are the compiler's, linker's and make's error lines, at most
	// 50 lines and 8 KiB, each cut at 1 KiB; when there were more, the last
	// line says how many ("... N more lines in the build log").
	Lines []string
	Log   string // path of the full build log
	// Limit, when set, says that the build stopped at one of its limits
	// twice where the base built within the same limits (limits.go):
	// which limit, and by how much. Lines[0] says it too.
	Limit *Limit `json:",omitempty"`
	cause error  // the second attempt's *InfraError, for errors.Is
}

// Unwrap is the limit the build stopped at (ErrTimeout, ErrOutOfMemory,
// ...), when it was one.
func (e *BuildError) Unwrap() error { return e.cause }

// Blame: a kernel that does not build with the series is the patch's.
func (e *BuildError) Blame() blame.Blame { return blame.Patch }

func (e *BuildError) Error() string {
	first := "see the build log"
	if len(e.Lines) > 0 {
		first = e.Lines[0]
	}
	return fmt.Sprintf("kernel does not build: %s", first)
}

// ConfigError says that options requested by the config fragments did not
// survive olddefconfig (missing dependencies, renamed or unknown symbols).
type ConfigError struct {
	Dropped []Dropped
}

// Dropped is one requested option and what the final .config holds instead.
type Dropped struct {
	Option string // CONFIG_FOO
	Want   string // "y", "64", "n" for "is not set"
	Got    string // "" when the symbol is absent from .config
}

func (d Dropped) String() string {
	got := d.Got
	if got == "" {
		got = "absent"
	}
	return fmt.Sprintf("%s=%s (got %s)", d.Option, d.Want, got)
}

// Blame: the requested config is ours; when a base does not keep it, the
// config is wrong, not the patch.
func (e *ConfigError) Blame() blame.Blame { return blame.Infra }

func (e *ConfigError) Error() string {
	s := make([]string, len(e.Dropped))
	for i, d := range e.Dropped {
		s[i] = d.String()
	}
	return "config options did not survive olddefconfig: " + strings.Join(s, ", ")
}

// InfraError is a failure of the build machinery, not of the patch. Err
// wraps one of the sentinels below when rootCause found why a build
// stopped.
//
// A hostile patch can make its own build reach a limit (fill the disk,
// fork without end, allocate without bound, hang); that is reported here
// too and retried, so a job's retries must be bounded.
type InfraError struct {
	Op  string // what was being done
	Err error
	// usage is what the build used when it stopped at a limit (nil for
	// other failures): the comparison with the base's needs it.
	usage    *Usage
	resource string // the limit reached: "time", "memory", "processes", "file size", "output", "disk"
}

func (e *InfraError) Error() string      { return e.Op + ": " + e.Err.Error() }
func (e *InfraError) Unwrap() error      { return e.Err }
func (e *InfraError) Blame() blame.Blame { return blame.Infra }

// Why a build stopped, when it was the machine's doing: errors.Is on an
// *InfraError's chain.
var (
	ErrTimeout     = errors.New("build time limit reached")
	ErrNoSpace     = errors.New("no space left for the build")
	ErrOutOfMemory = errors.New("build out of memory")
	ErrLimit       = errors.New("build reached a sandbox limit")
	ErrKilled      = errors.New("build killed")
	// ErrNoSandbox: this host cannot sandbox an untrusted build (no
	// unprivileged user namespaces); patched builds are refused.
	ErrNoSandbox = errors.New("no sandbox for untrusted builds")
)

func infra(op string, err error) error {
	if err == nil {
		return nil
	}
	return &InfraError{Op: op, Err: err}
}
