package service

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/patchbot/patchbot/config"
	"github.com/patchbot/patchbot/intake"
	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
)

// link forwards TCP connections to a server until it goes silent: then
// it forwards nothing more, either way, and closes nothing, as a cable
// pulled out does (no reset reaches either end). New connections are
// accepted and left hanging.
type link struct {
	ln     net.Listener
	mu     sync.Mutex
	silent bool
	conns  []net.Conn
}

func newLink(t *testing.T, to string) *link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, c := range l.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.conns = append(l.conns, c)
			silent := l.silent
			l.mu.Unlock()
			if silent {
				continue
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, s)
			l.mu.Unlock()
			go l.pipe(s, c)
			go l.pipe(c, s)
		}
	}()
	return l
}

// pipe copies from src to dst until the link goes silent; what arrives
// after that is read and dropped.
func (l *link) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		l.mu.Lock()
		silent := l.silent
		l.mu.Unlock()
		if !silent {
			dst.Write(buf[:n])
		}
	}
}

func (l *link) silence() {
	l.mu.Lock()
	l.silent = true
	l.mu.Unlock()
}

func (l *link) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// A worker cut off from the database right after its claim, before it
// has written that the job runs: no call to the database holds it past
// its lease (the stage it writes first included); it stops the job when
// the lease may have run out and records nothing of it; the coordinator
// then finds the lease over and hands the job on.
func TestWorkerCutOffAtItsClaim(t *testing.T) {
	testenv.Long(t) // PostgreSQL, and a lease run out
	pg := pgtest.Start(t)
	dsn, err := pg.NewDB()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cable := newLink(t, "127.0.0.1:"+strconv.Itoa(pg.Port))
	wst, err := store.Open(strings.Replace(dsn, ":"+strconv.Itoa(pg.Port)+"/", ":"+strconv.Itoa(cable.port())+"/", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wst.Close() })

	ctx := context.Background()
	req, _ := json.Marshal(intake.Request{Thread: reports.Thread{Subject: "[PATCH] squashfs: x", MessageID: "x@dev.example"},
		Series: intake.Series{Patches: []intake.Patch{{Mail: []byte("x")}}}})
	id, _, err := st.AddJob(ctx, store.Job{Dedupe: "series:x:v1", Request: req, Trigger: "list", Source: "list"})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	const lease = 4 * time.Second
	var cut time.Time
	w := &Worker{Config: cfg, Store: wst, Name: "w1", Lease: lease, WorkDir: t.TempDir(),
		Pipeline: &Pipeline{Builder: &fakeBuilder{}, Tester: &fakeTester{}, Reply: cfg.Reply},
		Log:      slog.New(slog.NewTextHandler(&logs, nil)),
		OnStep: func(s Step) {
			if s == StepJobClaimed {
				cut = time.Now()
				cable.silence()
			}
		}}
	done := make(chan error, 1)
	go func() {
		_, err := w.RunOnce(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * lease):
		t.Fatalf("the worker still holds its job %s after it was cut off, with a lease of %s:\n%s", 4*lease, lease, logs.String())
	}
	if d := time.Since(cut); d > lease+time.Second {
		t.Errorf("the worker gave its job up %s after it was cut off, with a lease of %s", d.Round(time.Millisecond), lease)
	}
	if !strings.Contains(logs.String(), "the job's lease was lost") {
		t.Errorf("the worker did not say it lost the job:\n%s", logs.String())
	}
	j, err := st.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobRunning || j.Owner != "w1" || j.Stage == "running" {
		t.Errorf("the job is %s, owned by %q, at stage %q; want it as claimed by w1, nothing more recorded", j.State, j.Owner, j.Stage)
	}
	// The coordinator's sweep, once the lease is over by the database's
	// clock, queues it again; another worker takes it.
	time.Sleep(time.Until(cut.Add(lease + 500*time.Millisecond)))
	requeued, _, err := st.ExpireJobs(ctx, time.Time{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(requeued) != 1 || requeued[0].ID != id {
		t.Fatalf("the sweep queued %v again, want job %d", requeued, id)
	}
	if j2, err := st.ClaimJob(ctx, store.Claim{Worker: "w2", Lease: time.Minute}); err != nil || j2.ID != id {
		t.Fatalf("w2's claim: %v, %v; want job %d", j2, err, id)
	}
}
