package service

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/patchbot/patchbot/store"
)

// A run travels from a worker to the coordinator through the store: the
// worker reads its run directory (readRun) and stores the files with the
// job's end; the coordinator writes them into its own runs directory
// (writeRun, from CollectRuns). Builds and guests wrote some of the files
// and neither end trusts them: they are bounded where they are read, and
// their names checked where they are written.

// The bounds of a run directory's files, before they are stored: the
// store's, which PostgreSQL enforces on a worker too.
const (
	maxRunFile  = store.MaxRunFile
	maxRunTotal = store.MaxRunTotal
	maxRunFiles = store.MaxRunFiles
)

// readRun reads the regular files of a run directory, by slash-separated
// relative path. Links and special files are skipped; a file over
// maxRunFile keeps its end (a log's last lines decide), marked as cut.
func readRun(dir string) ([]store.RunFile, error) {
	var files []store.RunFile
	total := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if len(files) >= maxRunFiles {
			return fmt.Errorf("the run directory holds more than %d files", maxRunFiles)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(rel) > store.MaxRunName {
			return nil // no such name is written out (runFileName)
		}
		if len(data) > maxRunFile {
			cut := len(data) - (maxRunFile - 64) // room for the mark
			data = append([]byte(fmt.Sprintf("[patchbot: the first %d bytes were cut]\n", cut)), data[cut:]...)
		}
		if total += len(data); total > maxRunTotal {
			return fmt.Errorf("the run directory holds more than %d MiB", maxRunTotal>>20)
		}
		files = append(files, store.RunFile{Name: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the run: %w", err)
	}
	return files, nil
}

// runFileName is what a stored run file's path elements may be: they
// come from a worker's run directory, written by builds and guests.
var runFileName = regexp.MustCompile(`^[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}$`)

// writeRun writes a run's files into runs/name, replacing what was there,
// and returns the names it left out.
func writeRun(runs, name string, files []store.RunFile) (skipped []string, err error) {
	tmp := filepath.Join(runs, ".incoming-"+name)
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	for _, f := range files {
		if !plainPath(f.Name) {
			skipped = append(skipped, fmt.Sprintf("%q", f.Name))
			continue
		}
		p := filepath.Join(tmp, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, f.Data, 0o600); err != nil {
			return nil, err
		}
	}
	dst := filepath.Join(runs, name)
	if _, err := os.Lstat(dst); err == nil {
		// An earlier attempt's run, written before a crash kept the job
		// from ending: the new one replaces it.
		old := filepath.Join(runs, ".old-"+name)
		os.RemoveAll(old)
		if err := os.Rename(dst, old); err != nil {
			return nil, err
		}
		defer os.RemoveAll(old)
	}
	return skipped, os.Rename(tmp, dst)
}

// plainPath says whether a stored run file's name is a clean relative
// path of plain names: no "..", no leading "/" or ".", nothing odd.
func plainPath(name string) bool {
	if path.Clean(name) != name || strings.HasPrefix(name, "/") {
		return false
	}
	for _, el := range strings.Split(name, "/") {
		if !runFileName.MatchString(el) {
			return false
		}
	}
	return true
}
