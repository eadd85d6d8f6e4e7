package judge

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/patchbot/patchbot/judge/stats"
	"github.com/patchbot/patchbot/suites"
)

// Options say how to judge a change. The zero value is the default: the
// pipeline's test (stats.DefaultTest) at alpha 0.05.
type Options struct {
	// Alpha is the false-positive rate of each family of metrics (default
	// 0.05), for results measured with a fixed number of runs.
	Alpha float64 `json:"alpha" yaml:"alpha"`
	// Test is the two-sample test (default stats.DefaultTest, log-Welch).
	Test stats.Test `json:"test" yaml:"test"`
	// Rule is the sequential rule the runs followed. Nil takes the rule
	// each suite's results record (suites.Result.Plan), and for results
	// that record none a fixed design at Alpha.
	Rule *stats.Rule `json:"rule,omitempty" yaml:"rule"`
}

func (o Options) withDefaults() Options {
	if o.Alpha == 0 {
		o.Alpha = 0.05
	}
	return o
}

func (o Options) check() error {
	if o.Alpha <= 0 || o.Alpha >= 1 {
		return fmt.Errorf("comparing results: alpha %v is not in (0, 1)", o.Alpha)
	}
	if o.Rule != nil {
		if err := o.Rule.Validate(); err != nil {
			return fmt.Errorf("comparing results: %w", err)
		}
	}
	return nil
}

// DefaultSmallestEffect is the smallest effect of interest of metrics whose
// suite declares none (a suite not among the embedded ones).
const DefaultSmallestEffect = 0.10

// Row is one metric in one workload cell, compared between the kernels.
type Row struct {
	MetricID
	// Primary: one of the suite's primary metrics, judged in the first
	// family; otherwise a derived counter, judged in the second. Rank is
	// its place in the suite's list of primary metrics.
	Primary bool `json:"primary"`
	// Mechanism: one of the suite's mechanism counters (suites.Verdict),
	// judged in a family of their own; they explain, never decide.
	Mechanism bool          `json:"mechanism,omitempty"`
	Rank      int           `json:"rank,omitempty"`
	Base      stats.Summary `json:"base"`
	Patched   stats.Summary `json:"patched"`
	// Change is (patched - base) / |base| of the means, as the table's
	// %change column; 0 when the base mean is zero (see HasChange), so
	// that the JSON stays valid.
	Change float64 `json:"change"`
	// Interval is how big the change is with its 95% interval: the ratio
	// of the geometric means for the log-scale test.
	Interval stats.Interval `json:"interval"`
	// P is the test's p-value; AdjustedP is after Holm-Bonferroni within
	// the row's family (its suite's primary metrics, or its derived
	// counters); Level is the level the family was judged at (the
	// sequential rule's level at this number of runs).
	P         float64 `json:"p"`
	AdjustedP float64 `json:"adjusted_p"`
	Level     float64 `json:"level"`
	// Paired: the test paired the two kernels' rounds turn by turn.
	Paired bool `json:"paired,omitempty"`
	// Estimate is the test's change with its standard error and degrees
	// of freedom, what Interval and Detectable are built on.
	Estimate stats.Estimate `json:"-"`
	// Detectable is the minimum detectable effect of the row's last look,
	// a fraction (stats.Detectable).
	Detectable float64 `json:"detectable,omitempty"`
	// ShortOfReach: the rule settles a metric as unchanged only where the
	// run could have seen the smallest effect (stats.Rule.Reach), and this
	// look could not: its Detectable is beyond it.
	ShortOfReach bool `json:"short_of_reach,omitempty"`
	// Judged is false when a side has fewer than stats.MinSamples runs.
	Judged      bool `json:"judged"`
	Significant bool `json:"significant"`
	// Within: the interval lies inside ± the suite's smallest effect of
	// interest, so the metric did not change by as much as matters.
	Within bool `json:"within"`
	// Called: a change, reported as one: significant, and past the guards
	// (Guard says which one stopped a significant row).
	Called bool   `json:"called"`
	Guard  string `json:"guard,omitempty"`

	// oneCell: the row's workload has a single cell, so its name need not
	// say which.
	oneCell bool
}

// Guards that keep a significant row from being called a change.
const (
	GuardNoiseFloor = stats.GuardNoiseFloor
	GuardOverlap    = stats.GuardOverlap
)

