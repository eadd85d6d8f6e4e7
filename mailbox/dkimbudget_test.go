package mailbox

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hangingDNS never answers the names of down domains (until the lookup's
// context ends) and answers the others from a keyring; it counts the
// queries and the most in flight at once.
type hangingDNS struct {
	keys            *keyring
	queries, flying atomic.Int32
	mu              sync.Mutex
	maxFlying       int32
	asked           map[string]int
}

func (h *hangingDNS) LookupTXT(ctx context.Context, name string) ([]string, error) {
	h.queries.Add(1)
	n := h.flying.Add(1)
	defer h.flying.Add(-1)
	h.mu.Lock()
	h.maxFlying = max(h.maxFlying, n)
	if h.asked == nil {
		h.asked = map[string]int{}
	}
	h.asked[name]++
	h.mu.Unlock()
	if strings.HasSuffix(name, "-down.example") {
		<-ctx.Done()
		return nil, &net.DNSError{Err: "i/o timeout", Name: name, IsTimeout: true}
	}
	return h.keys.LookupTXT(ctx, name)
}

// Key lookups run side by side, each bounded by the timeout from its
// start; a domain whose DNS did not answer is not asked again for a while,
// whatever the selector; a lookup in flight is shared. So 200 mails from
// domains that never answer, prefetched, cost one timeout, not 200, and
// a mail signed by a domain that answers is verified at once beside them.
func TestVerifyBudget(t *testing.T) {
	k := newKeyring()
	k.add(t, "linux.dev", "key1", false)
	dns := &hangingDNS{keys: k}
	v := &Verifier{LookupTXT: dns.LookupTXT, Timeout: 300 * time.Millisecond}
	var strangers []*Message
	for i := 0; i < 200; i++ {
		k.add(t, fmt.Sprintf("d%d-down.example", i%50), fmt.Sprintf("s%d", i), false)
		raw := strings.Replace(plainMail, "usama.arif@linux.dev", fmt.Sprintf("x@d%d-down.example", i%50), 1)
		raw = strings.Replace(raw, "<seed@linux.dev>", fmt.Sprintf("<m%d@strangers.example>", i), 1)
		m, err := ParseBytes([]byte(k.sign(t, fmt.Sprintf("d%d-down.example", i%50), fmt.Sprintf("s%d", i), raw)))
		if err != nil {
			t.Fatal(err)
		}
		strangers = append(strangers, m)
	}
	start := time.Now()
	for _, m := range strangers {
		v.Prefetch(m)
	}
	for _, m := range strangers {
		if a := v.Verify(context.Background(), m); a.Identity().Verified() || a.Signatures[0].Result != NoKey {
			t.Fatalf("a mail of a domain that never answers: %+v", a.Signatures)
		}
	}
	took := time.Since(start)
	if took > 10*v.Timeout { // 200 timeouts in turn would be 60 s
		t.Errorf("200 mails of domains that never answer took %s, want about one timeout (%s)", took, v.Timeout)
	}
	if n := dns.queries.Load(); n > 3*50 {
		t.Errorf("%d queries for 200 mails of 50 domains, want one lookup a domain (with at most two retransmissions)", n)
	}
	if dns.maxFlying < 50 {
		t.Errorf("at most %d lookups ran at once, want them side by side", dns.maxFlying)
	}
	// The domains are down now: a new selector of one is not asked for.
	before := dns.queries.Load()
	raw := strings.Replace(plainMail, "usama.arif@linux.dev", "x@d7-down.example", 1)
	m, _ := ParseBytes([]byte(k.sign(t, "d7-down.example", "s7", strings.Replace(raw, "s7", "s7", 1))))
	t0 := time.Now()
	if a := v.Verify(context.Background(), m); a.Signatures[0].Result != NoKey || time.Since(t0) >= v.Timeout {
		t.Errorf("a mail of a domain down: %+v after %s", a.Signatures, time.Since(t0))
	}
	if n := dns.queries.Load() - before; n != 0 {
		t.Errorf("%d queries for a domain that did not answer a moment ago", n)
	}
	// A domain that answers is verified beside them, at once.
	signed, _ := ParseBytes([]byte(k.sign(t, "linux.dev", "key1", plainMail)))
	t0 = time.Now()
	if a := v.Verify(context.Background(), signed); !a.Identity().Verified() || time.Since(t0) >= v.Timeout {
		t.Errorf("the author's mail beside them: %v after %s", a.Identity(), time.Since(t0))
	}
	// Once DownTTL has passed, the domain is asked again.
	v.DownTTL = time.Millisecond
	v.mu.Lock()
	for d := range v.down {
		v.down[d] = time.Now()
	}
	v.mu.Unlock()
	before = dns.queries.Load()
	v.Verify(context.Background(), m)
	if n := dns.queries.Load() - before; n < 1 || n > 3 {
		t.Errorf("%d queries for a domain down no longer, want it asked again (with at most two retransmissions)", n)
	}
}
