package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// What a fleet's worker may do to the database, and only that: claim a
// job that fits it, renew its lease, say its stage, end the job with its
// run's files, take back the jobs it held when it died, keep its row of
// the workers table and its own base kernels' rounds. On PostgreSQL each
// of these is one SECURITY DEFINER function (holderStep), and the worker
// roles have no grant on any table but schema_version: a worker changes
// only the job it holds, in its own name, within the sizes below. The
// coordinator (the schema's owner) calls the same functions, so that one
// code path is tested. SQLite serves one host, where the same rules are
// plain statements (jobs.go, runfiles.go, workers.go, baserounds.go).

// The sizes of what a job's holder writes: checked in Go on both engines,
// and again by PostgreSQL's functions, where a worker is a stranger.
const (
	MaxStage      = 128       // jobs.stage
	MaxJobError   = 16 << 10  // jobs.error
	MaxRunFile    = 16 << 20  // one run file
	MaxRunTotal   = 64 << 20  // a run's files together
	MaxRunFiles   = 1000      // files of one run
	MaxRunName    = 1024      // a run file's path
	MaxCaps       = 16 << 10  // workers.caps, JSON
	MaxHost       = 255       // workers.host
	MaxWorkerName = 128       // workers.name, a job's owner
	MaxBaseRounds = 4 << 20   // one base_rounds result
	MaxBaseKey    = 128       // a base_rounds key
	MaxLease      = 24 * 3600 // a lease or a retry's wait, in seconds
)

// ownedBaseRoundsStep keys base kernels' rounds by who saved them, so
// that a worker reads and replaces only its own (a worker once replaced
// another host's, which that host's later verdicts reused). Rows kept
// before belong to nobody ("") and are measured again.
const ownedBaseRoundsStep = `
	CREATE TABLE base_rounds_owned (
		owner  TEXT NOT NULL DEFAULT '',
		key    TEXT NOT NULL,
		result BLOB NOT NULL,
		saved  TEXT NOT NULL,
		PRIMARY KEY (owner, key)
	);
	INSERT INTO base_rounds_owned (owner, key, result, saved) SELECT '', key, result, saved FROM base_rounds;
	DROP TABLE base_rounds;
	ALTER TABLE base_rounds_owned RENAME TO base_rounds;`