// Better reports whether the patched kernel moved this metric the good way.
func (r Row) Better() bool {
	up := r.Patched.Mean > r.Base.Mean
	if r.Interval.Defined {
		up = r.Interval.Ratio > 1
	}
	return up == r.HigherIsBetter && r.moved()
}

// Worse reports whether the patched kernel moved this metric the bad way.
func (r Row) Worse() bool { return r.moved() && !r.Better() }

func (r Row) moved() bool {
	if r.Interval.Defined {
		return r.Interval.Ratio != 1
	}
	return r.Patched.Mean != r.Base.Mean
}

// Settled reports whether more runs are not needed for this row: it
// changed significantly, or not by as much as matters.
func (r Row) Settled() bool { return r.Judged && (r.Significant || r.Within && !r.ShortOfReach) }

// HasChange is false when the change cannot be expressed relative to the
// base (a zero base mean) or a side has no samples.
func (r Row) HasChange() bool {
	return r.Base.Mean != 0 && r.Base.N > 0 && r.Patched.N > 0
}

// Ratio is patched over base (or base over patched, whichever is >= 1):
// "1.8x" reads better than "+80%" for large changes. It is the interval's
// estimate when there is one.
func (r Row) Ratio() float64 {
	a, b := r.Base.Mean, r.Patched.Mean
	if r.Interval.Defined {
		a, b = 1, r.Interval.Ratio
	}
	if a == 0 || b == 0 {
		return math.Inf(1)
	}
	return math.Max(a/b, b/a)
}

// NamedCell is the row's cell when its workload has several (the name
// must say which), "" when the workload has one.
func (r Row) NamedCell() string {
	if r.oneCell {
		return ""
	}
	return r.Cell()
}

// Name is the row's name as the kernel test robot writes it:
// "cache-contention.read-storm.wakeups_per_release", with the cell after
// it in parentheses.
func (r Row) Name() string {
	s := r.Suite + "." + r.Workload + "." + r.Metric
	if cell := r.NamedCell(); cell != "" {
		s += " (" + cell + ")"
	}
	return s
}

// SuiteJudgement is how one suite's results were judged.
type SuiteJudgement struct {
	Suite string `json:"suite"`
	// Rule is the rule the runs followed; Runs the runs a side at the last
	// look; Level the level both families were judged at there.
	Rule  stats.Rule `json:"rule"`
	Runs  int        `json:"runs"`
	Level float64    `json:"level"`
	// Stop says why the runs ended (suites.StopSettled, StopMax,
	// StopFixed), as the results record it.
	Stop string `json:"stop,omitempty"`
	// Settled: every primary metric is settled.
	Settled bool `json:"settled"`
	// Futile: not settled, and more runs could not settle the primary
	// metrics (stats.Rule.Futile): the rounds stop for futility.
	Futile         bool    `json:"futile,omitempty"`
	Primary        int     `json:"primary"` // primary metrics judged
	Derived        int     `json:"derived"` // derived counters judged
	SmallestEffect float64 `json:"smallest_effect"`
	NoiseFloor     float64 `json:"noise_floor"`
}

// BusyRound is a round kept although the host was busy around it.
type BusyRound struct {
	Suite  string       `json:"suite"`
	Kernel string       `json:"kernel"`
	Round  suites.Round `json:"round"`
}

// Comparison is every metric of two kernels' results.
type Comparison struct {
	Base    string           `json:"base"` // kernel labels from the results
	Patched string           `json:"patched"`
	Test    string           `json:"test"`
	Alpha   float64          `json:"alpha"`
	Suites  []SuiteJudgement `json:"suites"`
	Rows    []Row            `json:"rows"`
	Missing []suites.Missing `json:"missing,omitempty"`
	// Busy lists the rounds measured while the host was busy (and not
	// repeated): the reply flags them.
	Busy []BusyRound `json:"busy,omitempty"`
	// Repeated counts the rounds run again because the host was busy.
	Repeated int `json:"repeated,omitempty"`
	// Calibration is the host's calibration before the rounds
	// (suites.Result.Calibration), from the base's result.
	Calibration *suites.Calibration `json:"calibration,omitempty"`
	// Noisy: a busy round was kept (the repeats ran out), so the host's
	// load may be in the numbers.
	Noisy bool `json:"noisy,omitempty"`
	// Reused counts base rounds taken from an earlier run on the same base
	// (suites.Result.Reused): those are compared unpaired.
	Reused int `json:"reused,omitempty"`
	// AA: both sides are the base kernel (an A/A run). Prose names the
	// second side "the second base", not "the patched kernel".
	AA bool `json:"aa,omitempty"`
}

