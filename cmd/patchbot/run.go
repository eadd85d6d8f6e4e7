package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/service"
	"github.com/patchbot/patchbot/store"
)

func init() {
	register(command{
		name:  "run",
		usage: "test one series now: build, boot, measure, and print the reply (--mbox, --maildir, --lore, --msgid)",
		run:   runRun,
	})
}

func runRun(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	mboxPath := fs.String("mbox", "", "read the series from an mbox `file`")
	maildir := fs.String("maildir", "", "read the series from a Maildir `dir`")
	imapURL := fs.String("imap", "", "read the series from an IMAP mailbox: imap://user:password@host:port")
	imapBox := fs.String("mailbox", "INBOX", "IMAP mailbox `name`")
	loreURL := fs.String("lore", "", "a public-inbox thread URL, or a list URL with --msgid")
	msgid := fs.String("msgid", "", "Message-ID of the series' thread (with --lore LIST_URL; default list https://lore.kernel.org/all/)")
	configPath := fs.String("config", "", "patchbot.yaml (default: the embedded defaults)")
	suiteList := fs.String("suites", "", "comma-separated suites (default: those the touched files select)")
	profile := fs.String("profile", "", "suite profile: quick or full (default from the config: quick)")
	runs := fs.Int("runs", 0, "runs per kernel, interleaved (default from the config: 5)")
	send := fs.Bool("send", false, "send the reply through the configured SMTP server")
	tree := fs.String("tree", "", "kernel git tree (default: Debian's linux-source-6.1, imported once)")
	base := fs.String("base", "", "base ref in --tree")
	backend := fs.String("backend", "", "VM backend: qemu or libvirt (default from the config: qemu)")
	stateDir := fs.String("state", "", "state directory (default from the config)")
	cpus := fs.Int("cpus", 0, "vCPUs of each VM (default from the config: 2)")
	mem := fs.Int("mem", 0, "memory of each VM in MiB (default from the config: 1024)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return exitError{2}
	}
	cfg := service.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = service.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	for _, o := range []struct {
		dst *string
		v   string
	}{{&cfg.Suites.Profile, *profile}, {&cfg.Kernel.Tree, *tree}, {&cfg.Kernel.Base, *base},
		{&cfg.VM.Backend, *backend}, {&cfg.StateDir, *stateDir}} {
		if o.v != "" {
			*o.dst = o.v
		}
	}
	for _, o := range []struct {
		dst *int
		v   int
	}{{&cfg.Suites.Runs, *runs}, {&cfg.VM.CPUs, *cpus}, {&cfg.VM.MemMiB, *mem}} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	if *send {
		cfg.SMTP.Enabled = true
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if *msgid != "" {
		list := *loreURL
		if list == "" {
			list = "https://lore.kernel.org/all/"
		}
		*loreURL = strings.TrimSuffix(list, "/") + "/" + strings.Trim(*msgid, "<>") + "/"
	}
	src, err := seriesSource(*mboxPath, *maildir, *imapURL, *imapBox, *loreURL)
	if err != nil {
		fs.Usage()
		return err
	}
	series, err := pickSeries(ctx, src)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "series: %s (v%d, %d patch(es), files %s)\n",
		series.Subject, series.Version, len(series.Patches), strings.Join(series.Files(), " "))

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p, err := service.NewPipeline(cfg, os.Stderr, log)
	if err != nil {
		return err
	}
	replyTo := series.Patches[0].MessageID
	if series.Cover != nil {
		replyTo = series.Cover.MessageID
	}
	req := service.NewRequest(series, cfg.Suites.Profile, cfg.Suites.Runs, replyTo)
	if *suiteList != "" {
		req.Suites = strings.Split(*suiteList, ",")
	}
	runDir := filepath.Join(cfg.StateDir, "runs", "run-"+time.Now().UTC().Format("20060102-150405"))
	start := time.Now()
	out, err := p.Execute(ctx, req, runDir)
	if err != nil {
		return fmt.Errorf("%w (the infrastructure failed, not the patch; run directory %s)", err, runDir)
	}
	fmt.Fprintf(os.Stderr, "== done in %s; run directory %s\n", time.Since(start).Round(time.Second), runDir)

	st, err := service.OpenStore(cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	rcpt, err := out.Reply.Recipients()
	if err != nil {
		return err
	}
	if _, _, err := st.Enqueue(ctx, store.OutboxMessage{MessageID: out.Reply.Header.MessageID,
		From: mailbox.AddrOf(cfg.Reply.From), Recipients: rcpt, Raw: out.Raw}); err != nil {
		return err
	}
	os.Stdout.Write(out.Raw)
	flush, err := service.NewFlush(cfg, st, log)
	if err != nil {
		return err
	}
	if flush == nil {
		fmt.Fprintln(os.Stderr, "(not sent: the reply is in the outbox; --send or smtp.enabled sends it)")
		return nil
	}
	return flush(ctx)
}

// pickSeries reads every mail of src and returns the newest complete
// series. An incomplete one is an error that says what is missing.
func pickSeries(ctx context.Context, src mailbox.Source) (*mailbox.Series, error) {
	var msgs []*mailbox.Message
	if _, err := src.Poll(ctx, "", func(m *mailbox.Message, _ string) error {
		msgs = append(msgs, m)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading mail: %w", err)
	}
	var best, incomplete *mailbox.Series
	for _, s := range mailbox.Assemble(msgs) {
		if len(s.Patches) == 0 {
			continue
		}
		if !s.Complete {
			incomplete = s
			continue
		}
		if best == nil || s.Date.After(best.Date) {
			best = s
		}
	}
	switch {
	case best != nil:
		return best, nil
	case incomplete != nil:
		return nil, fmt.Errorf("series %q is incomplete (missing %v): %s", incomplete.Subject, incomplete.Missing, incomplete.Reason)
	}
	return nil, errors.New("no patch series found in the mail")
}
