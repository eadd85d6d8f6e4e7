package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/outbox"
	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner"
)

// The parts a config composes, each the stage's own type made from the
// stage's own keys: the front desk, the state database, the sources, the
// outbox, and what this host can run.

// Desk is the front desk of the config: its keys, the sources by the name
// their cursors are kept under, how patchbot writes, and what a test needs
// of a worker beyond its suites (the VM shape for both kernels at once: an
// A/B pair always runs on one host, both VMs up, rounds interleaved; KVM
// when the fleet asks for it).
func (c Config) Desk() *intake.Desk {
	srcs := map[string]mailbox.SourceConfig{}
	for i, s := range c.Sources {
		srcs[SourceName(i, s)] = s
	}
	return &intake.Desk{Config: c.Config, Sources: srcs, Reply: c.Reply,
		Needs: store.Needs{KVM: c.Fleet.RequireKVM, CPUs: c.VM.CPUs, MemMiB: 2 * c.VM.MemMiB}}
}

// OpenStore opens the state database: the config's PostgreSQL server when
// it names one (with the password from its file), else state.db in the
// state directory. It creates the state directory 0700 either way: the
// runs and the secrets' copies in it are patchbot's alone.
func (c Config) OpenStore() (*store.Store, error) { return c.openStore(store.Open) }

// OpenWorkerStore is OpenStore for a worker: the schema is the
// coordinator's to migrate (store.OpenWorker).
func (c Config) OpenWorkerStore() (*store.Store, error) { return c.openStore(store.OpenWorker) }

func (c Config) openStore(open func(string) (*store.Store, error)) (*store.Store, error) {
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	if err := os.Chmod(c.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("closing the state directory to others: %w", err)
	}
	if c.Database == "" {
		return store.Open(filepath.Join(c.StateDir, "state.db"))
	}
	dsn := c.Database
	if c.DatabasePasswordFile != "" {
		pw, err := mailbox.ReadSecret(c.DatabasePasswordFile)
		if err != nil {
			return nil, fmt.Errorf("database password: %w", err)
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		u.User = url.UserPassword(u.User.Username(), pw)
		dsn = u.String()
	}
	return open(dsn)
}

// OpenSources opens every configured source to be watched, by the name
// its cursor is stored under; a lore list's git mirror defaults to
// STATE_DIR/lore/NAME.
func (c Config) OpenSources(log *slog.Logger) (map[string]mailbox.Source, error) {
	out := map[string]mailbox.Source{}
	for i, s := range c.Sources {
		name := SourceName(i, s)
		s.Follow = true
		if s.Mirror == "" && s.Lore != "" {
			if l, err := mailbox.NewLore(s.Lore); err == nil && l.MessageID == "" {
				s.Mirror = filepath.Join(c.StateDir, "lore", name)
			}
		}
		src, err := mailbox.Open(s, log)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", name, err)
		}
		out[name] = src
	}
	return out, nil
}

// Outbox is the outbox of st, within the config's limits, sending through
// the configured SMTP server when smtp.enabled is on (otherwise replies
// are only queued).
func (c Config) Outbox(st *store.Store, log *slog.Logger) (*outbox.Outbox, error) {
	o := &outbox.Outbox{Store: st, Log: log, MaxRecipients: c.Limits.MaxRecipients, OptOut: c.Limits.OptOutAddrs()}
	if !c.SMTP.Enabled {
		return o, nil
	}
	sc := c.SMTP
	if sc.From == "" {
		sc.From = mailbox.AddrOf(c.Reply.From)
	}
	tr, err := sender.NewSMTP(sc)
	if err != nil {
		return nil, err
	}
	o.Sender = tr
	return o, nil
}

// Caps says what this host can run with the config's VM shape: KVM when
// vmrunner finds it usable (else TCG), the online CPUs, the memory, the
// config's libvirt URIs, and the suites (only, if given, those named: a
// host whose kernels lack a suite's config leaves it out).
func (c Config) Caps(only []string) store.Caps {
	caps := store.Caps{Accel: "tcg", CPUs: runtime.NumCPU(), MemMiB: vmrunner.HostMemMiB(), LibvirtURIs: c.VM.URIs}
	if vmrunner.KVMUsable("") {
		caps.Accel = "kvm"
	}
	if len(only) > 0 {
		caps.Suites = append(caps.Suites, only...)
	} else if all, err := suites.All(); err == nil {
		for _, s := range all {
			caps.Suites = append(caps.Suites, s.Name)
		}
	}
	return caps
}