// Judged counts the rows that have enough runs to be tested.
func (c *Comparison) Judged() int {
	n := 0
	for _, r := range c.Rows {
		if r.Judged {
			n++
		}
	}
	return n
}

// SignificantRows returns the rows whose change is significant.
func (c *Comparison) SignificantRows() []Row {
	return c.rows(func(r Row) bool { return r.Significant })
}

// PrimaryRows returns the rows of the suites' primary metrics.
func (c *Comparison) PrimaryRows() []Row { return c.rows(func(r Row) bool { return r.Primary }) }

// DerivedRows returns the rows of derived counters (mechanism counters
// among them; MechanismRows returns those alone).
func (c *Comparison) DerivedRows() []Row { return c.rows(func(r Row) bool { return !r.Primary }) }

// MechanismRows returns the rows of the suites' mechanism counters.
func (c *Comparison) MechanismRows() []Row { return c.rows(func(r Row) bool { return r.Mechanism }) }

func (c *Comparison) rows(keep func(Row) bool) []Row {
	var out []Row
	for _, r := range c.Rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// Settled reports whether every suite's primary metrics are settled: the
// sequential rule's condition to stop running rounds.
func (c *Comparison) Settled() bool {
	if len(c.Suites) == 0 {
		return false
	}
	for _, s := range c.Suites {
		if !s.Settled {
			return false
		}
	}
	return true
}

// Futile reports whether the rounds may stop for futility: no suite is
// left that could still be settled, and at least one is futile.
func (c *Comparison) Futile() bool {
	futile := false
	for _, s := range c.Suites {
		switch {
		case s.Futile:
			futile = true
		case !s.Settled:
			return false
		}
	}
	return futile
}

// Judgement returns how suite was judged.
func (c *Comparison) Judgement(suite string) (SuiteJudgement, bool) {
	for _, s := range c.Suites {
		if s.Suite == suite {
			return s, true
		}
	}
	return SuiteJudgement{}, false
}

// Compare pools the samples of each metric over every result of a kernel
// (one result per suite run, or several rounds) and compares base with
// patched. Each suite's primary metrics (from its definition) are judged as
// one family and its other metrics as a second, Holm-Bonferroni within
// each, at the level the sequential rule gives for the number of runs.
// Metrics measured on only one side are kept with an empty side, unjudged.
//
// The steps, each a function below: pool the samples by metric and note
// how the rounds were measured (pool, noteRounds); give each suite its
// rule, smallest effect and noise floor (judgements); make a row per
// metric and sort the rows into families (families); judge each family at
// the rule's level (judgeFamily); name the cells (nameCells).
func Compare(base, patched []suites.Result, opt Options) (*Comparison, error) {
	opt = opt.withDefaults()
	if err := opt.check(); err != nil {
		return nil, err
	}
	if countSamples(base) == 0 {
		return nil, errors.New("comparing results: the base kernel has no samples")
	}
	if countSamples(patched) == 0 {
		return nil, errors.New("comparing results: the patched kernel has no samples")
	}
	c := &Comparison{Base: label(base, "base"), Patched: label(patched, "patched"), Test: opt.Test.String(), Alpha: opt.Alpha}
	p := pool(base, patched)
	for _, res := range base {
		c.noteRounds(res)
	}
	for _, res := range patched {
		c.noteRounds(res)
	}
	suiteOf, order, err := judgements(p, opt)
	if err != nil {
		return nil, err
	}
	for _, f := range c.families(p, suiteOf) {
		c.judgeFamily(f, opt.Test)
	}
	for _, s := range order {
		c.Suites = append(c.Suites, suiteOf[s].j)
	}
	c.nameCells()
	return c, nil
}

type rowKey struct{ suite, workload, cell, metric string }

// pooled are the samples of every metric on both sides (0 base, 1
// patched), pooled over the results, and what each suite's results record
// of the rule they ran by.
type pooled struct {
	order  []rowKey // suites and workloads together, each in the order first measured
	ids    map[rowKey]MetricID
	values map[rowKey]*[2][]float64
	turns  map[rowKey]*[2][]int // the round of each value
	plans  map[string]string    // suite: the rule its results record
	stops  map[string]string    // suite: why its rounds stopped
}

// pool pools the samples of base (side 0) and patched (side 1) by metric.
func pool(base, patched []suites.Result) *pooled {
	p := &pooled{ids: map[rowKey]MetricID{}, values: map[rowKey]*[2][]float64{}, turns: map[rowKey]*[2][]int{},
		plans: map[string]string{}, stops: map[string]string{}}
	for side, results := range [2][]suites.Result{base, patched} {
		for _, res := range results {
			for _, s := range res.Samples {
				k := rowKey{s.Suite, s.Workload, CellName(s.Params), s.Metric}
				if _, ok := p.ids[k]; !ok {
					p.order = append(p.order, k)
					p.ids[k] = MetricID{Suite: s.Suite, Workload: s.Workload, Params: s.Params,
						Metric: s.Metric, Unit: s.Unit, HigherIsBetter: s.HigherIsBetter}
					p.values[k] = &[2][]float64{}
					p.turns[k] = &[2][]int{}
				}
				p.values[k][side] = append(p.values[k][side], s.Value)
				p.turns[k][side] = append(p.turns[k][side], s.Round)
			}
			if res.Plan != "" {
				p.plans[res.Suite] = res.Plan
			}
			if res.Stop != "" {
				p.stops[res.Suite] = res.Stop
			}
		}
	}
	// Keep suites and workloads together, in the order they were first
	// measured within each (suites list their cells in a meaningful order).
	sort.SliceStable(p.order, func(i, j int) bool {
		a, b := p.order[i], p.order[j]
		if a.suite != b.suite {
			return a.suite < b.suite
		}
		return a.workload < b.workload
	})
	return p
}

// noteRounds notes what a result says about how its rounds were measured:
// base rounds reused, the host's calibration (the first one given),
// counters not measured, rounds repeated or kept while the host was busy.
func (c *Comparison) noteRounds(res suites.Result) {
	c.Reused += res.Reused
	if res.Calibration != nil && c.Calibration == nil {
		c.Calibration = res.Calibration
	}
	c.Missing = append(c.Missing, res.Missing...)
	for _, rd := range res.Rounds {
		switch {
		case rd.Repeated:
			c.Repeated++
		case rd.Busy:
			c.Busy = append(c.Busy, BusyRound{Suite: res.Suite, Kernel: res.Kernel, Round: rd})
			c.Noisy = true
		}
	}
}

// suiteState is one suite's judgement while its families are judged, and
// its definition's verdict spec (nil for a suite not embedded).
type suiteState struct {
	j       SuiteJudgement
	verdict *suites.Verdict
}

// judgements gives each suite measured its rule (opt's, else the one its
// results record, else a fixed design at opt.Alpha), its smallest effect
// of interest and noise floor (from its definition), and its runs a side
// (the most that any of its metrics has on both sides). order is the
// suites in the order of the rows.
func judgements(p *pooled, opt Options) (by map[string]*suiteState, order []string, err error) {
	by = map[string]*suiteState{}
	for _, k := range p.order {
		st := by[k.suite]
		if st == nil {
			st = &suiteState{j: SuiteJudgement{Suite: k.suite, SmallestEffect: DefaultSmallestEffect, Stop: p.stops[k.suite]}}
			if def, err := suites.Lookup(k.suite); err == nil {
				st.verdict = &def.Verdict
				st.j.SmallestEffect, st.j.NoiseFloor = def.Verdict.SmallestEffect, def.Verdict.NoiseFloor
			}
			st.j.Rule = stats.Fixed(opt.Alpha)
			switch {
			case opt.Rule != nil:
				st.j.Rule = *opt.Rule
			case p.plans[k.suite] != "":
				r, err := stats.ParseRule(p.plans[k.suite])
				if err != nil {
					return nil, nil, fmt.Errorf("comparing results: %s: %w", k.suite, err)
				}
				st.j.Rule = r
			}
			by[k.suite] = st
			order = append(order, k.suite)
		}
		v := p.values[k]
		st.j.Runs = max(st.j.Runs, min(len(v[0]), len(v[1])))
	}
	return by, order, nil
}

// Kinds of family: each suite's primary metrics, its mechanism counters,
// and its other, derived, counters are judged apart.
const (
	familyPrimary   = "primary"
	familyMechanism = "mechanism"
	familyDerived   = "derived"
)

// family is the rows of one suite judged together: their indexes in
// Comparison.Rows and their samples.
type family struct {
	suite *suiteState
	kind  string
	idx   []int
	pairs []stats.Pair
}

// families makes a row per metric (its place in its suite's verdict, the
// two sides' summaries, the change of the means) and sorts the rows into
// their suite's families, in the order first met. A metric's rounds are
// paired when both sides measured it in the same turns and no base round
// was reused.
func (c *Comparison) families(p *pooled, suiteOf map[string]*suiteState) []*family {
	by := map[[2]string]*family{}
	var out []*family
	for _, k := range p.order {
		v, st := p.values[k], suiteOf[k.suite]
		r := Row{MetricID: p.ids[k], Primary: true}
		if st.verdict != nil {
			r.Rank, r.Primary = st.verdict.Rank(r.Workload, r.Metric, r.Params)
			if !r.Primary {
				r.Rank, r.Mechanism = st.verdict.MechanismRank(r.Workload, r.Metric, r.Params)
			}
		}
		r.Base, r.Patched = stats.Summarize(v[0]), stats.Summarize(v[1])
		if r.Base.Mean != 0 {
			r.Change = (r.Patched.Mean - r.Base.Mean) / math.Abs(r.Base.Mean)
		}
		r.P, r.AdjustedP = 1, 1
		kind := familyDerived
		switch {
		case r.Primary:
			kind = familyPrimary
		case r.Mechanism:
			kind = familyMechanism
		}
		fk := [2]string{k.suite, kind}
		f := by[fk]
		if f == nil {
			f = &family{suite: st, kind: kind}
			by[fk] = f
			out = append(out, f)
		}
		f.idx = append(f.idx, len(c.Rows))
		f.pairs = append(f.pairs, stats.Pair{Base: v[0], Patched: v[1],
			Turns: c.Reused == 0 && sameTurns(p.turns[k][0], p.turns[k][1])})
		c.Rows = append(c.Rows, r)
	}
	return out
}

// judgeFamily judges one family with test t at the level its suite's rule
// gives at its runs a side (stats.JudgeFamily: Holm-Bonferroni within the
// family), applies the guards to its significant rows, and, for the
// primary family, says whether the suite is settled or futile.
func (c *Comparison) judgeFamily(f *family, t stats.Test) {
	st := f.suite
	level := st.j.Rule.Level(st.j.Runs)
	st.j.Level = level
	js := stats.JudgeFamily(t, st.j.Rule, level, st.j.SmallestEffect, f.pairs)
	for i, j := range js {
		r := &c.Rows[f.idx[i]]
		r.Judged, r.P, r.AdjustedP, r.Level = j.Judged, j.P, j.AdjustedP, level
		r.Interval, r.Significant, r.Within = j.Interval, j.Significant, j.Within
		r.Estimate, r.Paired, r.Detectable, r.ShortOfReach = j.Estimate, j.Estimate.Paired, j.Detectable, !j.Reaches
		if r.Significant {
			r.Guard = stats.Guard(r.Base, r.Patched, r.Interval, st.j.NoiseFloor)
			r.Called = r.Guard == ""
		}
		if !j.Judged {
			continue
		}
		if r.Primary {
			st.j.Primary++
		} else {
			st.j.Derived++
		}
	}
	if f.kind == familyPrimary {
		st.j.Settled = stats.Settled(js)
		st.j.Futile = st.j.Rule.Futile(js, st.j.Runs, st.j.SmallestEffect)
	}
}

// nameCells marks the rows whose workload has a single cell: their names
// need not say which.
func (c *Comparison) nameCells() {
	cells := map[[2]string]map[string]bool{}
	for _, r := range c.Rows {
		k := [2]string{r.Suite, r.Workload}
		if cells[k] == nil {
			cells[k] = map[string]bool{}
		}
		cells[k][r.Cell()] = true
	}
	for i := range c.Rows {
		c.Rows[i].oneCell = len(cells[[2]string{c.Rows[i].Suite, c.Rows[i].Workload}]) == 1
	}
}

// sameTurns reports whether two sides' samples of a metric came from the
// same turns, in the same order, each turn once: then the i-th base and
// patched values were measured side by side and may be paired.
func sameTurns(a, b []int) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	seen := map[int]bool{}
	for i := range a {
		if a[i] != b[i] || a[i] <= 0 || seen[a[i]] {
			return false
		}
		seen[a[i]] = true
	}
	return true
}

func countSamples(rs []suites.Result) int {
	n := 0
	for _, r := range rs {
		n += len(r.Samples)
	}
	return n
}

func label(rs []suites.Result, def string) string {
	for _, r := range rs {
		if r.Kernel != "" {
			return r.Kernel
		}
	}
	return def
}
