package web

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

// RunView is the page of one run, and its JSON (/api/runs/NAME).
type RunView struct {
	Summary
	// Run is run.json as stored (its results are in Comparison).
	Run *reports.Run `json:"run"`
	// Warning says why the run had to be read leniently, if it had.
	Warning   string         `json:"warning,omitempty"`
	Title     string         `json:"title"` // the series' title without tags
	SeriesURL string         `json:"series_url"`
	LoreURL   string         `json:"lore_url"` // the thread on lore
	Patches   []PatchView    `json:"patches"`
	Table     *TableView     `json:"comparison,omitempty"`
	Model     *ModelView     `json:"model,omitempty"`
	Artifacts []Artifact     `json:"artifacts"`
	Plots     []Plot         `json:"plots"`
	Job       *JobView       `json:"job,omitempty"`
	Reply     *ReplyView     `json:"reply,omitempty"`
	Failure   *judge.Failure `json:"failure,omitempty"`
}

// PlotGroup is the figures under one heading of the page.
type PlotGroup struct {
	Title string
	Plots []Plot
}

// PlotGroups splits the plots for the page: the overview (grids, curves,
// the model), then the per-metric figures under the table's headings.
func (v *RunView) PlotGroups() []PlotGroup {
	var out []PlotGroup
	for _, p := range v.Plots {
		title := p.Group
		if title == "" {
			title = "overview"
		}
		if len(out) == 0 || out[len(out)-1].Title != title {
			out = append(out, PlotGroup{Title: title})
		}
		out[len(out)-1].Plots = append(out[len(out)-1].Plots, p)
	}
	return out
}

// PatchView is one patch of the series, from the run's series.mbox, and
// who signed its mail (run.json's attestation), as b4 am shows it.
type PatchView struct {
	Subject   string `json:"subject"`
	Author    string `json:"author"`
	MessageID string `json:"message_id"`
	LoreURL   string `json:"lore_url"`
	// Verified: a valid DKIM signature aligned with From: proved the
	// sender; Signed are the attestation's lines ("✓ Signed: DKIM/linux.dev").
	Verified bool     `json:"verified"`
	Signed   []string `json:"signed,omitempty"`
}

// TableView is the comparison as the reply's table shows it.
type TableView struct {
	Test       string           `json:"test"`
	Alpha      float64          `json:"alpha"`
	Judged     int              `json:"judged"`
	NoiseShown float64          `json:"noise_shown"`
	Legend     string           `json:"legend"` // the reply's, under its table
	Rows       []RowView        `json:"rows"`
	Missing    []suites.Missing `json:"missing,omitempty"`
}

// RowView is a row of the comparison (every field of judge.Row) with
// the reply's formatting of it.
type RowView struct {
	judge.Row
	Group    string        `json:"group"` // "suite / workload (cell)", as the reply heads it
	Cells    reports.Cells `json:"cells"`
	Plot     string        `json:"plot,omitempty"` // the figure that draws it
	NewGroup bool          `json:"-"`
}

// ModelView is the reference model beside the measurement.
type ModelView struct {
	BasePolicy    string      `json:"base_policy"`
	PatchedPolicy string      `json:"patched_policy"`
	Metric        string      `json:"metric"`
	Check         string      `json:"check,omitempty"`
	Lines         []ModelLine `json:"lines"`
}

// ModelLine is one kernel of one workload: measured and predicted, as the
// reply prints them.
type ModelLine struct {
	Workload  string `json:"workload"`
	Kernel    string `json:"kernel"`
	Policy    string `json:"policy"`
	Measured  string `json:"measured"`
	Predicted string `json:"predicted"` // "-" when the model has no value
}

