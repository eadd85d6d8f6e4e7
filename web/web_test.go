package web

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	htmltemplate "html/template"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/suites"
)

func init() { refreshEvery = 0 }

func TestRunURL(t *testing.T) {
	for _, c := range []struct{ base, name, want string }{
		{"https://bot.example.org", "job-12", "https://bot.example.org/runs/job-12/"},
		{"https://bot.example.org/patchbot/", "run-20261201-101500", "https://bot.example.org/patchbot/runs/run-20261201-101500/"},
		{"", "job-1", "/runs/job-1/"},
	} {
		if got := RunURL(c.base, c.name); got != c.want {
			t.Errorf("RunURL(%q, %q) = %q, want %q", c.base, c.name, got, c.want)
		}
	}
}

func TestNewChecksOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a state directory: no error")
	}
	if _, err := New(Options{StateDir: t.TempDir(), BaseURL: "ftp://x"}); err == nil {
		t.Error("New with an ftp base URL: no error")
	}
	// A state directory without runs yet is fine: patchbot serve before
	// the first run.
	h := newHandler(t, Options{StateDir: t.TempDir()})
	if code, body, _ := get(t, h, "/"); code != 200 || !strings.Contains(body, "No finished run yet") {
		t.Errorf("home of an empty state directory: %d %q", code, body)
	}
}

// Every way of naming something that is not there is a 404 (or 400 for a
// name that cannot be valid), never a 500 and never a file.
func TestUnknownNames(t *testing.T) {
	state := stateWith(t, "readahead-warning")
	st := openStore(t, state)
	os.WriteFile(filepath.Join(state, "secret.txt"), []byte("SECRET"), 0o600)
	os.Symlink("/etc", filepath.Join(state, "runs", "evil"))
	h := newHandler(t, Options{StateDir: state, Store: st})
	for _, c := range []struct {
		path string
		code int
	}{
		{"/runs/nope/", 404},
		{"/runs/nope/files/run.json", 404},
		{"/runs/nope/plots/m-1.svg", 404},
		{"/api/runs/nope", 404},
		{"/runs/evil/", 404}, // a symlinked run directory is not a run
		{"/runs/evil/files/passwd", 404},
		{"/runs/..%2Fsecret.txt/", 404},
		{"/runs/.hidden/", 404},
		{"/runs/readahead-warning/plots/m-999.svg", 404},
		{"/runs/readahead-warning/plots/grid-1", 404},
		{"/series/0000000000000000", 404},
		{"/series/not-a-key", 404},
		{"/api/series/0000000000000000", 404},
		{"/jobs/9999", 404},
		{"/jobs/abc", 404},
		{"/jobs/-1", 404},
		{"/api/jobs/9999", 404},
		{"/runs?page=0", 400},
		{"/runs?page=x", 400},
		{"/runs?page=99", 404},
		{"/static/nope.css", 404},
	} {
		code, body, hdr := get(t, h, c.path)
		if code != c.code {
			t.Errorf("GET %s = %d, want %d (%q)", c.path, code, c.code, body)
		}
		if strings.Contains(body, "SECRET") || strings.Contains(body, "root:") {
			t.Errorf("GET %s served a file from outside the run directories", c.path)
		}
		if strings.HasPrefix(c.path, "/api/") {
			var e struct{ Error string }
			if json.Unmarshal([]byte(body), &e) != nil || e.Error == "" || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
				t.Errorf("GET %s: error is not JSON: %q", c.path, body)
			}
		}
	}
}

