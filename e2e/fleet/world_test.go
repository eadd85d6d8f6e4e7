// Package fleet tests a fleet as an operator starts it: the patchbot
// binary, built by the test, as `patchbot watch` (the coordinator, run as
// an unprivileged user with no build tools on its PATH) and two or more
// `patchbot worker`s, each with its own config, state, cache, PostgreSQL
// login role and password file, each in a network namespace of its own
// that reaches PostgreSQL over a veth pair with TLS (sslmode=verify-full):
// as near to other hosts as one machine allows. The processes are started
// from the command lines of the systemd units in deploy/systemd. The
// database is a real PostgreSQL cluster set up with deploy/postgresql's
// scripts; replies go out through a real Postfix.
//
// The many-jobs cases run the workers' documented dry run (dry_run: in
// their configs: nothing is built or booted); one case runs a real kernel.
package fleet

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	netmail "net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
	"github.com/patchbot/patchbot/store"
	"github.com/patchbot/patchbot/store/pgtest"
	"github.com/patchbot/patchbot/web"
)

// root is the module's root, from this package's directory.
const root = "../.."

var bins struct {
	once                sync.Once
	dir                 string
	patchbot, skewclock string
	err                 error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// binaries builds patchbot and skewclock once for the package's tests.
func binaries(t testing.TB) (patchbot, skewclock string) {
	t.Helper()
	bins.once.Do(func() {
		if bins.dir, bins.err = os.MkdirTemp("", "patchbot-fleet-bin-"); bins.err != nil {
			return
		}
		os.Chmod(bins.dir, 0o755)
		for pkg, out := range map[string]*string{"./cmd/patchbot": &bins.patchbot, "./internal/skewclock": &bins.skewclock} {
			*out = filepath.Join(bins.dir, filepath.Base(pkg))
			cmd := exec.Command("go", "build", "-o", *out, pkg)
			cmd.Dir = root
			if b, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.patchbot, bins.skewclock
}

// fleetEnv gates the fleet's tests: long, many processes, and the tools
// they start.
func fleetEnv(t *testing.T) {
	t.Helper()
	testenv.Long(t)
	testenv.Root(t) // network namespaces, Postfix, the cluster's postgres user
	testenv.Tools(t, "ip", "go", "psql", "postfix")
}

// unit is a systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

func readUnit(t testing.TB, name string) unit {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "deploy", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", name, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// command is the unit's ExecStart with the paths of this machine
// substituted (the binary, and files under /etc/patchbot), %i the
// instance, and its Environment.
func (u unit) command(t testing.TB, bin, instance string, files map[string]string) (argv, env []string) {
	t.Helper()
	argv = strings.Fields(u.get("Service", "ExecStart"))
	if len(argv) < 2 || argv[0] != "/usr/local/bin/patchbot" {
		t.Fatalf("ExecStart %q: want /usr/local/bin/patchbot COMMAND ...", argv)
	}
	argv[0] = bin
	for i, a := range argv {
		a = strings.ReplaceAll(a, "%i", instance)
		if p, ok := files[a]; ok {
			a = p
		} else if strings.HasPrefix(a, "/etc/patchbot/") {
			t.Fatalf("ExecStart names %s, which this test does not provide", a)
		}
		argv[i] = a
	}
	return argv, u["Service"]["Environment"]
}

// netns is a network namespace of its own reaching the host over a veth
// pair: a worker's "host". Cut drops the link; Restore brings it back.
type netns struct {
	name, hostIf, hostIP, nsIP string
}

var nsSeq struct {
	sync.Mutex
	n int
}

// newNetns makes a namespace with a /30 of its own, removed when the test
// ends.
func newNetns(t testing.TB) *netns {
	t.Helper()
	nsSeq.Lock()
	nsSeq.n++
	i := nsSeq.n
	nsSeq.Unlock()
	pid := os.Getpid() % 100000
	// 10.(64+pid%64).(i/64).(4*(i%64)) /30: this process's own range.
	a, b, c := 64+pid%64, i/64, 4*(i%64)
	n := &netns{name: fmt.Sprintf("pbfleet-%d-%d", pid, i), hostIf: fmt.Sprintf("pbf%d-%dh", pid, i),
		hostIP: fmt.Sprintf("10.%d.%d.%d", a, b, c+1), nsIP: fmt.Sprintf("10.%d.%d.%d", a, b, c+2)}
	peer := fmt.Sprintf("pbf%d-%dw", pid, i)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.hostIf).Run()
		exec.Command("ip", "netns", "del", n.name).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", n.name},
		{"link", "add", n.hostIf, "type", "veth", "peer", "name", peer, "netns", n.name},
		{"addr", "add", n.hostIP + "/30", "dev", n.hostIf},
		{"link", "set", n.hostIf, "up"},
		{"-n", n.name, "addr", "add", n.nsIP + "/30", "dev", peer},
		{"-n", n.name, "link", "set", peer, "up"},
		{"-n", n.name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return n
}

// Cut takes the host's side of the link down: the worker's packets go
// nowhere, and no reset tells it so.
func (n *netns) Cut(t testing.TB) {
	if out, err := exec.Command("ip", "link", "set", n.hostIf, "down").CombinedOutput(); err != nil {
		t.Fatalf("cutting %s: %v\n%s", n.name, err, out)
	}
}

// Restore brings the link back.
func (n *netns) Restore(t testing.TB) {
	if out, err := exec.Command("ip", "link", "set", n.hostIf, "up").CombinedOutput(); err != nil {
		t.Fatalf("restoring %s: %v\n%s", n.name, err, out)
	}
}

// proc is one process of the fleet, started and restarted as a service
// manager would, its standard error kept per start.
type proc struct {
	name string
	argv []string
	env  []string
	cred *syscall.Credential
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	logs []string
	done chan struct{}
}

func (p *proc) start(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	path := filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", p.name, len(p.logs)+1))
	logf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	p.logs = append(p.logs, path)
}

// running says whether the process is up.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL, as the OOM killer or a power cut would, and waits.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// stop sends SIGTERM, as systemctl stop does, and kills after timeout.
func (p *proc) stop(timeout time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(timeout):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// logText is everything the process wrote, every start of it.
func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.logs {
		data, _ := os.ReadFile(l)
		b.Write(data)
	}
	return b.String()
}

// logLine is one line of a process's JSON log.
type logLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Job  int64     `json:"job"`
}

// lines are the process's JSON log lines whose message starts with msg.
func (p *proc) lines(msg string) []logLine {
	var out []logLine
	for _, l := range strings.Split(p.logText(), "\n") {
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil && strings.HasPrefix(ll.Msg, msg) {
			out = append(out, ll)
		}
	}
	return out
}

// options shape a world.
type options struct {
	workers int
	lists   int
	lease   string // the fleet's lease: short, so that faults settle in seconds
	runs    int    // rounds a side
	profile string // the suites' profile: "" the pipeline's
	// dryRun is the workers' dry_run: config; "" runs the real pipeline.
	dryRun string
	// extraWorker is more of a worker's config.
	extraWorker string
	// skew runs a worker under skewclock with its clock off by this.
	skew map[string]time.Duration
	// cache is the workers' PATCHBOT_CACHE: each its own when empty.
	cache string
}

// world is one fleet.
type world struct {
	t     *testing.T
	o     options
	dir   string
	pg    *pgtest.Server
	pf    *smtptest.Postfix
	st    *store.Store // the test's own look, as the cluster's superuser
	admin *sql.DB
	ca    string
	http  string
	lists []string
	coord *proc
	// coordCache must stay absent: the coordinator builds nothing.
	coordCache string
	workers    map[string]*worker
	posted     []posting
	bin, skew  string
	settled    time.Time // when the last settle saw everything done and delivered
}

type worker struct {
	*proc
	ns    *netns
	cache string
}

type posting struct {
	id, author, list string
}

// dbName is the fleet's database, as deploy/postgresql/setup.sql makes it.
const dbName = "patchbot"

func newWorld(t *testing.T, o options) *world {
	t.Helper()
	fleetEnv(t)
	if o.workers == 0 {
		o.workers = 2
	}
	if o.lists == 0 {
		o.lists = 2
	}
	if o.lease == "" {
		o.lease = "4s"
	}
	if o.runs == 0 {
		o.runs = 2
	}
	bin, skew := binaries(t)
	began := time.Now()
	defer func() { t.Logf("the fleet is up in %s", time.Since(began).Round(10*time.Millisecond)) }()
	dir, err := os.MkdirTemp("", "patchbot-fleet-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // the coordinator runs as nobody
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &world{t: t, o: o, dir: dir, workers: map[string]*worker{}, bin: bin, skew: skew}

	// The workers' hosts first: PostgreSQL listens on their links.
	names := make([]string, o.workers)
	var listen []string
	nss := map[string]*netns{}
	for i := range names {
		names[i] = fmt.Sprintf("w%d", i+1)
		ns := newNetns(t)
		nss[names[i]] = ns
		listen = append(listen, ns.hostIP)
	}
	w.pg = pgtest.StartWith(t, pgtest.Options{Listen: listen, TLS: true, TLSHosts: listen, HBA: []string{
		// Workers from their hosts, and the coordinator, with TLS and a
		// password; the superuser on loopback stays trusted.
		"hostssl " + dbName + " all 10.0.0.0/8 scram-sha-256",
		"hostssl " + dbName + " coordinator 127.0.0.1/32 scram-sha-256",
		"host all all 10.0.0.0/8 reject",
	}})
	w.ca = filepath.Join(dir, "db-ca.pem")
	copyFile(t, w.pg.CAFile, w.ca, 0o644)
	// The operator's one-time setup, as a superuser: the coordinator's
	// role (the schema's owner) and database, the workers' group, and a
	// login role for each worker; passwords as \password would set them.
	w.psql("postgres", "-v", "db="+dbName, "-v", "coordinator=coordinator", "-f", filepath.Join(root, "deploy/postgresql/setup.sql"))
	for _, n := range names {
		w.psql("postgres", "-v", "worker="+n, "-f", filepath.Join(root, "deploy/postgresql/worker.sql"))
	}
	if w.admin, err = sql.Open("pgx", w.pg.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.admin.Close() })

	w.pf = smtptest.StartPostfix(t, filepath.Join(dir, "delivered"))
	w.http = freeAddr(t)
	var srcs strings.Builder
	for i := 0; i < o.lists; i++ {
		md := filepath.Join(dir, fmt.Sprintf("list-%c", 'a'+i))
		for _, sub := range []string{"new", "cur", "tmp"} {
			os.MkdirAll(filepath.Join(md, sub), 0o755)
		}
		w.lists = append(w.lists, md)
		fmt.Fprintf(&srcs, "  - {name: list-%c, maildir: %s, list: list-%c@lists.example.org, poll: 200ms}\n", 'a'+i, md, 'a'+i)
	}
	copyFile(t, filepath.Join(w.pf.ConfigDir, "cert.pem"), filepath.Join(dir, "smtp-ca.pem"), 0o644)

	// The coordinator: an unprivileged user, nothing on its PATH.
	uid, gid := nobody(t)
	cdir := filepath.Join(dir, "coordinator")
	os.Mkdir(cdir, 0o700)
	os.Chown(cdir, uid, gid)
	w.coordCache = filepath.Join(cdir, "cache")
	pw := w.password("coordinator", filepath.Join(cdir, "db-password"))
	os.Chown(pw, uid, gid)
	conf := fmt.Sprintf(`state_dir: %s
database: postgres://coordinator@127.0.0.1:%d/%s?sslmode=verify-full&sslrootcert=%s
database_password_file: %s
fleet: {local_worker: false, lease: %s, poll: 200ms}
sources:
%ssmtp: {enabled: true, addr: %q, from: bot@patchbot.test, ca_file: %s}
reply: {from: "patchbot <bot@patchbot.test>"}
suites: {runs: %d%s}
http: %s
`, filepath.Join(cdir, "state"), w.pg.Port, dbName, w.ca, pw, o.lease, srcs.String(), w.pf.Addr,
		filepath.Join(dir, "smtp-ca.pem"), o.runs, profileOf(o.profile), w.http)
	cfg := filepath.Join(cdir, "patchbot.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, uid, gid)
	argv, env := readUnit(t, "patchbot-watch.service").command(t, bin, "", map[string]string{"/etc/patchbot/patchbot.yaml": cfg})
	w.coord = &proc{name: "coordinator", argv: argv, dir: dir, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
		env: append(env, "PATH=/nonexistent", "HOME="+cdir, "PATCHBOT_CACHE="+w.coordCache)}
	t.Cleanup(func() { w.coord.stop(10 * time.Second); w.dumpOnFailure(w.coord) })
	w.coord.start(t)
	w.waitFor("the coordinator to serve /healthz and migrate the schema", 60*time.Second, func() bool {
		if !w.coord.running() {
			t.Fatalf("the coordinator exited:\n%s", tail(w.coord.logText(), 3000))
		}
		resp, err := http.Get("http://" + w.http + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		st, err := store.OpenWorker(w.pg.DSN(dbName))
		if err != nil {
			return false
		}
		w.st = st
		return true
	})
	t.Cleanup(func() { w.st.Close() })

	wu := readUnit(t, "patchbot-worker@.service")
	for _, n := range names {
		w.addWorker(t, wu, n, nss[n])
	}
	for _, n := range names {
		w.startWorker(n)
	}
	// Up is registered and past Recover: a worker logs "worker started"
	// only after both, and a test that reads that line must not race it.
	w.waitFor("every worker to register and start", 60*time.Second, func() bool {
		ws, _ := w.st.Workers(context.Background(), time.Now().Add(-time.Hour))
		started := 0
		for _, n := range names {
			if !w.workers[n].running() {
				t.Fatalf("worker %s exited:\n%s", n, tail(w.workers[n].logText(), 3000))
			}
			if len(w.workers[n].lines("worker started")) > 0 {
				started++
			}
		}
		return len(ws) == len(names) && started == len(names)
	})
	return w
}

// addWorker writes a worker's config, password and cache, and its command
// from the unit, in its namespace (and under skewclock when asked).
func (w *world) addWorker(t *testing.T, wu unit, name string, ns *netns) {
	wdir := filepath.Join(w.dir, name)
	os.Mkdir(wdir, 0o700)
	pw := w.password(name, filepath.Join(wdir, "db-password"))
	conf := fmt.Sprintf(`state_dir: %s
database: postgres://%s@%s:%d/%s?sslmode=verify-full&sslrootcert=%s
database_password_file: %s
fleet: {local_worker: false, lease: %s, poll: 200ms}
reply: {from: "patchbot <bot@patchbot.test>"}
`, filepath.Join(wdir, "state"), name, ns.hostIP, w.pg.Port, dbName, w.ca, pw, w.o.lease)
	if w.o.dryRun != "" {
		conf += "dry_run: " + w.o.dryRun + "\n"
	}
	conf += w.o.extraWorker
	cfg := filepath.Join(wdir, "worker.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	argv, env := wu.command(t, w.bin, name, map[string]string{"/etc/patchbot/worker.yaml": cfg})
	cache := w.o.cache
	if cache == "" {
		cache = filepath.Join(wdir, "cache")
		os.Mkdir(cache, 0o755)
	}
	for i, e := range env {
		if strings.HasPrefix(e, "PATCHBOT_CACHE=") {
			env[i] = "PATCHBOT_CACHE=" + cache
		}
	}
	pre := []string{"ip", "netns", "exec", ns.name}
	if off, ok := w.o.skew[name]; ok {
		pre = append(pre, w.skew, "-offset", off.String())
	}
	wk := &worker{proc: &proc{name: name, argv: append(pre, argv...), dir: w.dir,
		env: append(os.Environ(), env...)}, ns: ns, cache: cache}
	w.workers[name] = wk
	t.Cleanup(func() { wk.stop(20 * time.Second); w.dumpOnFailure(wk.proc) })
}

func (w *world) startWorker(name string) { w.workers[name].start(w.t) }

func (w *world) dumpOnFailure(p *proc) {
	if w.t.Failed() {
		w.t.Logf("%s's log (its end):\n%s", p.name, tail(p.logText(), 4000))
	}
}

// psql runs a script as the cluster's superuser, stopping at its first
// error.
func (w *world) psql(db string, args ...string) {
	w.t.Helper()
	cmd := exec.Command("psql", append([]string{w.pg.DSN(db), "-v", "ON_ERROR_STOP=1", "-q"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("psql %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// password gives a role a new password, as \password would, and writes
// it to a file of mode 0600.
func (w *world) password(role, path string) string {
	w.t.Helper()
	pw := fmt.Sprintf("pw-%s-%d", role, time.Now().UnixNano())
	db, err := sql.Open("pgx", w.pg.DSN("postgres"))
	if err != nil {
		w.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf(`ALTER ROLE %q PASSWORD '%s'`, role, pw)); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitFor polls cond until it holds or the time is up.
func (w *world) waitFor(what string, timeout time.Duration, cond func() bool) time.Duration {
	w.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			w.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func (w *world) jobs() []*store.Job {
	jobs, err := w.st.Jobs(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return jobs
}

// post delivers a series of one patch into a list's Maildir, as the
// list's server would: the seed patch's body, under a subject and
// Message-ID of its own, from the list's one author.
func (w *world) post(list int) string {
	w.t.Helper()
	n := len(w.posted)
	_, body, ok := bytes.Cut(seedPatch(w.t), []byte("\n\n"))
	if !ok {
		w.t.Fatal("the seed mail has no body")
	}
	p := posting{id: fmt.Sprintf("fleet-%d-%d@example.org", list, n), author: fmt.Sprintf("dev-%c@example.org", 'a'+list),
		list: fmt.Sprintf("list-%c@lists.example.org", 'a'+list)}
	mail := fmt.Sprintf(`From: Dev %c <%s>
To: %s
Subject: [PATCH] squashfs: cache wakeups, take %d of list %c
Date: Fri, 24 Jul 2026 12:05:56 -0700
Message-ID: <%s>
List-Id: <list-%c.lists.example.org>
MIME-Version: 1.0
Content-Type: text/plain; charset=UTF-8

%s`, 'a'+list, p.author, p.list, n, 'a'+list, p.id, 'a'+list, body)
	// As a delivery agent does: written in tmp/, then renamed into new/.
	name := fmt.Sprintf("%d.M%d.fleet", 1800000000+n, n)
	tmp := filepath.Join(w.lists[list], "tmp", name)
	if err := os.WriteFile(tmp, []byte(mail), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(w.lists[list], "new", name)); err != nil {
		w.t.Fatal(err)
	}
	w.posted = append(w.posted, p)
	return p.id
}

// postMany posts n series, alternating between the lists.
func (w *world) postMany(n int) {
	for i := 0; i < n; i++ {
		w.post(i % len(w.lists))
	}
}

func seedPatch(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "testdata/mbox/squashfs-thundering-herd.mbox"))
	if err != nil {
		t.Fatal(err)
	}
	// The first mail of the mbox, without its "From " line.
	_, b, _ = bytes.Cut(b, []byte("\n"))
	if i := bytes.Index(b, []byte("\nFrom ")); i >= 0 {
		b = b[:i+1]
	}
	return b
}

// home is the coordinator's dashboard's /api/home.
func (w *world) home() *web.HomeView {
	w.t.Helper()
	resp, err := http.Get("http://" + w.http + "/api/home")
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v web.HomeView
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		w.t.Fatalf("/api/home: %v: %s", err, b)
	}
	return &v
}

func workerState(v *web.HomeView, name string) string {
	for _, ws := range v.Workers {
		if ws.Name == name {
			return ws.State
		}
	}
	return ""
}

// runningOn is the job w is running, or nil.
func (w *world) runningOn(worker, stage string) *store.Job {
	for _, j := range w.jobs() {
		if j.State == store.JobRunning && j.Owner == worker && (stage == "" || strings.HasPrefix(j.Stage, stage)) {
			return j
		}
	}
	return nil
}

// delivered reads Postfix's Maildir: copies by the Message-ID they answer
// (In-Reply-To) and recipient (Delivered-To), and by their own Message-ID.
func (w *world) delivered() (perAnswer map[string]int, ids map[string]int) {
	w.t.Helper()
	msgs, err := smtptest.ReadMaildir(w.pf.Maildir)
	if err != nil {
		w.t.Fatal(err)
	}
	perAnswer, ids = map[string]int{}, map[string]int{}
	for _, raw := range msgs {
		m, err := netmail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			continue
		}
		irt := strings.Trim(m.Header.Get("In-Reply-To"), "<> ")
		perAnswer[irt+" "+strings.ToLower(m.Header.Get("Delivered-To"))]++
		ids[strings.Trim(m.Header.Get("Message-Id"), "<> ")]++
	}
	return perAnswer, ids
}

// tally is what a case counts: every posted series owes a job done once
// and a reply to its author and its list, one copy each.
type tally struct {
	Series, Jobs                     int
	JobsLost, JobsDup                int
	Replies, RepliesLost, RepliesDup int // copies, by series and recipient
	Uncertain                        int // deliveries a person had to check
	Crashes                          int // lost leases, counted on the jobs
}

func (t tally) String() string {
	return fmt.Sprintf("series %d: jobs lost %d, duplicated %d; reply copies %d: lost %d, duplicated %d; uncertain %d; crashes counted %d",
		t.Series, t.JobsLost, t.JobsDup, t.Replies, t.RepliesLost, t.RepliesDup, t.Uncertain, t.Crashes)
}

// settle waits until every posted series' job is done and its reply is at
// Postfix, as a person would wait, checking and requeueing an uncertain
// delivery that never arrived (the one thing SMTP cannot close); then it
// counts.
func (w *world) settle(timeout time.Duration) tally {
	w.t.Helper()
	var tl tally
	ctx := context.Background()
	checked := map[int64]bool{}
	deadline := time.Now().Add(timeout)
	for {
		tl = w.count()
		if tl.JobsLost == 0 && tl.RepliesLost == 0 {
			break
		}
		un, _ := w.st.OutboxIn(ctx, store.Uncertain)
		for _, m := range un {
			if checked[m.ID] {
				continue
			}
			checked[m.ID] = true
			if _, ids := w.delivered(); ids[m.MessageID] == 0 {
				out, err := exec.Command(w.bin, "outbox", "requeue", strconv.FormatInt(m.ID, 10),
					"--config", filepath.Join(w.dir, "coordinator", "patchbot.yaml")).CombinedOutput()
				if err != nil {
					w.t.Fatalf("patchbot outbox requeue %d: %v\n%s", m.ID, err, out)
				}
			}
		}
		if time.Now().After(deadline) {
			ob, _ := w.st.OutboxCounts(ctx)
			jc, _ := w.st.JobCounts(ctx)
			w.t.Errorf("not settled after %v: %s; outbox %v, jobs %v", timeout, tl, ob, jc)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	tl.Uncertain = len(checked)
	w.settled = time.Now()
	// Nothing more arrives later: no late duplicate.
	time.Sleep(time.Second)
	later := w.count()
	later.Uncertain = tl.Uncertain
	return later
}

// count counts what is there now.
func (w *world) count() tally {
	jobs := w.jobs()
	perAnswer, _ := w.delivered()
	tl := tally{Series: len(w.posted), Jobs: len(jobs)}
	byDedupe := map[string]int{}
	for _, j := range jobs {
		byDedupe[j.Dedupe]++
		tl.Crashes += j.Crashes
	}
	for _, n := range byDedupe {
		tl.JobsDup += n - 1
	}
	done := map[string]bool{}
	for _, j := range jobs {
		if j.State == store.JobDone {
			var req struct {
				Thread struct {
					MessageID string `json:"message_id"`
				} `json:"thread"`
			}
			json.Unmarshal(j.Request, &req)
			done[strings.Trim(req.Thread.MessageID, "<> ")] = true
		}
	}
	// A job done twice: more than one worker recorded its end.
	ends := map[int64]int{}
	for _, wk := range w.workers {
		for _, l := range wk.lines("job done") {
			ends[l.Job]++
		}
	}
	for _, n := range ends {
		tl.JobsDup += max(0, n-1)
	}
	for _, p := range w.posted {
		if !done[p.id] {
			tl.JobsLost++
		}
		for _, rcpt := range []string{p.author, p.list} {
			n := perAnswer[p.id+" "+rcpt]
			tl.Replies += n
			if n == 0 {
				tl.RepliesLost++
			}
			tl.RepliesDup += max(0, n-1)
		}
	}
	return tl
}

// report logs a case's figures in one line the docs quote.
func (w *world) report(name string, tl tally, recover time.Duration, extra string) {
	w.t.Logf("fleet-fault %s: %s; time to recover %s%s", name, tl, recover.Round(10*time.Millisecond), extra)
	if tl.JobsLost+tl.JobsDup+tl.RepliesLost+tl.RepliesDup != 0 {
		w.t.Errorf("%s: %s; want no job or reply lost or duplicated", name, tl)
	}
}

// warnings counts a process's warning and error lines by message.
func (p *proc) warnings() map[string]int {
	out := map[string]int{}
	for _, l := range strings.Split(p.logText(), "\n") {
		var ll struct{ Level, Msg string }
		if json.Unmarshal([]byte(l), &ll) == nil && (ll.Level == "WARN" || ll.Level == "ERROR") {
			out[ll.Level+" "+ll.Msg]++
		}
	}
	return out
}

// checkCoordinatorBuiltNothing: the coordinator never made a cache.
func (w *world) checkCoordinatorBuiltNothing() {
	if _, err := os.Stat(w.coordCache); err == nil {
		w.t.Errorf("the coordinator made a kernel cache at %s", w.coordCache)
	}
}

// profileOf is the suites config's profile entry, after its runs.
func profileOf(p string) string {
	if p == "" {
		return ""
	}
	return ", profile: " + p
}
