package service

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the daemon's Prometheus metrics, in a registry of their own.
type Metrics struct {
	Registry     *prometheus.Registry
	Jobs         *prometheus.GaugeVec   // by state
	JobSeconds   prometheus.Histogram   // whole job
	Failures     *prometheus.CounterVec // by blame
	Messages     prometheus.Counter
	Replies      prometheus.Counter
	Commands     *prometheus.CounterVec // accepted, refused
	SourceErrors *prometheus.CounterVec // by source
	// Uncertain counts deliveries whose outcome is unknown (the link broke
	// after the final ".", or the sender died there): each needs a person
	// to check.
	Uncertain prometheus.Counter
	// Dropped counts mails patchbot chose not to write, by reason: quota,
	// opted-out, unaddressable, render.
	Dropped *prometheus.CounterVec
	// Parked counts jobs parked for having lost their worker twice (a
	// restart found them running, or their lease ran out).
	Parked prometheus.Counter
	// Lost counts jobs whose worker died while running them.
	Lost prometheus.Counter
	// Outbox counts the outbox by state (uncertain ones wait for a person).
	Outbox *prometheus.GaugeVec
}

// NewMetrics makes the metrics and registers them.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Jobs:     gauges("patchbot_jobs", "Jobs by state.", "state"),
		JobSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "patchbot_job_seconds",
			Help: "Time from a job's start to its reply.", Buckets: prometheus.ExponentialBuckets(10, 2, 10)}),
		Failures: counters("patchbot_failures_total",
			"Failed jobs by blame: the patch's (answered) or the infrastructure's (retried).", "blame"),
		Messages:     counter("patchbot_messages_total", "Mails read from the sources."),
		Replies:      counter("patchbot_replies_total", "Replies written to the outbox."),
		Commands:     counters("patchbot_commands_total", "Email commands by outcome: accepted, answered, refused, dropped.", "outcome"),
		SourceErrors: counters("patchbot_source_errors_total", "Failures reading a source.", "source"),
		Uncertain: counter("patchbot_replies_uncertain_total",
			"Replies whose delivery outcome is unknown and that are not resent."),
		Dropped: counters("patchbot_mails_dropped_total",
			"Mails patchbot did not write, by reason: quota, opted-out, unaddressable, render.", "reason"),
		Parked: counter("patchbot_jobs_parked_total",
			"Jobs parked because their worker died (or its lease ran out) while running them twice."),
		Lost:   counter("patchbot_jobs_lost_total", "Jobs whose worker died, or whose lease ran out, while running them."),
		Outbox: gauges("patchbot_outbox", "Outbox messages by state; uncertain ones wait for a person.", "state"),
	}
	m.Registry.MustRegister(m.Jobs, m.JobSeconds, m.Failures, m.Messages, m.Replies, m.Commands, m.SourceErrors,
		m.Uncertain, m.Dropped, m.Parked, m.Lost, m.Outbox, prometheus.NewGoCollector())
	return m
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counters(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

func gauges(name, help, label string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{label})
}

// Serve answers /healthz and /metrics on addr until ctx ends, and hands
// every other path to pages (the dashboard) when it is not nil.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger, pages http.Handler) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	if pages != nil {
		mux.Handle("/", pages)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("serving /healthz and /metrics", "addr", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