// holderStep replaces the worker roles' table grants and row policies
// (workerRoleStep) with functions. Each checks that a worker acts in its
// own name (its login role, session_user), on a job it holds, with sizes
// in bounds, and on the database's clock; only the schema's owner may
// name a time of its own (tests, a person's tools).
const holderStep = `
	REVOKE ALL ON jobs, job_suites, served, workers, run_files, job_replies, base_rounds FROM patchbot_worker;
	DROP POLICY IF EXISTS worker_reads ON jobs;
	DROP POLICY IF EXISTS worker_writes ON jobs;
	DROP POLICY IF EXISTS worker_own ON workers;
	DROP POLICY IF EXISTS worker_own ON run_files;
	DROP POLICY IF EXISTS worker_own ON job_replies;
	-- No policy: row-level security denies every row to whoever is not
	-- the owner, should a grant come back by mistake.
	ALTER TABLE job_suites ENABLE ROW LEVEL SECURITY;
	ALTER TABLE served ENABLE ROW LEVEL SECURITY;
	ALTER TABLE base_rounds ENABLE ROW LEVEL SECURITY;

	CREATE FUNCTION patchbot_is_worker() RETURNS boolean LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp AS $$
		SELECT coalesce((SELECT pg_has_role(session_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = 'patchbot_worker'), false)
			AND NOT coalesce((SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = session_user), false)
	$$;

	CREATE FUNCTION patchbot_as(p_worker text, p_at text) RETURNS void LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, pg_temp AS $$
	BEGIN
		IF p_worker IS NULL OR p_worker = '' OR length(p_worker) > 128 THEN
			RAISE EXCEPTION 'no worker name, or one over 128 characters' USING ERRCODE = '22023';
		END IF;
		IF public.patchbot_is_worker() THEN
			IF p_worker <> session_user THEN
				RAISE EXCEPTION 'the worker role % may act only in its own name, not as %', session_user, p_worker
					USING ERRCODE = '42501';
			END IF;
			IF p_at IS NOT NULL THEN
				RAISE EXCEPTION 'a worker acts on the database''s clock' USING ERRCODE = '42501';
			END IF;
		END IF;
	END $$;

	CREATE FUNCTION patchbot_time(p_at text, p_plus float8) RETURNS text LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp AS $$
		SELECT coalesce(p_at, to_char((statement_timestamp() + make_interval(secs => p_plus)) AT TIME ZONE 'UTC',
			'YYYY-MM-DD"T"HH24:MI:SS.US"000Z"'))
	$$;

	CREATE FUNCTION patchbot_lease(p_secs float8) RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
	BEGIN
		IF p_secs IS NULL OR p_secs <= 0 OR p_secs > 86400 THEN
			RAISE EXCEPTION 'a lease of % s is out of bounds (0, 86400]', p_secs USING ERRCODE = '22023';
		END IF;
	END $$;

	CREATE FUNCTION patchbot_claim(p_worker text, p_kind text, p_lease float8, p_at text, p_until text,
		p_kvm int, p_cpus int, p_mem int, p_suites text[], p_max_attempts int)
	RETURNS SETOF jobs LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_now text := patchbot_time(NULL, 0);
		v_at text;
		v_until text;
		pair record;
		j jobs;
	BEGIN
		PERFORM patchbot_as(p_worker, coalesce(p_at, p_until));
		PERFORM patchbot_lease(p_lease);
		IF patchbot_is_worker() AND p_kind <> 'test' THEN
			RAISE EXCEPTION 'a worker runs test jobs only' USING ERRCODE = '42501';
		END IF;
		v_at := patchbot_time(p_at, 0);
		v_until := patchbot_time(p_until, p_lease);
		p_suites := coalesce(p_suites, '{}');
		-- The (source, sender) pairs with a job that fits, best first, as
		-- ClaimJob ranks them on SQLite.
		FOR pair IN
			SELECT h.source, h.sender FROM (
				SELECT j2.source, j2.sender, min(j2.id) AS first FROM jobs j2
				WHERE j2.state = 'queued' AND j2.kind = p_kind AND j2.not_before <= v_at
					AND j2.need_kvm <= p_kvm AND j2.need_cpus <= p_cpus AND j2.need_mem_mib <= p_mem
					AND (p_max_attempts <= 0 OR j2.attempts < p_max_attempts)
					AND NOT EXISTS (SELECT 1 FROM job_suites su WHERE su.job_id = j2.id AND su.suite <> ALL (p_suites))
				GROUP BY j2.source, j2.sender) h
			LEFT JOIN (SELECT source, count(*) AS n FROM jobs WHERE state = 'running' GROUP BY source) rs ON rs.source = h.source
			LEFT JOIN (SELECT sender, count(*) AS n FROM jobs WHERE state = 'running' GROUP BY sender) rw ON rw.sender = h.sender
			LEFT JOIN served ss ON ss.kind = 'source' AND ss.name = h.source
			LEFT JOIN served sw ON sw.kind = 'sender' AND sw.name = h.sender
			ORDER BY coalesce(rs.n, 0), coalesce(ss.last, ''), coalesce(rw.n, 0), coalesce(sw.last, ''), h.first
			LIMIT 8
		LOOP
			UPDATE jobs SET state = 'running', owner = p_worker, lease_until = v_until, started = v_at,
				attempts = attempts + 1, updated = v_now
			WHERE state = 'queued' AND id = (SELECT j3.id FROM jobs j3
				WHERE j3.state = 'queued' AND j3.kind = p_kind AND j3.not_before <= v_at
					AND j3.need_kvm <= p_kvm AND j3.need_cpus <= p_cpus AND j3.need_mem_mib <= p_mem
					AND (p_max_attempts <= 0 OR j3.attempts < p_max_attempts)
					AND NOT EXISTS (SELECT 1 FROM job_suites su WHERE su.job_id = j3.id AND su.suite <> ALL (p_suites))
					AND j3.source = pair.source AND j3.sender = pair.sender
				ORDER BY j3.id LIMIT 1 FOR UPDATE OF j3 SKIP LOCKED)
			RETURNING * INTO j;
			IF FOUND THEN
				INSERT INTO served (kind, name, last) VALUES ('source', j.source, v_at)
					ON CONFLICT (kind, name) DO UPDATE SET last = excluded.last;
				INSERT INTO served (kind, name, last) VALUES ('sender', j.sender, v_at)
					ON CONFLICT (kind, name) DO UPDATE SET last = excluded.last;
				RETURN NEXT j;
				RETURN;
			END IF;
		END LOOP;
	END $$;

	-- The suites of a job its caller holds.
	CREATE FUNCTION patchbot_job_suites(p_worker text, p_job bigint) RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		RETURN QUERY SELECT su.suite FROM job_suites su JOIN jobs j ON j.id = su.job_id
			WHERE su.job_id = p_job AND (NOT patchbot_is_worker() OR (j.owner = p_worker AND j.state = 'running'))
			ORDER BY su.suite;
	END $$;

	CREATE FUNCTION patchbot_heartbeat(p_worker text, p_job bigint, p_lease float8, p_at text, p_until text)
	RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_at text;
	BEGIN
		PERFORM patchbot_as(p_worker, coalesce(p_at, p_until));
		v_at := patchbot_time(p_at, 0);
		UPDATE workers SET heartbeat = v_at, stopped = '',
			since = CASE WHEN job_id = p_job THEN since ELSE v_at END, job_id = p_job WHERE name = p_worker;
		IF p_job = 0 THEN
			RETURN true;
		END IF;
		PERFORM patchbot_lease(p_lease);
		UPDATE jobs SET lease_until = patchbot_time(p_until, p_lease)
			WHERE id = p_job AND owner = p_worker AND state = 'running';
		RETURN FOUND;
	END $$;

	CREATE FUNCTION patchbot_set_stage(p_worker text, p_job bigint, p_stage text) RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		IF length(p_stage) > 128 THEN
			RAISE EXCEPTION 'a stage of % characters (at most 128)', length(p_stage) USING ERRCODE = '22001';
		END IF;
		UPDATE jobs SET stage = p_stage, updated = patchbot_time(NULL, 0)
			WHERE id = p_job AND owner = p_worker AND state = 'running';
		RETURN FOUND;
	END $$;

	-- The end of a job its caller holds, and its run's files, at once:
	-- nothing can be added to a run later. A worker ends a job done,
	-- failed or queued again; it gives back at most the claim it used;
	-- a retry waits on the database's clock, at most a day.
	CREATE FUNCTION patchbot_end_job(p_worker text, p_job bigint, p_state text, p_stage text, p_blame text, p_error text,
		p_attempts int, p_not_before text, p_retry float8, p_run_dir text, p_names text[], p_data bytea[])
	RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_worker boolean := patchbot_is_worker();
		v_now text := patchbot_time(NULL, 0);
		v_total bigint := 0;
		v_attempts int;
		i int;
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		IF p_state NOT IN ('done', 'failed', 'queued') THEN
			RAISE EXCEPTION 'a job ends done, failed or queued, not %', p_state USING ERRCODE = '22023';
		END IF;
		IF p_blame NOT IN ('', 'patch', 'infra') THEN
			RAISE EXCEPTION 'blame % is not one of patch, infra', p_blame USING ERRCODE = '22023';
		END IF;
		IF length(p_stage) > 128 OR length(p_error) > 16384 OR length(p_run_dir) > 4096 THEN
			RAISE EXCEPTION 'a stage, error or run directory over its size' USING ERRCODE = '22001';
		END IF;
		IF p_retry IS NOT NULL AND p_retry > 0 THEN
			PERFORM patchbot_lease(p_retry);
		END IF;
		IF v_worker AND p_not_before IS NOT NULL THEN
			RAISE EXCEPTION 'a worker waits on the database''s clock' USING ERRCODE = '42501';
		END IF;
		IF coalesce(cardinality(p_names), 0) <> coalesce(cardinality(p_data), 0) OR coalesce(cardinality(p_names), 0) > 1000 THEN
			RAISE EXCEPTION 'a run of % names and % files (at most 1000)', cardinality(p_names), cardinality(p_data)
				USING ERRCODE = '22023';
		END IF;
		FOR i IN 1 .. coalesce(cardinality(p_names), 0) LOOP
			IF p_names[i] IS NULL OR p_data[i] IS NULL OR length(p_names[i]) > 1024 OR length(p_data[i]) > 16777216 THEN
				RAISE EXCEPTION 'run file % is over its size', i USING ERRCODE = '22001';
			END IF;
			v_total := v_total + length(p_data[i]);
		END LOOP;
		IF v_total > 67108864 THEN
			RAISE EXCEPTION 'a run of % bytes (at most 64 MiB)', v_total USING ERRCODE = '22001';
		END IF;
		IF p_names IS NOT NULL AND cardinality(p_names) > 0 AND p_state <> 'done' THEN
			RAISE EXCEPTION 'only a job done has a run to keep' USING ERRCODE = '22023';
		END IF;
		SELECT attempts INTO v_attempts FROM jobs WHERE id = p_job AND owner = p_worker AND state = 'running' FOR UPDATE;
		IF NOT FOUND THEN
			RETURN false;
		END IF;
		IF v_worker AND (p_attempts > v_attempts OR p_attempts < v_attempts - 1) THEN
			RAISE EXCEPTION 'a worker gives back at most the claim it used (% attempts, not %)', v_attempts, p_attempts
				USING ERRCODE = '42501';
		END IF;
		UPDATE jobs SET state = p_state, stage = p_stage, blame = p_blame, error = p_error, attempts = p_attempts,
			not_before = CASE WHEN p_retry > 0 THEN patchbot_time(NULL, p_retry) ELSE coalesce(p_not_before, not_before) END,
			run_dir = CASE WHEN v_worker THEN run_dir ELSE p_run_dir END,
			owner = CASE WHEN p_state = 'queued' THEN '' ELSE owner END,
			lease_until = '', updated = v_now
		WHERE id = p_job;
		DELETE FROM run_files WHERE job_id = p_job;
		FOR i IN 1 .. coalesce(cardinality(p_names), 0) LOOP
			INSERT INTO run_files (job_id, name, data) VALUES (p_job, p_names[i], p_data[i]);
		END LOOP;
		RETURN true;
	END $$;

	-- The jobs a worker held when it died: queued again, or parked after
	-- p_max_crashes such deaths.
	CREATE FUNCTION patchbot_recover(p_worker text, p_max_crashes int) RETURNS SETOF jobs LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_now text := patchbot_time(NULL, 0);
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		RETURN QUERY UPDATE jobs SET crashes = crashes + 1,
			state = CASE WHEN crashes + 1 >= p_max_crashes THEN 'parked' ELSE 'queued' END,
			error = CASE WHEN crashes + 1 >= p_max_crashes THEN 'parked: its worker died while running it ' || (crashes + 1) || ' times' ELSE error END,
			owner = CASE WHEN crashes + 1 >= p_max_crashes THEN owner ELSE '' END,
			lease_until = '', updated = v_now
		WHERE state = 'running' AND owner = p_worker RETURNING *;
	END $$;

	CREATE FUNCTION patchbot_register(p_worker text, p_host text, p_caps text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_now text := patchbot_time(NULL, 0);
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		IF length(p_host) > 255 OR length(p_caps) > 16384 THEN
			RAISE EXCEPTION 'a host name or capabilities over their size' USING ERRCODE = '22001';
		END IF;
		INSERT INTO workers (name, host, caps, job_id, started, since, heartbeat, stopped)
		VALUES (p_worker, p_host, p_caps, 0, v_now, v_now, v_now, '')
		ON CONFLICT (name) DO UPDATE SET host = excluded.host, caps = excluded.caps, job_id = 0,
			started = excluded.started, since = excluded.since, heartbeat = excluded.heartbeat, stopped = '';
	END $$;

	CREATE FUNCTION patchbot_stop_worker(p_worker text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	DECLARE
		v_now text := patchbot_time(NULL, 0);
	BEGIN
		PERFORM patchbot_as(p_worker, NULL);
		UPDATE workers SET stopped = v_now, heartbeat = v_now, since = v_now, job_id = 0 WHERE name = p_worker;
	END $$;

	-- Base kernels' rounds, each caller's own (session_user's).
	CREATE FUNCTION patchbot_base_rounds(p_key text) RETURNS TABLE (result bytea, saved text) LANGUAGE sql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
		SELECT b.result, b.saved FROM base_rounds b WHERE b.owner = session_user AND b.key = p_key
	$$;

	CREATE FUNCTION patchbot_put_base_rounds(p_key text, p_result bytea, p_saved text) RETURNS void LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = public, pg_temp AS $$
	BEGIN
		IF length(p_key) > 128 OR length(p_result) > 4194304 OR length(p_saved) > 64 THEN
			RAISE EXCEPTION 'base rounds over their size' USING ERRCODE = '22001';
		END IF;
		INSERT INTO base_rounds (owner, key, result, saved) VALUES (session_user, p_key, p_result, p_saved)
		ON CONFLICT (owner, key) DO UPDATE SET result = excluded.result, saved = excluded.saved;
	END $$;

	REVOKE EXECUTE ON FUNCTION patchbot_is_worker(), patchbot_as(text, text), patchbot_time(text, float8),
		patchbot_lease(float8),
		patchbot_claim(text, text, float8, text, text, int, int, int, text[], int),
		patchbot_job_suites(text, bigint),
		patchbot_heartbeat(text, bigint, float8, text, text), patchbot_set_stage(text, bigint, text),
		patchbot_end_job(text, bigint, text, text, text, text, int, text, float8, text, text[], bytea[]),
		patchbot_recover(text, int), patchbot_register(text, text, text), patchbot_stop_worker(text),
		patchbot_base_rounds(text), patchbot_put_base_rounds(text, bytea, text) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION
		patchbot_claim(text, text, float8, text, text, int, int, int, text[], int),
		patchbot_job_suites(text, bigint),
		patchbot_heartbeat(text, bigint, float8, text, text), patchbot_set_stage(text, bigint, text),
		patchbot_end_job(text, bigint, text, text, text, text, int, text, float8, text, text[], bytea[]),
		patchbot_recover(text, int), patchbot_register(text, text, text), patchbot_stop_worker(text),
		patchbot_base_rounds(text), patchbot_put_base_rounds(text, bytea, text) TO patchbot_worker;`

