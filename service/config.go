// Package service sequences the stages (mailbox → images → suites/invm →
// bisect → reports → mailbox/outbox) into the jobs that patchbot runs: from
// the command line (`patchbot run`) and as a daemon (`patchbot watch`) that
// watches lists, answers email commands, and keeps its state in the store
// across restarts. Each stage owns its own steps, config and adapter; this
// package holds only their order (Pipeline.Execute), the job queue's
// policy and who may ask. The daemon is in files by concern: the loop
// (daemon.go), mail coming in (ingest.go), email commands (commands.go),
// answers and replies going out (replies.go) and what may be mailed to
// whom (limits.go); the fleet's workers in worker.go (the loop and a
// job's run), lease.go (holding the job), runfiles.go (the run's files,
// worker to coordinator) and fleet.go (what a host can run, collecting
// the runs).
package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/suites/invm"
)

// Config is patchbot.yaml: one file for every command (run, watch, reply,
// serve). It is decoded strictly: an unknown key is an error, so that a
// typo is not silently ignored. Defaults are set before decoding; Validate
// checks ranges. Each part is the config type of the stage it configures.
type Config struct {
	// StateDir holds the SQLite database (state.db, unless Database names
	// a server) and one directory per run (runs/NAME); it is created 0700.
	StateDir string `yaml:"state_dir"`
	// Database is where the state and the job queue live: empty for
	// state.db in StateDir (SQLite, nothing to install), or a PostgreSQL
	// URL (postgres://user@host/db) that the coordinator and every worker
	// of a fleet share. The URL holds no password: DatabasePasswordFile
	// (mode 0600) does.
	Database             string `yaml:"database"`
	DatabasePasswordFile string `yaml:"database_password_file"`
	// Fleet is how jobs are run: by a worker inside watch, or by workers
	// on other hosts (patchbot worker).
	Fleet FleetConfig `yaml:"fleet"`
	// Sources are the lists to watch.
	Sources []mailbox.SourceConfig `yaml:"sources"`
	// Paths: a series is tested only when it touches one of these prefixes.
	Paths  []string          `yaml:"paths"`
	Kernel images.TreeConfig `yaml:"kernel"`
	VM     invm.VMConfig     `yaml:"vm"`
	Suites SuitesConfig      `yaml:"suites"`
	// SMTP says how replies leave; sending is off by default (replies go
	// to the outbox and are printed).
	SMTP  sender.Config        `yaml:"smtp"`
	Reply reports.ReplyOptions `yaml:"reply"`
	// Publish copies each run's directory to a GitHub repository, and the
	// reply links it (unless the dashboard's BaseURL is set).
	Publish *publish.Config `yaml:"publish,omitempty"`
	// Commands controls who may ask for a run with "#patchbot test".
	Commands CommandsConfig `yaml:"commands"`
	// DKIM says where the signers' keys are looked up: every patch and
	// command mail is verified (mailbox.Verifier).
	DKIM mailbox.DKIMConfig `yaml:"dkim"`
	// Limits bound the mail patchbot sends, whoever asks (limits.go).
	Limits LimitsConfig `yaml:"limits"`
	// HTTP serves /healthz, /metrics and the dashboard; empty disables it.
	HTTP      string          `yaml:"http"`
	Dashboard DashboardConfig `yaml:"dashboard"`
	// IncompleteAfter is how long a series may wait for its missing parts
	// before patchbot answers that it could not test it, and why.
	IncompleteAfter time.Duration `yaml:"incomplete_after"`

	// Trees are the trees a series may be tested on besides the kernel:
	// base, fetched into one object store (see images.Kernels.Choose).
	Trees images.TreesConfig `yaml:"trees"`

	// DryRun, when set, builds and boots nothing: every job "builds" and
	// "measures" for the times given and replies with made-up numbers
	// that say so. It rehearses a fleet's setup (database, roles, TLS,
	// network, workers, mail) without build tools, kernels or VMs, and
	// is what the fleet's many-jobs tests run (docs/fleet.md).
	DryRun *DryRunConfig `yaml:"dry_run,omitempty"`
}

// DryRunConfig times a dry run's stages.
type DryRunConfig struct {
	Build time.Duration `yaml:"build"` // each kernel's "build"
	Round time.Duration `yaml:"round"` // each suite round, per kernel
}