// A run directory holds what a run left, and a patch's build wrote some of
// it: nothing it names may reach outside the directory.
func TestArtifactTraversal(t *testing.T) {
	state := stateWith(t, "readahead-warning")
	run := filepath.Join(state, "runs", "readahead-warning")
	os.WriteFile(filepath.Join(state, "secret.txt"), []byte("SECRET"), 0o600)
	os.MkdirAll(filepath.Join(run, "logs"), 0o755)
	os.WriteFile(filepath.Join(run, "logs", "console-base.log"), []byte("[    0.000000] Linux version 6.1\n"), 0o644)
	os.WriteFile(filepath.Join(run, "evil.html"), []byte("<script>alert(1)</script>"), 0o644)
	os.Symlink("../../secret.txt", filepath.Join(run, "link"))
	os.Symlink("/etc/passwd", filepath.Join(run, "abs"))
	os.Symlink("..", filepath.Join(run, "up"))
	os.Symlink("logs/console-base.log", filepath.Join(run, "inside-link"))
	if err := syscall.Mkfifo(filepath.Join(run, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, Options{StateDir: state})
	base := "/runs/readahead-warning/files/"
	for _, c := range []struct {
		path string
		code int
	}{
		{"run.json", 200},
		{"logs/console-base.log", 200},
		{"evil.html", 200},
		{"nothing", 404},
		{"..%2F..%2Fsecret.txt", 400},
		{"%2e%2e/%2e%2e/secret.txt", 400},
		{"%2e%2e%2f%2e%2e%2fsecret.txt", 400},
		{"logs/..%2F..%2F..%2Fsecret.txt", 400},
		{"./run.json", 307}, // the router cleans it, to run.json
		{"a%5Cb", 400},
		{"a%00b", 400},
		{"link", 403},
		{"abs", 403},
		{"inside-link", 403}, // links are not served, even to a file inside
		{"up/secret.txt", 404},
		{"up/up/secret.txt", 404},
		{"fifo", 403},
		{"logs", 403},
		{"a/b/c/d", 400},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", base+c.path, nil).WithContext(ctx)
		done := make(chan struct{})
		go func() { h.ServeHTTP(rec, req); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("GET %s hung", c.path)
		}
		cancel()
		body := rec.Body.String()
		if rec.Code != c.code {
			t.Errorf("GET %s = %d, want %d (%q)", c.path, rec.Code, c.code, body)
		}
		if strings.Contains(body, "SECRET") || strings.Contains(body, "root:") {
			t.Errorf("GET %s served a file from outside the run directory", c.path)
		}
	}
	// A cleaned "../" is redirected by the router, never served.
	code, body, _ := get(t, h, base+"../../secret.txt")
	if code == 200 || strings.Contains(body, "SECRET") {
		t.Errorf("GET files/../../secret.txt = %d %q", code, body)
	}

	// Types: JSON as JSON, the rest as plain text in a sandbox, so that
	// an HTML file a build wrote never runs in the dashboard's origin.
	for _, c := range []struct{ name, ctype string }{
		{"run.json", "application/json"}, {"evil.html", "text/plain; charset=utf-8"},
		{"logs/console-base.log", "text/plain; charset=utf-8"},
	} {
		_, body, hdr := get(t, h, base+c.name)
		if hdr.Get("Content-Type") != c.ctype || hdr.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(hdr.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s served with %v", c.name, hdr)
		}
		want, _ := os.ReadFile(filepath.Join(run, filepath.FromSlash(c.name)))
		if body != string(want) {
			t.Errorf("%s: body differs from the file", c.name)
		}
	}
	_, _, hdr := get(t, h, base+"run.json?download=1")
	if cd := hdr.Get("Content-Disposition"); cd != `attachment; filename=run.json` {
		t.Errorf("download: Content-Disposition %q", cd)
	}

	// The list of artifacts shows files, not links, fifos or directories.
	_, body, _ = get(t, h, "/api/runs/readahead-warning")
	var v RunView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range v.Artifacts {
		names = append(names, a.Name)
	}
	if got, want := strings.Join(names, " "), "run.json base.json patched.json evil.html logs/console-base.log"; got != want {
		t.Errorf("artifacts = %q, want %q", got, want)
	}
}

// formSession loads the form like a browser: the CSRF cookie and field.
func formSession(t *testing.T, h http.Handler) (*http.Cookie, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/submit", nil))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(rec.Body.String())
	cookies := rec.Result().Cookies()
	if m == nil || len(cookies) != 1 {
		t.Fatalf("the form has no CSRF field or cookie: %q", rec.Body.String())
	}
	return cookies[0], m[1]
}

type formPost struct {
	fields   map[string]string
	suites   []string
	mbox     []byte
	cookie   *http.Cookie
	header   map[string]string
	noCookie bool
}

func postForm(t *testing.T, h http.Handler, f formPost) *httptest.ResponseRecorder {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range f.fields {
		mw.WriteField(k, v)
	}
	for _, s := range f.suites {
		mw.WriteField("suite", s)
	}
	if f.mbox != nil {
		fw, _ := mw.CreateFormFile("mbox", "series.mbox")
		fw.Write(f.mbox)
	}
	mw.Close()
	req := httptest.NewRequest("POST", "/submit", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if f.cookie != nil && !f.noCookie {
		req.AddCookie(f.cookie)
	}
	for k, v := range f.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestSubmitForm(t *testing.T) {
	state := t.TempDir()
	st := openStore(t, state)
	q := &fakeQueue{st: st}
	const token = "s3cret-token"
	h := newHandler(t, Options{StateDir: state, Store: st, Token: token, Queue: q, MaxUpload: 64 << 10})
	seed, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
	if err != nil {
		t.Fatal(err)
	}
	cookie, csrf := formSession(t, h)
	other, _ := formSession(t, h)
	forged := "AAAA." + strconv.FormatInt(time.Now().Unix(), 10) + ".bm90IGEgbWFj"
	msgid := map[string]string{"csrf": csrf, "token": token, "msgid": "<20260724190556.1950693-1-usama.arif@linux.dev>"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		name   string
		post   formPost
		code   int
		queued bool
		says   string
	}{
		{"no CSRF cookie", formPost{fields: msgid, cookie: cookie, noCookie: true}, 403, false, "did not come from this page"},
		{"no CSRF field", formPost{fields: with(msgid, "csrf", ""), cookie: cookie}, 403, false, "did not come from this page"},
		{"another session's cookie", formPost{fields: msgid, cookie: other}, 403, false, "did not come from this page"},
		{"forged CSRF value", formPost{fields: with(msgid, "csrf", forged),
			cookie: &http.Cookie{Name: csrfCookie, Value: forged}}, 403, false, "did not come from this page"},
		{"cross-site", formPost{fields: msgid, cookie: cookie, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403, false, ""},
		{"other origin", formPost{fields: msgid, cookie: cookie, header: map[string]string{"Origin": "https://evil.example"}}, 403, false, ""},
		{"no token", formPost{fields: with(msgid, "token", ""), cookie: cookie}, 403, false, "Wrong token"},
		{"wrong token", formPost{fields: with(msgid, "token", "guess"), cookie: cookie}, 403, false, "Wrong token"},
		{"token with a suffix", formPost{fields: with(msgid, "token", token+"x"), cookie: cookie}, 403, false, "Wrong token"},
		{"nothing asked", formPost{fields: with(msgid, "msgid", ""), cookie: cookie}, 400, false, "exactly one"},
		{"two things asked", formPost{fields: with(msgid, "lore", "https://lore.kernel.org/all/x@y/"), cookie: cookie}, 400, false, "exactly one"},
		{"lore URL on another host", formPost{fields: with(msgid, "msgid", "", "lore", "http://10.0.0.1/admin/"), cookie: cookie}, 400, false, "must be on lore.kernel.org"},
		{"javascript URL", formPost{fields: with(msgid, "msgid", "", "lore", "javascript:alert(1)"), cookie: cookie}, 400, false, "http(s) URL"},
		{"Message-ID with a space", formPost{fields: with(msgid, "msgid", "a b@c"), cookie: cookie}, 400, false, "Message-ID"},
		{"unknown suite", formPost{fields: msgid, suites: []string{"rm -rf"}, cookie: cookie}, 400, false, "unknown suite"},
		{"unknown profile", formPost{fields: with(msgid, "profile", "huge"), cookie: cookie}, 400, false, "unknown profile"},
		{"not an mbox", formPost{fields: with(msgid, "msgid", ""), mbox: []byte("\x00\x01binary"), cookie: cookie}, 400, false, "not an mbox"},
		{"oversized mbox", formPost{fields: with(msgid, "msgid", ""), mbox: bytes.Repeat([]byte("x"), 200<<10), cookie: cookie}, 413, false, "larger than"},
		{"by Message-ID", formPost{fields: with(msgid, "submitter", "Maint Ainer"), suites: []string{"cache-contention"}, cookie: cookie}, 303, true, ""},
		{"by mbox", formPost{fields: with(msgid, "msgid", "", "profile", "quick"), mbox: seed, cookie: cookie}, 303, true, ""},
		{"by lore URL", formPost{fields: with(msgid, "msgid", "", "lore", "https://lore.kernel.org/all/x@y/"), cookie: cookie}, 303, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(q.submissions())
			rec := postForm(t, h, c.post)
			if rec.Code != c.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.code, rec.Body.String())
			}
			if c.says != "" && !strings.Contains(rec.Body.String(), c.says) {
				t.Errorf("the answer does not say %q: %s", c.says, rec.Body.String())
			}
			if queued := len(q.submissions()) > before; queued != c.queued {
				t.Fatalf("queued = %v, want %v", queued, c.queued)
			}
			if c.queued {
				loc := rec.Header().Get("Location")
				if !regexp.MustCompile(`^/jobs/[0-9]+$`).MatchString(loc) {
					t.Fatalf("redirect to %q, want /jobs/ID", loc)
				}
				if code, body, _ := get(t, h, loc); code != 200 || !strings.Contains(body, "queued") {
					t.Errorf("GET %s = %d %q", loc, code, body)
				}
			}
		})
	}
	subs := q.submissions()
	if len(subs) != 3 {
		t.Fatalf("%d submissions, want 3", len(subs))
	}
	if s := subs[0]; s.MessageID != "20260724190556.1950693-1-usama.arif@linux.dev" || s.Submitter != "Maint Ainer" ||
		strings.Join(s.Suites, ",") != "cache-contention" || s.Mbox != nil {
		t.Errorf("by Message-ID: queued %+v", s)
	}
	if s := subs[1]; !bytes.Equal(s.Mbox, seed) || s.Profile != "quick" || s.Submitter != "dashboard" {
		t.Errorf("by mbox: queued %d bytes, profile %q, submitter %q", len(s.Mbox), s.Profile, s.Submitter)
	}
	if s := subs[2]; s.LoreURL != "https://lore.kernel.org/all/x@y/" {
		t.Errorf("by lore URL: queued %+v", s)
	}

	// A queue that refuses what is asked is a 422 that says why.
	q.err = fmt.Errorf("no complete series in the thread: %w", ErrRefused)
	if rec := postForm(t, h, formPost{fields: msgid, cookie: cookie}); rec.Code != 422 ||
		!strings.Contains(rec.Body.String(), "no complete series") {
		t.Errorf("refused by the queue: %d %s", rec.Code, rec.Body.String())
	}
}

func TestSubmitOff(t *testing.T) {
	state := t.TempDir()
	st := openStore(t, state)
	for _, o := range []Options{
		{StateDir: state, Store: st, Queue: &fakeQueue{st: st}}, // no token
		{StateDir: state, Store: st, Token: "t"},                // no queue
	} {
		h := newHandler(t, o)
		code, body, _ := get(t, h, "/submit")
		if code != 200 || !strings.Contains(body, "is off") || strings.Contains(body, `name="token"`) {
			t.Errorf("GET /submit with the form off: %d %q", code, body)
		}
		rec := postForm(t, h, formPost{fields: map[string]string{"token": "t", "msgid": "a@b"}})
		if rec.Code != 403 {
			t.Errorf("POST /submit with the form off = %d", rec.Code)
		}
		req := httptest.NewRequest("POST", "/api/submit", strings.NewReader(`{"message_id":"a@b"}`))
		req.Header.Set("Authorization", "Bearer t")
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 403 {
			t.Errorf("POST /api/submit with the form off = %d", rec.Code)
		}
	}
}

func TestAPISubmit(t *testing.T) {
	state := t.TempDir()
	st := openStore(t, state)
	q := &fakeQueue{st: st}
	h := newHandler(t, Options{StateDir: state, Store: st, Token: "tok", Queue: q, MaxUpload: 4 << 10})
	for _, c := range []struct {
		name, auth, body string
		code             int
	}{
		{"no token", "", `{"message_id":"a@b"}`, 403},
		{"wrong token", "Bearer nope", `{"message_id":"a@b"}`, 403},
		{"basic auth", "Basic dG9rOg==", `{"message_id":"a@b"}`, 403},
		{"unknown field", "Bearer tok", `{"message_id":"a@b","admin":true}`, 400},
		{"not JSON", "Bearer tok", `message_id=a@b`, 400},
		{"oversized", "Bearer tok", `{"mbox":"` + strings.Repeat("x", 20<<10) + `"}`, 413},
		{"bad Message-ID", "Bearer tok", `{"message_id":"no-at-sign"}`, 400},
		{"accepted", "Bearer tok", `{"message_id":"a@b","suites":["locks"],"submitter":"ci"}`, 202},
	} {
		req := httptest.NewRequest("POST", "/api/submit", strings.NewReader(c.body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code {
			t.Errorf("%s: %d, want %d: %s", c.name, rec.Code, c.code, rec.Body.String())
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Errorf("%s: answer is not JSON: %s", c.name, rec.Body.String())
		}
		if c.code == 202 && (out["job_id"] != float64(1) || out["url"] != "/jobs/1") {
			t.Errorf("%s: answer %v", c.name, out)
		}
	}
	if subs := q.submissions(); len(subs) != 1 || subs[0].MessageID != "a@b" || subs[0].Submitter != "ci" {
		t.Errorf("queued %+v", subs)
	}
}

// parseNum reads a number as the table prints it ("691.6", "+86.1%").
func parseNum(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(s, "+"), "%"), 64)
	if err != nil {
		t.Fatalf("cell %q is not a number", s)
	}
	return v
}

// roundsTo says whether shown is v rounded to the digits shown.
func roundsTo(shown string, v float64) bool {
	s := strings.TrimSuffix(strings.TrimPrefix(shown, "+"), "%")
	got, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	unit := 1.0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, _ := strconv.Atoi(s[i+1:])
		mant := s[:i]
		if j := strings.IndexByte(mant, '.'); j >= 0 {
			exp -= len(mant) - j - 1
		}
		unit = math.Pow(10, float64(exp))
	} else if j := strings.IndexByte(s, '.'); j >= 0 {
		unit = math.Pow(10, -float64(len(s)-j-1))
	}
	return math.Abs(got-v) <= unit/2*1.0001
}

