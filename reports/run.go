package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/bisect"
	"github.com/patchbot/patchbot/judge"
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

// Root is the Message-ID that starts the thread, without angle brackets:
// the first of its References, else the mail answered.
func (t Thread) Root() string {
	if len(t.References) > 0 {
		return strings.Trim(t.References[0], "<> ")
	}
	return strings.Trim(t.MessageID, "<> ")
}

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

// MetricName is the measured metric set beside the prediction.
func (m *Model) MetricName() string {
	if m.Metric != "" {
		return m.Metric
	}
	return "wakeups_per_release"
}

// ModelRow is one kernel's measured mean of the model's metric in one
// workload, beside the model's prediction for that kernel's policy.
type ModelRow struct {
	Workload  string // with its cell, e.g. "read-storm threads=64"
	Kernel    string // "base" or "patched"
	Policy    string
	Measured  float64
	Predicted float64
	Predicts  bool // the model has a prediction for Policy
}

// PredictedText is the prediction as the reply and the dashboard print
// it, or "-" where the model has none for the policy.
func (r ModelRow) PredictedText() string {
	if !r.Predicts {
		return "-"
	}
	return short3(r.Predicted)
}

// Rows sets the model beside every row of c that measured its metric: a
// row for the base and one for the patched kernel. The reply and the
// dashboard both show these.
func (m *Model) Rows(c *judge.Comparison) []ModelRow {
	var out []ModelRow
	for _, r := range c.Rows {
		if r.Metric != m.MetricName() {
			continue
		}
		name := r.Workload
		if cell := r.Cell(); cell != "" {
			name += " " + cell
		}
		for _, side := range []struct {
			kernel, policy string
			mean           float64
		}{{"base", m.BasePolicy, r.Base.Mean}, {"patched", m.PatchedPolicy, r.Patched.Mean}} {
			p, ok := m.Predicted[side.policy]
			out = append(out, ModelRow{Workload: name, Kernel: side.kernel, Policy: side.policy,
				Measured: side.mean, Predicted: p, Predicts: ok})
		}
	}
	return out
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
	// Clock is the guests' time under TCG: "icount" (instruction-counted,
	// vmrunner.ICountShift) or "host" (real time); empty in runs recorded
	// before it was kept, which were real time.
	Clock string `json:"clock,omitempty"`
	Runs  int    `json:"runs"` // runs per kernel, interleaved
	// Commands reproduce the run with patchbot, one shell line each.
	Commands    []string       `json:"commands"`
	NewWarnings []string       `json:"new_warnings,omitempty"`
	Failure     *judge.Failure `json:"failure,omitempty"`
	Model       *Model         `json:"model,omitempty"`
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

	// BaseChoice says which base the series was tested on and why; nil
	// for a run that did not choose (older runs).
	BaseChoice *BaseChoice `json:"base_choice,omitempty"`
	// Series is the number of patches in the series; Range the part
	// measured when one was asked for (patches=M-N), nil for the whole.
	Series int         `json:"series,omitempty"`
	Range  *PatchRange `json:"range,omitempty"`
	// Builds are the series' prefixes built one by one (1/n, 1..2/n, ...),
	// for a series of more than one patch: which patch breaks the build,
	// which adds warnings.
	Builds []PatchBuild `json:"builds,omitempty"`
	// Bisection traces the series' change to its patches: each prefix
	// measured against the base, when the whole series changed a primary
	// metric.
	Bisection *bisect.Result `json:"bisection,omitempty"`
	// Previous is what the series' earlier version measured on the same
	// metric, when it was tested.
	Previous *Previous `json:"previous,omitempty"`
	// Attestation is who signed each patch's mail, in order, as
	// verified when it came; empty when not checked.
	Attestation []Attested `json:"attestation,omitempty"`
	// KernelWarnings are the kernel warnings (WARN_ON(), WARN()) the
	// kernels' consoles showed, by title, counted on each kernel over
	// every suite (judge.Warnings); one the base never showed is the
	// patch's (judge.WarningCount.New). Fatal kernel trouble is in
	// Failure.Trouble.
	KernelWarnings []judge.WarningCount `json:"kernel_warnings,omitempty"`
	// Exercised says whether the suites ran the code the series changed:
	// each changed function's calls during the measured rounds, on both
	// kernels (judge.ExercisedOf); nil when not counted.
	Exercised *judge.Exercised `json:"exercised,omitempty"`
	// TroubleBisection names the patch of a series that brought the
	// kernel trouble in Failure.Trouble (bisect.Trouble).
	TroubleBisection *bisect.TroubleResult `json:"trouble_bisection,omitempty"`

	// Base and Patched are the raw results, kept in their own files of
	// the run directory.
	Base    []suites.Result `json:"-"`
	Patched []suites.Result `json:"-"`
}

