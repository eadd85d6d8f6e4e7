package suites

import (
	"errors"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

// parallel runs fn(0..n-1), each on its own locked OS thread, released
// together once all are ready, and returns the elapsed time from release
// to the last one's end and the first error.
func parallel(n int, fn func(i int) error) (time.Duration, error) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	ready.Add(n)
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			// A thread per worker, as the seed's T OS threads; the thread is
			// discarded afterwards rather than reused for other goroutines.
			runtime.LockOSThread()
			ready.Done()
			<-start
			errs[i] = fn(i)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	return time.Since(t0), errors.Join(errs...)
}

// readWhole reads a file to its end with buf and returns the bytes read.
func readWhole(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return readToEnd(f, buf)
}

// readToEnd reads f to its end with buf and returns the bytes read.
func readToEnd(f *os.File, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := f.Read(buf)
		n += int64(m)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// latencies summarises per-operation times for the latency samples.
type latencies []time.Duration

func (l latencies) mean() time.Duration {
	if len(l) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	return sum / time.Duration(len(l))
}

// quantile returns the q-quantile by nearest rank; l is sorted in place.
func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	i := int(q*float64(len(l))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(l) {
		i = len(l) - 1
	}
	return l[i]
}

func (l latencies) max() time.Duration {
	var m time.Duration
	for _, d := range l {
		m = max(m, d)
	}
	return m
}
