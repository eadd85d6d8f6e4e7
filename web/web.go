// Package web is patchbot's dashboard: server-rendered pages (html/template,
// readable without JavaScript) of the queue, every run with its evidence
// and plots, every series across its versions, a form to start a run, a
// JSON API beside each page and an Atom feed of results.
//
// Every number a page shows is computed by the code the reply uses
// (judge.Compare on the stored results with the run's options, and the
// reply's formatting through reports.CellsOf), so a page and the mail
// never disagree.
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// Options configure the dashboard. Only StateDir is required.
type Options struct {
	// Store holds the jobs, the sources' cursors and the outbox; the
	// dashboard only reads it. Nil shows runs without a queue.
	Store *store.Store
	// StateDir is the state directory: runs live under StateDir/runs/NAME/.
	StateDir string
	// Token is what the form to start a run asks for; "" disables the form.
	Token string
	// Queue receives accepted runs; nil disables the form.
	Queue Queue
	// Sources lists the watched sources and when each last delivered mail;
	// nil falls back to the store's cursors.
	Sources func() []SourceStatus
	// Workers lists the workers and VM hosts in use; nil lists the
	// Store's workers table (WorkerStatuses), or none without a Store.
	Workers func() []WorkerStatus
	// Lease is the fleet's lease (fleet.lease): a worker not heard from
	// for that long is down. Default two minutes.
	Lease time.Duration
	// Progress is the live progress of a running job; nil shows only the
	// stage the store has.
	Progress func(jobID int64) (Progress, bool)
	// BaseURL is the dashboard's public address, e.g.
	// "https://patchbot.example.org": the Atom feed's links and RunURL use
	// it. Empty makes links relative to the host a request came to.
	BaseURL string
	// LoreURL is where a Message-ID is looked up for the series' links
	// (default "https://lore.kernel.org/all/").
	LoreURL string
	// LoreHosts are the hosts a lore URL given on the form may name
	// (host or host:port; default: LoreURL's host). The queue fetches it,
	// so nothing else is let through.
	LoreHosts []string
	// MaxUpload caps an uploaded mbox (default 8 MiB).
	MaxUpload int64
	Log       *slog.Logger
}

// Queue is where a run started from the form goes: the same queue as mail
// and email commands.
type Queue interface {
	Submit(ctx context.Context, s Submission) (jobID int64, err error)
}

// Submission is a run asked for on the form (or POST /api/submit). Exactly
// one of LoreURL, MessageID and Mbox is set; the dashboard checked its
// form, not its content (the Queue fetches and assembles the series).
type Submission struct {
	LoreURL   string   // a public-inbox thread URL (http or https)
	MessageID string   // a Message-ID without angle brackets, looked up on lore
	Mbox      []byte   // an uploaded mbox, at most Options.MaxUpload bytes
	Suites    []string // known suite names; empty lets the touched files choose
	Profile   string   // "standard", "quick", "full" or "" (the config's default)
	Submitter string   // who asked, as typed on the form ("dashboard" if not)
}

// ErrRefused is what a Queue wraps when it refuses a submission for what it
// asks (no series in the mail, nothing the paths cover): the dashboard
// answers 422 with the error's text instead of 500.
var ErrRefused = errors.New("refused")

// SourceStatus is one watched source.
type SourceStatus struct {
	Name     string    `json:"name"`
	Kind     string    `json:"kind,omitempty"` // imap, lore, mbox, maildir
	LastMail time.Time `json:"last_mail"`      // zero: none yet
	Error    string    `json:"error,omitempty"`
}

// WorkerStatus is one worker of the fleet, as the store's workers table
// knows it.
type WorkerStatus struct {
	Name  string `json:"name"`
	Host  string `json:"host,omitempty"`
	State string `json:"state"` // busy, idle, stopped, or down (no heartbeat for a lease)
	JobID int64  `json:"job_id,omitempty"`
	// Stage and LeaseUntil are the busy worker's job's: its stage, and
	// when its lease runs out unless the worker renews it.
	Stage      string    `json:"stage,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitempty"`
	Since      time.Time `json:"since"` // in this state since
	Seen       time.Time `json:"seen"`  // its last heartbeat
	Caps       string    `json:"caps"`  // what it can run: "kvm, 32 CPUs, 64 GiB, suites: …"
}

