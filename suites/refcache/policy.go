package refcache

import (
	"fmt"
	"strings"
)

// Policy is the wake-up policy of the cache: who is woken, and how, when an
// entry is released or a block is published.
type Policy int

const (
	// WakeAll is mainline 6.1: waiters for capacity sleep non-exclusively
	// in wait_event(cache->wait_queue, cache->unused), so one release makes
	// every one of them runnable, and a wakee that finds unused == 0 queues
	// again inside wait_event without rescanning the cache.
	WakeAll Policy = iota
	// Exclusive is mainline with the capacity wait made exclusive
	// (wait_event_exclusive): a release wakes one waiter. It is the
	// "simply making the waits exclusive" alternative the patch rejects.
	Exclusive
	// Keyed is the patch: exclusive waiters keyed by block, a publish wakes
	// every waiter for that block, a release wakes one capacity waiter, and
	// a capacity waiter that ends up sharing hands its wake on.
	Keyed
)

// Policies lists every policy, in the order tables print them.
var Policies = []Policy{WakeAll, Exclusive, Keyed}

var policyNames = [...]string{WakeAll: "wake-all", Exclusive: "exclusive", Keyed: "keyed"}

func (p Policy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return fmt.Sprintf("Policy(%d)", int(p))
	}
	return policyNames[p]
}

// ParsePolicy turns "wake-all", "exclusive" or "keyed" into a Policy.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if strings.EqualFold(s, n) {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown wake-up policy %q (want %s)", s, strings.Join(policyNames[:], ", "))
}

// MarshalText makes a Policy print as its name in JSON.
func (p Policy) MarshalText() ([]byte, error) {
	if p < 0 || int(p) >= len(policyNames) {
		return nil, fmt.Errorf("invalid policy %d", int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText accepts the names ParsePolicy accepts.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
