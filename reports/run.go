package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/patchbot/patchbot/suites"
)

// Thread is the mail a reply answers.
type Thread struct {
	Subject string `json:"subject"` // of the patch or cover letter, as posted
	// MessageID is the patch (one-patch series) or the cover letter to
	// reply to, with or without angle brackets.
	MessageID  string   `json:"message_id"`
	References []string `json:"references,omitempty"` // the chain above MessageID
	Author     string   `json:"author"`               // "Name <addr>": the reply's To
	Cc         []string `json:"cc,omitempty"`         // people Cc'd on the series
	Lists      []string `json:"lists,omitempty"`      // mailing lists the series went to
}

// Failure says why a run produced no comparison. Every failure described
// here is the patch's: infrastructure failures are retried, never mailed.
type Failure struct {
	Stage Stage  `json:"stage"`
	Patch string `json:"patch,omitempty"` // which patch, e.g. "[PATCH 2/3] fuse: ..."
	// Detail is one line: the failing hunk, the first compiler error, the
	// panic message.
	Detail string `json:"detail"`
	// Excerpt is the evidence quoted verbatim: the rejected hunk, the
	// compiler's error lines, the console around the panic.
	Excerpt string `json:"excerpt,omitempty"`
	// Kernel is the kernel that failed ("patched" unless said otherwise).
	Kernel string `json:"kernel,omitempty"`
}

// Stage is where a run stopped.
type Stage string

const (
	StageApply Stage = "apply"
	StageBuild Stage = "build"
	StageBoot  Stage = "boot"
	StageSuite Stage = "suite"
)

// Model is the reference cache model's view of the run (suites/refcache):
// its predicted wake-ups per release for the policy on each side, and what
// the model checker says about the policy the patch implements.
type Model struct {
	BasePolicy    string `json:"base_policy"`
	PatchedPolicy string `json:"patched_policy"`
	// Predicted maps a policy to the model's wake-ups per cache release for
	// the suite's shape (waiters, cache entries).
	Predicted map[string]float64 `json:"predicted"`
	// Metric is the measured metric to set beside the prediction
	// (default "wakeups_per_release").
	Metric string `json:"metric,omitempty"`
	// Check is the model checker's summary, e.g. "no lost wake-up in
	// 48,213 states (4 waiters, 2 entries)".
	Check string `json:"check,omitempty"`
}

// Run describes a finished test of one series: what was built and how, and
// what came of it. It is the input of the reply.
type Run struct {
	Thread        Thread `json:"thread"`
	BaseCommit    string `json:"base_commit"`
	BaseTitle     string `json:"base_title,omitempty"` // e.g. "Linux 6.1.192 (Debian linux-source-6.1)"
	PatchedCommit string `json:"patched_commit,omitempty"`
	ConfigHash    string `json:"config_hash"`
	// Layout says how the kernels' code layout was pinned (LayoutNote of
	// their config), so that a change cannot come from alignment alone.
	Layout     string `json:"layout,omitempty"`
	ConfigPath string `json:"config_path,omitempty"` // where a reader gets the config
	Compiler   string `json:"compiler"`
	CPUs       int    `json:"cpus"`
	MemMiB     int    `json:"mem_mib"`
	Accel      string `json:"accel"` // "kvm" or "tcg"
	Runs       int    `json:"runs"`  // runs per kernel, interleaved
	// Commands reproduce the run with patchbot, one shell line each.
	Commands    []string `json:"commands"`
	NewWarnings []string `json:"new_warnings,omitempty"`
	Failure     *Failure `json:"failure,omitempty"`
	Model       *Model   `json:"model,omitempty"`
	// ResultsURL is where the run's artifacts can be read: the dashboard's
	// page of the run, or a published copy.
	ResultsURL string `json:"results_url,omitempty"`
	// ReplyID is the reply's Message-ID; empty derives one from the run.
	// The daemon gives one per job, so that a job re-run after a crash
	// renders the same reply and the outbox recognises it.
	ReplyID string `json:"reply_id,omitempty"`
	// Command is the email command the run answers, quoted at the top of
	// the reply; empty for a series seen on a list or a run from the CLI.
	Command  string    `json:"command,omitempty"`
	Finished time.Time `json:"finished"`
	Options  Options   `json:"options"`

	// Base and Patched are the raw results, kept in their own files of
	// the run directory.
	Base    []suites.Result `json:"-"`
	Patched []suites.Result `json:"-"`
}

// Files of a run directory. Logs and configs sit beside them under any
// name; everything in the directory is an artifact.
const (
	RunFile     = "run.json"
	BaseFile    = "base.json"
	PatchedFile = "patched.json"
	ReplyFile   = "reply.eml"
)

// LoadRun reads a run directory: run.json, and base.json and patched.json
// when the run got as far as measuring.
func LoadRun(dir string) (*Run, error) {
	data, err := os.ReadFile(filepath.Join(dir, RunFile))
	if err != nil {
		return nil, fmt.Errorf("reading run directory: %w", err)
	}
	var run Run
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&run); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", filepath.Join(dir, RunFile), err)
	}
	for _, f := range []struct {
		name string
		dst  *[]suites.Result
	}{{BaseFile, &run.Base}, {PatchedFile, &run.Patched}} {
		rs, err := ReadResults(filepath.Join(dir, f.name))
		if errors.Is(err, os.ErrNotExist) && run.Failure != nil {
			continue // a failed run measured nothing
		}
		if err != nil {
			return nil, err
		}
		*f.dst = rs
	}
	return &run, nil
}

// SaveRun writes run.json, base.json and patched.json into dir.
func SaveRun(dir string, run *Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	files := []struct {
		name string
		v    any
	}{{RunFile, run}}
	if run.Base != nil {
		files = append(files, struct {
			name string
			v    any
		}{BaseFile, run.Base})
	}
	if run.Patched != nil {
		files = append(files, struct {
			name string
			v    any
		}{PatchedFile, run.Patched})
	}
	for _, f := range files {
		data, err := json.MarshalIndent(f.v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding %s: %w", f.name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing run directory: %w", err)
		}
	}
	return nil
}

// ReadResults reads a results file: a JSON array of suites.Result, or a
// single Result object.
func ReadResults(path string) ([]suites.Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	data = bytes.TrimSpace(data)
	var rs []suites.Result
	if len(data) > 0 && data[0] == '{' {
		var r suites.Result
		err = strictUnmarshal(data, &r)
		rs = []suites.Result{r}
	} else {
		err = strictUnmarshal(data, &rs)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding results %s: %w", path, err)
	}
	return rs, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
