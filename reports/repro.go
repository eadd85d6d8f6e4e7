package reports

import (
	"strconv"
	"strings"
)

// Repro is what a reader needs to repeat a run with patchbot from the
// Message-ID alone: the thread is fetched from lore, the base and VM shape
// are given, every argument quoted for a POSIX shell.
type Repro struct {
	MessageID string
	Suites    []string
	Profile   string
	Runs      int
	CPUs      int
	MemMiB    int
	Boot      string // the VMs' boot path, when not the default (legacy)
	Tree      string // the operator's tree, if not the default (said, not given: it is a path on the bot's disk)
	Base      string // the base it was tested on (a tree or commit), unless the default
	Patches   string // "2-3": the patches measured, when not the whole series
	AA        bool
}

// Commands are the shell lines that reproduce the run.
func (r Repro) Commands() []string {
	args := []string{"patchbot", "run", "--msgid", strings.Trim(strings.TrimSpace(r.MessageID), "<>")}
	if len(r.Suites) > 0 {
		args = append(args, "--suites", strings.Join(r.Suites, ","))
	}
	if r.Profile != "" {
		args = append(args, "--profile", r.Profile)
	}
	if r.Runs > 0 {
		args = append(args, "--runs", strconv.Itoa(r.Runs))
	}
	if r.CPUs > 0 {
		args = append(args, "--cpus", strconv.Itoa(r.CPUs))
	}
	if r.MemMiB > 0 {
		args = append(args, "--mem", strconv.Itoa(r.MemMiB))
	}
	if r.Boot != "" && r.Boot != "legacy" {
		args = append(args, "--boot", r.Boot)
	}
	if r.Base != "" {
		args = append(args, "--base", r.Base)
	}
	if r.Patches != "" {
		args = append(args, "--patches", r.Patches)
	}
	if r.AA {
		args = append(args, "--aa")
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = ShellQuote(a)
	}
	return []string{strings.Join(quoted, " ")}
}

// ShellQuote quotes s for a POSIX shell: as it is when it holds only
// characters no shell treats specially, else in single quotes, with each
// single quote written as '\”.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
