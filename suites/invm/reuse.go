package invm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/patchbot/patchbot/images"
	"github.com/patchbot/patchbot/suites"
)

// Bases keeps a base kernel's measured rounds, so that the next series
// tested on the same base, config, suite, profile, VM shape and host need
// not measure them again, as the kernel test robot keeps its base
// results. store.Store is one.
type Bases interface {
	BaseRounds(ctx context.Context, key string) (result []byte, saved time.Time, ok bool, err error)
	PutBaseRounds(ctx context.Context, key string, result []byte, saved time.Time) error
}

// Reusing is a Stopping that lets a base's rounds kept from an earlier
// run stand in for fresh ones (judge.Rounds): how many fresh control
// rounds check them and how old they may be (Reuse), and whether the
// controls show that the host drifted since (Drifted). The policy is the
// rule's; this package keeps the rounds (Bases) and runs the controls.
type Reusing interface {
	suites.Stopping
	Reuse() (controls int, maxAge time.Duration)
	Drifted(suite string, kept, controls *suites.Result) string
}

// KeepRounds is the most base rounds kept for a key: the latest.
const KeepRounds = 10

// BaseKey names what a base's rounds are valid for: the base commit (or
// head of the build measured as the base), its config, the suite and
// profile, what the profile resolves to (its workloads, parameters and
// image: a profile reshaped under the same name measures something else),
// the VM shape and backend, and this host.
func BaseKey(suite, profile string, base *images.Build, vm VMConfig) string {
	if profile == "" {
		profile = suites.DefaultProfile
	}
	cfg := &suites.Config{Suite: suite, Profile: profile}
	if s, err := suites.Lookup(suite); err == nil {
		if c, err := s.Resolve(profile); err == nil {
			cfg = c
		}
	}
	return baseKey(cfg, base, vm)
}

// baseKey is BaseKey of a resolved profile.
func baseKey(cfg *suites.Config, base *images.Build, vm VMConfig) string {
	host, _ := os.Hostname()
	commit := base.Commit
	if base.Head != "" {
		commit = base.Head
	}
	parts := []string{commit, base.ConfigHash, cfg.Suite, cfg.Profile, cfg.Sum(), vm.Backend, vm.Boot, vm.Clock,
		fmt.Sprintf("%dx%d", vm.CPUs, vm.MemMiB), host}
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:12])
}

// Reuse takes a base's rounds from Bases when they are kept for Key.
type Reuse struct {
	Bases Bases
	Key   string
	Log   *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

func (r *Reuse) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reuse) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// run measures sides[0] (the base) against sides[1] (the patched kernel)
// until stop says, reusing kept base rounds when it can:
//
//   - without kept rounds (or with rounds too old, or fewer than the
//     rule's fewest) it measures both afresh, interleaved, and keeps the
//     base's rounds;
//   - with them, it runs the rule's control rounds of each kernel,
//     interleaved, and checks the base's control rounds against the kept
//     ones (Reusing.Drifted). Past that check it goes on with the patched
//     kernel alone, judging it against the kept rounds and the controls,
//     and keeps the controls with the rounds. A host that drifted is
//     measured afresh, both kernels, from where the controls left off, and
//     its rounds replace the kept ones.
func (r *Reuse) run(ctx context.Context, cfg *suites.Config, sides []suites.Side, stop Reusing, quiet suites.Quiet,
	progress io.Writer) ([]*suites.Result, error) {
	controls, maxAge := stop.Reuse()
	fewest, _ := stop.Bounds()
	kept := r.load(ctx, fewest, maxAge)
	if kept == nil {
		out, err := suites.RunAB(ctx, cfg, sides, stop, quiet, progress)
		if err == nil {
			r.keep(ctx, out[0], nil)
		}
		return out, err
	}
	first, err := suites.RunAB(ctx, cfg, sides, suites.Fixed(controls), quiet, progress)
	if err != nil {
		return nil, err
	}
	rest := []suites.Side{sides[0], sides[1]}
	rest[1].Done = first[1]
	if why := stop.Drifted(cfg.Suite, kept, first[0]); why != "" {
		fmt.Fprintf(progress, "%s: kept base rounds not reused: %s; measuring afresh\n", cfg.Suite, why)
		r.log().Info("base rounds not reused", "suite", cfg.Suite, "key", r.Key, "reason", why)
		rest[0].Done = first[0]
		out, err := suites.RunAB(ctx, cfg, rest, stop, quiet, progress)
		if err != nil {
			return nil, err
		}
		r.keep(ctx, out[0], nil)
		return out, nil
	}
	fmt.Fprintf(progress, "%s: reusing %d kept base rounds (saved %s), %d fresh control round(s) agree\n",
		cfg.Suite, len(kept.Rounds), kept.Finished.Format(time.RFC3339), controls)
	// The base's rounds are the kept ones and the controls, and it is not
	// run again: the patched kernel goes on alone, its first look when it
	// has the rule's fewest rounds in all.
	rest[0].Done, rest[0].Guest = reused(kept, first[0]), nil
	out, err := suites.RunAB(ctx, cfg, rest, stop, quiet, progress)
	if err != nil {
		return nil, err
	}
	r.keep(ctx, kept, first[0])
	return out, nil
}

