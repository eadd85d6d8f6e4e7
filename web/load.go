package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// Caps on what a page reads from a run directory: the files are ours, but
// a page must stay fast and small whatever a run left there.
const (
	maxRunJSON     = 4 << 20
	maxResultsJSON = 64 << 20
	maxSeriesMbox  = 32 << 20
)

// runData is a run as loaded for a page: the stored run and results, and
// what the reply says of them.
type runData struct {
	run *reports.Run
	// strictErr is why reports.LoadRun refused the run, when it had to be
	// read leniently (a run.json written by a newer patchbot).
	strictErr error
	headline  string
	outcome   string
	cmp       *judge.Comparison
	cmpErr    error
}

// loadRun reads a run directory the way the reply does (reports.LoadRun);
// when that refuses a file, it reads it leniently instead and says so, so
// that a run written by another version of patchbot can still be looked
// at. The numbers come from judge.Compare either way.
func loadRun(dir string) (*runData, error) {
	rd := &runData{}
	run, err := reports.LoadRun(dir)
	if err != nil {
		rd.strictErr = err
		run, err = loadRunLenient(dir)
		if err != nil {
			return nil, err
		}
	}
	rd.run = run
	rd.headline, rd.cmp, rd.cmpErr = reports.RunVerdict(run)
	switch {
	case rd.cmpErr != nil:
		rd.headline, rd.outcome = "No comparison: "+rd.cmpErr.Error(), "unreadable"
	case run.Failure != nil:
		rd.outcome = "failed"
	default:
		rd.outcome = outcomeOf(rd.cmp)
	}
	return rd, nil
}

// outcomeOf classes a comparison by its significant rows, as the verdict
// does: which way each significant change went.
func outcomeOf(c *judge.Comparison) string {
	better, worse := 0, 0
	for _, r := range c.SignificantRows() {
		switch {
		case r.Better():
			better++
		case r.Patched.Mean != r.Base.Mean:
			worse++
		}
	}
	switch {
	case better > 0 && worse > 0:
		return "mixed"
	case better > 0:
		return "improvement"
	case worse > 0:
		return "regression"
	}
	return "no-change"
}

func loadRunLenient(dir string) (*reports.Run, error) {
	data, err := readCapped(filepath.Join(dir, reports.RunFile), maxRunJSON)
	if err != nil {
		return nil, err
	}
	var run reports.Run
	if err := json.Unmarshal(data, &run); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", reports.RunFile, err)
	}
	for _, f := range []struct {
		name string
		dst  *[]suites.Result
	}{{reports.BaseFile, &run.Base}, {reports.PatchedFile, &run.Patched}} {
		data, err := readCapped(filepath.Join(dir, f.name), maxResultsJSON)
		if errors.Is(err, os.ErrNotExist) && run.Failure != nil {
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(data) > 0 && data[0] == '{' {
			var r suites.Result
			err = json.Unmarshal(data, &r)
			*f.dst = []suites.Result{r}
		} else {
			err = json.Unmarshal(data, f.dst)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", f.name, err)
		}
	}
	return &run, nil
}

// readCapped reads a file of at most max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Base(path), max)
	}
	return data, nil
}