// checkTable checks the page's comparison against the stored results:
// each mean and %change computed here from the raw samples, and each row
// as the reply renders it now.
func checkTable(t *testing.T, dir string, rows []RowView) {
	t.Helper()
	run, err := reports.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Means from the raw samples, by row.
	sums := map[string]*[2][]float64{}
	for side, results := range [2][]reportsResult{toResults(run.Base), toResults(run.Patched)} {
		for _, s := range results {
			k := s.key
			if sums[k] == nil {
				sums[k] = &[2][]float64{}
			}
			sums[k][side] = append(sums[k][side], s.value)
		}
	}
	if len(rows) != len(sums) {
		t.Errorf("%d rows on the page, %d metrics in the results", len(rows), len(sums))
	}
	for _, r := range rows {
		v := sums[r.Suite+"/"+r.Workload+"/"+r.Cell()+"/"+r.Metric]
		if v == nil {
			t.Errorf("row %s %s: not in the results", r.Group, r.Metric)
			continue
		}
		mb, mp := mean(v[0]), mean(v[1])
		if !roundsTo(r.Cells.Base, mb) || !roundsTo(r.Cells.Patched, mp) {
			t.Errorf("row %s %s: base %q patched %q, the samples' means are %g and %g", r.Group, r.Metric,
				r.Cells.Base, r.Cells.Patched, mb, mp)
		}
		if mb != 0 && !roundsTo(r.Cells.Change, (mp-mb)/math.Abs(mb)*100) {
			t.Errorf("row %s %s: change %q, the samples say %.3f%%", r.Group, r.Metric, r.Cells.Change, (mp-mb)/math.Abs(mb)*100)
		}
	}
	// The reply, rendered now from the same run, has each row's line.
	reply, err := reports.Render(run, reports.ReplyOptions{From: "patchbot <patchbot@example.org>"})
	if err != nil {
		t.Fatal(err)
	}
	replyLines := map[string]bool{}
	for _, l := range strings.Split(reply.Body, "\n") {
		replyLines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, r := range rows {
		c := r.Cells
		numbers := strings.Join(strings.Fields(strings.Join([]string{c.Base, c.BaseSpread, c.Change, c.Mark, c.Patched,
			c.PatchedSpread}, " ")), " ")
		name := metricName2(r.Metric, r.Unit)
		// The reply drops a unit that would break the row, and puts a
		// name too long even alone on a line of its own below the numbers.
		if !replyLines[numbers+" "+name] && !replyLines[numbers+" "+r.Metric] && !(replyLines[numbers] && replyLines[r.Metric]) {
			t.Errorf("row %q %q is not a line of the reply", numbers, name)
		}
	}
}

type reportsResult struct {
	key   string
	value float64
}

func toResults(rs []suites.Result) []reportsResult {
	var out []reportsResult
	for _, r := range rs {
		for _, s := range r.Samples {
			row := judge.MetricID{Params: s.Params}
			out = append(out, reportsResult{key: s.Suite + "/" + s.Workload + "/" + row.Cell() + "/" + s.Metric, value: s.Value})
		}
	}
	return out
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// metricName2 is the metric as the reply's table names it.
func metricName2(metric, unit string) string {
	if unit == "" {
		return metric
	}
	return metric + " (" + unit + ")"
}

func TestRunPage(t *testing.T) {
	state := stateWith(t, seedRun, "readahead-warning", "does-not-apply")
	synthRun(t, state, "synth", "[PATCH] squashfs: fewer wake-ups", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 1)
	locksRun(t, state, "locks", time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC))
	h := newHandler(t, Options{StateDir: state})
	for _, name := range []string{seedRun, "readahead-warning", "synth", "locks"} {
		t.Run(name, func(t *testing.T) {
			code, body, _ := get(t, h, "/api/runs/"+name)
			if code != 200 {
				t.Fatalf("GET /api/runs/%s = %d %s", name, code, body)
			}
			var v RunView
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatal(err)
			}
			checkTable(t, filepath.Join(state, "runs", name), v.Table.Rows)
			run, _ := reports.LoadRun(filepath.Join(state, "runs", name))
			reply, err := reports.Render(run, reports.ReplyOptions{From: "patchbot <patchbot@example.org>"})
			if err != nil {
				t.Fatal(err)
			}
			if v.Table.Legend == "" || !strings.Contains(strings.Join(strings.Fields(reply.Body), " "), v.Table.Legend) {
				t.Errorf("the legend %q is not the reply's", v.Table.Legend)
			}
			want, _, _ := reports.RunVerdict(run)
			if v.Verdict != want {
				t.Errorf("verdict %q, the reply's %q", v.Verdict, want)
			}
			code, page, _ := get(t, h, "/runs/"+name+"/")
			if code != 200 {
				t.Fatalf("GET /runs/%s/ = %d", name, code)
			}
			if miss := contains2(page, escaped(want), "To reproduce", "Artifacts", `<svg role="img"`); miss != "" {
				t.Errorf("the page lacks %q", miss)
			}
			for _, p := range v.Plots {
				checkSVG(t, h, p)
			}
		})
	}
	// Who signed each patch, as the reply says it (b4 am's lines).
	_, seedBody, _ := get(t, h, "/api/runs/"+seedRun)
	var seed RunView
	json.Unmarshal([]byte(seedBody), &seed)
	if len(seed.Patches) != 1 || !seed.Patches[0].Verified || strings.Join(seed.Patches[0].Signed, "|") != "✓ Signed: DKIM/linux.dev" {
		t.Errorf("the seed's patches: %+v", seed.Patches)
	}
	if _, page, _ := get(t, h, "/runs/"+seedRun+"/"); !strings.Contains(page, `<span class="signed verified">✓ Signed: DKIM/linux.dev</span>`) {
		t.Error("the run page does not say who signed the patch")
	}
	// The readahead run: a grid, the new warning; the synthetic one: the
	// model beside the measurement; locks: the curve.
	_, body, _ := get(t, h, "/api/runs/readahead-warning")
	var ra RunView
	json.Unmarshal([]byte(body), &ra)
	if len(ra.Plots) != 1 || ra.Plots[0].Kind != "grid" || ra.Plots[0].Marks != 18 {
		t.Errorf("readahead plots: %+v", ra.Plots)
	}
	_, page, _ := get(t, h, "/runs/readahead-warning/")
	if !strings.Contains(page, "-Wunused-function") {
		t.Error("the readahead page does not show the new warning")
	}
	_, body, _ = get(t, h, "/api/runs/synth")
	var sy RunView
	json.Unmarshal([]byte(body), &sy)
	if sy.Model == nil || len(sy.Model.Lines) != 4 || sy.Model.Lines[0].Predicted != "9.6" || sy.Model.Lines[1].Predicted != "1" {
		t.Errorf("model lines: %+v", sy.Model)
	}
	if n := len(sy.Plots); n != 9 { // 8 metrics and the model
		t.Errorf("synthetic run: %d plots, want 9", n)
	}
	_, body, _ = get(t, h, "/api/runs/locks")
	var lk RunView
	json.Unmarshal([]byte(body), &lk)
	if len(lk.Plots) != 1 || lk.Plots[0].Kind != "curve" || lk.Plots[0].Marks != 32 {
		t.Errorf("locks plots: %+v", lk.Plots)
	}

	// A failed run: the failure and its evidence, no table.
	code, page, _ := get(t, h, "/runs/does-not-apply/")
	if code != 200 || !strings.Contains(page, "does not apply") || !strings.Contains(page, "What failed") ||
		strings.Contains(page, `class="comparison"`) {
		t.Errorf("failed run page: %d", code)
	}
}

