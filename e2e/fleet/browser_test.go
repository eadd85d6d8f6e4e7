package fleet

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/patchbot/patchbot/internal/testenv"
)

// workerRow is one row of the dashboard's workers table as Chromium shows
// it.
type workerRow struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Job   string `json:"job"`
	Stage string `json:"stage"`
	Lease string `json:"lease"`
	Seen  string `json:"seen"`
}

const readWorkers = `[...document.querySelectorAll('#workers tr.worker')].map(r => ({
	name: r.dataset.worker,
	state: r.querySelector('.state').textContent.trim(),
	job: (r.querySelector('.job a') || {textContent: ''}).textContent.trim(),
	stage: (r.querySelector('.job .stage') || {textContent: ''}).textContent.trim(),
	lease: r.querySelector('.lease').textContent.trim(),
	seen: r.querySelector('.seen').textContent.trim(),
}))`

var (
	leaseEnds = regexp.MustCompile(`^ends in \d+ s$`)
	secsAgo   = regexp.MustCompile(`^(\d+) s ago$`)
)

// checkDashboard opens the coordinator's home page in Chromium, again
// until the workers table shows the dead worker down, heard from a lease
// ago or more, and another worker busy: its job, the job's stage, its
// lease's end, heard from seconds ago.
func (w *world) checkDashboard(t *testing.T, dead string) {
	path := testenv.NeedsBrowser(t)
	if _, err := os.Stat("/usr/lib/chromium/chromium"); err == nil {
		path = "/usr/lib/chromium/chromium" // Debian's binary, not its wrapper script
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	defer cancel()
	ctx, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	// The first action on the tab starts the browser, for the tab's whole
	// life: not under one look's time limit.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	deadline := time.Now().Add(40 * time.Second)
	var rows []workerRow
	for {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := chromedp.Do(c, chromedp.Navigate("http://"+w.http+"/"), chromedp.WaitVisible(chromedp.CSS("#workers")))
		if err == nil {
			rows, err = chromedp.Run(c, chromedp.Evaluate[[]workerRow](readWorkers))
		}
		cancel()
		if err != nil {
			t.Fatalf("reading the dashboard in Chromium: %v", err)
		}
		if ok, why := w.dashboardShows(rows, dead); ok {
			t.Logf("the workers table in Chromium: %+v", rows)
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the workers table never showed %s down and another worker busy (%s): %+v", dead, why, rows)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (w *world) dashboardShows(rows []workerRow, dead string) (bool, string) {
	if len(rows) != len(w.workers) {
		return false, "not every worker has a row"
	}
	deadOK, busyOK := false, false
	for _, r := range rows {
		m := secsAgo.FindStringSubmatch(r.Seen)
		switch {
		case r.Name == dead:
			if r.State != "down" || m == nil {
				return false, dead + " is not down"
			}
			if n, _ := strconv.Atoi(m[1]); n < 4 {
				return false, dead + " was heard from less than a lease ago"
			}
			deadOK = true
		case r.State == "busy":
			if r.Job == "" || r.Stage == "" || !leaseEnds.MatchString(r.Lease) || m == nil {
				return false, r.Name + " is busy without its job, stage, lease or last word"
			}
			busyOK = true
		}
	}
	if !busyOK {
		return false, "no worker busy"
	}
	return deadOK, "the dead worker's row"
}