// DashboardConfig is the `dashboard:` part of patchbot.yaml. The dashboard
// (package web) is served on the config's `http:` address beside /metrics
// (by `patchbot watch`) or by `patchbot serve`; the command wires it, so
// that service knows its settings and not its code.
type DashboardConfig struct {
	// BaseURL is the dashboard's public address; when set, every reply's
	// "results:" line links the run's page.
	BaseURL string `yaml:"base_url"`
	// TokenFile (mode 0600) holds the token the form to start a run asks
	// for; without it the form is off.
	TokenFile string `yaml:"token_file"`
	// LoreURL is where a Message-ID is looked up (default
	// https://lore.kernel.org/all/); LoreHosts the hosts a lore URL on the
	// form may name (default: LoreURL's host).
	LoreURL   string   `yaml:"lore_url"`
	LoreHosts []string `yaml:"lore_hosts"`
	// MaxUploadMiB caps an uploaded mbox (default 8).
	MaxUploadMiB int `yaml:"max_upload_mib"`
}

// FleetConfig shapes the queue between the coordinator (watch) and its
// workers.
type FleetConfig struct {
	// LocalWorker makes watch run a worker in its own process, as a
	// single host does (the default). Off, watch only coordinates: it
	// reads mail, queues jobs, collects results and sends replies, and
	// workers on the test hosts run the jobs (patchbot worker).
	LocalWorker bool `yaml:"local_worker"`
	// Lease is how long a worker holds a job without renewing it; it
	// renews every quarter of it. A worker killed mid-job loses the job
	// when it runs out, and another worker runs it.
	Lease time.Duration `yaml:"lease"`
	// Poll is how often an idle worker looks for a job, and the
	// coordinator for finished runs and leases that ran out.
	Poll time.Duration `yaml:"poll"`
	// RequireKVM makes every test job wait for a worker with KVM, so that
	// absolute times are not TCG's.
	RequireKVM bool `yaml:"require_kvm"`
}

// SuitesConfig is how much a job measures by default.
type SuitesConfig struct {
	Profile string `yaml:"profile"`
	// Runs per kernel, interleaved: 0 runs as many as the evidence needs
	// (the sequential rule: 3 to 10 a side, stopping when every primary
	// metric is settled), N runs exactly N.
	Runs int `yaml:"runs"`
}

// CommandsConfig controls email commands.
type CommandsConfig struct {
	// AllowAuthor lets a series' author ask for its test; Allow lists the
	// other addresses (or "@domain") that may. Either counts only for an
	// authenticated mail: see AuthservIDs.
	AllowAuthor bool     `yaml:"allow_author"`
	Allow       []string `yaml:"allow"`
	// AuthservIDs are the receiving servers whose Authentication-Results
	// fields patchbot reads (RFC 8601), e.g. smtp.subspace.kernel.org for
	// mail read from lore: only the topmost block of such fields, and only
	// to vouch for a signature in the mail whose key patchbot cannot get
	// itself (a key rotated since). A sender is verified by a valid DKIM
	// signature aligned with From: (checked by patchbot), such a vouched
	// one, or a source trusted as a whole (sources[].trusted).
	AuthservIDs []string `yaml:"authserv_ids"`
	// PerSenderPerHour is how many commands one sender may give an hour:
	// every command that made a job or a mail counts (help, refusals and
	// malformed commands too).
	PerSenderPerHour int `yaml:"per_sender_per_hour"`
	// AnswerRefused answers a refused command with the reason, at most
	// once per sender an hour; when false refused commands are ignored
	// silently.
	AnswerRefused bool `yaml:"answer_refused"`
}

// DefaultState is the default state directory: /var/lib/patchbot as root,
// else ~/.local/state/patchbot.
func DefaultState() string {
	if os.Geteuid() != 0 {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, ".local", "state", "patchbot")
		}
	}
	return "/var/lib/patchbot"
}

// DefaultConfig is the embedded default: QEMU, SQLite, outbox, nothing sent.
func DefaultConfig() Config {
	return Config{
		StateDir: DefaultState(),
		Paths:    []string{"fs/squashfs/", "fs/fuse/", "mm/readahead.c", "fs/locks.c"},
		VM:       invm.DefaultVM(),
		Trees:    images.DefaultTrees(),
		// Runs 0: the sequential rule decides, from 3 to 10 a side.
		Suites:          SuitesConfig{Profile: suites.DefaultProfile},
		Reply:           reports.ReplyOptions{From: "patchbot <patchbot@localhost>"},
		Commands:        CommandsConfig{AllowAuthor: true, PerSenderPerHour: 4, AnswerRefused: true},
		Limits:          DefaultLimits(),
		IncompleteAfter: 6 * time.Hour,
		Fleet:           FleetConfig{LocalWorker: true, Lease: 2 * time.Minute, Poll: 5 * time.Second},
	}
}