// escaped is s as html/template writes it in text.
func escaped(s string) string { return htmltemplate.HTMLEscapeString(s) }

// checkSVG fetches a plot as a document, checks it is SVG and that it has
// one mark per run (or a cell per grid cell), as Marks says.
func checkSVG(t *testing.T, h http.Handler, p Plot) {
	t.Helper()
	u, _ := url.Parse(p.URL)
	code, body, hdr := get(t, h, u.Path)
	if code != 200 || hdr.Get("Content-Type") != "image/svg+xml" {
		t.Errorf("plot %s: %d %s", p.ID, code, hdr.Get("Content-Type"))
		return
	}
	counts := map[string]int{}
	dec := xml.NewDecoder(strings.NewReader(body))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Errorf("plot %s is not well-formed XML: %v", p.ID, err)
			return
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				if a.Name.Local == "class" {
					counts[a.Value]++
				}
			}
		}
	}
	if root != "svg" {
		t.Errorf("plot %s: root element %q", p.ID, root)
	}
	got := counts["mark base"] + counts["mark patched"]
	if p.Kind == "grid" {
		got = counts["cell"]
	}
	if got != p.Marks || got == 0 {
		t.Errorf("plot %s (%s): %d marks drawn, %d measured (%v)", p.ID, p.Kind, got, p.Marks, counts)
	}
}

