// Package publish commits a run directory to a GitHub results repository
// (one commit per run, under runs/NAME/), so that a reply can link to the
// raw samples, configs and logs behind it.
package publish

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-github/v60/github"
)

// Config says where results go.
type Config struct {
	Owner  string `yaml:"owner"`
	Repo   string `yaml:"repo"`
	Branch string `yaml:"branch"` // default "main"
	// TokenFile (mode 0600) holds a token that may write the repository;
	// Token is for programs that got it elsewhere (never in a config).
	Token     string `yaml:"-"`
	TokenFile string `yaml:"token_file"`
	// APIURL is the REST API root for GitHub Enterprise (or a test
	// server); default api.github.com.
	APIURL string `yaml:"api_url"`
	// MaxFileBytes skips larger files (GitHub refuses blobs over 100 MB);
	// default 50 MB.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

// Page says whether u is a page of the configured repository (on
// github.com, or on the host of api_url, where GitHub Enterprise serves
// its pages): a link that came from elsewhere (a worker's run) is given
// in a reply only then.
func (c *Config) Page(u string) bool {
	if c == nil || c.Owner == "" || c.Repo == "" {
		return false
	}
	host := "github.com"
	if api, err := url.Parse(c.APIURL); err == nil && c.APIURL != "" && api.Host != "" {
		host = api.Host
	}
	parsed, err := url.Parse(u)
	return err == nil && strings.HasPrefix(u, "https://"+host+"/"+c.Owner+"/"+c.Repo+"/") &&
		parsed.User == nil && !strings.Contains(parsed.Path, "..") && !strings.ContainsAny(u, " \t\r\n\\")
}

// Publisher writes run directories to the results repository.
type Publisher struct {
	cfg    Config
	client *github.Client
}

// New checks cfg and returns a Publisher. httpClient may be nil.
func New(cfg Config, httpClient *http.Client) (*Publisher, error) {
	if cfg.Owner == "" || cfg.Repo == "" {
		return nil, errors.New("publish: owner and repo are required")
	}
	if cfg.Branch == "" {
		cfg.Branch = "main"
	}
	if cfg.MaxFileBytes == 0 {
		cfg.MaxFileBytes = 50 << 20
	}
	token := cfg.Token
	if cfg.TokenFile != "" {
		b, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("publish: reading token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, errors.New("publish: no token (token or token_file)")
	}
	c := github.NewClient(httpClient).WithAuthToken(token)
	if cfg.APIURL != "" {
		u, err := url.Parse(strings.TrimSuffix(cfg.APIURL, "/") + "/")
		if err != nil {
			return nil, fmt.Errorf("publish: api_url: %w", err)
		}
		c.BaseURL = u
	}
	return &Publisher{cfg: cfg, client: c}, nil
}

// Publish commits every file of runDir under runs/name/ on the branch and
// returns the commit's web address. The first publish to an empty
// repository creates the branch. If another run moved the branch meanwhile,
// it starts again on top of that run, a few times.
func (p *Publisher) Publish(ctx context.Context, runDir, name, message string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return "", fmt.Errorf("publish: run name %q must be one path element", name)
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var url string
		var raced bool
		url, raced, err = p.publishOnce(ctx, runDir, name, message)
		if !raced {
			return url, err
		}
	}
	return "", err
}

// publishOnce makes the commit; raced reports that the branch moved under it.
func (p *Publisher) publishOnce(ctx context.Context, runDir, name, message string) (url string, raced bool, err error) {
	o, r, g := p.cfg.Owner, p.cfg.Repo, p.client.Git
	ref := "refs/heads/" + p.cfg.Branch

	var parent, baseTree string
	head, resp, err := g.GetRef(ctx, o, r, ref)
	switch {
	case err == nil:
		parent = head.GetObject().GetSHA()
		c, _, err := g.GetCommit(ctx, o, r, parent)
		if err != nil {
			return "", false, fmt.Errorf("publish: reading %s: %w", parent, err)
		}
		baseTree = c.GetTree().GetSHA()
	case resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusConflict):
		// No branch yet (409 is GitHub's answer for an empty repository).
	default:
		return "", false, fmt.Errorf("publish: reading branch %s of %s/%s: %w", p.cfg.Branch, o, r, err)
	}

	var entries []*github.TreeEntry
	err = filepath.WalkDir(runDir, func(file string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() || info.Size() > p.cfg.MaxFileBytes {
			return err // skip links, devices and huge files
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		blob, _, err := g.CreateBlob(ctx, o, r, &github.Blob{
			Content:  github.String(base64.StdEncoding.EncodeToString(data)),
			Encoding: github.String("base64"),
		})
		if err != nil {
			return fmt.Errorf("uploading %s: %w", file, err)
		}
		rel, _ := filepath.Rel(runDir, file)
		entries = append(entries, &github.TreeEntry{
			Path: github.String(path.Join("runs", name, filepath.ToSlash(rel))),
			Mode: github.String("100644"), Type: github.String("blob"), SHA: blob.SHA,
		})
		return nil
	})
	if err != nil {
		return "", false, fmt.Errorf("publish: %w", err)
	}
	if len(entries) == 0 {
		return "", false, fmt.Errorf("publish: %s holds no files", runDir)
	}
	tree, _, err := g.CreateTree(ctx, o, r, baseTree, entries)
	if err != nil {
		return "", false, fmt.Errorf("publish: creating tree: %w", err)
	}
	commit := &github.Commit{Message: github.String(message), Tree: &github.Tree{SHA: tree.SHA}}
	if parent != "" {
		commit.Parents = []*github.Commit{{SHA: github.String(parent)}}
	}
	created, _, err := g.CreateCommit(ctx, o, r, commit, nil)
	if err != nil {
		return "", false, fmt.Errorf("publish: creating commit: %w", err)
	}
	newRef := &github.Reference{Ref: github.String(ref), Object: &github.GitObject{SHA: created.SHA}}
	if parent == "" {
		_, resp, err = g.CreateRef(ctx, o, r, newRef)
	} else {
		// Not forced: if another run was published meanwhile, this fails
		// (422, not a fast forward) rather than dropping that run's commit.
		_, resp, err = g.UpdateRef(ctx, o, r, newRef, false)
	}
	if err != nil {
		raced = resp != nil && resp.StatusCode == http.StatusUnprocessableEntity
		return "", raced, fmt.Errorf("publish: moving %s to %s: %w", p.cfg.Branch, created.GetSHA(), err)
	}
	if u := created.GetHTMLURL(); u != "" {
		return u, false, nil
	}
	return fmt.Sprintf("https://github.com/%s/%s/commit/%s", o, r, created.GetSHA()), false, nil
}
