package suites

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The FUSE server runs in a child process of its own (this executable,
// started with childEnv=fuse), as a FUSE daemon would: its GOMAXPROCS is
// the number of server threads. go-fuse reads /dev/fuse with
// max(2, min(16, GOMAXPROCS)) goroutines, so for one server thread the
// file system is also wrapped single-threaded (MountOptions.SingleThreaded).
const (
	fuseBackingEnv = "PATCHBOT_FUSE_BACKING"
	fuseMountEnv   = "PATCHBOT_FUSE_MOUNT"
	fuseSingleEnv  = "PATCHBOT_FUSE_SINGLE"
	fuseRawEnv     = "PATCHBOT_FUSE_RAW"
)

// fuseServer serves a passthrough of the backing directory on the mount
// point until it is unmounted; it writes one byte to stdout when mounted.
func fuseServer() error {
	if os.Getenv(fuseRawEnv) == "1" {
		return rawFuseServer(os.Getenv(fuseBackingEnv), os.Getenv(fuseMountEnv), runtime.GOMAXPROCS(0))
	}
	root, err := fs.NewLoopbackRoot(os.Getenv(fuseBackingEnv))
	if err != nil {
		return err
	}
	srv, err := fs.Mount(os.Getenv(fuseMountEnv), root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMountStrict: true, // no fusermount in the guest; root mounts directly
		FsName:            "patchbot-passthrough",
		Name:              "patchbot",
		SingleThreaded:    os.Getenv(fuseSingleEnv) == "1",
	}})
	if err != nil {
		return fmt.Errorf("mounting FUSE: %w", err)
	}
	if _, err := os.Stdout.Write([]byte{1}); err != nil {
		return err
	}
	srv.Wait()
	return nil
}

// bonniePhases are bonnie++'s small-file phases, in its order.
var bonniePhases = []struct {
	name   string
	random bool
	op     string // create, read, delete
}{
	{"seq-create", false, "create"}, {"seq-read", false, "read"}, {"seq-delete", false, "delete"},
	{"rand-create", true, "create"}, {"rand-read", true, "read"}, {"rand-delete", true, "delete"},
}

func runFuseWaitq(r *round) error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse (CONFIG_FUSE_FS?): %w", err)
	}
	for _, threads := range r.cfg.Params.ServerThreads {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if err := r.bonnieOnFuse(threads); err != nil {
			return fmt.Errorf("%d server threads: %w", threads, err)
		}
	}
	return nil
}