// ReplyView is the reply's state in the outbox.
type ReplyView struct {
	MessageID string    `json:"message_id"`
	State     string    `json:"state"` // queued, sending, delivering, sent, failed, or "not in the outbox"
	Attempts  int       `json:"attempts,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	Updated   time.Time `json:"updated,omitzero"`
}

// runView returns the view of run e, from the cache when the run directory
// did not change since it was made. The job and the reply's state are
// looked up for every request: they change after a run is written.
func (s *server) runView(ctx context.Context, e *entry) (*RunView, error) {
	v, err := s.pages.get(e.name, e.dir, func() (*RunView, error) { return s.buildRunView(e.name, e.dir) })
	if err != nil {
		return nil, err
	}
	out := *v
	out.Job, out.Reply = s.jobOfRun(ctx, e.name, e.dir), s.replyOfRun(ctx, e.dir)
	return &out, nil
}

// buildRunView reads a run directory and makes its page's data: the
// comparison (judge.Compare, as the reply), the plots, the artifacts.
func (s *server) buildRunView(name, dir string) (*RunView, error) {
	rd, err := loadRun(dir)
	if err != nil {
		return nil, err
	}
	run := rd.run
	subj := mailbox.ParseSubject(run.Thread.Subject)
	v := &RunView{
		Summary: Summary{Name: name, URL: s.link(s.runPath(name)), Subject: run.Thread.Subject,
			Author: run.Thread.Author, MessageID: strings.Trim(run.Thread.MessageID, "<>"), Version: subj.Version,
			Series: seriesKey(run.Thread.Author, subj.Title), Finished: run.Finished,
			Verdict: rd.headline, Outcome: rd.outcome},
		Run: run, Title: subj.Title, Failure: run.Failure,
	}
	if run.Failure != nil {
		v.Summary.Failure = string(run.Failure.Stage)
	}
	v.SeriesURL = s.link("/series/" + v.Series)
	v.LoreURL = s.loreLink(v.MessageID)
	if rd.strictErr != nil {
		v.Warning = "This run was read leniently: " + rd.strictErr.Error()
	}
	v.Patches = s.patchesOf(dir)
	if len(run.Attestation) == len(v.Patches) {
		for i, a := range run.Attestation {
			v.Patches[i].Verified = a.Verified
			for _, c := range a.Checks {
				v.Patches[i].Signed = append(v.Patches[i].Signed, c.String())
			}
		}
	}
	v.Artifacts = s.artifactsOf(name, dir)
	if rd.cmp != nil {
		v.Table, v.Plots, err = s.tableAndPlots(name, run, rd.cmp)
		if err != nil {
			return nil, err
		}
		v.Model = modelView(run.Model, rd.cmp)
	}
	return v, nil
}

func (s *server) loreLink(messageID string) string {
	if messageID == "" {
		return ""
	}
	return s.o.LoreURL + url.PathEscape(messageID) + "/"
}

// tableAndPlots lays the comparison out as the reply's table does and
// draws its figures.
func (s *server) tableAndPlots(name string, run *reports.Run, c *judge.Comparison) (*TableView, []Plot, error) {
	t := &TableView{Test: c.Test, Alpha: c.Alpha, Judged: c.Judged(), NoiseShown: run.Options.Noise(),
		Legend: reports.Legend(c, run.Options.Noise()), Missing: c.Missing}
	samples := samplesOf(run.Base, run.Patched)
	var plots []Plot
	plotURL := func(id string) string { return s.link(s.runPath(name) + "plots/" + id + ".svg") }
	var overview []Plot
	add := func(id, kind, group, title string, svg []byte, marks int) {
		if svg == nil {
			return
		}
		p := Plot{ID: id, Kind: kind, Group: group, Title: title, URL: plotURL(id), Marks: marks, SVG: template.HTML(svg)}
		if group == "" {
			overview = append(overview, p)
		} else {
			plots = append(plots, p)
		}
	}
	// Workloads laid out as grids or curves get one figure per metric;
	// every other row gets its own.
	figure := map[string]string{}
	type group struct {
		suite, workload, metric, unit, kind string
		rows                                []judge.Row
	}
	var groups []*group
	byID := map[string]*group{}
	for _, r := range c.Rows {
		kind := ""
		_, hasB := r.Params["bucket"]
		_, hasR := r.Params["readers"]
		_, hasC := r.Params["contenders"]
		switch {
		case hasB && hasR:
			kind = "grid"
		case hasC:
			kind = "curve"
		}
		if kind == "" {
			continue
		}
		gid := kind + "\x00" + r.Suite + "\x00" + r.Workload + "\x00" + r.Metric
		g := byID[gid]
		if g == nil {
			g = &group{suite: r.Suite, workload: r.Workload, metric: r.Metric, unit: r.Unit, kind: kind}
			byID[gid] = g
			groups = append(groups, g)
		}
		g.rows = append(g.rows, r)
		figure[r.Suite+"\x00"+r.Workload+"\x00"+r.Cell()+"\x00"+r.Metric] = fmt.Sprintf("%s-%d", kind, len(groups))
	}
	prev := ""
	for i, r := range c.Rows {
		g := r.Suite + " / " + r.Workload
		if cell := r.Cell(); cell != "" {
			g += " (" + cell + ")"
		}
		rv := RowView{Row: r, Group: g, Cells: reports.CellsOf(r, run.Options.Noise()), NewGroup: g != prev}
		prev = g
		if id, ok := figure[r.Suite+"\x00"+r.Workload+"\x00"+r.Cell()+"\x00"+r.Metric]; ok {
			rv.Plot = id
		} else {
			id := "m-" + strconv.Itoa(i+1)
			var vals [2][]float64
			if v := samples[keyOf(r)]; v != nil {
				vals = [2][]float64{values(v[0]), values(v[1])}
			}
			svg, marks, err := stripPlot(r, vals)
			if err != nil {
				return nil, nil, fmt.Errorf("drawing %s: %w", g, err)
			}
			add(id, "runs", g, g+": "+metricName(r.Metric, r.Unit), svg, marks)
			rv.Plot = id
		}
		t.Rows = append(t.Rows, rv)
	}
	for i, g := range groups {
		id := fmt.Sprintf("%s-%d", g.kind, i+1)
		var svg []byte
		var marks int
		var err error
		title := g.suite + " / " + g.workload + ": " + metricName(g.metric, g.unit)
		if g.kind == "grid" {
			svg, marks, err = gridPlot(g.suite, g.workload, g.metric, g.unit, g.rows, run.Options.Noise())
		} else {
			svg, marks, err = curvePlot(g.suite, g.workload, g.metric, g.unit, g.rows, samples)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("drawing %s: %w", title, err)
		}
		add(id, g.kind, "", title, svg, marks)
	}
	if m := run.Model; m != nil {
		metric := m.MetricName()
		var rows []judge.Row
		for _, r := range c.Rows {
			if r.Metric == metric {
				rows = append(rows, r)
			}
		}
		svg, marks, err := modelPlot(m, metric, rows, samples)
		if err != nil {
			return nil, nil, fmt.Errorf("drawing the model: %w", err)
		}
		add("model", "model", "", "wake-ups per release, measured and predicted", svg, marks)
	}
	// The figures that sum a run up first, then one per metric.
	return t, append(overview, plots...), nil
}

// modelView sets the model's predictions beside the measured means, row
// by row, as the reply's model lines do.
func modelView(m *reports.Model, c *judge.Comparison) *ModelView {
	if m == nil {
		return nil
	}
	mv := &ModelView{BasePolicy: m.BasePolicy, PatchedPolicy: m.PatchedPolicy, Metric: m.MetricName(), Check: m.Check}
	for _, r := range m.Rows(c) {
		mv.Lines = append(mv.Lines, ModelLine{Workload: r.Workload, Kernel: r.Kernel, Policy: r.Policy,
			Measured: reports.Short(r.Measured), Predicted: r.PredictedText()})
	}
	return mv
}

// patchesOf lists the patches the run applied, from its series.mbox.
func (s *server) patchesOf(dir string) []PatchView {
	data, err := readCapped(filepath.Join(dir, "series.mbox"), maxSeriesMbox)
	if err != nil {
		return nil
	}
	var out []PatchView
	mailbox.ReadMbox(bytes.NewReader(data), func(raw []byte, _ int64) error {
		m, err := mailbox.ParseBytes(raw)
		if err != nil || len(out) >= 500 {
			return nil
		}
		out = append(out, PatchView{Subject: m.Subject, Author: m.From, MessageID: m.MessageID,
			LoreURL: s.loreLink(m.MessageID)})
		return nil
	})
	return out
}

var jobDir = regexp.MustCompile(`^job-([0-9]{1,18})$`)

// jobOfRun finds the job that wrote a run: the daemon names run
// directories job-ID; otherwise the store is asked by path.
func (s *server) jobOfRun(ctx context.Context, name, dir string) *JobView {
	if s.o.Store == nil {
		return nil
	}
	if m := jobDir.FindStringSubmatch(name); m != nil {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		if j, err := s.o.Store.JobView(ctx, id); err == nil && j != nil && filepath.Base(j.RunDir) == name {
			return s.jobView(j)
		}
	}
	if j, err := s.o.Store.JobByRunDir(ctx, dir); err == nil && j != nil {
		return s.jobView(j)
	}
	return nil
}

// replyOfRun reads the reply's Message-ID from reply.eml and asks the
// outbox how far sending it got.
func (s *server) replyOfRun(ctx context.Context, dir string) *ReplyView {
	f, err := os.Open(filepath.Join(dir, reports.ReplyFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	msg, err := mail.ReadMessage(bufio.NewReader(&limitedReader{f, 256 << 10}))
	if err != nil {
		return nil
	}
	id := strings.Trim(strings.TrimSpace(msg.Header.Get("Message-Id")), "<>")
	if id == "" {
		return nil
	}
	rv := &ReplyView{MessageID: id, State: "not in the outbox"}
	if s.o.Store == nil {
		rv.State = "unknown (no store)"
		return rv
	}
	st, err := s.o.Store.ReplyStatus(ctx, id)
	if err != nil || st == nil {
		return rv
	}
	rv.State, rv.Attempts, rv.LastError, rv.Updated = string(st.State), st.Attempts, st.LastError, st.Updated
	return rv
}

type limitedReader struct {
	f *os.File
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("header too long")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// pageCache keeps the views of recently viewed runs. A view is valid while
// the run directory and its run.json keep their modification times (a
// file added to the directory changes the directory's).
type pageCache struct {
	mu    sync.Mutex
	max   int
	tick  uint64
	items map[string]*cached
}

type cached struct {
	view    *RunView
	dirMod  time.Time
	runMod  time.Time
	runSize int64
	used    uint64
}

func newPageCache(max int) *pageCache { return &pageCache{max: max, items: map[string]*cached{}} }

func stamp(dir string) (dirMod, runMod time.Time, runSize int64, ok bool) {
	d, err := os.Stat(dir)
	if err != nil {
		return
	}
	r, err := os.Stat(filepath.Join(dir, reports.RunFile))
	if err != nil {
		return
	}
	return d.ModTime(), r.ModTime(), r.Size(), true
}

// peek returns a valid cached view, or nil.
func (pc *pageCache) peek(name, dir string) *RunView {
	dm, rm, rs, ok := stamp(dir)
	if !ok {
		return nil
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	c := pc.items[name]
	if c == nil || !c.dirMod.Equal(dm) || !c.runMod.Equal(rm) || c.runSize != rs {
		return nil
	}
	pc.tick++
	c.used = pc.tick
	return c.view
}

// get returns the cached view of a run, or builds and keeps it.
func (pc *pageCache) get(name, dir string, build func() (*RunView, error)) (*RunView, error) {
	if v := pc.peek(name, dir); v != nil {
		return v, nil
	}
	dm, rm, rs, _ := stamp(dir)
	v, err := build()
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(pc.items) >= pc.max {
		var oldest string
		var least uint64 = ^uint64(0)
		for k, c := range pc.items {
			if c.used < least {
				oldest, least = k, c.used
			}
		}
		delete(pc.items, oldest)
	}
	pc.tick++
	pc.items[name] = &cached{view: v, dirMod: dm, runMod: rm, runSize: rs, used: pc.tick}
	return v, nil
}

// jobView is a job as pages show it.
func (s *server) jobView(j *store.Job) *JobView {
	jv := &JobView{ID: j.ID, URL: s.link("/jobs/" + strconv.FormatInt(j.ID, 10)), Title: j.Title, Trigger: j.Trigger,
		State: string(j.State), Stage: j.Stage, Blame: string(j.Blame), Error: j.Error, Attempts: j.Attempts,
		Worker: j.Owner, Crashes: j.Crashes, NotBefore: j.NotBefore, Created: j.Created, Updated: j.Updated}
	if j.State == store.JobQueued && j.NotBefore.After(time.Now()) {
		jv.Waiting = true
	}
	if j.RunDir != "" {
		if name := filepath.Base(j.RunDir); validName.MatchString(name) {
			if e := s.runs.lookup(name); e != nil && e.ok {
				jv.RunURL = s.link(s.runPath(name))
			}
		}
	}
	if j.State == store.JobRunning && s.o.Progress != nil {
		if p, ok := s.o.Progress(j.ID); ok {
			jv.Progress = &p
			if p.Stage != "" {
				jv.Stage = p.Stage
			}
		}
	}
	return jv
}

// JobView is a job in the queue (/api/jobs/ID).
type JobView struct {
	ID       int64     `json:"id"`
	URL      string    `json:"url"`
	Title    string    `json:"title"`
	Trigger  string    `json:"trigger"` // list, command, cli, web
	State    string    `json:"state"`   // queued, running, done, failed, parked (lost its worker twice)
	Waiting  bool      `json:"waiting"` // queued but waiting for NotBefore (a retry, or missing parts)
	Stage    string    `json:"stage,omitempty"`
	Blame    string    `json:"blame,omitempty"`
	Error    string    `json:"error,omitempty"`
	Attempts int       `json:"attempts"`
	Crashes  int       `json:"crashes"`          // its worker died (or lost its lease) while running it
	Worker   string    `json:"worker,omitempty"` // the worker that holds it, or ran it last
	Progress *Progress `json:"progress,omitempty"`
	RunURL   string    `json:"run_url,omitempty"`
	// NotBefore is when a waiting job may run again.
	NotBefore time.Time `json:"not_before"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
}
