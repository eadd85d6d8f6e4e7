package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/patchbot/patchbot/store"
)

const (
	homeRecent = 50  // results on the home page
	listPage   = 100 // results per page of /runs
	homeFailed = 20  // failed jobs on the home page
	maxActive  = 500 // queued and running jobs shown
)

// HomeView is the home page (/api/home).
type HomeView struct {
	Running []*JobView `json:"running"`
	Queued  []*JobView `json:"queued"`
	Waiting []*JobView `json:"waiting"` // queued, waiting for a retry time or missing parts
	// Parked jobs lost their worker twice (it died, or its lease ran
	// out, while running them): they wait for a person, newest first.
	Parked  []*JobView     `json:"parked"`
	Failed  []*JobView     `json:"failed"` // given up on (infrastructure), newest first
	Recent  []Summary      `json:"recent"`
	Runs    int            `json:"runs"` // finished runs stored
	Sources []SourceStatus `json:"sources"`
	Workers []WorkerStatus `json:"workers"`
	// CanSubmit says whether the form to start a run is on.
	CanSubmit bool      `json:"can_submit"`
	Now       time.Time `json:"now"`
}

func (s *server) homeView(ctx context.Context) (*HomeView, error) {
	if err := s.runs.refresh(); err != nil {
		return nil, err
	}
	v := &HomeView{Now: time.Now().UTC(), CanSubmit: s.formOn(), Workers: []WorkerStatus{}}
	if s.o.Store != nil {
		active, err := s.o.Store.ActiveJobs(ctx, maxActive)
		if err != nil {
			return nil, err
		}
		for _, j := range active {
			jv := s.jobView(j)
			switch {
			case j.State == store.JobRunning:
				v.Running = append(v.Running, jv)
			case jv.Waiting:
				v.Waiting = append(v.Waiting, jv)
			default:
				v.Queued = append(v.Queued, jv)
			}
		}
		failed, err := s.o.Store.RecentJobs(ctx, store.JobFailed, homeFailed)
		if err != nil {
			return nil, err
		}
		for _, j := range failed {
			v.Failed = append(v.Failed, s.jobView(j))
		}
		parked, err := s.o.Store.RecentJobs(ctx, store.JobParked, homeFailed)
		if err != nil {
			return nil, err
		}
		for _, j := range parked {
			v.Parked = append(v.Parked, s.jobView(j))
		}
	}
	recent, total := s.runs.page(0, homeRecent)
	v.Recent, v.Runs = s.summaries(recent), total
	v.Sources = s.sources(ctx)
	if s.o.Workers != nil {
		v.Workers = s.o.Workers()
	} else if s.o.Store != nil {
		v.Workers = s.storeWorkers(ctx)
	}
	return v, nil
}

// sources are the configured sources' status, or else what the store's
// cursors say of every source that has delivered mail.
func (s *server) sources(ctx context.Context) []SourceStatus {
	if s.o.Sources != nil {
		return s.o.Sources()
	}
	out := []SourceStatus{}
	if s.o.Store == nil {
		return out
	}
	acts, err := s.o.Store.SourcesActivity(ctx)
	if err != nil {
		s.log.Warn("dashboard: reading sources", "err", err)
		return out
	}
	for _, a := range acts {
		out = append(out, SourceStatus{Name: a.Source, LastMail: a.Updated})
	}
	return out
}

