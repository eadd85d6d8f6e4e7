package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patchbot/patchbot/images"
)

func init() {
	register(&command{
		name:       "trees",
		positional: true,
		summary:    "list the kernel trees series are tested on, their heads and last fetch",
		usage:      "trees [--config FILE] [--fetch] [--json] [TREE...]",
		desc: `Lists the trees of the config's trees: part (each a git URL and branch, and
the subject tags that name it) as the object store has them: the head commit,
its date and subject, when the tree was last fetched and the last fetch's
error. The default base (the kernel: part; Debian's linux-source-6.1 unless
set) is listed last: it is the one tree that needs no network.

Given TREE names, only those are listed (and fetched). --fetch fetches the
trees into the store first, as the daemon does every trees.fetch_every. A series is tested on
the base it asks for (base=, --base), its base-commit, the tree its subject
tag names, or else the newest of these trees the whole series applies to.

Exit status: 0 listed, 1 a fetch failed (the list is printed all the same),
2 usage error.`,
		example: `patchbot trees --config patchbot.yaml
patchbot trees --config patchbot.yaml --fetch next`,
		flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var conf configFlags
			conf.declare(fs)
			fetch := fs.Bool("fetch", false, "fetch the trees (the NAMEs, or every tree) before listing")
			asJSON := fs.Bool("json", false, "print JSON (schema 1)")
			return func(ctx context.Context, names []string) error {
				cfg, err := conf.load()
				if err != nil {
					return err
				}
				cache, err := images.CacheDir()
				if err != nil {
					return err
				}
				t := images.NewTrees(cfg.Trees, cache)
				for _, n := range names {
					if _, ok := t.Lookup(n); !ok {
						return usagef("no tree %q in the config (trees: %s)", n, strings.Join(treeNames(t), ", "))
					}
				}
				var fetchErr error
				if *fetch {
					t.Progress = stderr
					fetchErr = t.Fetch(ctx, names...)
					if ctx.Err() != nil {
						return ctx.Err()
					}
				}
				heads, err := t.Heads(ctx)
				if err != nil {
					return err
				}
				if len(names) == 0 {
					heads = append(heads, images.DefaultHead(ctx, cache, cfg.Kernel))
				}
				report := treesReport{Schema: schemaVersion, Store: t.Dir}
				for _, h := range heads {
					if len(names) > 0 && !containsName(names, h.Name) {
						continue
					}
					report.Trees = append(report.Trees, treeRow{Name: h.Name, URL: h.URL, Branch: h.Branch, Tags: h.Tags,
						Head: h.Commit, Title: h.Title, Date: h.Date, Fetched: h.Fetched, FetchError: h.FetchError})
				}
				if *asJSON {
					err = writeJSON(stdout, report)
				} else {
					writeTrees(stdout, report, time.Now())
				}
				if err != nil {
					return err
				}
				if fetchErr != nil {
					fmt.Fprintf(stderr, "patchbot trees: %v\n", fetchErr)
					return exitError{exitInfra}
				}
				return nil
			}
		},
	})
}

func containsName(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

func treeNames(t *images.Trees) []string {
	var out []string
	for _, tr := range t.Config.List {
		out = append(out, tr.Name)
	}
	if len(out) == 0 {
		return []string{"none configured"}
	}
	return out
}

// treesReport is what "patchbot trees --json" prints.
type treesReport struct {
	Schema int       `json:"schema"`
	Store  string    `json:"store"`
	Trees  []treeRow `json:"trees"`
}

type treeRow struct {
	Name       string    `json:"name"`
	URL        string    `json:"url"`
	Branch     string    `json:"branch,omitempty"`
	Tags       []string  `json:"tags,omitempty"`
	Head       string    `json:"head,omitempty"`
	Title      string    `json:"title,omitempty"`
	Date       time.Time `json:"date,omitzero"`
	Fetched    time.Time `json:"fetched,omitzero"`
	FetchError string    `json:"fetch_error,omitempty"`
}

func writeTrees(w io.Writer, r treesReport, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TREE\tBRANCH\tHEAD\tDATE\tLAST FETCH\tSUBJECT")
	for _, t := range r.Trees {
		head, date, fetched := "-", "-", "never"
		if t.Head != "" {
			head = t.Head[:min(12, len(t.Head))]
		}
		if !t.Date.IsZero() {
			date = t.Date.Format("2006-01-02")
		}
		switch {
		case t.Name == images.DefaultTree:
			fetched = "(offline)"
		case !t.Fetched.IsZero():
			fetched = t.Fetched.Local().Format("2006-01-02 15:04") + " (" + ago(now.Sub(t.Fetched)) + ")"
		}
		if t.FetchError != "" {
			fetched += ", then failed"
		}
		branch := t.Branch
		if branch == "" {
			branch = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, branch, head, date, fetched, t.Title)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range r.Trees {
		line := fmt.Sprintf("%s: %s", t.Name, t.URL)
		if len(t.Tags) > 0 {
			line += " (tags: " + strings.Join(t.Tags, ", ") + ")"
		}
		fmt.Fprintln(w, line)
		if t.FetchError != "" {
			fmt.Fprintf(w, "  last fetch failed: %s\n", t.FetchError)
		}
	}
	fmt.Fprintf(w, "\nobject store: %s\n", r.Store)
}

// ago is a duration as a person says it: "3m ago", "5h ago", "2d ago".
func ago(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}
