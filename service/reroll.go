package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"

	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// History is the record of jobs and their run directories (the store),
// where the runs of a series' earlier versions are found.
type History interface {
	Jobs(ctx context.Context) ([]*store.Job, error)
}

var _ History = (*store.Store)(nil)

// earlier are the runs of the series' earlier versions that were tested
// to the end, the latest version first and its latest run first: the
// report sets the measurement of the first that measured anything beside
// this one's (reports.Run.Record). A failure to read the history leaves
// the reply without it (and is said on progress, if given).
func earlier(ctx context.Context, h History, req *intake.Request, progress io.Writer) []reports.Earlier {
	if h == nil || req.Series.Version < 2 {
		return nil
	}
	jobs, err := h.Jobs(ctx)
	if err != nil {
		if progress != nil {
			fmt.Fprintf(progress, "reroll: reading the jobs: %v\n", err)
		}
		return nil
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
		var r intake.Request
		if json.Unmarshal(j.Request, &r) != nil || !r.Series.Same(req.Series.SeriesKey) || r.Series.Version >= req.Series.Version {
			continue
		}
		all = append(all, found{r.Series.Version, j})
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
	return out
}
