// Package suites defines the performance suites, runs their workloads (in a
// guest through the agent, or on this machine with --local), and returns raw
// samples. Statistics happen in reports/, never here.
package suites

import "time"

// Sample is one measured value of one metric in one round. Samples are raw:
// one per round per metric, so that reports/ can compute spread and tests.
type Sample struct {
	Suite    string `json:"suite"`    // e.g. "cache-contention"
	Workload string `json:"workload"` // e.g. "small-file-read"
	// Params are the coordinates of the cell within the workload, e.g.
	// {"bucket": "<256K", "readers": "4"} or {"contenders": "100"}.
	Params         map[string]string `json:"params,omitempty"`
	Metric         string            `json:"metric"` // e.g. "files_per_s", "wakeups_per_release"
	Unit           string            `json:"unit"`   // e.g. "files/s", "ms", "count"
	HigherIsBetter bool              `json:"higher_is_better"`
	Round          int               `json:"round"`
	Value          float64           `json:"value"`
	// Windows are the values of the round's windows, in the order they
	// ran, when it ran its workloads more than once (Params.Windows):
	// Value is their mean.
	Windows []float64 `json:"windows,omitempty"`
}

// Missing records a counter the kernel could not provide: it is reported as
// missing, never as zero.
type Missing struct {
	Suite    string `json:"suite"`
	Workload string `json:"workload"`
	Metric   string `json:"metric"`
	Reason   string `json:"reason"`
}

// Result is everything one suite run on one kernel produced.
type Result struct {
	Suite         string `json:"suite"`
	Profile       string `json:"profile"`
	Kernel        string `json:"kernel"`         // label: "base", "patched", or a path
	KernelRelease string `json:"kernel_release"` // uname -r in the guest (or host with --local)
	Accel         string `json:"accel"`          // "kvm", "tcg", or "host"
	// Clock is the guest's time: "host" (real time) or "icount"
	// (instruction-counted, vmrunner.ICountShift); empty in results
	// recorded before it was kept, which were real time.
	Clock    string    `json:"clock,omitempty"`
	CPUs     int       `json:"cpus"`
	MemMiB   int       `json:"mem_mib"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Samples  []Sample  `json:"samples"`
	Missing  []Missing `json:"missing,omitempty"`
	// Notes carries facts a reader of the report needs, e.g. which probe
	// counted releases.
	Notes map[string]string `json:"notes,omitempty"`
	// Model is the reference model's prediction for the run's shape
	// (cache-contention only).
	Model *Prediction `json:"model,omitempty"`
	// Plan is the rule that decided the number of rounds (Stopping.Plan,
	// e.g. judge/stats.Rule's text), empty for a fixed number; Stop says
	// why the rounds ended (StopFixed, StopSettled, StopFutile, StopMax).
	Plan string `json:"plan,omitempty"`
	Stop string `json:"stop,omitempty"`
	// Rounds records every round run on this kernel, repeated ones too,
	// with the host's load around it.
	Rounds []Round `json:"rounds,omitempty"`
	// Phases is the time in seconds each phase of the rounds took, summed
	// over the rounds (PhaseStage, PhaseWorkload, ...).
	Phases map[string]float64 `json:"phases,omitempty"`
	// Calibration is the host's speed, measured before the first round
	// (Quiet.Calibrate).
	Calibration *Calibration `json:"calibration,omitempty"`
	// Noisy: a round kept although the host was busy around it (its
	// repeats ran out).
	Noisy bool `json:"noisy,omitempty"`
	// Reused counts the rounds of this result taken from an earlier run on
	// the same base, kernel, config, profile and host (invm's base
	// rounds); they were not interleaved with the other side's.
	Reused int `json:"reused,omitempty"`
	// Calls counts the calls of the functions the series changed during
	// the rounds (ParamProbes; calls.go), summed over them.
	Calls []Calls `json:"calls,omitempty"`
	// Warnings are the kernel warnings (WARN_ON(), WARN()) this kernel's
	// console showed while the suite ran on it, as the host read them
	// (vmrunner/report): each title once, with its count.
	Warnings []KernelWarning `json:"warnings,omitempty"`
	// MoreWarnings counts warnings whose titles came after the ones kept.
	MoreWarnings int `json:"more_warnings,omitempty"`
}

// KernelWarning is one kernel warning title and how often the console
// showed it.
type KernelWarning struct {
	// Title names it: "WARNING in squashfs_cache_get".
	Title string `json:"title"`
	// Kind is "WARNING", or the kind of a transient report that passed
	// ("soft lockup", "RCU stall": vmrunner/report.Kind.Transient).
	Kind string `json:"kind,omitempty"`
	// Where is its place in the source: the guilty function with its
	// decoded file:line, or the file:line the kernel printed.
	Where string `json:"where,omitempty"`
	Count int    `json:"count"`
	// Report is the first one's console lines, with its trace decoded
	// (frame and file:line, one a line).
	Report []string `json:"report,omitempty"`
	Trace  []string `json:"trace,omitempty"`
}

// Calibration is a short fixed workload timed on the host before the
// rounds: how fast this host runs a round now, so that a run's time can be
// read as a multiple of it and hosts compared.
type Calibration struct {
	What    string  `json:"what"`    // the workload, in words
	Seconds float64 `json:"seconds"` // the best of its repetitions
	Repeats int     `json:"repeats"`
}