func TestHomeQueueAndSources(t *testing.T) {
	state := stateWith(t, "readahead-warning")
	st := openStore(t, state)
	ctx := context.Background()
	add := func(title string, state store.JobState, notBefore time.Time, errText string) int64 {
		id, _, err := st.AddJob(ctx, store.Job{Dedupe: title, Trigger: "list", Title: title, Request: []byte("{}"), NotBefore: notBefore})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := st.Job(ctx, id)
		j.State, j.Error, j.NotBefore = state, errText, notBefore
		if state == store.JobRunning {
			j.Stage = "running"
		}
		st.UpdateJob(ctx, j)
		return id
	}
	running := add("[PATCH] running <script>", store.JobRunning, time.Now(), "")
	add("[PATCH] queued", store.JobQueued, time.Now().Add(-time.Minute), "")
	add("[PATCH] waiting", store.JobQueued, time.Now().Add(2*time.Hour), "qemu: cannot allocate memory")
	add("[PATCH] parked", store.JobParked, time.Now(), "parked: its worker died while running it 2 times")
	add("[PATCH] failed", store.JobFailed, time.Now(), "disk full")
	h := newHandler(t, Options{StateDir: state, Store: st,
		Progress: func(id int64) (Progress, bool) {
			return Progress{Stage: "run cache-contention", Done: 3, Total: 10, ETA: 4 * time.Minute}, id == running
		},
		Sources: func() []SourceStatus {
			return []SourceStatus{{Name: "fsdevel", Kind: "lore", LastMail: time.Now().Add(-5 * time.Minute)}}
		},
		Workers: func() []WorkerStatus {
			return []WorkerStatus{{Name: "kvm-7", Host: "lab7", State: "busy", JobID: running, Since: time.Now(),
				Stage: "apply and build patched", LeaseUntil: time.Now().Add(100 * time.Second),
				Seen: time.Now().Add(-20 * time.Second), Caps: "kvm, 32 CPUs, 64 GiB, suites: cache-contention"},
				{Name: "kvm-8", Host: "lab8", State: "down", Since: time.Now().Add(-3 * time.Minute)}}
		},
	})
	code, page, _ := get(t, h, "/")
	if code != 200 {
		t.Fatalf("home = %d", code)
	}
	if miss := contains2(page, "[PATCH] running &lt;script&gt;", "run cache-contention", `<progress max="10" value="3">`,
		"about 4 min left", "[PATCH] queued", "[PATCH] waiting", "runs again in 1 h 59 min", "cannot allocate memory",
		`<tr class="job parked">`, "died while running it 2 times", "a person must unpark it",
		"[PATCH] failed", "disk full", "fsdevel", "5 min ago", "squashfs: disable readahead",
		`<tr class="worker busy" data-worker="kvm-7"><td class="name">kvm-7</td><td>lab7</td>`, "kvm, 32 CPUs, 64 GiB",
		`<span class="stage">apply and build patched</span>`, ">ends in 1 min</time>", ">20 s ago</time>",
		`<tr class="worker down" data-worker="kvm-8"><td class="name">kvm-8</td>`); miss != "" {
		t.Errorf("home lacks %q", miss)
	}
	if strings.Contains(page, "<script>") && strings.Count(page, "<script") != 1 {
		t.Error("a job title was not escaped")
	}
	_, body, _ := get(t, h, "/api/home")
	var v HomeView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Running) != 1 || v.Running[0].Progress == nil || v.Running[0].Progress.Done != 3 ||
		len(v.Queued) != 1 || len(v.Waiting) != 1 || !v.Waiting[0].Waiting || len(v.Parked) != 1 ||
		v.Parked[0].State != "parked" || v.Parked[0].Waiting || len(v.Failed) != 1 || len(v.Workers) != 2 ||
		len(v.Recent) != 1 || v.Runs != 1 || len(v.Sources) != 1 {
		t.Errorf("/api/home = %s", body)
	}
	if code, body, _ := get(t, h, fmt.Sprintf("/api/jobs/%d", running)); code != 200 || !strings.Contains(body, `"total": 10`) {
		t.Errorf("/api/jobs/%d = %d %s", running, code, body)
	}

	// Without a Sources function, the store's cursors say when each
	// source last delivered mail.
	st.SaveMessage(ctx, "imap-inbox", "42", "m@x", "m@x", []byte("raw"))
	h = newHandler(t, Options{StateDir: state, Store: st})
	_, body, _ = get(t, h, "/api/home")
	json.Unmarshal([]byte(body), &v)
	if len(v.Sources) != 1 || v.Sources[0].Name != "imap-inbox" || time.Since(v.Sources[0].LastMail) > time.Minute {
		t.Errorf("sources from the store: %+v", v.Sources)
	}
}