// pgTimes are the times a holder's function takes: at, and at plus the
// lease, as stored; both nil (the database's clock) when at is zero.
func pgTimes(at time.Time, lease time.Duration) (atArg, untilArg any) {
	if at.IsZero() {
		return nil, nil
	}
	return fmtTime(at), fmtTime(at.Add(lease))
}

// claimJobPG is ClaimJob on PostgreSQL: patchbot_claim, then the job's
// suites.
func (s *Store) claimJobPG(ctx context.Context, c Claim) (*Job, error) {
	suites := c.Caps.Suites
	if suites == nil {
		suites = []string{}
	}
	atArg, untilArg := pgTimes(c.At, c.Lease)
	j, err := scanJob(s.r.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM patchbot_claim(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Worker, c.Kind, c.Lease.Seconds(), atArg, untilArg, boolInt(c.Caps.Accel == "kvm"), c.Caps.CPUs, c.Caps.MemMiB,
		suites, c.MaxAttempts))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoJob
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a job: %w", err)
	}
	j.Needs.Suites, err = queryAll(ctx, s.r, "reading the claimed job's suites", func(rows *sql.Rows) (name string, err error) {
		return name, rows.Scan(&name)
	}, `SELECT patchbot_job_suites(?, ?)`, c.Worker, j.ID)
	if err != nil {
		return nil, fmt.Errorf("claiming a job: %w", err)
	}
	return j, nil
}

