package suites

import (
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// runReadahead fills the bucket × readers table: for every size bucket (an
// image group) and reader count, drop caches and read every file of the
// bucket whole with that many parallel readers taking files from one queue.
func runReadahead(r *round, img *mountedImage) error {
	for _, g := range r.cfg.Image.Groups {
		bucket := groupFiles(img.files, g.Name)
		for _, readers := range r.cfg.Params.Readers {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if err := r.timed(PhaseDropCaches, dropCaches); err != nil {
				return err
			}
			params := map[string]string{"bucket": g.Name, "readers": strconv.Itoa(readers)}
			var next, bytes atomic.Int64
			var elapsed time.Duration
			err := r.measure("bucket-read", params, false, func() error {
				var err error
				elapsed, err = parallel(readers, func(int) error {
					buf := make([]byte, 1<<20)
					for {
						i := int(next.Add(1) - 1)
						if i >= len(bucket) {
							return nil
						}
						n, err := readWhole(filepath.Join(img.dir, bucket[i].Path), buf)
						if err != nil {
							return err
						}
						if n != bucket[i].Size {
							return fmt.Errorf("%s: read %d bytes, the image has %d", bucket[i].Path, n, bucket[i].Size)
						}
						bytes.Add(n)
					}
				})
				return err
			})
			if err != nil {
				return fmt.Errorf("bucket %s, %d readers: %w", g.Name, readers, err)
			}
			r.sample("bucket-read", params, mElapsed, elapsed.Seconds())
			r.sample("bucket-read", params, mMiBPerS, float64(bytes.Load())/(1<<20)/elapsed.Seconds())
		}
	}
	return nil
}