func TestSeriesAcrossVersions(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	synthRun(t, state, "v1", "[PATCH] squashfs: fewer wake-ups", t0, 1)
	synthRun(t, state, "v2", "[PATCH v2] squashfs: fewer wake-ups", t0.Add(24*time.Hour), 2)
	synthRun(t, state, "v2-again", "[PATCH v2] squashfs: fewer wake-ups", t0.Add(25*time.Hour), 3)
	synthRun(t, state, "other", "[PATCH] fuse: something else", t0.Add(26*time.Hour), 4)
	h := newHandler(t, Options{StateDir: state})
	_, body, _ := get(t, h, "/api/runs/v2")
	var rv RunView
	json.Unmarshal([]byte(body), &rv)
	code, body, _ := get(t, h, "/api/series/"+rv.Series)
	if code != 200 {
		t.Fatalf("series = %d %s", code, body)
	}
	var v SeriesView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range v.Runs {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "v1 v2 v2-again" || len(v.Versions) != 2 || v.Versions[1].Version != 2 ||
		len(v.Versions[1].Runs) != 2 {
		t.Errorf("series runs %v, versions %+v", names, v.Versions)
	}
	if len(v.Metrics) != 8 {
		t.Fatalf("%d metrics side by side, want 8", len(v.Metrics))
	}
	for _, m := range v.Metrics {
		if len(m.Cells) != 3 || m.Cells[0] == nil || m.Cells[2] == nil {
			t.Errorf("metric %s: cells %v", m.Metric, m.Cells)
		}
	}
	// Each cell is what that run's page shows.
	for col, name := range names {
		_, body, _ := get(t, h, "/api/runs/"+name)
		var r RunView
		json.Unmarshal([]byte(body), &r)
		for i, row := range r.Table.Rows {
			if c := v.Metrics[i].Cells[col]; c.Patched != row.Cells.Patched || c.Change != row.Cells.Change {
				t.Errorf("%s %s: series shows %+v, the run %+v", name, row.Metric, c, row.Cells)
			}
		}
	}
	if code, page, _ := get(t, h, "/series/"+rv.Series); code != 200 || !strings.Contains(page, "squashfs: fewer wake-ups") ||
		strings.Contains(page, "fuse: something else") {
		t.Errorf("series page: %d", code)
	}
}

func TestFeed(t *testing.T) {
	state := t.TempDir()
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		synthRun(t, state, fmt.Sprintf("r%d", i), fmt.Sprintf("[PATCH] series %d", i), t0.Add(time.Duration(i)*time.Hour), uint64(i))
	}
	h := newHandler(t, Options{StateDir: state, BaseURL: "https://bot.example.org/"})
	code, body, hdr := get(t, h, "/feed.atom")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/atom+xml") {
		t.Fatalf("feed: %d %s", code, hdr.Get("Content-Type"))
	}
	var f atomFeed
	if err := xml.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Entries) != 3 || f.Entries[0].Title != "[PATCH] series 2" ||
		f.Entries[0].Link.Href != "https://bot.example.org/runs/r2/" || f.Entries[0].Updated != "2026-11-01T02:00:00Z" ||
		f.Updated != "2026-11-01T02:00:00Z" || f.Entries[0].Summary != verdictOf(t, filepath.Join(state, "runs", "r2")) ||
		f.Entries[0].Category.Term != "improvement" {
		t.Errorf("feed: %+v", f)
	}
}

