package suites

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/patchbot/patchbot/images/fsimage"
)

// runCacheContention runs the stat storm, the small-file read storm and the
// mixed operations, each from cold caches, with T threads, each as many
// times as Params.Repeat says (once unless told).
func runCacheContention(r *round, img *mountedImage) error {
	meta, small := groupFiles(img.files, "meta"), groupFiles(img.files, "small")
	if len(meta) == 0 || len(small) == 0 {
		return fmt.Errorf("the image needs groups \"meta\" and \"small\" (has %d and %d files)", len(meta), len(small))
	}
	threads := r.cfg.Params.Threads
	params := map[string]string{"threads": strconv.Itoa(threads)}
	r.res.Notes["threads"] = strconv.Itoa(threads)
	for _, w := range r.cfg.Workloads {
		// Each run of a workload repeated in the window (Params.Repeat)
		// starts from cold caches as the first did, and its samples are
		// more windows of its metrics (foldWindows).
		for range r.cfg.Params.repeats(w) {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if err := r.timed(PhaseDropCaches, dropCaches); err != nil {
				return err
			}
			var err error
			switch w {
			case "stat-storm":
				err = r.statStorm(img.dir, meta, threads, params)
			case "read-storm":
				err = r.readStorm(img.dir, small, threads, params)
			case "mixed":
				err = r.mixed(img.dir, small, threads, params)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", w, err)
			}
		}
	}
	return nil
}

func groupFiles(files []fsimage.File, group string) []fsimage.File {
	var out []fsimage.File
	for _, f := range files {
		if strings.HasPrefix(f.Path, group+"/") {
			out = append(out, f)
		}
	}
	return out
}

// statStorm: thread t stats files t, t+T, t+2T, ... (elbencho's stat phase,
// each thread its own share), so every directory is hit by many threads.
// Each lstat is timed: a herd shows in the tail.
func (r *round) statStorm(root string, files []fsimage.File, threads int, params map[string]string) error {
	elapsed, all, _, err := r.storm("stat-storm", params, stormStat, root, files, shares(len(files), threads))
	if err != nil {
		return err
	}
	r.sample("stat-storm", params, mFilesPerS, float64(len(files))/elapsed.Seconds())
	r.sample("stat-storm", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("stat-storm", params, mLatP95, ms(all.quantile(0.95)))
	r.sample("stat-storm", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}

// shares deals n files to threads threads: thread t's are t, t+T, t+2T...
func shares(n, threads int) [][]int {
	plan := make([][]int, threads)
	for t := range plan {
		for i := t; i < n; i += threads {
			plan[t] = append(plan[t], i)
		}
	}
	return plan
}

// storm runs op on the files of plan (plan[t]: thread t's, in order), its
// threads released together, measured as workload with the release
// counters, and returns the time from the release to the last thread's
// end, the latencies of all the operations, and the bytes read. The
// threads are the agent's own, or with Params.Workers "raw" a process's
// of their own (stormraw.go).
func (r *round) storm(workload string, params map[string]string, op, root string,
	files []fsimage.File, plan [][]int) (time.Duration, latencies, int64, error) {
	spec := stormSpec{Op: op, Files: make([]string, len(files)), Sizes: make([]int64, len(files)), Plan: plan}
	for i, f := range files {
		spec.Files[i], spec.Sizes[i] = filepath.Join(root, f.Path), f.Size
	}
	if r.cfg.Params.Workers == "raw" {
		return rawStorm(spec, func(run func() error) error { return r.measure(workload, params, true, run) })
	}
	if err := spec.check(); err != nil {
		return 0, nil, 0, err
	}
	lat := make([]latencies, len(plan))
	var elapsed time.Duration
	var bytes atomic.Int64
	err := r.measure(workload, params, true, func() error {
		var err error
		elapsed, err = parallel(len(plan), func(t int) error {
			buf := make([]byte, 128<<10)
			lat[t] = make(latencies, 0, len(plan[t]))
			for _, i := range plan[t] {
				t0 := time.Now()
				n, err := stormOp(op, spec.Files[i], buf)
				lat[t] = append(lat[t], time.Since(t0))
				if err != nil {
					return err
				}
				if op != stormStat && n != spec.Sizes[i] {
					return fmt.Errorf("%s: read %d bytes, the image has %d", files[i].Path, n, spec.Sizes[i])
				}
				bytes.Add(n)
			}
			return nil
		})
		return err
	})
	var all latencies
	for _, l := range lat {
		all = append(all, l...)
	}
	return elapsed, all, bytes.Load(), err
}

// stormOp does op to path with Go's os package and returns the bytes
// read: the agent's threads' side of rawStormOp.
func stormOp(op, path string, buf []byte) (int64, error) {
	switch op {
	case stormStat:
		_, err := os.Lstat(path)
		return 0, err
	case stormRead:
		return readWhole(path, buf)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := readToEnd(f, buf)
	if err != nil {
		return n, err
	}
	_, err = os.Stat(path)
	return n, err
}

// readStorm: thread t reads its share of the small files whole, each read
// timed from open to close.
func (r *round) readStorm(root string, files []fsimage.File, threads int, params map[string]string) error {
	elapsed, all, bytes, err := r.storm("read-storm", params, stormRead, root, files, shares(len(files), threads))
	if err != nil {
		return err
	}
	r.sample("read-storm", params, mFilesPerS, float64(len(files))/elapsed.Seconds())
	r.sample("read-storm", params, mMiBPerS, float64(bytes)/(1<<20)/elapsed.Seconds())
	r.sample("read-storm", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("read-storm", params, mLatP95, ms(all.quantile(0.95)))
	r.sample("read-storm", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}

// mixed: each thread does Ops operations of open+read+stat+close on files
// drawn at random (seeded by round, r.drawSeed, and thread, so both
// kernels draw the same sequence), as filebench's line in the seed.
func (r *round) mixed(root string, files []fsimage.File, threads int, params map[string]string) error {
	ops := r.cfg.Params.Ops
	plan := make([][]int, threads)
	for t := range plan {
		rng := rand.New(rand.NewPCG(r.drawSeed(), uint64(t)))
		for k := 0; k < ops; k++ {
			plan[t] = append(plan[t], rng.IntN(len(files)))
		}
	}
	elapsed, all, _, err := r.storm("mixed", params, stormMixed, root, files, plan)
	if err != nil {
		return err
	}
	r.sample("mixed", params, mOpsPerS, float64(len(all))/elapsed.Seconds())
	r.sample("mixed", params, mLatMean, ms(all.mean()))
	r.sample("mixed", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("mixed", params, mLatP95, ms(all.quantile(0.95)))
	r.sample("mixed", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}