func (s *server) home(w http.ResponseWriter, r *http.Request) {
	v, err := s.homeView(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.html(w, r, "home", "patchbot", v)
}

func (s *server) apiHome(w http.ResponseWriter, r *http.Request) {
	v, err := s.homeView(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// RunsView is a page of all runs (/api/runs?page=N).
type RunsView struct {
	Runs  []Summary `json:"runs"`
	Page  int       `json:"page"`
	Pages int       `json:"pages"`
	Total int       `json:"total"`
}

func (s *server) runsView(r *http.Request) (*RunsView, int, string) {
	page := 1
	if p := r.URL.Query().Get("page"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 1_000_000 {
			return nil, http.StatusBadRequest, "page: want a positive number"
		}
		page = n
	}
	if err := s.runs.refresh(); err != nil {
		return nil, http.StatusInternalServerError, err.Error()
	}
	es, total := s.runs.page((page-1)*listPage, listPage)
	pages := max(1, (total+listPage-1)/listPage)
	if page > pages {
		return nil, http.StatusNotFound, "no such page"
	}
	return &RunsView{Runs: s.summaries(es), Page: page, Pages: pages, Total: total}, 0, ""
}

func (s *server) runList(w http.ResponseWriter, r *http.Request) {
	v, code, msg := s.runsView(r)
	if v == nil {
		httpError(w, r, code, msg)
		return
	}
	s.html(w, r, "runs", "all runs", v)
}

func (s *server) apiRuns(w http.ResponseWriter, r *http.Request) {
	v, code, msg := s.runsView(r)
	if v == nil {
		httpError(w, r, code, msg)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// run finds the run a request names, answering 404 itself when there is
// none.
func (s *server) run(w http.ResponseWriter, r *http.Request, name string) *RunView {
	e := s.runs.lookup(name)
	if e == nil || !e.ok {
		httpError(w, r, http.StatusNotFound, "no such run")
		return nil
	}
	v, err := s.runView(r.Context(), e)
	if errors.Is(err, fs.ErrNotExist) {
		// run.json is written before the results: a run being saved.
		w.Header().Set("Retry-After", "2")
		httpError(w, r, http.StatusServiceUnavailable, "this run is being written; try again in a moment")
		return nil
	}
	if err != nil {
		s.fail(w, r, err)
		return nil
	}
	return v
}

func (s *server) runPage(w http.ResponseWriter, r *http.Request) {
	if v := s.run(w, r, r.PathValue("name")); v != nil {
		s.html(w, r, "run", v.Title, v)
	}
}

func (s *server) apiRun(w http.ResponseWriter, r *http.Request) {
	if v := s.run(w, r, r.PathValue("name")); v != nil {
		writeJSON(w, http.StatusOK, v)
	}
}

// plot serves one figure of a run as an SVG document.
func (s *server) plot(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutSuffix(r.PathValue("plot"), ".svg")
	if !ok {
		httpError(w, r, http.StatusNotFound, "no such plot")
		return
	}
	v := s.run(w, r, r.PathValue("name"))
	if v == nil {
		return
	}
	for _, p := range v.Plots {
		if p.ID == id {
			w.Header().Set("Content-Type", "image/svg+xml")
			w.Write([]byte(`<?xml version="1.0"?>` + "\n"))
			w.Write([]byte(p.SVG))
			return
		}
	}
	httpError(w, r, http.StatusNotFound, "no such plot")
}

// SeriesView is every version of a series and every run of it, oldest
// version first (/api/series/KEY).
type SeriesView struct {
	Key      string          `json:"key"`
	Title    string          `json:"title"`
	Author   string          `json:"author"`
	Versions []SeriesVersion `json:"versions"`
	// Runs are every run, oldest version first, then oldest run first:
	// the columns of the side-by-side table.
	Runs []Summary `json:"runs"`
	// Metrics are the rows of the side-by-side table: each metric any run
	// measured, with every run's cells.
	Metrics []SeriesMetric `json:"metrics"`
}

// SeriesVersion is one posted version.
type SeriesVersion struct {
	Version int       `json:"version"`
	Subject string    `json:"subject"`
	LoreURL string    `json:"lore_url"`
	Runs    []Summary `json:"runs"`
}

// SeriesMetric is one metric across the runs of a series.
type SeriesMetric struct {
	Group  string `json:"group"`
	Metric string `json:"metric"`
	Unit   string `json:"unit"`
	// Cells has one entry per run of SeriesView.Runs; nil where that run
	// did not measure the metric.
	Cells []*SeriesCell `json:"cells"`
}

// SeriesCell is one run's reading of a metric, in the reply's format.
type SeriesCell struct {
	Base    string `json:"base"`
	Patched string `json:"patched"`
	Change  string `json:"change"`
	Mark    string `json:"mark"`
	Better  bool   `json:"better"`
	// Significant is as the run's comparison judged it.
	Significant bool `json:"significant"`
}

func (s *server) seriesView(ctx context.Context, key string) (*SeriesView, error) {
	if err := s.runs.refresh(); err != nil {
		return nil, err
	}
	es := s.runs.seriesRuns(key)
	if len(es) == 0 {
		return nil, nil
	}
	// Oldest version first, then oldest run first.
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].version != es[j].version {
			return es[i].version < es[j].version
		}
		return es[i].finished.Before(es[j].finished)
	})
	v := &SeriesView{Key: key, Title: es[0].title, Author: es[0].thread.Author}
	v.Runs = s.summaries(es)
	metricIndex := map[string]int{}
	for col, e := range es {
		if len(v.Versions) == 0 || v.Versions[len(v.Versions)-1].Version != e.version {
			v.Versions = append(v.Versions, SeriesVersion{Version: e.version, Subject: e.thread.Subject,
				LoreURL: s.loreLink(strings.Trim(e.thread.MessageID, "<>"))})
		}
		sv := &v.Versions[len(v.Versions)-1]
		sv.Runs = append(sv.Runs, v.Runs[col])
		rv, err := s.runView(ctx, e)
		if err != nil || rv.Table == nil {
			continue
		}
		for _, row := range rv.Table.Rows {
			k := row.Group + "\x00" + row.Metric
			i, ok := metricIndex[k]
			if !ok {
				i = len(v.Metrics)
				metricIndex[k] = i
				v.Metrics = append(v.Metrics, SeriesMetric{Group: row.Group, Metric: row.Metric, Unit: row.Unit,
					Cells: make([]*SeriesCell, len(es))})
			}
			v.Metrics[i].Cells[col] = &SeriesCell{Base: row.Cells.Base, Patched: row.Cells.Patched,
				Change: row.Cells.Change, Mark: row.Cells.Mark, Better: row.Better(), Significant: row.Significant}
		}
	}
	return v, nil
}

func (s *server) series(w http.ResponseWriter, r *http.Request) *SeriesView {
	key := r.PathValue("key")
	if len(key) != 16 || strings.Trim(key, "0123456789abcdef") != "" {
		httpError(w, r, http.StatusNotFound, "no such series")
		return nil
	}
	v, err := s.seriesView(r.Context(), key)
	return found(s, w, r, "series", v, err)
}

// found is what a lookup of the thing a request names gives: its error
// answered as the server's failure, nothing found as 404 ("no such
// what"), or what it found.
func found[T any](s *server, w http.ResponseWriter, r *http.Request, what string, v *T, err error) *T {
	if err != nil {
		s.fail(w, r, err)
		return nil
	}
	if v == nil {
		httpError(w, r, http.StatusNotFound, "no such "+what)
	}
	return v
}

func (s *server) seriesPage(w http.ResponseWriter, r *http.Request) {
	if v := s.series(w, r); v != nil {
		s.html(w, r, "series", v.Title, v)
	}
}

func (s *server) apiSeries(w http.ResponseWriter, r *http.Request) {
	if v := s.series(w, r); v != nil {
		writeJSON(w, http.StatusOK, v)
	}
}

func (s *server) job(w http.ResponseWriter, r *http.Request) *JobView {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		httpError(w, r, http.StatusNotFound, "no such job")
		return nil
	}
	if s.o.Store == nil {
		httpError(w, r, http.StatusNotFound, "no such job: this dashboard has no queue")
		return nil
	}
	j, err := s.o.Store.JobView(r.Context(), id)
	if j = found(s, w, r, "job", j, err); j == nil {
		return nil
	}
	return s.jobView(j)
}

func (s *server) jobPage(w http.ResponseWriter, r *http.Request) {
	if v := s.job(w, r); v != nil {
		s.html(w, r, "job", "job "+strconv.FormatInt(v.ID, 10), v)
	}
}

func (s *server) apiJob(w http.ResponseWriter, r *http.Request) {
	if v := s.job(w, r); v != nil {
		writeJSON(w, http.StatusOK, v)
	}
}

// html renders a page into a buffer first, so that a template error is a
// clean 500 rather than half a page.
func (s *server) html(w http.ResponseWriter, r *http.Request, page, title string, data any) {
	var buf bytes.Buffer
	if err := renderPage(&buf, page, title, data); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}

// httpError answers with a status and one line: as JSON under /api/, as
// text elsewhere.
func httpError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	http.Error(w, msg, code)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("dashboard", "path", r.URL.Path, "err", err)
	httpError(w, r, http.StatusInternalServerError, "internal error; the server's log says which")
}
