package intake

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// History is the record of jobs and their run directories (the store),
// where the runs of a series' earlier versions are found.
type History interface {
	Jobs(ctx context.Context) ([]*store.Job, error)
}

var _ History = (*store.Store)(nil)

// Earlier are the runs of the series' earlier versions that were tested
// to the end, as h records them, the latest version first and its latest
// run first: the report sets the measurement of the first that measured
// anything beside this one's (reports.Run.Record). A version is the
// series' when its key is the same (SeriesKey.Same).
func (r *Request) Earlier(ctx context.Context, h History) ([]reports.Earlier, error) {
	if h == nil || r.Series.Version < 2 {
		return nil, nil
	}
	jobs, err := h.Jobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the earlier versions' runs: %w", err)
	}
	type found struct {
		version int
		job     *store.Job
	}
	var all []found
	for _, j := range jobs {
		if j.State != store.JobDone || j.RunDir == "" {
			continue
		}
		var e Request
		if json.Unmarshal(j.Request, &e) != nil || !e.Series.Same(r.Series.SeriesKey) || e.Series.Version >= r.Series.Version {
			continue
		}
		all = append(all, found{e.Series.Version, j})
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].version != all[j].version {
			return all[i].version > all[j].version
		}
		return all[i].job.Updated.After(all[j].job.Updated)
	})
	out := make([]reports.Earlier, len(all))
	for i, f := range all {
		out[i] = reports.Earlier{Version: f.version, RunDir: f.job.RunDir}
	}
	return out, nil
}
