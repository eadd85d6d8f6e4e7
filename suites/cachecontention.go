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
// mixed operations, each from cold caches, with T threads.
func runCacheContention(r *round, img *mountedImage) error {
	meta, small := groupFiles(img.files, "meta"), groupFiles(img.files, "small")
	if len(meta) == 0 || len(small) == 0 {
		return fmt.Errorf("the image needs groups \"meta\" and \"small\" (has %d and %d files)", len(meta), len(small))
	}
	threads := r.cfg.Params.Threads
	params := map[string]string{"threads": strconv.Itoa(threads)}
	r.res.Notes["threads"] = strconv.Itoa(threads)
	for _, w := range r.cfg.Workloads {
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
	elapsed, all, err := r.storm("stat-storm", params, threads, func(t int) (latencies, error) {
		l := make(latencies, 0, len(files)/threads+1)
		for i := t; i < len(files); i += threads {
			t0 := time.Now()
			if _, err := os.Lstat(filepath.Join(root, files[i].Path)); err != nil {
				return nil, err
			}
			l = append(l, time.Since(t0))
		}
		return l, nil
	})
	if err != nil {
		return err
	}
	r.sample("stat-storm", params, mFilesPerS, float64(len(files))/elapsed.Seconds())
	r.sample("stat-storm", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("stat-storm", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}

// storm runs fn on threads threads at once, measured as workload with the
// release counters, and returns the time they took and the latencies of
// all their operations: fn(t) is thread t's, one latency an operation.
func (r *round) storm(workload string, params map[string]string, threads int,
	fn func(t int) (latencies, error)) (time.Duration, latencies, error) {
	lat := make([]latencies, threads)
	var elapsed time.Duration
	err := r.measure(workload, params, true, func() error {
		var err error
		elapsed, err = parallel(threads, func(t int) (err error) {
			lat[t], err = fn(t)
			return err
		})
		return err
	})
	var all latencies
	for _, l := range lat {
		all = append(all, l...)
	}
	return elapsed, all, err
}

// readStorm: thread t reads its share of the small files whole, each read
// timed from open to close.
func (r *round) readStorm(root string, files []fsimage.File, threads int, params map[string]string) error {
	var bytes atomic.Int64
	elapsed, all, err := r.storm("read-storm", params, threads, func(t int) (latencies, error) {
		buf := make([]byte, 128<<10)
		l := make(latencies, 0, len(files)/threads+1)
		for i := t; i < len(files); i += threads {
			t0 := time.Now()
			n, err := readWhole(filepath.Join(root, files[i].Path), buf)
			if err != nil {
				return nil, err
			}
			l = append(l, time.Since(t0))
			if n != files[i].Size {
				return nil, fmt.Errorf("%s: read %d bytes, the image has %d", files[i].Path, n, files[i].Size)
			}
			bytes.Add(n)
		}
		return l, nil
	})
	if err != nil {
		return err
	}
	r.sample("read-storm", params, mFilesPerS, float64(len(files))/elapsed.Seconds())
	r.sample("read-storm", params, mMiBPerS, float64(bytes.Load())/(1<<20)/elapsed.Seconds())
	r.sample("read-storm", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("read-storm", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}

// mixed: each thread does Ops operations of open+read+stat+close on files
// drawn at random (seeded by round, r.drawSeed, and thread, so both
// kernels draw the same sequence), as filebench's line in the seed.
func (r *round) mixed(root string, files []fsimage.File, threads int, params map[string]string) error {
	ops := r.cfg.Params.Ops
	elapsed, all, err := r.storm("mixed", params, threads, func(t int) (latencies, error) {
		rng := rand.New(rand.NewPCG(r.drawSeed(), uint64(t)))
		buf := make([]byte, 128<<10)
		l := make(latencies, 0, ops)
		for k := 0; k < ops; k++ {
			path := filepath.Join(root, files[rng.IntN(len(files))].Path)
			t0 := time.Now()
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			for {
				n, err := f.Read(buf)
				if n == 0 || err != nil {
					break
				}
			}
			if _, err := os.Stat(path); err != nil {
				f.Close()
				return nil, err
			}
			f.Close()
			l = append(l, time.Since(t0))
		}
		return l, nil
	})
	if err != nil {
		return err
	}
	r.sample("mixed", params, mOpsPerS, float64(len(all))/elapsed.Seconds())
	r.sample("mixed", params, mLatMean, ms(all.mean()))
	r.sample("mixed", params, mLatP50, ms(all.quantile(0.50)))
	r.sample("mixed", params, mLatP99, ms(all.quantile(0.99)))
	return nil
}
