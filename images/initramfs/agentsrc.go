package initramfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/patchbot/patchbot/internal/buildinfo"
)

// The guest agent is built from a source tree at run time, not from the
// binary that asks for it. A patchbot built from a clean revision and run
// after that tree has moved on (an edit, a pull) would boot guests with an
// agent of other code than its own, and a measurement campaign spread over
// hours would mix agents without a trace. checkAgentSources refuses that.

// binaryRevision is the VCS revision this binary was built from, "" when
// the build recorded none (go test, go run, -buildvcs=false) or when the
// tree it was built from had uncommitted changes: then there is nothing
// to compare a tree with.
func binaryRevision() string {
	rev, modified := buildinfo.VCS()
	if modified {
		return ""
	}
	return rev
}

// checkAgentSources fails when the files the agent is compiled from in the
// tree at root (the agent's packages of this module: their non-test Go
// files and embedded files, and go.mod and go.sum) differ from those of
// revision rev. What cannot be compared (no git, root not a checkout,
// rev unknown to it) is not an error: the check only speaks when it knows.
func checkAgentSources(ctx context.Context, root, rev string) error {
	if rev == "" {
		return nil
	}
	paths, err := agentPathspecs(ctx, root)
	if paths == nil || err != nil {
		return err
	}
	// Tracked files that differ from rev (or are gone), and new ones.
	diff := exec.CommandContext(ctx, "git", append([]string{"diff", "--name-only", rev, "--"}, paths...)...)
	diff.Dir = root
	changed, err := diff.Output()
	if err != nil {
		return nil // not a checkout, or rev is not in it
	}
	others := exec.CommandContext(ctx, "git", append([]string{"ls-files", "--others", "--exclude-standard", "--"}, paths...)...)
	others.Dir = root
	added, err := others.Output()
	if err != nil {
		return nil
	}
	files := strings.Fields(string(changed) + string(added))
	if len(files) == 0 {
		return nil
	}
	short := rev
	if len(short) > 12 {
		short = short[:12]
	}
	if len(files) > 5 {
		files = append(files[:5], fmt.Sprintf("and %d more", len(files)-5))
	}
	return fmt.Errorf("initramfs: the guest agent's sources in %s are not those of %s, the revision this patchbot was built from (%s): "+
		"its guests would run an agent of other code; build patchbot again from this tree, or build it in a clean export of the revision to measure with",
		root, short, strings.Join(files, ", "))
}

// agentPathspecs names, relative to root, what the agent is compiled from
// as git pathspecs: each of its packages' directories' Go files without
// the tests (so that a file added or deleted there counts too), the files
// they embed, and the module's go.mod and go.sum.
func agentPathspecs(ctx context.Context, root string) ([]string, error) {
	// -e: a package that does not load (a broken test file is enough) is
	// listed with its error; the build that follows reports what matters.
	list := exec.CommandContext(ctx, "go", "list", "-e", "-deps", "-json=Dir,Module,EmbedFiles", "./cmd/patchbot-agent")
	list.Dir = root
	list.Env = append(list.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err := list.Output()
	if err != nil {
		return nil, nil // no go list here: nothing to compare
	}
	paths := []string{"go.mod", "go.sum"}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			Dir        string
			Module     *struct{ Main bool }
			EmbedFiles []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("initramfs: read go list's output: %w", err)
		}
		if p.Module == nil || !p.Module.Main {
			continue // the standard library, or a dependency go.sum pins
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		dir := ""
		if rel != "." {
			dir = filepath.ToSlash(rel) + "/"
		}
		// In glob magic a * does not cross a /: this directory only.
		paths = append(paths, ":(glob)"+dir+"*.go", ":(exclude,glob)"+dir+"*_test.go")
		for _, e := range p.EmbedFiles {
			paths = append(paths, ":(literal)"+dir+e)
		}
	}
	return paths, nil
}
