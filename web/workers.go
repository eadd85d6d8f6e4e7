package web

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/patchbot/patchbot/store"
)

// workersSince is how long a stopped or dead worker stays on the
// dashboard.
const workersSince = 24 * time.Hour

// WorkerStatuses is the dashboard's view of the fleet: every worker heard
// from in the last day, busy (with its job), idle, stopped, or down (no
// heartbeat for a lease: it died, or cannot reach the database).
//
// Heartbeats are stamped by the database's clock, so they are judged by
// it: at is the database's time (store.Now), and the times shown are
// moved onto this host's clock (now), on which the page says "ago".
func WorkerStatuses(ctx context.Context, st *store.Store, lease time.Duration, at, now time.Time) ([]WorkerStatus, error) {
	ws, err := st.Workers(ctx, at.Add(-workersSince))
	if err != nil {
		return nil, err
	}
	local := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return t.Add(now.Sub(at))
	}
	out := make([]WorkerStatus, 0, len(ws))
	for _, w := range ws {
		s := WorkerStatus{Name: w.Name, Host: w.Host, Since: local(w.Since), Seen: local(w.Heartbeat),
			Caps: capsLine(w.Caps)}
		switch {
		case !w.Stopped.IsZero():
			s.State = "stopped"
		case at.Sub(w.Heartbeat) > lease:
			s.State, s.Since = "down", local(w.Heartbeat)
		case w.JobID != 0:
			s.State, s.JobID, s.Stage, s.LeaseUntil = "busy", w.JobID, w.Stage, local(w.LeaseUntil)
		default:
			s.State = "idle"
		}
		out = append(out, s)
	}
	return out, nil
}

// capsLine is a worker's capabilities in a few words: "kvm, 32 CPUs,
// 64 GiB, 4 suites".
func capsLine(c store.Caps) string {
	mem := fmt.Sprintf("%d MiB", c.MemMiB)
	if c.MemMiB >= 4096 {
		mem = fmt.Sprintf("%d GiB", c.MemMiB/1024)
	}
	s := fmt.Sprintf("%s, %d CPUs, %s, suites: %s", c.Accel, c.CPUs, mem, strings.Join(c.Suites, " "))
	if len(c.LibvirtURIs) > 0 {
		s += ", libvirt: " + strings.Join(c.LibvirtURIs, " ")
	}
	return s
}

// storeWorkers is the workers table of Options.Store, when no Workers
// function is given; a failure to read it shows none, and is logged.
func (s *server) storeWorkers(ctx context.Context) []WorkerStatus {
	lease := s.o.Lease
	if lease == 0 {
		lease = 2 * time.Minute
	}
	now := time.Now()
	at, err := s.o.Store.Now(ctx)
	var ws []WorkerStatus
	if err == nil {
		ws, err = WorkerStatuses(ctx, s.o.Store, lease, at, now)
	}
	if err != nil {
		s.log.Warn("dashboard: listing workers", "err", err)
		return []WorkerStatus{}
	}
	return ws
}