// BaseChoice is how the base was chosen (images.Choose).
type BaseChoice struct {
	// Tree is the tree's name: "default" is the configured kernel: base
	// (Debian's linux-source-6.1 unless set); empty for a commit no
	// tree's branch holds.
	Tree string `json:"tree,omitempty"`
	// How: "override" (asked for), "base-commit", "tag", "applies" (the
	// newest tree the whole series applies to), "default" (no tree
	// configured).
	How string `json:"how"`
	// Detail completes How: the base as asked, the tag, the trees a
	// base-commit is in.
	Detail string `json:"detail,omitempty"`
	// Notes are what did not decide it, e.g. a base-commit no tree has.
	Notes []string `json:"notes,omitempty"`
	// Tried are the trees tried, in order, newest first.
	Tried []TriedBase `json:"tried,omitempty"`
}

// Ways a base is chosen (BaseChoice.How).
const (
	ByOverride   = "override"
	ByBaseCommit = "base-commit"
	ByTag        = "tag"
	ByApplying   = "applies"
	ByDefault    = "default"
)

// TriedBase is one tree the series was tried on.
type TriedBase struct {
	Tree   string `json:"tree"`
	Commit string `json:"commit,omitempty"`
	Title  string `json:"title,omitempty"`
	// Patch is the first patch that does not apply there ("2/3 squashfs:
	// ..."), Hunk its first failing hunk; both empty when the whole series
	// applies.
	Patch string `json:"patch,omitempty"`
	Hunk  string `json:"hunk,omitempty"`
	// Unavailable says why the tree could not be tried.
	Unavailable string `json:"unavailable,omitempty"`
}

// PatchRange is the part of a series measured: patches First..Last of
// Total, on top of patches 1..First-1 (the A side).
type PatchRange struct {
	First int `json:"first"`
	Last  int `json:"last"`
	Total int `json:"total"`
}

// PatchBuild is the build of one prefix of a series: patches 1..Index.
type PatchBuild struct {
	Index   int    `json:"index"`
	Subject string `json:"subject"`
	// Stage is where it failed: StageApply or StageBuild; empty when it
	// built.
	Stage judge.Stage `json:"stage,omitempty"`
	// Errors are the compiler's error lines (or the failing hunk).
	Errors []string `json:"errors,omitempty"`
	// NewWarnings are the warnings this patch added to the prefix before
	// it.
	NewWarnings []string `json:"new_warnings,omitempty"`
}

// Previous is an earlier version of the series, measured on the same
// metric.
type Previous struct {
	Version int       `json:"version"`
	Tested  time.Time `json:"tested"`
	judge.MetricID
	Change      float64 `json:"change"`
	Significant bool    `json:"significant"`
	// Now is this version's change of the same metric; NowMeasured is
	// false when this version did not measure it.
	Now            float64 `json:"now"`
	NowSignificant bool    `json:"now_significant"`
	NowMeasured    bool    `json:"now_measured"`
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
		if err := replaceFile(filepath.Join(dir, f.name), append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing run directory: %w", err)
		}
	}
	return nil
}

// SaveReply keeps the rendered reply as dir's ReplyFile, replacing any
// earlier one whole: the dashboard reads its Message-ID while a re-render
// (patchbot reply) writes it, and must never see half a mail. Readable by
// the bot only, as the outbox's copies are.
func SaveReply(dir string, raw []byte) error {
	if err := replaceFile(filepath.Join(dir, ReplyFile), raw, 0o600); err != nil {
		return fmt.Errorf("keeping the reply in the run directory: %w", err)
	}
	return nil
}

// replaceFile writes data to path through a temporary file beside it and
// a rename, so that a reader (the dashboard, while a run is saved or saved
// again) sees the old file or the new one, never half of one.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// ReadResults reads a results file: a JSON array of suites.Result, a
// single Result object, or what `patchbot suite run --json` prints
// ({"schema": 1, "results": [...]}).
func ReadResults(path string) ([]suites.Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	data = bytes.TrimSpace(data)
	var rs []suites.Result
	if len(data) > 0 && data[0] == '{' {
		var doc struct {
			Schema  int             `json:"schema"`
			Results []suites.Result `json:"results"`
		}
		if strictUnmarshal(data, &doc) == nil && doc.Schema != 0 {
			if doc.Schema != 1 {
				return nil, fmt.Errorf("decoding results %s: schema %d, want 1", path, doc.Schema)
			}
			return doc.Results, nil
		}
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