// endJobPG is EndJob on PostgreSQL: one call of patchbot_end_job.
func endJobPG(ctx context.Context, r runner, worker bool, j *Job, files []RunFile) error {
	names, data := make([]string, len(files)), make([][]byte, len(files))
	for i, f := range files {
		names[i], data[i] = f.Name, f.Data
	}
	var notBefore, retry any
	if j.RetryAfter > 0 {
		retry = j.RetryAfter.Seconds()
	} else if !worker {
		notBefore = fmtTime(j.NotBefore)
	}
	var held bool
	err := r.QueryRowContext(ctx, `SELECT patchbot_end_job(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.Owner, j.ID, string(j.State), j.Stage, string(j.Blame), j.Error, j.Attempts, notBefore, retry, j.RunDir,
		names, data).Scan(&held)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("ending job %d: %w", j.ID, ErrLeaseLost)
	}
	return nil
}

// checkRun says whether a run's files are within their sizes.
func checkRun(files []RunFile) error {
	if len(files) > MaxRunFiles {
		return fmt.Errorf("a run of %d files (at most %d)", len(files), MaxRunFiles)
	}
	total := 0
	for _, f := range files {
		if len(f.Name) > MaxRunName || len(f.Data) > MaxRunFile {
			return fmt.Errorf("run file %.64q is over its size (%d bytes of data, at most %d; a name of at most %d)",
				f.Name, len(f.Data), MaxRunFile, MaxRunName)
		}
		total += len(f.Data)
	}
	if total > MaxRunTotal {
		return fmt.Errorf("a run of %d bytes (at most %d)", total, MaxRunTotal)
	}
	return nil
}