// LoadConfig reads a YAML config over the defaults; an empty path is the
// embedded defaults alone.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, cfg.Validate()
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("reading config: %w", err)
	}
	if err := DecodeConfig(data, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// DecodeConfig decodes YAML into cfg strictly and validates the result.
func DecodeConfig(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return cfg.Validate()
}

// Validate checks ranges and combinations.
func (c *Config) Validate() error {
	var errs []string
	if c.StateDir == "" {
		errs = append(errs, "state_dir is empty")
	}
	errs = append(errs, c.validateFleet()...)
	names := map[string]bool{}
	for i, s := range c.Sources {
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Sprintf("sources[%d]: %v", i, err))
		}
		name := SourceName(i, s)
		if names[name] {
			errs = append(errs, fmt.Sprintf("sources[%d]: two sources are named %q", i, name))
		}
		names[name] = true
	}
	if err := c.Trees.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if err := c.Kernel.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if err := c.VM.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Suites.Runs < 0 || c.Suites.Runs > 100 {
		errs = append(errs, fmt.Sprintf("suites.runs %d: want 0 (as the evidence needs) or 1..100", c.Suites.Runs))
	}
	if c.SMTP.Enabled && c.SMTP.Addr == "" {
		errs = append(errs, "smtp.enabled is on but smtp.addr is empty")
	}
	if c.IncompleteAfter <= 0 {
		errs = append(errs, "incomplete_after: want a positive duration")
	}
	if c.Dashboard.BaseURL != "" {
		if u, err := url.Parse(c.Dashboard.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Sprintf("dashboard.base_url %q: want an http(s) URL", c.Dashboard.BaseURL))
		}
	}
	if c.Dashboard.MaxUploadMiB < 0 {
		errs = append(errs, "dashboard.max_upload_mib: negative")
	}
	if err := c.DKIM.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Commands.PerSenderPerHour < 1 {
		errs = append(errs, "commands.per_sender_per_hour: want at least 1")
	}
	if d := c.DryRun; d != nil && (d.Build < 0 || d.Build > time.Hour || d.Round < 0 || d.Round > time.Hour) {
		errs = append(errs, "dry_run: build and round want 0..1h")
	}
	errs = append(errs, c.Limits.validate()...)
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: %s", strings.Join(errs, "; "))
	}
	return nil
}

// SourceName is the name a source's stored cursor is kept under.
func SourceName(i int, s mailbox.SourceConfig) string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("source-%d", i)
}

// validateFleet checks the database URL and the fleet's timings.
func (c *Config) validateFleet() []string {
	var errs []string
	if c.Database != "" {
		u, err := url.Parse(c.Database)
		switch {
		case err != nil || !store.IsPostgres(c.Database) || u.Host == "":
			errs = append(errs, "database: want a postgres://user@host/db URL (or nothing, for SQLite in state_dir)")
		case hasPassword(u):
			errs = append(errs, "database: the URL holds a password; put it in database_password_file (mode 0600)")
		}
	} else if c.DatabasePasswordFile != "" {
		errs = append(errs, "database_password_file is set but database is empty")
	}
	if c.Fleet.Lease < time.Second {
		errs = append(errs, fmt.Sprintf("fleet.lease %s: want at least 1s", c.Fleet.Lease))
	}
	if c.Fleet.Poll < 100*time.Millisecond || c.Fleet.Poll > c.Fleet.Lease {
		errs = append(errs, fmt.Sprintf("fleet.poll %s: want 100ms..fleet.lease", c.Fleet.Poll))
	}
	return errs
}

// hasPassword says whether a PostgreSQL URL carries a password, in its
// user part or as a parameter.
func hasPassword(u *url.URL) bool {
	if _, ok := u.User.Password(); ok {
		return true
	}
	for k := range u.Query() {
		if strings.EqualFold(k, "password") {
			return true
		}
	}
	return false
}
