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
func WorkerStatuses(ctx context.Context, st *store.Store, lease time.Duration, at time.Time) ([]WorkerStatus, error) {
	ws, err := st.Workers(ctx, at.Add(-workersSince))
	if err != nil {
		return nil, err
	}
	out := make([]WorkerStatus, 0, len(ws))
	for _, w := range ws {
		s := WorkerStatus{Name: w.Name, Host: w.Host, Since: w.Since, Seen: w.Heartbeat,
			Caps: capsLine(w.Caps)}
		switch {
		case !w.Stopped.IsZero():
			s.State = "stopped"
		case at.Sub(w.Heartbeat) > lease:
			s.State, s.Since = "down", w.Heartbeat
		case w.JobID != 0:
			s.State, s.JobID = "busy", w.JobID
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
	ws, err := WorkerStatuses(ctx, s.o.Store, lease, time.Now())
	if err != nil {
		s.log.Warn("dashboard: listing workers", "err", err)
		return []WorkerStatus{}
	}
	return ws
}