func (r *round) bonnieOnFuse(threads int) error {
	work, err := os.MkdirTemp("", "patchbot-fuse-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	backing, mnt := filepath.Join(work, "backing"), filepath.Join(work, "mnt")
	os.Mkdir(backing, 0o755)
	os.Mkdir(mnt, 0o755)
	// The passthrough's backing store is a tmpfs, so the server's cost is
	// FUSE's, not a disk's.
	if err := unix.Mount("tmpfs", backing, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mounting tmpfs for the FUSE backing store: %w", err)
	}
	defer unix.Unmount(backing, unix.MNT_DETACH)

	stop, err := startFuseServer(backing, mnt, threads, r.cfg.Params.FuseServer == "raw")
	if err != nil {
		return err
	}
	defer stop()

	p := r.cfg.Params
	files := make([]string, p.Files)
	for d := 0; d < p.Dirs; d++ {
		if err := os.Mkdir(filepath.Join(mnt, fmt.Sprintf("d%02d", d)), 0o755); err != nil {
			return err
		}
	}
	for i := range files {
		files[i] = filepath.Join(mnt, fmt.Sprintf("d%02d", i%p.Dirs), fmt.Sprintf("%07d", i))
	}
	sizes, order, shuffled := r.bonnieDraws()
	run := localPhase(files, sizes, p.MaxBytes)
	if r.cfg.Params.FuseServer == "raw" {
		c, err := startRawClient(bonnieSpec{Files: files, Sizes: sizes, MaxBytes: p.MaxBytes})
		if err != nil {
			return err
		}
		defer c.close()
		run = c.phase
	}
	for _, ph := range bonniePhases {
		idx := order
		if ph.random {
			idx = shuffled
		}
		params := map[string]string{"server_threads": strconv.Itoa(threads), "phase": ph.name}
		var lat latencies
		var elapsed time.Duration
		err := r.measure("bonnie", params, false, func() error {
			var err error
			elapsed, lat, err = run(ph.op, idx)
			if err != nil {
				return fmt.Errorf("%s: %w", ph.name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.sample("bonnie", params, mOpsPerS, float64(len(idx))/elapsed.Seconds())
		r.sample("bonnie", params, mLatMean, ms(lat.mean()))
		r.sample("bonnie", params, mLatMax, ms(lat.max()))
	}
	return nil
}

// startFuseServer starts a passthrough of backing on mnt with threads
// server threads: go-fuse's loopback, or the raw server (fuseraw.go). Its
// stop unmounts the file system and returns the server's exit.
func startFuseServer(backing, mnt string, threads int, raw bool) (stop func() error, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	single := "0"
	if threads == 1 {
		single = "1"
	}
	cmd.Env = append(os.Environ(), childEnv+"=fuse", fuseBackingEnv+"="+backing, fuseMountEnv+"="+mnt,
		fuseSingleEnv+"="+single, "GOMAXPROCS="+strconv.Itoa(threads))
	if raw {
		// The raw server's threads block in raw reads of /dev/fuse, which
		// a stop-the-world would wait on: no collector (it allocates
		// little), and no preemption signals interrupting the reads.
		cmd.Env = append(cmd.Env, fuseRawEnv+"=1", "GOGC=off", "GODEBUG=asyncpreemptoff=1")
	}
	ready, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the FUSE server: %w", err)
	}
	if _, err := io.ReadFull(ready, make([]byte, 1)); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("the FUSE server did not mount: %w", err)
	}
	return func() error {
		if err := unix.Unmount(mnt, 0); err != nil {
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
		exited, err := waitChild(cmd, 10*time.Second)
		if !exited {
			return errors.New("the FUSE server did not stop within 10s of its unmount")
		}
		return err
	}, nil
}

// waitChild waits for cmd to exit, and kills it once grace is over:
// exited says whether it went by itself, and err is its exit.
func waitChild(cmd *exec.Cmd, grace time.Duration) (exited bool, err error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(grace):
		cmd.Process.Kill()
		return false, <-done
	}
}

// localPhase runs a phase's ops in this process, on one locked thread:
// bonnie++ is one client thread.
func localPhase(files []string, sizes []int, maxBytes int) func(op string, idx []int) (time.Duration, latencies, error) {
	data := make([]byte, maxBytes+1)
	buf := make([]byte, maxBytes+1)
	return func(op string, idx []int) (time.Duration, latencies, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		lat := make(latencies, 0, len(idx))
		t0 := time.Now()
		for _, i := range idx {
			s := time.Now()
			if err := bonnieOp(op, files[i], data[:sizes[i]], buf); err != nil {
				return 0, nil, fmt.Errorf("%s: %w", files[i], err)
			}
			lat = append(lat, time.Since(s))
		}
		return time.Since(t0), lat, nil
	}
}

// bonnieDraws are a round's file sizes (0 to MaxBytes), in order and in
// the random phases' order, seeded by r.drawSeed.
func (r *round) bonnieDraws() (sizes, order, shuffled []int) {
	p := r.cfg.Params
	rng := rand.New(rand.NewPCG(r.drawSeed(), 2))
	sizes, order = make([]int, p.Files), make([]int, p.Files)
	for i := range sizes {
		sizes[i] = rng.IntN(p.MaxBytes + 1)
		order[i] = i
	}
	shuffled = append([]int(nil), order...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	return sizes, order, shuffled
}

// bonnieOp is one file of a phase: create (and write its bytes), read
// (stat, and read the bytes if any), or delete.
func bonnieOp(op, path string, data, buf []byte) error {
	switch op {
	case "create":
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		if len(data) > 0 {
			if _, err := unix.Write(fd, data); err != nil {
				unix.Close(fd)
				return err
			}
		}
		return unix.Close(fd)
	case "read":
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return err
		}
		if st.Size == 0 {
			return nil
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		_, err = unix.Read(fd, buf)
		unix.Close(fd)
		return err
	case "delete":
		return unix.Unlink(path)
	}
	return errors.New("unknown bonnie op " + op)
}
