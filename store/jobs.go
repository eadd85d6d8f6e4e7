package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/patchbot/patchbot/blame"
)

// JobState is where a job is in its life.
type JobState string

const (
	JobQueued  JobState = "queued"
	JobRunning JobState = "running" // held by a worker's lease
	JobDone    JobState = "done"    // a reply was written (a result or the patch's failure)
	JobFailed  JobState = "failed"  // gave up on an infrastructure failure, or after too many attempts
	// JobParked: its worker died while running it twice (a restart found
	// it running, or its lease ran out: see RecoverJobs and ExpireJobs).
	// It is not run again, and its author is not mailed, until a person
	// looks at it and unparks it (UnparkJob).
	JobParked JobState = "parked"
)

// JobStates are all states, in the order of a job's life, for listings
// and gauges.
var JobStates = []JobState{JobQueued, JobRunning, JobDone, JobFailed, JobParked}

// JobKind says who runs a job.
type JobKind string

const (
	KindTest  JobKind = "test"  // a series' test: run by a worker
	KindCheck JobKind = "check" // a look at the stored mail (an incomplete series): run by the coordinator
)

// Needs is what a job needs of the worker that runs it.
type Needs struct {
	KVM    bool     // a host with working KVM
	CPUs   int      // online CPUs, at least
	MemMiB int      // memory, at least
	Suites []string // suites the worker's kernels must support
}

// Job is one test of one series.
type Job struct {
	ID int64
	// Dedupe is the job's key in the queue: a job whose key is queued
	// already is not queued again (its forms: intake.Dedupe).
	Dedupe  string
	Kind    JobKind
	Trigger string // "list", "cli", "command", "incomplete", "web"
	Title   string
	// Source and Sender are whom the job is for: the source its mail came
	// from and the series' author or the command's sender. Claims serve
	// the source, then the sender, with the fewest jobs running and the
	// longest wait since one of theirs was claimed.
	Source    string
	Sender    string
	Needs     Needs
	Request   []byte
	State     JobState
	Stage     string
	Blame     blame.Blame // whose fault the last failure was
	Error     string
	Attempts  int // claims so far (a claim given back at a clean shutdown does not count)
	Crashes   int // claims lost: the worker died, or its lease ran out
	NotBefore time.Time
	// RetryAfter, when positive, makes FinishJob set NotBefore to the
	// database's clock plus it: a worker's backoff is not measured on its
	// own clock.
	RetryAfter time.Duration
	RunDir     string
	// Owner is the worker that holds the job while it runs (and, after,
	// the one that ran it last); LeaseUntil is when its claim ends unless
	// renewed.
	Owner      string
	LeaseUntil time.Time
	Started    time.Time // when it was last claimed
	Created    time.Time
	Updated    time.Time
}

// timeFormat is fixed-width, so that times stored as text compare as
// times in both engines (RFC3339Nano drops trailing zeros: "…05Z" would
// sort after "…05.1Z"). Stored times are parsed with RFC3339Nano, which
// reads both.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

func now() string { return fmtTime(time.Now()) }

