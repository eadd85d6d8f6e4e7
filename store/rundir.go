package store

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// A run travels from a worker to the coordinator through the store: the
// worker reads its run directory (ReadRunDir) and stores the files with
// the job's end (EndJob); the coordinator writes them into its own runs
// directory (WriteRunDir). Builds and guests wrote some of the files and
// neither end trusts them: they are bounded where they are read (the
// sizes of holder.go, which PostgreSQL enforces on a worker too), and
// their names checked where they are written.

// ReadRunDir reads the regular files of a run directory, by slash-separated
// relative path. Links and special files are skipped; a file over
// MaxRunFile keeps its end (a log's last lines decide), marked as cut.
func ReadRunDir(dir string) ([]RunFile, error) {
	var files []RunFile
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
		if len(files) >= MaxRunFiles {
			return fmt.Errorf("the run directory holds more than %d files", MaxRunFiles)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(rel) > MaxRunName {
			return nil // no such name is written out (runFileName)
		}
		if len(data) > MaxRunFile {
			cut := len(data) - (MaxRunFile - 64) // room for the mark
			data = append([]byte(fmt.Sprintf("[patchbot: the first %d bytes were cut]\n", cut)), data[cut:]...)
		}
		if total += len(data); total > MaxRunTotal {
			return fmt.Errorf("the run directory holds more than %d MiB", MaxRunTotal>>20)
		}
		files = append(files, RunFile{Name: filepath.ToSlash(rel), Data: data})
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

// WriteRunDir writes a run's files into runs/name, replacing what was there,
// and returns the names it left out.
func WriteRunDir(runs, name string, files []RunFile) (skipped []string, err error) {
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
