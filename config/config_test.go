package config

import (
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "empty keeps defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.VM.Backend != "qemu" || c.Suites.Profile != "standard" || c.SMTP.Enabled {
				t.Errorf("defaults not kept: %+v", c)
			}
		}},
		{name: "unknown key", yaml: "vm:\n  backnd: qemu\n", wantErr: "field backnd not found"},
		{name: "bad backend", yaml: "vm:\n  backend: xen\n", wantErr: `vm.backend "xen"`},
		{name: "two kinds in one source", yaml: "sources:\n- mbox: a\n  maildir: b\n", wantErr: "exactly one of"},
		{name: "send without addr", yaml: "smtp:\n  enabled: true\n", wantErr: "smtp.addr is empty"},
		{name: "limits and trusted servers", yaml: "commands:\n  authserv_ids: [smtp.subspace.kernel.org]\nlimits:\n  max_recipients: 10\n  opt_out: [a@x.org]\n",
			check: func(t *testing.T, c Config) {
				if c.Limits.MaxRecipients != 10 || c.Limits.PerThreadPerDay != 10 || c.Limits.PerHour != 30 ||
					len(c.Commands.AuthservIDs) != 1 || strings.Join(c.Limits.OptOutAddrs(), " ") != "a@x.org" {
					t.Errorf("limits = %+v, commands = %+v", c.Limits, c.Commands)
				}
			}},
		{name: "recipient cap out of range", yaml: "limits:\n  max_recipients: 0\n", wantErr: "limits.max_recipients 0"},
		{name: "opt-out not an address", yaml: "limits:\n  opt_out: [\"not an address\"]\n", wantErr: "limits.opt_out"},
		{name: "no per-sender limit", yaml: "commands:\n  per_sender_per_hour: 0\n", wantErr: "per_sender_per_hour"},
		{name: "a list that is not a bare address", yaml: "sources:\n- mbox: a\n  list: \"Fsdevel <linux-fsdevel@vger.kernel.org>\"\n", wantErr: "want the list's bare address"},
		{name: "what a list hears", yaml: "sources:\n- {mbox: a, list: l@x.org, list_hears: everything}\n",
			check: func(t *testing.T, c Config) {
				if c.Sources[0].ListHears != "everything" {
					t.Errorf("sources = %+v", c.Sources)
				}
			}},
		{name: "what a list hears, misspelt", yaml: "sources:\n- {mbox: a, list: l@x.org, list_hears: all}\n", wantErr: `list_hears "all"`},
		{name: "what no list hears", yaml: "sources:\n- {mbox: a, list_hears: findings}\n", wantErr: "only a list's source"},
		{name: "a DNS server without a port", yaml: "dkim:\n  dns: 127.0.0.1\n", wantErr: "dkim.dns"},
		{name: "unverified budget negative", yaml: "limits:\n  unverified_per_hour: -1\n", wantErr: "unverified_per_hour"},
		{name: "a list source and DKIM", yaml: "sources:\n- {name: l, mbox: a, list: linux-fsdevel@vger.kernel.org}\ndkim: {dns: \"127.0.0.1:5353\"}\n",
			check: func(t *testing.T, c Config) {
				if !c.Sources[0].ListMail() || c.DKIM.DNS != "127.0.0.1:5353" || c.Limits.UnverifiedPerHour != 10 {
					t.Errorf("sources = %+v, dkim = %+v, limits %+v", c.Sources, c.DKIM, c.Limits)
				}
			}},
		{name: "fleet on PostgreSQL", yaml: "database: postgres://patchbot@db.example.org/patchbot\nfleet: {local_worker: false, lease: 1m, require_kvm: true}\n",
			check: func(t *testing.T, c Config) {
				if c.Database == "" || c.Fleet.LocalWorker || c.Fleet.Lease != time.Minute || !c.Fleet.RequireKVM || c.Fleet.Poll != 5*time.Second {
					t.Errorf("fleet = %+v, database %q", c.Fleet, c.Database)
				}
			}},
		{name: "single host by default", yaml: "", check: func(t *testing.T, c Config) {
			if c.Database != "" || !c.Fleet.LocalWorker || c.Fleet.Lease != 2*time.Minute {
				t.Errorf("fleet = %+v, database %q", c.Fleet, c.Database)
			}
		}},
		{name: "password in the database URL", yaml: "database: postgres://patchbot:secret@db/patchbot\n", wantErr: "database_password_file"},
		{name: "password parameter", yaml: "database: postgres://patchbot@db/patchbot?password=secret\n", wantErr: "database_password_file"},
		{name: "not a postgres URL", yaml: "database: mysql://db/patchbot\n", wantErr: "want a postgres://"},
		{name: "password file without a database", yaml: "database_password_file: /etc/pw\n", wantErr: "database is empty"},
		{name: "lease too short", yaml: "fleet: {lease: 100ms}\n", wantErr: "fleet.lease 100ms"},
		{name: "poll longer than the lease", yaml: "fleet: {lease: 10s, poll: 1m}\n", wantErr: "fleet.poll 1m0s"},
		{name: "imap source", yaml: "sources:\n- name: fsdevel\n  imap: {addr: 127.0.0.1:1143, user: bot, mailbox: INBOX}\n  poll: 30s\n",
			check: func(t *testing.T, c Config) {
				if len(c.Sources) != 1 || c.Sources[0].IMAP.Mailbox != "INBOX" || c.Sources[0].Poll.Seconds() != 30 {
					t.Errorf("sources = %+v", c.Sources)
				}
			}},
		// A key the source's kind would ignore is refused at start.
		{name: "since on an imap source", yaml: "sources:\n- imap: {addr: 127.0.0.1:1143, user: bot}\n  since: now\n", wantErr: "since: only a lore list"},
		{name: "mirror on an mbox", yaml: "sources:\n- mbox: /tmp/x.mbox\n  mirror: /tmp/m\n", wantErr: "mirror: only a lore list"},
		{name: "since on a lore thread", yaml: "sources:\n- lore: https://lore.kernel.org/all/abc@x/\n  since: now\n", wantErr: "a lore thread"},
		{name: "since not a time", yaml: "sources:\n- lore: https://lore.kernel.org/linux-fsdevel/\n  since: yesterday\n", wantErr: `since "yesterday"`},
		{name: "lore list", yaml: "sources:\n- lore: https://lore.kernel.org/linux-fsdevel/\n  since: 2026-12-01\n  mirror: /srv/lore/fsdevel\n  poll: 1m\n",
			check: func(t *testing.T, c Config) {
				if s := c.Sources[0]; s.Since != "2026-12-01" || s.Mirror != "/srv/lore/fsdevel" || s.Poll != time.Minute {
					t.Errorf("sources = %+v", c.Sources)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.StateDir = t.TempDir()
			err := Decode([]byte(tt.yaml), &c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestExampleConfigDecodes(t *testing.T) {
	c, err := Load("../patchbot.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != 3 || c.Sources[0].IMAP == nil || c.Sources[1].Lore == "" || c.HTTP == "" {
		t.Errorf("example config decoded as %+v", c)
	}
	// The IMAP folder and the lore archive are the list's; the inbox is not.
	if !c.Sources[0].ListMail() || !c.Sources[1].ListMail() || c.Sources[2].ListMail() ||
		c.Limits.UnverifiedPerSenderPerDay != 1 || c.DKIM.Timeout != 5*time.Second {
		t.Errorf("example config: sources %+v, limits %+v, dkim %+v", c.Sources, c.Limits, c.DKIM)
	}
}

// A database off this host reached without sslmode=verify-full is named
// in a warning; loopback, a socket and verify-full are not.
func TestUnverifiedTLS(t *testing.T) {
	for _, tc := range []struct {
		url  string
		warn bool
	}{
		{"", false},
		{"postgres://w@127.0.0.1:5432/patchbot", false},
		{"postgres://w@localhost/patchbot?sslmode=disable", false},
		{"postgres://w@db.example.org/patchbot", true},
		{"postgres://w@10.0.0.5/patchbot?sslmode=require", true},
		{"postgres://w@10.0.0.5/patchbot?sslmode=verify-ca&sslrootcert=/ca.pem", true},
		{"postgres://w@db.example.org/patchbot?sslmode=verify-full&sslrootcert=/ca.pem", false},
	} {
		if got := (&Config{Database: tc.url}).UnverifiedTLS(); (got != "") != tc.warn {
			t.Errorf("unverifiedTLS(%q) = %q, want a warning: %v", tc.url, got, tc.warn)
		}
	}
}

func TestDecodeTreesConfig(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, wantErr string
		check               func(t *testing.T, c Config)
	}{
		{name: "defaults: no tree, fetched every 6h when there are", check: func(t *testing.T, c Config) {
			if len(c.Trees.List) != 0 || c.Trees.FetchEvery != 6*time.Hour {
				t.Errorf("trees = %+v", c.Trees)
			}
		}},
		{name: "two trees", yaml: "trees:\n  fetch_every: 1h\n  list:\n  - {name: mainline, url: /srv/linux.git, branch: master}\n" +
			"  - {name: net-next, url: 'https://git.kernel.org/pub/scm/linux/kernel/git/netdev/net-next.git', branch: main, tags: [net-next]}\n",
			check: func(t *testing.T, c Config) {
				if len(c.Trees.List) != 2 || c.Trees.List[1].Tags[0] != "net-next" || c.Trees.FetchEvery != time.Hour {
					t.Errorf("trees = %+v", c.Trees)
				}
			}},
		{name: "unknown key", yaml: "trees:\n  list:\n  - {name: a, url: b, branch: c, brnach: d}\n", wantErr: "field brnach not found"},
		{name: "ext transport", yaml: "trees:\n  list:\n  - {name: a, url: 'ext::sh -c id', branch: master}\n", wantErr: "url"},
		{name: "the default's name", yaml: "trees:\n  list:\n  - {name: default, url: /x, branch: master}\n", wantErr: "kernel: base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.StateDir = t.TempDir()
			err := Decode([]byte(tc.yaml), &c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
	c, err := Load("../patchbot.example.yaml")
	if err != nil || len(c.Trees.List) != 3 {
		t.Errorf("example config: %v, trees %+v", err, c.Trees.List)
	}
}