func fmtTime(t time.Time) string { return t.UTC().Format(timeFormat) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DedupesWithPrefix lists the dedupe keys of the jobs whose key starts
// with prefix: the other candidates for one claim (see the service's
// series keys).
func (t *Tx) DedupesWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	prefix = Text(prefix) // counted as kept
	rows, err := t.r.QueryContext(ctx, `SELECT dedupe FROM jobs WHERE substr(dedupe, 1, ?) = ? ORDER BY id`,
		utf8.RuneCountInString(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("reading the jobs of %s: %w", prefix, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// AddJob queues a job unless one with the same dedupe key exists. A job
// with a NotBefore waits until then. It returns the job's id and whether it
// was new.
func (s *Store) AddJob(ctx context.Context, j Job) (int64, bool, error) {
	var id int64
	var added bool
	err := s.Update(ctx, func(tx *Tx) (err error) {
		id, added, err = addJob(ctx, tx.r, j)
		return err
	})
	return id, added, err
}

// AddJob is Store.AddJob inside the transaction.
func (t *Tx) AddJob(ctx context.Context, j Job) (int64, bool, error) { return addJob(ctx, t.r, j) }

func addJob(ctx context.Context, r runner, j Job) (int64, bool, error) {
	nowSQL, nowArg := r.d.at(time.Time{}, 0)
	nbSQL, nbArg := nowSQL, nowArg
	if !j.NotBefore.IsZero() {
		nbSQL, nbArg = r.d.at(j.NotBefore, 0)
	}
	if j.Kind == "" {
		j.Kind = KindTest
	}
	id, added, err := r.insertID(ctx, `INSERT INTO jobs
		(dedupe, kind, trigger, title, source, sender, need_kvm, need_cpus, need_mem_mib,
		 request, state, not_before, created, updated)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, `+nbSQL+`, `+nowSQL+`, `+nowSQL+`) ON CONFLICT(dedupe) DO NOTHING`,
		j.Dedupe, j.Kind, j.Trigger, j.Title, j.Source, j.Sender,
		boolInt(j.Needs.KVM), j.Needs.CPUs, j.Needs.MemMiB, j.Request, JobQueued, nbArg, nowArg, nowArg)
	if err != nil {
		return 0, false, fmt.Errorf("adding job %s: %w", j.Dedupe, err)
	}
	if !added {
		err = r.QueryRowContext(ctx, `SELECT id FROM jobs WHERE dedupe = ?`, j.Dedupe).Scan(&id)
		return id, false, err
	}
	for _, suite := range slices.Compact(slices.Sorted(slices.Values(j.Needs.Suites))) {
		if _, err := r.ExecContext(ctx, `INSERT INTO job_suites (job_id, suite) VALUES (?, ?)`, id, suite); err != nil {
			return 0, false, fmt.Errorf("adding job %s: %w", j.Dedupe, err)
		}
	}
	return id, true, nil
}

const jobColumns = `id, dedupe, kind, trigger, title, source, sender, need_kvm, need_cpus, need_mem_mib,
	request, state, stage, blame, error, attempts, crashes, not_before, run_dir,
	owner, lease_until, started, created, updated`

func scanJob(row interface{ Scan(...any) error }) (*Job, error) {
	var j Job
	var kvm int
	var nb, lease, started, created, updated string
	if err := row.Scan(&j.ID, &j.Dedupe, &j.Kind, &j.Trigger, &j.Title, &j.Source, &j.Sender,
		&kvm, &j.Needs.CPUs, &j.Needs.MemMiB, &j.Request, &j.State, &j.Stage,
		&j.Blame, &j.Error, &j.Attempts, &j.Crashes, &nb, &j.RunDir,
		&j.Owner, &lease, &started, &created, &updated); err != nil {
		return nil, err
	}
	j.Needs.KVM = kvm != 0
	j.NotBefore, j.LeaseUntil, j.Started = parseTime(nb), parseTime(lease), parseTime(started)
	j.Created, j.Updated = parseTime(created), parseTime(updated)
	return &j, nil
}

// withSuites fills in the suites each job needs.
func withSuites(ctx context.Context, r runner, jobs ...*Job) error {
	for _, j := range jobs {
		rows, err := r.QueryContext(ctx, `SELECT suite FROM job_suites WHERE job_id = ? ORDER BY suite`, j.ID)
		if err != nil {
			return err
		}
		j.Needs.Suites = nil
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return err
			}
			j.Needs.Suites = append(j.Needs.Suites, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Job returns one job.
func (s *Store) Job(ctx context.Context, id int64) (*Job, error) {
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id))
	if err == nil {
		err = withSuites(ctx, s.r, j)
	}
	if err != nil {
		return nil, fmt.Errorf("reading job %d: %w", id, err)
	}
	return j, nil
}

// Jobs lists every job, oldest first.
func (s *Store) Jobs(ctx context.Context) ([]*Job, error) {
	out, err := queryJobs(ctx, s.r, `SELECT `+jobColumns+` FROM jobs ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	return out, nil
}

func queryJobs(ctx context.Context, r runner, query string, args ...any) ([]*Job, error) {
	rows, err := r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// ErrNoJob means no job is ready to run.
var ErrNoJob = errors.New("no job ready")

// ErrLeaseLost means the worker no longer holds the job: its lease ran out
// and the job was queued again (or another worker has it). Whatever the
// worker did with it since is to be thrown away.
var ErrLeaseLost = errors.New("the job's lease was lost")

// Caps is what a worker can run.
type Caps struct {
	Accel       string   `json:"accel"` // kvm or tcg
	CPUs        int      `json:"cpus"`
	MemMiB      int      `json:"mem_mib"`
	LibvirtURIs []string `json:"libvirt_uris,omitempty"`
	Suites      []string `json:"suites"` // those its kernels support
}

// Claim is a worker asking for a job.
type Claim struct {
	Worker string // the owner the job is held by
	Lease  time.Duration
	// At is now: jobs due by then are claimable, and the lease runs from
	// then. Zero (what workers pass) is the database's clock, so that a
	// worker's own clock decides nothing.
	At   time.Time
	Kind JobKind // default KindTest
	Caps Caps    // only a job that needs no more is taken
	// MaxAttempts leaves a queued job that has used that many claims
	// already (0: no limit) to the coordinator, which fails it
	// (FailSpentJobs): the limit holds however the job came back to the
	// queue, a retry or a lost lease.
	MaxAttempts int
}

// ClaimJob gives the worker the due job that fits it best and holds it
// for the worker until At+Lease (Heartbeat renews it), or ErrNoJob.
//
// Of the jobs that fit (the worker has KVM if the job needs it, the CPUs,
// the memory, every suite), it takes the one whose source has the fewest
// jobs running and has waited longest since one of its jobs was claimed;
// among those, the same by sender; then the oldest. So one busy list, or
// one busy sender, cannot starve the others.
//
// The claim is one UPDATE … RETURNING: on PostgreSQL its choice locks the
// row it takes and skips rows other claims hold (FOR UPDATE SKIP LOCKED),
// on SQLite the write lock makes it atomic; two workers never get the same
// job.
func (s *Store) ClaimJob(ctx context.Context, c Claim) (*Job, error) {
	if c.Kind == "" {
		c.Kind = KindTest
	}
	if c.Lease <= 0 {
		return nil, errors.New("claiming a job: no lease")
	}
	d := s.r.d
	if d.postgres() {
		return s.claimJobPG(ctx, c)
	}
	atSQL, atArg := d.at(c.At, 0)
	leaseSQL, leaseArg := d.at(c.At, c.Lease)
	nowSQL, nowArg := d.at(time.Time{}, 0)
	// What fits: due, of the kind, with attempts left, and needing no
	// more than the worker has. Written for a jobs row named j.
	fits := `j.state = ? AND j.kind = ? AND j.not_before <= ` + atSQL + ` AND j.need_kvm <= ? AND j.need_cpus <= ? AND j.need_mem_mib <= ?`
	fitArgs := []any{JobQueued, c.Kind, atArg, boolInt(c.Caps.Accel == "kvm"), c.Caps.CPUs, c.Caps.MemMiB}
	if c.MaxAttempts > 0 {
		fits += ` AND j.attempts < ?`
		fitArgs = append(fitArgs, c.MaxAttempts)
	}
	fits += ` AND NOT EXISTS (SELECT 1 FROM job_suites su WHERE su.job_id = j.id`
	if len(c.Caps.Suites) > 0 {
		fits += ` AND su.suite NOT IN (?` + strings.Repeat(", ?", len(c.Caps.Suites)-1) + `)`
		for _, s := range c.Caps.Suites {
			fitArgs = append(fitArgs, s)
		}
	}
	fits += `)`
	var j *Job
	err := s.inTx(ctx, false, func(r runner) error {
		// The (source, sender) pairs with a job that fits, best first:
		// fewest running of the source, its longest wait since it was
		// served, then the same of the sender. Ranking the pairs, not the
		// jobs, keeps the sort small however deep the queue.
		rows, err := r.QueryContext(ctx, `SELECT h.source, h.sender FROM (
				SELECT j.source, j.sender, min(j.id) AS first FROM jobs j WHERE `+fits+` GROUP BY j.source, j.sender) h
			LEFT JOIN (SELECT source, count(*) AS n FROM jobs WHERE state = ? GROUP BY source) rs ON rs.source = h.source
			LEFT JOIN (SELECT sender, count(*) AS n FROM jobs WHERE state = ? GROUP BY sender) rw ON rw.sender = h.sender
			LEFT JOIN served ss ON ss.kind = 'source' AND ss.name = h.source
			LEFT JOIN served sw ON sw.kind = 'sender' AND sw.name = h.sender
			ORDER BY coalesce(rs.n, 0), coalesce(ss.last, ''), coalesce(rw.n, 0), coalesce(sw.last, ''), h.first
			LIMIT 8`, append(append([]any{}, fitArgs...), JobRunning, JobRunning)...)
		if err != nil {
			return err
		}
		var pairs [][2]string
		for rows.Next() {
			var p [2]string
			if err := rows.Scan(&p[0], &p[1]); err != nil {
				rows.Close()
				return err
			}
			pairs = append(pairs, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		// The pair's oldest job that fits; another claim may hold it (and
		// the next, and …): on PostgreSQL those are skipped, and a pair
		// whose jobs are all held gives way to the next.
		for _, p := range pairs {
			args := []any{JobRunning, c.Worker, leaseArg, atArg, nowArg, JobQueued}
			args = append(append(args, fitArgs...), p[0], p[1])
			j, err = scanJob(r.QueryRowContext(ctx, `UPDATE jobs SET state = ?, owner = ?, lease_until = `+leaseSQL+`,
				started = `+atSQL+`, attempts = attempts + 1, updated = `+nowSQL+`
				WHERE state = ? AND id = (SELECT j.id FROM jobs j WHERE `+fits+` AND j.source = ? AND j.sender = ?
					ORDER BY j.id LIMIT 1`+r.d.skipLocked("j")+`)
				RETURNING `+jobColumns, args...))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		if j == nil {
			return sql.ErrNoRows
		}
		// Served now: the next claim prefers the others. Source before
		// sender, always, so that two claims never wait on each other's
		// rows in opposite orders.
		for _, k := range [][2]string{{"source", j.Source}, {"sender", j.Sender}} {
			if _, err := r.ExecContext(ctx, `INSERT INTO served (kind, name, last) VALUES (?, ?, `+atSQL+`)
				ON CONFLICT(kind, name) DO UPDATE SET last = excluded.last`, k[0], k[1], atArg); err != nil {
				return err
			}
		}
		return withSuites(ctx, r, j)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoJob
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a job: %w", err)
	}
	return j, nil
}

// FailSpentJobs fails every queued job that has used maxAttempts claims
// (claims leave them alone), and returns how many. The coordinator calls
// it at every look at the queue: a worker may not end a job it does not
// hold.
func (s *Store) FailSpentJobs(ctx context.Context, maxAttempts int) (int, error) {
	if maxAttempts <= 0 {
		return 0, nil
	}
	nowSQL, nowArg := s.r.d.at(time.Time{}, 0)
	res, err := s.r.ExecContext(ctx, `UPDATE jobs SET state = ?, error = ? || error, updated = `+nowSQL+`
		WHERE state = ? AND attempts >= ?`,
		JobFailed, fmt.Sprintf("gave up after %d attempts; last error: ", maxAttempts), nowArg, JobQueued, maxAttempts)
	if err != nil {
		return 0, fmt.Errorf("failing jobs out of attempts: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// Heartbeat says that worker is alive and, when jobID is not 0, renews its
// lease on that job until at+lease (a zero at: the database's clock). It
// fails with ErrLeaseLost when the worker no longer holds the job.
func (s *Store) Heartbeat(ctx context.Context, worker string, jobID int64, lease time.Duration, at time.Time) error {
	if s.r.d.postgres() {
		var held bool
		atArg, untilArg := pgTimes(at, lease)
		if err := s.r.QueryRowContext(ctx, `SELECT patchbot_heartbeat(?, ?, ?, ?, ?)`,
			worker, jobID, lease.Seconds(), atArg, untilArg).Scan(&held); err != nil {
			return fmt.Errorf("heartbeat of %s: %w", worker, err)
		}
		if !held {
			return fmt.Errorf("renewing the lease of job %d: %w", jobID, ErrLeaseLost)
		}
		return nil
	}
	t, ta := s.r.d.at(at, 0)
	if _, err := s.r.ExecContext(ctx, `UPDATE workers SET heartbeat = `+t+`, stopped = '',
		since = CASE WHEN job_id = ? THEN since ELSE `+t+` END, job_id = ? WHERE name = ?`,
		ta, jobID, ta, jobID, worker); err != nil {
		return fmt.Errorf("heartbeat of %s: %w", worker, err)
	}
	if jobID == 0 {
		return nil
	}
	l, la := s.r.d.at(at, lease)
	res, err := s.r.ExecContext(ctx, `UPDATE jobs SET lease_until = `+l+` WHERE id = ? AND owner = ? AND state = ?`,
		la, jobID, worker, JobRunning)
	if err != nil {
		return fmt.Errorf("renewing the lease of job %d: %w", jobID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("renewing the lease of job %d: %w", jobID, ErrLeaseLost)
	}
	return nil
}

// SetStage records the stage of a job its worker holds, for the
// dashboard.
func (s *Store) SetStage(ctx context.Context, jobID int64, worker, stage string) error {
	stage = clip(stage, MaxStage)
	if s.r.d.postgres() {
		_, err := s.r.ExecContext(ctx, `SELECT patchbot_set_stage(?, ?, ?)`, worker, jobID, stage)
		return err
	}
	t, ta := s.r.d.at(time.Time{}, 0)
	_, err := s.r.ExecContext(ctx, `UPDATE jobs SET stage = ?, updated = `+t+` WHERE id = ? AND owner = ? AND state = ?`,
		stage, ta, jobID, worker, JobRunning)
	return err
}

// FinishJob ends the worker's hold on a running job: it records j's state
// (done, failed, or queued for a retry or after a shutdown), stage, blame
// and error, attempts (a worker gives back a claim it did not use), the
// time before which it must not run again, and its run directory. It
// fails with ErrLeaseLost, changing nothing, when j.Owner no longer holds
// the job.
func (s *Store) FinishJob(ctx context.Context, j *Job) error { return s.EndJob(ctx, j, nil) }

// EndJob is FinishJob with the run's files, kept together or not at all:
// a job is never done without its results, and nothing is added to a run
// once its job has ended. Only a job done has files. Each field is cut to
// its size (MaxStage, MaxJobError); files over theirs (MaxRunFile,
// MaxRunTotal, MaxRunFiles, MaxRunName) are refused.
func (s *Store) EndJob(ctx context.Context, j *Job, files []RunFile) error {
	j.Stage, j.Error = clip(j.Stage, MaxStage), clip(j.Error, MaxJobError)
	if err := checkRun(files); err != nil {
		return fmt.Errorf("ending job %d: %w", j.ID, err)
	}
	if len(files) > 0 && j.State != JobDone {
		return fmt.Errorf("ending job %d: only a job done keeps a run", j.ID)
	}
	owner := j.Owner
	var err error
	if s.r.d.postgres() {
		err = endJobPG(ctx, s.r, s.worker, j, files)
	} else {
		err = s.UpdateHeld(ctx, func(tx *Tx) error {
			if err := finishJob(ctx, tx.r, j); err != nil {
				return err
			}
			return putRunFiles(ctx, tx.r, j.ID, files)
		})
	}
	if err != nil {
		j.Owner = owner
		if errors.Is(err, ErrLeaseLost) {
			return err
		}
		return fmt.Errorf("ending job %d: %w", j.ID, err)
	}
	if j.State == JobQueued {
		j.Owner = "" // nobody holds a queued job
	}
	return nil
}

func finishJob(ctx context.Context, r runner, j *Job) error {
	owner, next := j.Owner, j.Owner
	if j.State == JobQueued {
		next = ""
	}
	nbSQL, nbArg := "?", any(fmtTime(j.NotBefore))
	if j.RetryAfter > 0 {
		nbSQL, nbArg = r.d.at(time.Time{}, j.RetryAfter)
	}
	t, ta := r.d.at(time.Time{}, 0)
	res, err := r.ExecContext(ctx, `UPDATE jobs SET state = ?, stage = ?, blame = ?, error = ?, attempts = ?,
		not_before = `+nbSQL+`, run_dir = ?, owner = ?, lease_until = '', updated = `+t+`
		WHERE id = ? AND owner = ? AND state = ?`,
		j.State, j.Stage, j.Blame, j.Error, j.Attempts, nbArg, j.RunDir, next, ta,
		j.ID, owner, JobRunning)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("ending job %d: %w", j.ID, ErrLeaseLost)
	}
	return nil
}

// clip cuts s, in the form it is kept in (Text), to at most n bytes, at
// a rune's start: the size PostgreSQL's functions check is the kept
// text's, where each byte that is not UTF-8 takes four.
func clip(s string, n int) string {
	if s = Text(s); len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// UpdateJob records a job's state, stage, blame, error, attempts,
// not-before time and run directory, whoever holds it: for tests and for
// a person's tools. Workers use FinishJob, which checks their lease.
func (s *Store) UpdateJob(ctx context.Context, j *Job) error {
	_, err := s.r.ExecContext(ctx, `UPDATE jobs SET state = ?, stage = ?, blame = ?, error = ?, attempts = ?,
		not_before = ?, run_dir = ?, updated = ? WHERE id = ?`,
		j.State, j.Stage, j.Blame, j.Error, j.Attempts, fmtTime(j.NotBefore), j.RunDir, now(), j.ID)
	if err != nil {
		return fmt.Errorf("updating job %d: %w", j.ID, err)
	}
	return nil
}

// RecoverJobs is called by a worker once at start, before it claims
// anything: a job still running under its name was running when it (the
// same worker, or the daemon it ran in) died. Each counts a crash and is
// queued again, or parked when it has now been lost maxCrashes times: a
// job that kills its worker must not keep killing workers at the head of
// the queue. It returns the jobs requeued and parked.
func (s *Store) RecoverJobs(ctx context.Context, owner string, maxCrashes int) (requeued, parked []*Job, err error) {
	if s.r.d.postgres() {
		var jobs []*Job
		jobs, err = queryJobs(ctx, s.r, `SELECT `+jobColumns+` FROM patchbot_recover(?, ?)`, owner, maxCrashes)
		for _, j := range jobs {
			if j.State == JobParked {
				parked = append(parked, j)
			} else {
				requeued = append(requeued, j)
			}
		}
	} else {
		requeued, parked, err = s.loseJobs(ctx, maxCrashes, `owner = ?`, owner)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("recovering interrupted jobs: %w", err)
	}
	return requeued, parked, nil
}

// ExpireJobs applies RecoverJobs' rule to every running job whose lease
// ran out by at (zero: by the database's clock): its worker was killed,
// its host is gone, or it cannot reach the database; the job is claimable
// again (or parked) and a late word from the old worker is refused
// (ErrLeaseLost). The coordinator calls it; a job is expired once.
func (s *Store) ExpireJobs(ctx context.Context, at time.Time, maxCrashes int) (requeued, parked []*Job, err error) {
	t, ta := s.r.d.at(at, 0)
	requeued, parked, err = s.loseJobs(ctx, maxCrashes, `lease_until < `+t, ta)
	if err != nil {
		return nil, nil, fmt.Errorf("expiring leases: %w", err)
	}
	return requeued, parked, nil
}

func (s *Store) loseJobs(ctx context.Context, maxCrashes int, where string, arg any) (requeued, parked []*Job, err error) {
	err = s.Update(ctx, func(tx *Tx) error {
		t, ta := tx.r.d.at(time.Time{}, 0)
		jobs, err := queryJobs(ctx, tx.r, `UPDATE jobs SET crashes = crashes + 1,
			state = CASE WHEN crashes + 1 >= ? THEN ? ELSE ? END,
			error = CASE WHEN crashes + 1 >= ? THEN 'parked: its worker died while running it ' || (crashes + 1) || ' times' ELSE error END,
			owner = CASE WHEN crashes + 1 >= ? THEN owner ELSE '' END,
			lease_until = '', updated = `+t+`
			WHERE state = ? AND `+where+` RETURNING `+jobColumns,
			maxCrashes, JobParked, JobQueued, maxCrashes, maxCrashes, ta, JobRunning, arg)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if j.State == JobParked {
				parked = append(parked, j)
			} else {
				requeued = append(requeued, j)
			}
		}
		return nil
	})
	return requeued, parked, err
}

// UnparkJob queues a parked job again with its crash count cleared, for
// a person who has looked at why it killed its workers.
func (s *Store) UnparkJob(ctx context.Context, id int64) error {
	res, err := s.r.ExecContext(ctx, `UPDATE jobs SET state = ?, crashes = 0, attempts = 0, error = '', owner = '', updated = ?
		WHERE id = ? AND state = ?`, JobQueued, now(), id, JobParked)
	if err != nil {
		return fmt.Errorf("unparking job %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("unparking job %d: not parked", id)
	}
	return nil
}

// JobCounts counts jobs by state, for /metrics.
func (s *Store) JobCounts(ctx context.Context) (map[JobState]int, error) {
	return countByState[JobState](ctx, s.r, "jobs")
}
