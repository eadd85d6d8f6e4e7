package web

import (
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

var screenshots = flag.String("screenshots", "", "save the browser test's screenshots in this `directory` (default: a temporary one)")

// newBrowser starts a headless chromium of its own, with a fresh profile.
func newBrowser(t *testing.T) context.Context {
	alloc, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(testenv.NeedsBrowser(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// step runs actions with a time limit.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates JavaScript in the page (awaiting a promise) into T.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %.60q: %v", js, err)
	}
	return v
}

// shoot saves a screenshot of the whole page.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// shootElement saves a screenshot of one element of the page.
func shootElement(t *testing.T, ctx context.Context, name, css string) {
	t.Helper()
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.Screenshot(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("screenshot of %s: %v", css, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// waitFor polls a JavaScript condition until it is true.
func waitFor(t *testing.T, ctx context.Context, what, js string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if eval[bool](t, ctx, js) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type browserRow struct {
	Group  string   `json:"group"`
	Metric string   `json:"metric"`
	Cells  []string `json:"cells"`
}

type browserFigure struct {
	ID      string  `json:"id"`
	Kind    string  `json:"kind"`
	SVG     bool    `json:"svg"`
	Width   float64 `json:"width"`
	Base    int     `json:"base"`
	Patched int     `json:"patched"`
	Model   int     `json:"model"`
	Cells   int     `json:"cells"`
}

type browserArtifact struct {
	Name        string `json:"name"`
	Status      int    `json:"status"`
	Type        string `json:"type"`
	Body        string `json:"body"`
	Disposition string `json:"disposition"`
}

// TestBrowser opens the dashboard in a real chromium: the home page with
// its live progress, the page of the seed run patchbot measured (table,
// plots, artifacts), its series, and the form with and without the token.
func TestBrowser(t *testing.T) {
	ctx := newBrowser(t)
	state := stateWith(t, seedRun, "readahead-warning", "does-not-apply")
	st := openStore(t, state)
	bg := context.Background()
	runningID, _, err := st.AddJob(bg, store.Job{Dedupe: "series:x:v2", Trigger: "list",
		Title: "[PATCH v2] fuse: wake one waiter", Request: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := st.Job(bg, runningID)
	j.State, j.Stage = store.JobRunning, "running"
	st.UpdateJob(bg, j)
	var done atomic.Int64
	done.Store(3)
	q := &fakeQueue{st: st}
	const token = "browser-token"
	h := newHandler(t, Options{StateDir: state, Store: st, Token: token, Queue: q,
		Progress: func(id int64) (Progress, bool) {
			return Progress{Stage: "run cache-contention", Done: int(done.Load()), Total: 10, ETA: 3 * time.Minute}, id == runningID
		},
		Sources: func() []SourceStatus {
			return []SourceStatus{{Name: "linux-fsdevel", Kind: "lore", LastMail: time.Now().Add(-3 * time.Minute)}}
		},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()

	seedDir := filepath.Join(state, "runs", seedRun)
	run, err := reports.LoadRun(seedDir)
	if err != nil {
		t.Fatal(err)
	}
	verdict, cmp, err := reports.RunVerdict(run)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("home", func(t *testing.T) {
		step(t, ctx, "opening the home page", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#recent")))
		rows := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("tr.result")].map(
			r => [r.dataset.run, r.querySelector(".verdict").textContent]))`)
		if len(rows) != 3 || rows[seedRun] != verdict {
			t.Errorf("recent results %v; want 3 with the seed run's verdict %q", rows, verdict)
		}
		if got := eval[string](t, ctx, `document.querySelector("tr.job.running .count").textContent`); strings.TrimSpace(got) != "3/10" {
			t.Errorf("running job's progress %q, want 3/10", got)
		}
		// The script follows the job: the bar moves without a reload.
		eval[bool](t, ctx, `window.__loaded = true`)
		done.Store(7)
		waitFor(t, ctx, "the progress to reach 7/10", `document.querySelector("tr.job.running .count").textContent.trim() == "7/10"`, 15*time.Second)
		if !eval[bool](t, ctx, `window.__loaded === true && document.querySelector("tr.job.running progress").value == 7`) {
			t.Error("the progress bar did not move in place")
		}
		if src := eval[string](t, ctx, `document.querySelector("#sources").textContent`); !strings.Contains(src, "linux-fsdevel") ||
			!strings.Contains(src, "3 min ago") {
			t.Errorf("sources: %q", src)
		}
		shoot(t, ctx, "home")
	})

	t.Run("run", func(t *testing.T) {
		step(t, ctx, "opening the run", chromedp.Navigate(srv.URL+"/runs/"+seedRun+"/"), chromedp.WaitVisible(chromedp.CSS("table.comparison")))
		if got := eval[string](t, ctx, `document.querySelector(".lead .verdict").textContent`); got != verdict {
			t.Errorf("verdict %q, want the reply's %q", got, verdict)
		}
		rows := eval[[]browserRow](t, ctx, `[...document.querySelectorAll("table.comparison tr.row")].map(tr => ({
			group: tr.dataset.group, metric: tr.dataset.metric,
			cells: [...tr.querySelectorAll("td")].slice(0, 6).map(td => td.textContent.trim())}))`)
		if len(rows) != len(cmp.Rows) {
			t.Fatalf("%d rows in the page's table, %d in the comparison", len(rows), len(cmp.Rows))
		}
		var shown []RowView
		for i, r := range rows {
			want := cmp.Rows[i]
			if r.Metric != want.Metric || !strings.HasPrefix(r.Group, want.Suite+" / "+want.Workload) {
				t.Errorf("row %d is %s %s, want %s/%s %s", i, r.Group, r.Metric, want.Suite, want.Workload, want.Metric)
			}
			shown = append(shown, RowView{Row: want, Cells: reports.Cells{Base: r.Cells[0], BaseSpread: r.Cells[1],
				Change: r.Cells[2], Mark: r.Cells[3], Patched: r.Cells[4], PatchedSpread: r.Cells[5]}})
		}
		checkTable(t, seedDir, shown)

		figs := eval[[]browserFigure](t, ctx, `[...document.querySelectorAll("figure.plot")].map(f => {
			const svg = f.querySelector("svg");
			return {id: f.id, kind: f.dataset.kind, svg: !!svg, width: svg ? svg.getBoundingClientRect().width : 0,
				base: f.querySelectorAll("svg .mark.base").length, patched: f.querySelectorAll("svg .mark.patched").length,
				model: f.querySelectorAll("svg .mark.model").length, cells: f.querySelectorAll("svg .cell").length};
		})`)
		// One mark per run: as many as the stored results have samples of
		// the metric on each kernel (a counter missing in a round has none).
		stored := map[string]*[2]int{}
		for side, results := range [][]suites.Result{run.Base, run.Patched} {
			for _, res := range results {
				for _, smp := range res.Samples {
					k := smp.Suite + "/" + smp.Workload + "/" + judge.CellName(smp.Params) + "/" + smp.Metric
					if stored[k] == nil {
						stored[k] = &[2]int{}
					}
					stored[k][side]++
				}
			}
		}
		keyOfRow := func(r judge.Row) string { return r.Suite + "/" + r.Workload + "/" + r.Cell() + "/" + r.Metric }
		strips := 0
		for _, f := range figs {
			if !f.SVG || f.Width < 100 {
				t.Errorf("figure %s: svg %v, %g px wide", f.ID, f.SVG, f.Width)
			}
			switch f.Kind {
			case "runs":
				strips++
				var i int
				if _, err := fmt.Sscanf(f.ID, "plot-m-%d", &i); err != nil || i < 1 || i > len(cmp.Rows) {
					t.Errorf("figure %s names no row", f.ID)
					continue
				}
				want := stored[keyOfRow(cmp.Rows[i-1])]
				if want == nil || f.Base != want[0] || f.Patched != want[1] {
					t.Errorf("figure %s: %d base and %d patched marks, the results have %v", f.ID, f.Base, f.Patched, want)
				}
			case "model":
				var b, p, n int
				for _, r := range cmp.Rows {
					if r.Metric == run.Model.MetricName() {
						w := stored[keyOfRow(r)]
						b, p, n = b+w[0], p+w[1], n+1
					}
				}
				if f.Base != b || f.Patched != p || f.Model != 2*n {
					t.Errorf("model figure: %d base, %d patched, %d predicted marks; want %d, %d, %d",
						f.Base, f.Patched, f.Model, b, p, 2*n)
				}
			}
		}
		if strips != len(cmp.Rows) {
			t.Errorf("%d per-metric figures, want one for each of the %d metrics", strips, len(cmp.Rows))
		}

		arts := eval[[]browserArtifact](t, ctx, `Promise.all([...document.querySelectorAll("tr.artifact")].map(async tr => {
			const r = await fetch(tr.querySelector("a").href);
			const d = await fetch(tr.querySelector("a.download").href);
			return {name: tr.dataset.name, status: r.status, type: r.headers.get("content-type"), body: await r.text(),
				disposition: d.headers.get("content-disposition")};
		}))`)
		var want []string
		filepath.WalkDir(seedDir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				rel, _ := filepath.Rel(seedDir, p)
				want = append(want, filepath.ToSlash(rel))
			}
			return nil
		})
		if len(arts) != len(want) {
			t.Errorf("%d artifacts listed, the run directory has %d files (%v)", len(arts), len(want), want)
		}
		for _, a := range arts {
			data, err := os.ReadFile(filepath.Join(seedDir, filepath.FromSlash(a.Name)))
			if err != nil {
				t.Errorf("artifact %s: not a file of the run: %v", a.Name, err)
				continue
			}
			if a.Status != 200 || a.Body != string(data) {
				t.Errorf("artifact %s: status %d, %d bytes, want the file's %d", a.Name, a.Status, len(a.Body), len(data))
			}
			if !strings.HasPrefix(a.Disposition, "attachment") {
				t.Errorf("artifact %s: download answered with Content-Disposition %q", a.Name, a.Disposition)
			}
		}
		for _, name := range []string{reports.RunFile, reports.BaseFile, reports.PatchedFile, reports.ReplyFile, "series.mbox"} {
			found := false
			for _, a := range arts {
				found = found || a.Name == name
			}
			if !found {
				t.Errorf("artifact %s is not listed", name)
			}
		}
		if cmds := eval[string](t, ctx, `document.querySelector("pre.commands").textContent`); !strings.Contains(cmds, run.Commands[0]) {
			t.Errorf("the reproduce commands %q lack %q", cmds, run.Commands[0])
		}
		shoot(t, ctx, "run")
		shootElement(t, ctx, "run-plots", "#plots")
		shootElement(t, ctx, "run-model", "#model")
	})

	t.Run("grid", func(t *testing.T) {
		step(t, ctx, "opening the readahead run", chromedp.Navigate(srv.URL+"/runs/readahead-warning/"),
			chromedp.WaitVisible(chromedp.CSS("figure.plot-grid")))
		if n := eval[int](t, ctx, `document.querySelectorAll("figure.plot-grid svg .cell").length`); n != 18 {
			t.Errorf("the readahead grid has %d cells, want 18 (6 buckets × 3 readers)", n)
		}
		shoot(t, ctx, "run-readahead")
		shootElement(t, ctx, "run-readahead-grid", "figure.plot-grid")
	})

	t.Run("series", func(t *testing.T) {
		// Wait for the seed run's own page (its model section) before
		// clicking: on a loaded machine the click could otherwise land on
		// the readahead run still shown from the step before, and open
		// that run's series.
		step(t, ctx, "opening the series", chromedp.Navigate(srv.URL+"/runs/"+seedRun+"/"), chromedp.WaitVisible(chromedp.CSS("#model")),
			chromedp.Click(chromedp.CSS(`a[href^="/series/"]`)), chromedp.WaitVisible(chromedp.CSS("#side-by-side")))
		if n := eval[int](t, ctx, `document.querySelectorAll("table.sbs tbody tr").length`); n != len(cmp.Rows) {
			t.Errorf("the series table has %d metrics, want %d", n, len(cmp.Rows))
		}
		shoot(t, ctx, "series")
	})

	t.Run("form", func(t *testing.T) {
		submit := func(tok string) {
			t.Helper()
			step(t, ctx, "filling the form", chromedp.Navigate(srv.URL+"/submit"), chromedp.WaitVisible(chromedp.CSS("form")),
				chromedp.SetValue(chromedp.CSS(`input[name="msgid"]`), "<20260724190556.1950693-1-usama.arif@linux.dev>"),
				chromedp.Click(chromedp.CSS(`input[value="cache-contention"]`)),
				chromedp.SetValue(chromedp.CSS(`input[name="token"]`), tok))
			eval[bool](t, ctx, `(window.__before = location.href, true)`)
			step(t, ctx, "sending the form", chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
			waitFor(t, ctx, "the answer", `window.__before === undefined && document.readyState === "complete"`, 15*time.Second)
		}
		shoot0 := func() {
			step(t, ctx, "opening the form", chromedp.Navigate(srv.URL+"/submit"), chromedp.WaitVisible(chromedp.CSS("form")))
			shoot(t, ctx, "form")
		}
		shoot0()

		submit("wrong-" + token)
		if msg := eval[string](t, ctx, `(document.querySelector(".error-box") || {}).textContent || ""`); msg != "Wrong token." {
			t.Errorf("with a wrong token the page says %q", msg)
		}
		if n := len(q.submissions()); n != 0 {
			t.Fatalf("a wrong token queued %d runs", n)
		}
		shoot(t, ctx, "form-refused")

		submit(token)
		loc := eval[string](t, ctx, `location.pathname`)
		subs := q.submissions()
		if len(subs) != 1 || loc != fmt.Sprintf("/jobs/%d", runningID+1) {
			t.Fatalf("with the token: at %s, %d runs queued", loc, len(subs))
		}
		if s := subs[0]; s.MessageID != "20260724190556.1950693-1-usama.arif@linux.dev" || strings.Join(s.Suites, ",") != "cache-contention" {
			t.Errorf("queued %+v", s)
		}
		if state := eval[string](t, ctx, `document.querySelector("td.state").textContent`); !strings.HasPrefix(state, "queued") {
			t.Errorf("the job page says %q", state)
		}
		shoot(t, ctx, "job")

		// An uploaded mbox reaches the queue byte for byte.
		mbox, _ := filepath.Abs("../testdata/mbox/squashfs-thundering-herd.mbox")
		step(t, ctx, "uploading an mbox", chromedp.Navigate(srv.URL+"/submit"), chromedp.WaitVisible(chromedp.CSS("form")),
			chromedp.SetUploadFiles(chromedp.CSS(`input[name="mbox"]`), []string{mbox}),
			chromedp.SetValue(chromedp.CSS(`input[name="token"]`), token))
		eval[bool](t, ctx, `(window.__before = location.href, true)`)
		step(t, ctx, "sending the mbox", chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
		waitFor(t, ctx, "the answer", `window.__before === undefined && document.readyState === "complete"`, 15*time.Second)
		data, _ := os.ReadFile(mbox)
		if subs := q.submissions(); len(subs) != 2 || string(subs[1].Mbox) != string(data) {
			t.Errorf("the uploaded mbox was not queued as sent (%d submissions)", len(subs))
		}
	})
}
