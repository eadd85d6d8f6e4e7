package service

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
)

// History is the record of jobs and their run directories (the store),
// where the runs of a series' earlier versions are found.
type History interface {
	Jobs(ctx context.Context) ([]*store.Job, error)
}

var _ History = (*store.Store)(nil)

// sameSeries: the same author and title (case and spacing aside), as a
// reroll keeps them.
func sameSeries(a, b SeriesKey) bool {
	norm := func(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }
	return a.Author != "" && strings.EqualFold(a.Author, b.Author) && norm(a.Title) == norm(b.Title) &&
		(a.Identity == "" || b.Identity == "" || a.Identity == b.Identity) // runs from before identities match
}

// previous sets beside this run what the series' latest earlier version
// that was measured found on the same metric: the metric this version
// changed most significantly, else the one the earlier version did. A
// failure to read the history leaves the reply without it.
func (p *Pipeline) previous(ctx context.Context, req *Request, run *reports.Run) {
	if p.History == nil || req.Series.Version < 2 || run.Failure != nil {
		return
	}
	jobs, err := p.History.Jobs(ctx)
	if err != nil {
		p.note("reroll: reading the jobs: %v", err)
		return
	}
	type earlier struct {
		version int
		job     *store.Job
	}
	var found []earlier
	for _, j := range jobs {
		if j.State != store.JobDone || j.RunDir == "" {
			continue
		}
		var r Request
		if json.Unmarshal(j.Request, &r) != nil || !sameSeries(r.Series, req.Series) || r.Series.Version >= req.Series.Version {
			continue
		}
		found = append(found, earlier{r.Series.Version, j})
	}
	// The latest version first, and its latest run.
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].version != found[j].version {
			return found[i].version > found[j].version
		}
		return found[i].job.Updated.After(found[j].job.Updated)
	})
	cur, err := reports.Compare(run.Base, run.Patched, run.Options)
	if err != nil {
		return
	}
	for _, e := range found {
		prev, err := reports.LoadRun(e.job.RunDir)
		if err != nil || prev.Failure != nil || len(prev.Base) == 0 {
			continue
		}
		pc, err := reports.Compare(prev.Base, prev.Patched, prev.Options)
		if err != nil {
			continue
		}
		key, ok := keyChange(cur)
		if !ok {
			if key, ok = keyChange(pc); !ok {
				continue // neither version changed anything: nothing to set side by side
			}
		}
		var then, now *reports.Row
		for i := range pc.Rows {
			if sameRow(pc.Rows[i], key) {
				then = &pc.Rows[i]
			}
		}
		for i := range cur.Rows {
			if sameRow(cur.Rows[i], key) {
				now = &cur.Rows[i]
			}
		}
		if then == nil {
			continue
		}
		pv := &reports.Previous{Version: e.version, Tested: prev.Finished, Suite: key.Suite, Workload: key.Workload,
			Params: key.Params, Metric: key.Metric, Unit: key.Unit, Change: then.Change, Significant: changed(*then)}
		if now != nil {
			pv.Now, pv.NowSignificant, pv.NowMeasured = now.Change, changed(*now), true
		}
		run.Previous = pv
		return
	}
}

func (p *Pipeline) note(format string, args ...any) {
	if p.Progress != nil {
		fmt.Fprintf(p.Progress, format+"\n", args...)
	}
}
