package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/vmrunner"
)

// sourceFlags are the flags that name where mail comes from, shared by
// run, series and build. They make a mailbox.SourceConfig, and
// mailbox.Open opens it, as the daemon does with patchbot.yaml's sources.
type sourceFlags struct {
	mbox, maildir, imap, mailboxName, passwordFile, lore, msgid string
}

func (s *sourceFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&s.mbox, "mbox", "", "read mail from an mbox `file` (- for standard input)")
	fs.StringVar(&s.maildir, "maildir", "", "read mail from a Maildir `dir`")
	fs.StringVar(&s.imap, "imap", "", "read an IMAP mailbox: imap://user@host:port/MAILBOX (imaps:// for TLS)")
	fs.StringVar(&s.mailboxName, "mailbox", "", "IMAP mailbox `name` (default INBOX, or the URL's path)")
	fs.StringVar(&s.passwordFile, "password-file", "", "IMAP password `file` (mode 0600; never put a password in a URL)")
	fs.StringVar(&s.lore, "lore", "", "a public-inbox thread URL (https://host/list/msgid/), or a list URL with --msgid")
	fs.StringVar(&s.msgid, "msgid", "", "Message-ID of the series' thread, read from --lore LIST_URL (default https://lore.kernel.org/all/)")
}

// config checks the flags and makes the source they name.
func (s *sourceFlags) config() (mailbox.SourceConfig, error) {
	var c mailbox.SourceConfig
	n := 0
	if s.mbox != "" {
		c.Mbox, n = s.mbox, n+1
	}
	if s.maildir != "" {
		c.Maildir, n = s.maildir, n+1
	}
	if s.imap != "" {
		ic, err := parseIMAPURL(s.imap)
		if err != nil {
			return c, err
		}
		if s.mailboxName != "" {
			ic.Mailbox = s.mailboxName
		}
		ic.PasswordFile = s.passwordFile
		c.IMAP, n = ic, n+1
	} else if s.mailboxName != "" || s.passwordFile != "" {
		return c, usagef("--mailbox and --password-file go with --imap")
	}
	switch {
	case s.msgid != "":
		c.Lore, n = mailbox.ThreadURL(s.lore, s.msgid), n+1
	case s.lore != "":
		c.Lore, n = s.lore, n+1
	}
	switch n {
	case 0:
		return c, usagef("give one of --mbox, --maildir, --imap, --lore, --msgid")
	case 1:
		if c.Lore != "" {
			if _, err := mailbox.NewLore(c.Lore); err != nil {
				return c, usageError{err.Error()}
			}
		}
		return c, nil
	}
	return c, usagef("give only one of --mbox, --maildir, --imap, --lore, --msgid")
}

// parseIMAPURL reads imap://user@host:port/MAILBOX. A password in the URL
// is refused: a command line is visible to every user of the machine.
func parseIMAPURL(raw string) (*mailbox.IMAPConfig, error) {
	c, password, err := mailbox.ParseIMAPURL(raw)
	switch {
	case err != nil:
		return nil, usagef("--imap: %v", err)
	case password != "":
		return nil, usagef("--imap: a password in the URL would show in every process list; give it with --password-file")
	case c.User == "":
		return nil, usagef("--imap %q has no user (imap://user@host)", raw)
	}
	return c, nil
}

// seriesToTest reads every mail of the source and chooses the series to
// test as the daemon does (mailbox.SeriesIn): the newest complete version,
// or the one asked for. Notes about the choice go to stderr.
func seriesToTest(ctx context.Context, c mailbox.SourceConfig, version int, stderr io.Writer) (*mailbox.Series, error) {
	src, err := mailbox.Open(c, terminalLog(stderr))
	if err != nil {
		return nil, err
	}
	s, notes, err := mailbox.SeriesIn(ctx, src, version)
	for _, n := range notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	return s, err
}

// configFlags name patchbot.yaml and override its state directory.
type configFlags struct {
	path, state string
}

