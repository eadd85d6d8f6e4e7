package web

import (
	"errors"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Artifact is one file of a run directory.
type Artifact struct {
	Name  string `json:"name"` // path inside the run directory, "/"-separated
	Size  int64  `json:"size"`
	URL   string `json:"url"`
	About string `json:"about,omitempty"`
}

// What the files of a run directory are, for the list of artifacts.
var artifactAbout = map[string]string{
	"run.json":          "the run: thread, commits, setup, failure, model",
	"base.json":         "results of the base kernel (every sample)",
	"patched.json":      "results of the patched kernel (every sample)",
	"reply.eml":         "the reply as mailed",
	"series.mbox":       "the series as applied with git am",
	"config":            "the kernel config of both kernels",
	"build-base.log":    "build log of the base kernel",
	"build-patched.log": "build log of the patched kernel",
	"git-am.log":        "the whole git am output",
}

const maxArtifacts = 1000

// artifactsOf lists the regular files of a run directory, two levels deep
// at most. Symbolic links are left out: nothing outside the directory is
// listed or served, whatever a run left in it.
func (s *server) artifactsOf(name, dir string) []Artifact {
	var out []Artifact
	root := os.DirFS(dir)
	fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= maxArtifacts {
			return fs.SkipDir
		}
		if d.IsDir() {
			if strings.Count(p, "/") >= 2 {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		about := artifactAbout[p]
		if about == "" && strings.HasPrefix(path.Base(p), "console") {
			about = "a VM's serial console"
		}
		out = append(out, Artifact{Name: p, Size: info.Size(), About: about,
			URL: s.link(s.runPath(name) + "files/" + escapePath(p))})
		return nil
	})
	// The files a reader wants first, then the rest by name.
	rank := func(a Artifact) int {
		for i, n := range []string{"reply.eml", "run.json", "base.json", "patched.json", "series.mbox", "git-am.log",
			"build-base.log", "build-patched.log", "config"} {
			if a.Name == n {
				return i
			}
		}
		return 100
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// cleanArtifact checks an artifact's path from a URL: "/"-separated
// elements of plain names, no "." or "..", no backslash or NUL, at most
// three deep. The path was unescaped by the router, so an encoded "../"
// arrives here as "../" and is refused.
func cleanArtifact(p string) (string, bool) {
	if p == "" || len(p) > 1024 || strings.ContainsAny(p, "\\\x00") {
		return "", false
	}
	parts := strings.Split(p, "/")
	if len(parts) > 3 {
		return "", false
	}
	for _, e := range parts {
		if e == "" || e == "." || e == ".." {
			return "", false
		}
	}
	return p, true
}

// artifact serves one file of a run directory. It is opened through an
// os.Root of the run directory, which refuses any path that leaves it
// (through "..", or a symbolic link); on top of that only a regular file
// that is not a link is served. Everything is served as plain text, JSON
// or bytes, never as HTML: a log is text a patch wrote.
func (s *server) artifact(w http.ResponseWriter, r *http.Request) {
	e := s.runs.lookup(r.PathValue("name"))
	if e == nil {
		httpError(w, r, http.StatusNotFound, "no such run")
		return
	}
	p, ok := cleanArtifact(r.PathValue("path"))
	if !ok {
		httpError(w, r, http.StatusBadRequest, "bad artifact name")
		return
	}
	root, err := os.OpenRoot(e.dir)
	if err != nil {
		httpError(w, r, http.StatusNotFound, "no such run")
		return
	}
	defer root.Close()
	name := filepath.FromSlash(p)
	li, err := root.Lstat(name)
	if err != nil {
		httpError(w, r, http.StatusNotFound, "no such artifact")
		return
	}
	if !li.Mode().IsRegular() {
		httpError(w, r, http.StatusForbidden, "not a regular file of the run directory")
		return
	}
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			httpError(w, r, http.StatusNotFound, "no such artifact")
		} else {
			httpError(w, r, http.StatusForbidden, "not a file of the run directory")
		}
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	// The file opened must be the one checked: a swap for a link between
	// Lstat and Open is refused.
	if err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, li) {
		httpError(w, r, http.StatusForbidden, "not a regular file of the run directory")
		return
	}
	h := w.Header()
	h.Set("Content-Type", artifactType(p))
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if r.URL.Query().Has("download") {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// artifactType is the type an artifact is served as: JSON as JSON, and
// everything else a run writes (logs, configs, mail) as plain text; a
// file that is not text is bytes.
func artifactType(p string) string {
	switch strings.ToLower(path.Ext(p)) {
	case ".json":
		return "application/json"
	case ".gz", ".tar", ".zst", ".xz", ".img", ".bin", ".squashfs":
		return "application/octet-stream"
	}
	return "text/plain; charset=utf-8"
}