// load returns the kept base rounds for the key, if there are at least
// fewest of them and they are at most maxAge old.
func (r *Reuse) load(ctx context.Context, fewest int, maxAge time.Duration) *suites.Result {
	raw, saved, ok, err := r.Bases.BaseRounds(ctx, r.Key)
	if err != nil {
		r.log().Warn("reading kept base rounds", "key", r.Key, "err", err)
		return nil
	}
	if !ok || r.now().Sub(saved) > maxAge {
		return nil
	}
	var res suites.Result
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Rounds) < fewest {
		return nil
	}
	return &res
}

// keep stores the base's rounds for the next series: kept and fresh
// together (the latest KeepRounds of them), or fresh alone.
func (r *Reuse) keep(ctx context.Context, kept, fresh *suites.Result) {
	all := kept
	if fresh != nil {
		all = reused(kept, fresh)
	}
	all = latest(all, KeepRounds)
	raw, err := json.Marshal(all)
	if err == nil {
		err = r.Bases.PutBaseRounds(ctx, r.Key, raw, r.now())
	}
	if err != nil {
		r.log().Warn("keeping base rounds", "key", r.Key, "err", err)
	}
}

// reused is the base's result made of kept rounds and fresh ones: the
// kept samples are renumbered below 1 (0, -1, ...), so that they are never
// taken for a turn of this run, and counted in Reused.
func reused(kept, fresh *suites.Result) *suites.Result {
	out := *fresh
	out.Samples = nil
	out.Rounds = nil
	n := 0
	for _, rd := range kept.Rounds {
		if !rd.Repeated {
			n++
		}
	}
	renum := map[int]int{}
	next := 0
	for _, rd := range kept.Rounds {
		if _, ok := renum[rd.N]; !ok {
			renum[rd.N] = next
			next--
		}
		rd.N = renum[rd.N]
		out.Rounds = append(out.Rounds, rd)
	}
	for _, s := range kept.Samples {
		if m, ok := renum[s.Round]; ok {
			s.Round = m
		} else {
			s.Round = next
		}
		out.Samples = append(out.Samples, s)
	}
	out.Samples = append(out.Samples, fresh.Samples...)
	out.Rounds = append(out.Rounds, fresh.Rounds...)
	out.Reused = kept.Reused + n
	return &out
}

// latest keeps the last n rounds (by the order they ran) of r, numbered
// 1..n again.
func latest(r *suites.Result, n int) *suites.Result {
	out := *r
	var order []int
	seen := map[int]bool{}
	for _, rd := range r.Rounds {
		if !rd.Repeated && !seen[rd.N] {
			seen[rd.N] = true
			order = append(order, rd.N)
		}
	}
	if len(order) > n {
		order = order[len(order)-n:]
	}
	renum := map[int]int{}
	for i, k := range order {
		renum[k] = i + 1
	}
	out.Rounds, out.Samples = nil, nil
	for _, rd := range r.Rounds {
		if m, ok := renum[rd.N]; ok && !rd.Repeated {
			rd.N = m
			out.Rounds = append(out.Rounds, rd)
		}
	}
	for _, s := range r.Samples {
		if m, ok := renum[s.Round]; ok {
			s.Round = m
			out.Samples = append(out.Samples, s)
		}
	}
	out.Reused = 0
	return &out
}