func (c *configFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "config", "", "patchbot.yaml `file` (default: the embedded defaults)")
	fs.StringVar(&c.state, "state", "", "state `dir`ectory: the database and the runs (default from the config: "+config.DefaultState()+")")
}

func (c *configFlags) load() (config.Config, error) {
	cfg, err := loadConfig(c.path)
	if err != nil {
		return cfg, err
	}
	if c.state != "" {
		cfg.StateDir = c.state
	}
	return cfg, nil
}

// loadConfig reads the config file a command was given. A config that
// cannot be read, decoded or validated is a usage error, as a bad flag
// is: one line (the YAML decoder's list of errors joined), exit status 2.
func loadConfig(path string) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, usageError{oneLine(err.Error())}
	}
	return cfg, nil
}

// oneLine joins a message of several lines into one: "a:\n  b\n  c" is
// "a: b; c".
func oneLine(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

// vmFlags choose the VM shape, over the config's.
type vmFlags struct {
	backend, boot, clock string
	cpus, mem            int
}

func (v *vmFlags) declare(fs *flag.FlagSet) {
	fs.StringVar(&v.backend, "backend", "", "VM backend: qemu or libvirt (default from the config: qemu)")
	fs.IntVar(&v.cpus, "cpus", 0, "vCPUs of each VM, 1..64 (default from the config: 2)")
	fs.IntVar(&v.mem, "mem", 0, "memory of each VM in MiB, at least 256 (default from the config: 1024)")
	fs.StringVar(&v.boot, "boot", "", "the VMs' boot path: legacy (bzImage on the pc machine) or pvh (the kernel's ELF on microvm) (default from the config: legacy)")
	fs.StringVar(&v.clock, "clock", "", "a TCG guest's time: icount (instruction-counted, at the profile's icount_shift, else 4 ns an instruction), icount:N (2^N ns an instruction) or host (TCG's real time) (default from the config: icount where this QEMU can)")
}

// apply checks the flags that were given and sets them over cfg.
func (v *vmFlags) apply(fs *flag.FlagSet, cfg *config.Config) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "backend":
			switch v.backend {
			case "qemu", "libvirt":
				cfg.VM.Backend = v.backend
			default:
				err = usagef("--backend %q: want qemu or libvirt", v.backend)
			}
		case "cpus":
			if v.cpus < 1 || v.cpus > 64 {
				err = usagef("--cpus %d: want 1..64", v.cpus)
			}
			cfg.VM.CPUs = v.cpus
		case "mem":
			if v.mem < 256 {
				err = usagef("--mem %d: want at least 256 (MiB)", v.mem)
			}
			cfg.VM.MemMiB = v.mem
		case "clock":
			switch cerr := vmrunner.CheckClock(v.clock); {
			case v.clock == "":
				err = usagef("--clock: want %s, %s:N or %s", vmrunner.ClockICount, vmrunner.ClockICount, vmrunner.ClockHost)
			case cerr != nil:
				err = usagef("--clock: %v", cerr)
			default:
				cfg.VM.Clock = v.clock
			}
		case "boot":
			switch v.boot {
			case vmrunner.BootLegacy, vmrunner.BootPVH:
				cfg.VM.Boot = v.boot
			default:
				err = usagef("--boot %q: want %s or %s", v.boot, vmrunner.BootLegacy, vmrunner.BootPVH)
			}
		}
	})
	return err
}

// suitesFlag is "--suites a,b": suite names, each checked to exist.
type suitesFlag []string

func (s *suitesFlag) String() string { return strings.Join(*s, ",") }
func (s *suitesFlag) Set(v string) error {
	seen := map[string]bool{}
	*s = nil
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" && !seen[n] {
			seen[n] = true
			*s = append(*s, n)
		}
	}
	if len(*s) == 0 {
		return fmt.Errorf("no suite named")
	}
	return nil
}

// checkRuns is the one range for --runs.
func checkRuns(fs *flag.FlagSet, runs int) error {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "runs" })
	if set && (runs < 1 || runs > 100) {
		return usagef("--runs %d: want 1..100", runs)
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }
