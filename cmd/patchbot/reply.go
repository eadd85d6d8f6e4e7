package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/patchbot/patchbot/mailbox/sender"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/reports/publish"
	"github.com/patchbot/patchbot/store"
)

func init() {
	register(command{
		name:  "reply",
		usage: "RUN_DIR [--config FILE] [--outbox DB]: render a finished run's reply, queue it (and send it if the config says so)",
		run:   func(ctx context.Context, args []string) error { return runReply(ctx, args, os.Stdout) },
	})
}

// replyConfig is the part of the config file the reply command reads.
type replyConfig struct {
	Reply reports.ReplyOptions `yaml:"reply"`
	// Outbox is the SQLite store the reply is queued in.
	Outbox  string          `yaml:"outbox"`
	Sender  sender.Config   `yaml:"sender"`
	Publish *publish.Config `yaml:"publish"`
}

func defaultOutbox() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "patchbot", "patchbot.db")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "patchbot", "patchbot.db")
	}
	return "patchbot.db"
}

func loadReplyConfig(path string) (*replyConfig, error) {
	cfg := &replyConfig{Reply: reports.ReplyOptions{From: "patchbot <patchbot@localhost>"}}
	if path == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelt key is an error, not a silent default
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

func runReply(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("reply", flag.ContinueOnError)
	configPath := fs.String("config", "", "config file (YAML: reply, outbox, sender, publish)")
	outbox := fs.String("outbox", "", "outbox database (default: the config's, else "+defaultOutbox()+")")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one run directory; got %d arguments", len(pos))
	}
	dir := pos[0]
	cfg, err := loadReplyConfig(*configPath)
	if err != nil {
		return err
	}
	run, err := reports.LoadRun(dir)
	if err != nil {
		return err
	}

	if cfg.Publish != nil && run.ResultsURL == "" {
		p, err := publish.New(*cfg.Publish, nil)
		if err != nil {
			return err
		}
		name := filepath.Base(filepath.Clean(dir))
		url, err := p.Publish(ctx, dir, name, "run "+name+": "+run.Thread.Subject)
		if err != nil {
			return err
		}
		run.ResultsURL = url
	}

	reply, err := reports.Render(run, cfg.Reply)
	if err != nil {
		return err
	}
	raw, err := reply.Bytes()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, reports.ReplyFile), raw, 0o644); err != nil {
		return fmt.Errorf("keeping the reply in the run directory: %w", err)
	}
	w.Write(bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n")))

	dbPath := *outbox
	if dbPath == "" {
		dbPath = cfg.Outbox
	}
	if dbPath == "" {
		dbPath = defaultOutbox()
	}
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o755); err != nil {
		return fmt.Errorf("creating the outbox directory: %w", err)
	}
	st, err := store.Open(dbPath)
	if err != nil {
		return err
	}
	defer st.Close()
	rcpt, err := reply.Recipients()
	if err != nil {
		return err
	}
	envelopeFrom := cfg.Sender.From
	if envelopeFrom == "" {
		envelopeFrom = "patchbot@localhost"
	}
	_, added, err := st.Enqueue(ctx, store.OutboxMessage{MessageID: reply.Header.MessageID,
		From: envelopeFrom, Recipients: rcpt, Raw: raw})
	if err != nil {
		return err
	}
	if !added {
		fmt.Fprintf(os.Stderr, "patchbot reply: %s was already in the outbox %s\n", reply.Header.MessageID, dbPath)
	}
	if !cfg.Sender.Enabled {
		fmt.Fprintf(os.Stderr, "patchbot reply: queued in %s; sending is off (sender.enabled in the config)\n", dbPath)
		return nil
	}
	if cfg.Sender.From == "" {
		cfg.Sender.From = envelopeFrom
	}
	smtpc, err := sender.NewSMTP(cfg.Sender)
	if err != nil {
		return err
	}
	o := &sender.Outbox{Store: st, Transport: smtpc, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	_, err = o.Flush(ctx)
	return err
}
