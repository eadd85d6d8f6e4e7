// Package service joins the stages (mailbox → images → vmrunner → suites →
// reports) into the jobs that patchbot runs: from the command line
// (`patchbot run`) and as a daemon (`patchbot watch`) that watches lists,
// answers email commands, and keeps its state in SQLite across restarts.
package service

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/reports"
)

// Config is the daemon's configuration (patchbot.yaml). It is decoded
// strictly: an unknown key is an error, so that a typo is not silently
// ignored. Defaults are set before decoding; Validate checks ranges.
type Config struct {
	// StateDir holds the SQLite database and one directory per run.
	StateDir string `yaml:"state_dir"`
	// Sources are the lists to watch.
	Sources []SourceConfig `yaml:"sources"`
	// Paths: a series is tested only when it touches one of these prefixes.
	Paths []string `yaml:"paths"`
	// Kernel names the tree and base; empty means Debian's linux-source-6.1.
	Kernel KernelConfig `yaml:"kernel"`
	VM     VMConfig     `yaml:"vm"`
	Suites SuitesConfig `yaml:"suites"`
	// SMTP says how replies leave; sending is off by default (replies go
	// to the outbox and are printed).
	SMTP  sender.Config        `yaml:"smtp"`
	Reply reports.ReplyOptions `yaml:"reply"`
	// Commands controls who may ask for a run with "#patchbot test".
	Commands CommandsConfig `yaml:"commands"`
	// HTTP serves /healthz and /metrics; empty disables it.
	HTTP string `yaml:"http"`
	// IncompleteAfter is how long a series may wait for its missing parts
	// before patchbot answers that it could not test it, and why.
	IncompleteAfter time.Duration `yaml:"incomplete_after"`
}

// SourceConfig is one watched source; exactly one kind is set.
type SourceConfig struct {
	Name    string        `yaml:"name"`
	IMAP    *IMAPConfig   `yaml:"imap,omitempty"`
	Lore    string        `yaml:"lore,omitempty"` // list URL, e.g. https://lore.kernel.org/linux-fsdevel/
	Mbox    string        `yaml:"mbox,omitempty"`
	Maildir string        `yaml:"maildir,omitempty"`
	Poll    time.Duration `yaml:"poll"`
}

// IMAPConfig names an IMAP mailbox.
type IMAPConfig struct {
	Addr     string `yaml:"addr"` // host:port
	TLS      bool   `yaml:"tls"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	Mailbox  string `yaml:"mailbox"`
}

// KernelConfig names the kernel tree and base ref.
type KernelConfig struct {
	Tree string `yaml:"tree"`
	Base string `yaml:"base"`
}

// VMConfig chooses the VM backend and shape.
type VMConfig struct {
	Backend string   `yaml:"backend"` // qemu or libvirt
	URIs    []string `yaml:"libvirt_uris"`
	CPUs    int      `yaml:"cpus"`
	MemMiB  int      `yaml:"mem_mib"`
	// Concurrency bounds the VMs running at once.
	Concurrency int `yaml:"concurrency"`
}

// SuitesConfig chooses how much to measure.
type SuitesConfig struct {
	Profile string `yaml:"profile"`
	Runs    int    `yaml:"runs"`
}

// CommandsConfig controls email commands.
type CommandsConfig struct {
	AllowAuthor bool     `yaml:"allow_author"`
	Allow       []string `yaml:"allow"`
	// PerSenderPerHour is how many commands one sender may give an hour.
	PerSenderPerHour int `yaml:"per_sender_per_hour"`
	// AnswerRefused answers a refused command with the reason; when false
	// refused commands are ignored silently.
	AnswerRefused bool `yaml:"answer_refused"`
}

// DefaultConfig is the embedded default: QEMU, SQLite, outbox, nothing sent.
func DefaultConfig() Config {
	state := "/var/lib/patchbot"
	if os.Geteuid() != 0 {
		if home, err := os.UserHomeDir(); err == nil {
			state = filepath.Join(home, ".local", "state", "patchbot")
		}
	}
	return Config{
		StateDir: state,
		Paths:    []string{"fs/squashfs/", "fs/fuse/", "mm/readahead.c", "fs/locks.c"},
		// Two vCPUs: on a 2-core host under TCG a 4-vCPU guest made each
		// cache-contention round 2-5x slower, and two CPUs already make
		// 64 threads queue for the cache. Five runs: with three a side,
		// even an 8.5 -> 0.95 change cannot pass Holm across a reply's
		// metrics.
		VM:              VMConfig{Backend: "qemu", CPUs: 2, MemMiB: 1024, Concurrency: 1},
		Suites:          SuitesConfig{Profile: "quick", Runs: 5},
		Reply:           reports.ReplyOptions{From: "patchbot <patchbot@localhost>"},
		Commands:        CommandsConfig{AllowAuthor: true, PerSenderPerHour: 4, AnswerRefused: true},
		IncompleteAfter: 6 * time.Hour,
	}
}

// LoadConfig reads a YAML config over the defaults.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
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
	if err := dec.Decode(cfg); err != nil && err.Error() != "EOF" {
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
	for i, s := range c.Sources {
		n := 0
		for _, set := range []bool{s.IMAP != nil, s.Lore != "", s.Mbox != "", s.Maildir != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, fmt.Sprintf("sources[%d]: exactly one of imap, lore, mbox, maildir must be set (got %d)", i, n))
		}
		if s.IMAP != nil && (s.IMAP.Addr == "" || s.IMAP.User == "") {
			errs = append(errs, fmt.Sprintf("sources[%d].imap: addr and user are required", i))
		}
		if s.Poll < 0 {
			errs = append(errs, fmt.Sprintf("sources[%d].poll: negative", i))
		}
	}
	switch c.VM.Backend {
	case "qemu", "libvirt", "fake":
	default:
		errs = append(errs, fmt.Sprintf("vm.backend %q: want qemu or libvirt", c.VM.Backend))
	}
	if c.VM.CPUs < 1 || c.VM.CPUs > 64 {
		errs = append(errs, fmt.Sprintf("vm.cpus %d: want 1..64", c.VM.CPUs))
	}
	if c.VM.MemMiB < 256 {
		errs = append(errs, fmt.Sprintf("vm.mem_mib %d: want at least 256", c.VM.MemMiB))
	}
	if c.VM.Concurrency < 1 {
		errs = append(errs, "vm.concurrency: want at least 1")
	}
	if c.Suites.Runs < 1 || c.Suites.Runs > 100 {
		errs = append(errs, fmt.Sprintf("suites.runs %d: want 1..100", c.Suites.Runs))
	}
	if c.SMTP.Enabled && c.SMTP.Addr == "" {
		errs = append(errs, "smtp.enabled is on but smtp.addr is empty")
	}
	if c.IncompleteAfter <= 0 {
		errs = append(errs, "incomplete_after: want a positive duration")
	}
	if c.Commands.PerSenderPerHour < 0 {
		errs = append(errs, "commands.per_sender_per_hour: negative")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid config: %s", strings.Join(errs, "; "))
	}
	return nil
}
