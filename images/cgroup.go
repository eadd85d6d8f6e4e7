package images

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroup is one build command's cgroup v1 memory and pids groups: a limit
// on the memory of the whole build (page cache and tmpfs included) and on
// its number of tasks, and afterwards the facts of whether the kernel had
// to kill for memory or refuse a fork. Used when patchbot runs as root on
// a host that mounts the v1 controllers (this one mounts no v2 ones).
//
// Where the cpuacct controller is mounted too, a third group counts the
// build's CPU time: bwrap's outer process exits with its sandbox's status
// without reaping the sandbox's init, so the CPU time of the build never
// reaches patchbot's wait (0.02 s for a whole make, measured).
type cgroup struct {
	mem, pids string // the group directories
	cpu       string // the cpuacct group, "" where there is none
}

const cgroupRoot = "/sys/fs/cgroup"

var (
	cgroupOnce sync.Once
	cgroupOK   bool
	cpuacctOK  bool
	cgroupSeq  atomic.Int64
)

// controllers are the v1 hierarchies a build's groups are made in; cpuacct
// only where cgroupsUsable found it.
func controllers() []string {
	if cpuacctOK {
		return []string{"memory", "pids", "cpuacct"}
	}
	return []string{"memory", "pids"}
}

// groupOf is the group named name under every controller.
func groupOf(name string) *cgroup {
	c := &cgroup{
		mem:  filepath.Join(cgroupRoot, "memory", "patchbot", name),
		pids: filepath.Join(cgroupRoot, "pids", "patchbot", name),
	}
	if cpuacctOK {
		c.cpu = filepath.Join(cgroupRoot, "cpuacct", "patchbot", name)
	}
	return c
}

// dirs are the group's directories.
func (c *cgroup) dirs() []string {
	if c.cpu != "" {
		return []string{c.mem, c.pids, c.cpu}
	}
	return []string{c.mem, c.pids}
}

// cgroupsUsable reports whether patchbot can make v1 memory and pids
// groups: it makes their parent "patchbot" groups once.
func cgroupsUsable() bool {
	cgroupOnce.Do(func() {
		for _, c := range []string{"memory", "pids"} {
			if err := os.MkdirAll(filepath.Join(cgroupRoot, c, "patchbot"), 0o755); err != nil {
				return
			}
		}
		_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "patchbot", "memory.oom_control"))
		cgroupOK = err == nil
		if os.MkdirAll(filepath.Join(cgroupRoot, "cpuacct", "patchbot"), 0o755) == nil {
			_, err := os.Stat(filepath.Join(cgroupRoot, "cpuacct", "patchbot", "cpuacct.stat"))
			cpuacctOK = err == nil
		}
		if cgroupOK {
			removeStaleCgroups()
		}
	})
	return cgroupOK
}

// removeStaleCgroups removes the groups of patchbot processes that died
// (killed before they could remove their own): their builds died with
// them, and an empty group must not outlive its maker for ever.
func removeStaleCgroups() {
	seen := map[string]bool{}
	for _, c := range controllers() {
		dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, c, "patchbot", "build-*"))
		for _, d := range dirs {
			name := filepath.Base(d)
			var pid, seq int
			if _, err := fmt.Sscanf(name, "build-%d-%d", &pid, &seq); err != nil || seen[name] {
				continue
			}
			if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
				seen[name] = true
				groupOf(name).remove()
			}
		}
	}
}

// newCgroup makes the groups of one command with the limits l.
func newCgroup(l Limits) (*cgroup, error) {
	name := fmt.Sprintf("build-%d-%d", os.Getpid(), cgroupSeq.Add(1))
	c := groupOf(name)
	for _, d := range c.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			c.remove()
			return nil, infra("creating cgroup", err)
		}
	}
	set := func(dir, file, value string) error {
		return os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644)
	}
	mem := strconv.FormatInt(l.Memory, 10)
	if err := set(c.mem, "memory.limit_in_bytes", mem); err != nil {
		c.remove()
		return nil, infra("setting the build's memory limit", err)
	}
	// Swap counts too where the kernel accounts it (memsw must not be
	// below the memory limit, so it is set second).
	set(c.mem, "memory.memsw.limit_in_bytes", mem)
	if err := set(c.pids, "pids.max", strconv.Itoa(l.Processes)); err != nil {
		c.remove()
		return nil, infra("setting the build's process limit", err)
	}
	return c, nil
}

// procs are the files the command's first process writes its pid to.
func (c *cgroup) procs() []string {
	var out []string
	for _, d := range c.dirs() {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// userHZ is the unit of cpuacct.stat: USER_HZ, 100 on every Linux
// architecture patchbot builds on.
const userHZ = 100

// cpuTime is the user and system CPU time of everything that ran in the
// group, and false where there is no cpuacct group to say.
func (c *cgroup) cpuTime() (user, sys time.Duration, ok bool) {
	if c.cpu == "" {
		return 0, 0, false
	}
	file := filepath.Join(c.cpu, "cpuacct.stat")
	if _, err := os.Stat(file); err != nil {
		return 0, 0, false
	}
	tick := time.Second / userHZ
	return time.Duration(counter(file, "user")) * tick, time.Duration(counter(file, "system")) * tick, true
}

// facts returns how many processes the kernel killed for want of memory
// in the group, and how many forks the pids limit refused.
func (c *cgroup) facts() (oomKills, pidsMax int) {
	return counter(filepath.Join(c.mem, "memory.oom_control"), "oom_kill"),
		counter(filepath.Join(c.pids, "pids.events"), "max")
}

// peakMemory is the most memory the group used at once (0 when the
// controller does not say).
func (c *cgroup) peakMemory() int64 {
	data, err := os.ReadFile(filepath.Join(c.mem, "memory.max_usage_in_bytes"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// counter reads "name N" from a cgroup file of such lines.
func counter(file, name string) int {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == name {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// remove kills anything left in the groups (nothing should be: the PID
// namespace ended with bwrap) and removes them.
func (c *cgroup) remove() {
	for _, d := range c.dirs() {
		for try := 0; try < 50; try++ {
			if err := os.Remove(d); err == nil || os.IsNotExist(err) {
				break
			}
			killProcs(d)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// killProcs sends SIGKILL to every process of the group directory d.
func killProcs(d string) {
	data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// watchForksEvery is how often watchForks reads the group's counter.
var watchForksEvery = 100 * time.Millisecond

// watchForks stops a build the first time its pids group refuses a fork:
// it calls kill, then kills what is left in the group. Make fails where a
// fork is refused, so a build at its process limit has failed already; but
// a fork bomb beside it keeps the group at the limit, hundreds of
// processes spinning on refused forks, until make happens to ask for one.
// That took minutes at a load average of 50 on this host (2 cores), and
// every other process on it, a measurement's VMs or a mail server,
// starved meanwhile. Reading the counter ten times a second costs
// nothing. stop, called once the build has ended, says whether it was
// stopped so.
func (c *cgroup) watchForks(kill func()) (stop func() bool) {
	done := make(chan struct{})
	var fired atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(watchForksEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if counter(filepath.Join(c.pids, "pids.events"), "max") > 0 {
				fired.Store(true)
				kill()
				killProcs(c.pids)
				return
			}
		}
	}()
	return func() bool {
		close(done)
		wg.Wait()
		return fired.Load()
	}
}