// verdictOf is the reply's first sentence for the run in dir.
func verdictOf(t *testing.T, dir string) string {
	t.Helper()
	run, err := reports.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := reports.RunVerdict(run)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A run.json with a field this patchbot does not know is read leniently:
// the page says so and still shows the reply's numbers.
func TestLenientRun(t *testing.T) {
	state := stateWith(t, "readahead-warning")
	path := filepath.Join(state, "runs", "readahead-warning", "run.json")
	data, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(data, []byte(`"runs": 5,`), []byte(`"runs": 5, "a_future_field": {"x": 1},`), 1), 0o644)
	h := newHandler(t, Options{StateDir: state})
	code, body, _ := get(t, h, "/api/runs/readahead-warning")
	var v RunView
	json.Unmarshal([]byte(body), &v)
	if code != 200 || !strings.Contains(v.Warning, "a_future_field") || v.Table == nil || len(v.Table.Rows) != 18 {
		t.Errorf("lenient run: %d, warning %q", code, v.Warning)
	}
	// A run.json that is not JSON at all is still listed, as unreadable.
	os.WriteFile(path, []byte("{not json"), 0o644)
	_, body, _ = get(t, h, "/api/runs")
	var list RunsView
	json.Unmarshal([]byte(body), &list)
	if len(list.Runs) != 1 || list.Runs[0].Outcome != "unreadable" {
		t.Errorf("unreadable run listed as %+v", list.Runs)
	}
	if code, _, _ := get(t, h, "/runs/readahead-warning/"); code != 500 {
		t.Errorf("page of an unreadable run = %d, want 500", code)
	}
}