// Progress is how far a running job got, as its worker tells it.
type Progress = store.Progress

//go:embed templates/*.html static/*
var assets embed.FS

// server holds what the handlers share.
type server struct {
	o     Options
	runs  *index
	pages *pageCache
	csrf  *csrfKeys
	log   *slog.Logger
}

// New returns the dashboard's handler. It scans StateDir/runs once before
// returning, so that the first page is as fast as the next.
func New(o Options) (http.Handler, error) {
	s, err := newServer(o)
	if err != nil {
		return nil, err
	}
	return s.routes(), nil
}

func newServer(o Options) (*server, error) {
	if o.StateDir == "" {
		return nil, errors.New("dashboard: no state directory")
	}
	if o.LoreURL == "" {
		o.LoreURL = "https://lore.kernel.org/all/"
	}
	if !strings.HasSuffix(o.LoreURL, "/") {
		o.LoreURL += "/"
	}
	lore, err := url.Parse(o.LoreURL)
	if err != nil || (lore.Scheme != "http" && lore.Scheme != "https") || lore.Host == "" {
		return nil, fmt.Errorf("dashboard: lore URL %q: want http(s)://host/path/", o.LoreURL)
	}
	if len(o.LoreHosts) == 0 {
		o.LoreHosts = []string{lore.Host}
	}
	hosts := make([]string, len(o.LoreHosts))
	for i, h := range o.LoreHosts {
		hosts[i] = strings.ToLower(h)
	}
	o.LoreHosts = hosts
	if o.MaxUpload <= 0 {
		o.MaxUpload = 8 << 20
	}
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	if o.BaseURL != "" {
		u, err := url.Parse(o.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("dashboard: base URL %q: want http(s)://host[/path]", o.BaseURL)
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if err := parseTemplates(); err != nil {
		return nil, err
	}
	s := &server{o: o, runs: newIndex(filepath.Join(o.StateDir, "runs")), pages: newPageCache(64),
		csrf: newCSRFKeys(), log: o.Log}
	if err := s.runs.refresh(); err != nil {
		return nil, err
	}
	return s, nil
}

// RunURL is the address of a run's page, for the reply's "results:" line:
// base is Options.BaseURL, runName the run directory's name.
func RunURL(base, runName string) string { return reports.RunURL(base, runName) }

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	get := func(pattern string, h http.HandlerFunc) { mux.HandleFunc("GET "+pattern, h) }
	get("/{$}", s.home)
	get("/runs", s.runList)
	get("/runs/{name}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/runs/"+url.PathEscape(r.PathValue("name"))+"/", http.StatusMovedPermanently)
	})
	get("/runs/{name}/{$}", s.runPage)
	get("/runs/{name}/files/{path...}", s.artifact)
	get("/runs/{name}/plots/{plot}", s.plot)
	get("/series/{key}", s.seriesPage)
	get("/jobs/{id}", s.jobPage)
	get("/submit", s.submitForm)
	mux.HandleFunc("POST /submit", s.submit)
	get("/feed.atom", s.feed)
	get("/static/{file}", s.static)

	get("/api/home", s.apiHome)
	get("/api/runs", s.apiRuns)
	get("/api/runs/{name}", s.apiRun)
	get("/api/series/{key}", s.apiSeries)
	get("/api/jobs/{id}", s.apiJob)
	mux.HandleFunc("POST /api/submit", s.apiSubmit)

	// Cross-origin POSTs are refused before any handler runs: a page on
	// another site cannot make a visitor's browser start a run.
	cop := http.NewCrossOriginProtection()
	return s.headers(cop.Handler(mux))
}

// headers sets what every answer carries: no framing, no sniffing, and a
// policy that runs no script but our own (a run's logs and mails are
// hostile text).
func (s *server) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		// gonum's SVG sets style attributes, hence 'unsafe-inline' for
		// styles only.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "+
			"img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		next.ServeHTTP(w, r)
	})
}

func (s *server) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	data, err := assets.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.Error(w, "no such file", http.StatusNotFound)
		return
	}
	switch filepath.Ext(name) {
	case ".css":
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(data)
}

// link is an absolute URL when a base URL is configured, else a path.
func (s *server) link(path string) string { return s.o.BaseURL + path }

func (s *server) runPath(name string) string { return "/runs/" + url.PathEscape(name) + "/" }
