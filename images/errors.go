package images

import (
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

// BuildError says that a patched kernel does not build.
type BuildError struct {
	Lines []string // the compiler's and linker's error lines
	Log   string   // path of the full build log
}

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

// InfraError is a failure of the build machinery, not of the patch.
type InfraError struct {
	Op  string // what was being done
	Err error
}

func (e *InfraError) Error() string      { return e.Op + ": " + e.Err.Error() }
func (e *InfraError) Unwrap() error      { return e.Err }
func (e *InfraError) Blame() blame.Blame { return blame.Infra }

func infra(op string, err error) error {
	if err == nil {
		return nil
	}
	return &InfraError{Op: op, Err: err}
}