// A run that appears after the dashboard started is found by its page and
// by the lists; a run whose run.json changes is shown anew.
func TestNewRunsAppear(t *testing.T) {
	state := t.TempDir()
	h := newHandler(t, Options{StateDir: state})
	synthRun(t, state, "late", "[PATCH] late: arrives", time.Now(), 9)
	if code, _, _ := get(t, h, "/runs/late/"); code != 200 {
		t.Errorf("a new run's page = %d", code)
	}
	_, body, _ := get(t, h, "/api/runs")
	if !strings.Contains(body, `"name": "late"`) {
		t.Errorf("a new run is not listed: %s", body)
	}
	os.MkdirAll(filepath.Join(state, "runs", "running"), 0o755) // no run.json yet
	if code, _, _ := get(t, h, "/runs/running/"); code != 404 {
		t.Errorf("a run without run.json = %d, want 404", code)
	}
}

// Pages are served concurrently while runs appear and are rewritten: run
// with -race, nothing is shared unguarded.
func TestConcurrentRequests(t *testing.T) {
	state := stateWith(t, "readahead-warning")
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	synthRun(t, state, "a", "[PATCH] a: one", t0, 1)
	h := newHandler(t, Options{StateDir: state})
	done := make(chan error)
	for g := range 8 {
		go func() {
			var err error
			for i := range 15 {
				path := []string{"/", "/runs/a/", "/api/runs", "/feed.atom", "/runs/readahead-warning/", "/runs/b/"}[(g+i)%6]
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				// b may be caught before it exists (404) or while it is
				// written (503), never as an error.
				if rec.Code != 200 && !(path == "/runs/b/" && (rec.Code == 404 || rec.Code == 503)) {
					err = fmt.Errorf("GET %s = %d", path, rec.Code)
				}
			}
			done <- err
		}()
	}
	synthRun(t, state, "b", "[PATCH] b: two", t0.Add(time.Hour), 2)
	synthRun(t, state, "a", "[PATCH] a: one, again", t0.Add(2*time.Hour), 3)
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	_, body, _ := get(t, h, "/api/runs/a")
	if !strings.Contains(body, "a: one, again") {
		t.Error("a rewritten run.json is not shown anew")
	}
	_, body, _ = get(t, h, "/api/runs")
	if strings.Contains(body, "unreadable") {
		t.Errorf("a run caught while written stays unreadable: %s", body)
	}
}

// A run whose run.json is there before its results is being written: 503,
// with a time to retry, not an error.
func TestRunBeingWritten(t *testing.T) {
	state := t.TempDir()
	synthRun(t, state, "w", "[PATCH] w: being written", time.Now(), 1)
	os.Remove(filepath.Join(state, "runs", "w", reports.PatchedFile))
	h := newHandler(t, Options{StateDir: state})
	code, _, hdr := get(t, h, "/runs/w/")
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("a run being written = %d, Retry-After %q", code, hdr.Get("Retry-After"))
	}
	_, body, _ := get(t, h, "/api/runs")
	if !strings.Contains(body, `"outcome": "unreadable"`) {
		t.Errorf("list: %s", body)
	}
	synthRun(t, state, "w", "[PATCH] w: being written", time.Now(), 1)
	if code, _, _ := get(t, h, "/runs/w/"); code != 200 {
		t.Errorf("once written = %d", code)
	}
	_, body, _ = get(t, h, "/api/runs")
	if !strings.Contains(body, `"outcome": "improvement"`) {
		t.Errorf("once written, the list still says %s", body)
	}
}
