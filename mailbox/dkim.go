package mailbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-msgauth/dkim"
	"golang.org/x/net/publicsuffix"
)

// DKIMConfig is the `dkim:` part of patchbot.yaml: where the signers'
// keys are looked up.
type DKIMConfig struct {
	// DNS is the server (host:port) asked for the keys
	// (selector._domainkey.domain TXT); empty: the system's resolver.
	DNS string `yaml:"dns"`
	// Timeout bounds the key lookups of one mail (default 5 s): a slow
	// resolver costs a stranger's mail no more than this.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAge and MaxAhead are the window a signature's time (t=) must
	// fall in, from when the mail is read (default 7 days before, 15
	// minutes ahead): an older signature is a replay, one dated ahead a
	// forgery or a broken clock. Neither counts.
	MaxAge   time.Duration `yaml:"max_age"`
	MaxAhead time.Duration `yaml:"max_ahead"`
}

// Validate checks the DNS server's address.
func (c DKIMConfig) Validate() error {
	if c.DNS != "" {
		if _, _, err := net.SplitHostPort(c.DNS); err != nil {
			return fmt.Errorf("dkim.dns %q: want host:port: %v", c.DNS, err)
		}
	}
	if c.Timeout < 0 || c.MaxAge < 0 || c.MaxAhead < 0 {
		return errors.New("dkim: timeout, max_age and max_ahead must not be negative")
	}
	return nil
}

// The default window of a signature's time.
const (
	DefaultMaxAge   = 7 * 24 * time.Hour
	DefaultMaxAhead = 15 * time.Minute
)

// ThreadFields are the fields a signature must cover, each one the mail
// has, for the mail to count as its signer's: who, what, which mail, and
// where in which thread. A field the mail does not have needs nothing
// (one added later is then a field the signature does not cover).
var ThreadFields = []string{"From", "Subject", "Message-ID", "In-Reply-To", "References"}

// MaxSignatures is how many DKIM-Signature fields of one mail are checked;
// the rest are ignored (a stranger's mail with a thousand signatures costs
// five verifications).
const MaxSignatures = 5

// Verifier checks who sent a mail, as b4's attestation and a receiving
// mail server do: it verifies the mail's DKIM signatures itself, with the
// signers' keys from DNS, and reads the Authentication-Results of the
// servers it is told to trust (RFC 8601) where a key cannot be had. It
// keeps the keys it looked up for a while, so that the patches of one
// series cost one lookup.
type Verifier struct {
	// LookupTXT answers a key query; nil asks the system's resolver (or
	// the DNS server of NewVerifier's config). Tests give a local one.
	LookupTXT func(ctx context.Context, name string) ([]string, error)
	// AuthservIDs are the receiving servers whose Authentication-Results
	// fields are read (e.g. smtp.subspace.kernel.org for mail read from
	// lore). Only the topmost block of such fields counts.
	AuthservIDs []string
	// Timeout bounds one mail's lookups; default 5 s.
	Timeout time.Duration
	// KeyTTL is how long a looked-up key is kept; default 10 minutes.
	KeyTTL time.Duration
	// MaxAge and MaxAhead bound a signature's time (DKIMConfig); zero:
	// the defaults; negative: no bound (a person's look at an old thread,
	// where no command is obeyed).
	MaxAge, MaxAhead time.Duration
	// Now is the clock a signature's time is judged by; nil: time.Now.
	Now func() time.Time

	// MaxLookups bounds the key lookups in flight at once (default
	// 1024), Prefetch's included.
	MaxLookups int
	// DownTTL is how long a signing domain whose DNS did not answer in
	// Timeout is taken as down: its keys are not asked for again, and its
	// mail is not verified (NoKey), in that time (default 5 minutes).
	DownTTL time.Duration

	mu       sync.Mutex
	keys     map[string]cachedKey
	inflight map[string]*keyLookup
	byOrg    map[string]*keyLookup // the lookup in flight of each organizational domain that others wait for
	down     map[string]time.Time  // organizational domain -> until
	sem      chan struct{}
	// nextQuery is when the next query may be sent (pace).
	nextQuery time.Time
}

type cachedKey struct {
	txts    []string
	err     error
	expires time.Time
}

// keyLookup is one key's lookup in flight: every mail that needs the key
// waits for the same one, bounded by its own Timeout from when it began.
type keyLookup struct {
	done chan struct{}
	txts []string
	err  error
}

// NewVerifier makes the verifier a config describes.
func NewVerifier(c DKIMConfig, authservIDs []string) *Verifier {
	v := &Verifier{AuthservIDs: authservIDs, Timeout: c.Timeout, MaxAge: c.MaxAge, MaxAhead: c.MaxAhead}
	if c.DNS != "" {
		server := c.DNS
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
		v.LookupTXT = r.LookupTXT
	}
	return v
}

// Result is what one check of one signature found.
type Result string

const (
	Pass      Result = "pass"
	Fail      Result = "fail"      // the mail changed after signing: body hash or signature does not verify
	NoKey     Result = "nokey"     // the key could not be had (not in DNS, or the lookup failed)
	PermError Result = "permerror" // the signature cannot be checked: malformed, expired, weak hash, ...
)

// Signature is one DKIM signature of a mail and what came of checking it.
type Signature struct {
	Domain   string `json:"domain"` // d=
	Selector string `json:"selector,omitempty"`
	Result   Result `json:"result"`
	Err      string `json:"error,omitempty"`
	// Aligned: the signing domain's organizational domain is the From:
	// domain's (DMARC's relaxed alignment).
	Aligned bool `json:"aligned"`
	// By names the trusted server whose Authentication-Results vouched
	// for the signature, when patchbot could not get the key itself.
	By string `json:"by,omitempty"`
	// Unsigned are the ThreadFields the mail has that the signature does
	// not cover (h=): a valid signature then proves the text, not the
	// thread it is in, and the mail is not its signer's.
	Unsigned []string `json:"unsigned,omitempty"`
	// Stale says why the signature's time (t=) is out of the window
	// (too old, dated ahead, none): then it does not count either.
	Stale string `json:"stale,omitempty"`
}

// counts says whether the signature makes the mail its signer's: valid,
// aligned with From:, covering the thread's fields, and timely.
func (s Signature) counts() bool {
	return s.Result == Pass && s.Aligned && len(s.Unsigned) == 0 && s.Stale == ""
}

// gap says, for a valid aligned signature that does not count, why.
func (s Signature) gap() string {
	name := "DKIM/" + s.Domain
	switch {
	case len(s.Unsigned) > 0:
		return "its " + name + " signature does not cover " + strings.Join(s.Unsigned, ", ")
	case s.Stale != "":
		return "its " + name + " signature " + s.Stale
	}
	return ""
}

// Attestation is what patchbot checked about who sent a mail. It is kept
// with the mail, so that a thread assembled again later needs no DNS.
type Attestation struct {
	// From is the one bare address of From:, "" when there is not
	// exactly one (then nobody is verified).
	From       string      `json:"from"`
	Signatures []Signature `json:"signatures,omitempty"`
	// Source names the mail's source when the operator trusts it as a
	// whole (sources[].trusted): a private list whose server checks its
	// senders.
	Source string `json:"source,omitempty"`
}

// Identity is who sent a mail, as far as patchbot verified it.
type Identity struct {
	Address string // bare, lower case
	// Via is how the address was verified: "DKIM/linux.dev" (a valid
	// signature aligned with From:), "source/NAME" (a trusted source);
	// empty when it was not.
	Via string
	// Why says, when a valid signature aligned with From: did not verify
	// the address, what it left out: "its DKIM/gmail.com signature does
	// not cover In-Reply-To, References", "... was made 12 days before
	// the mail was read (at most 7)".
	Why string
}

// Verified says whether the address was proven.
func (id Identity) Verified() bool { return id.Via != "" && id.Address != "" }

// Key is the identity as series are keyed by: the address and whether it
// was verified. An unverified mail in someone's name never shares a key
// with that person's verified mail.
func (id Identity) Key() string {
	if id.Verified() {
		return id.Address + "/verified"
	}
	return id.Address + "/unverified"
}

// String is the identity as the reply and the logs say it:
// "usama.arif@linux.dev (DKIM/linux.dev)" or "... (unverified)".
func (id Identity) String() string {
	if id.Verified() {
		return id.Address + " (" + id.Via + ")"
	}
	return id.Address + " (unverified)"
}

// Identity is who the attestation proves sent the mail: the first valid
// signature aligned with From: that covers the mail's thread fields and
// is timely, else a trusted source, else nobody (Why then says what an
// aligned valid signature left out).
func (a *Attestation) Identity() Identity {
	if a == nil {
		return Identity{}
	}
	id := Identity{Address: a.From}
	if a.From == "" {
		return id
	}
	for _, s := range a.Signatures {
		if s.counts() {
			id.Via = "DKIM/" + s.Domain
			return id
		}
	}
	if a.Source != "" {
		id.Via = "source/" + a.Source
		return id
	}
	for _, s := range a.Signatures {
		if s.Result == Pass && s.Aligned {
			id.Why = s.gap()
			break
		}
	}
	return id
}

// Check is one line of a patch's attestation, as b4 am prints it under the
// patch: "✓ Signed: DKIM/linux.dev", "✗ BADSIG: DKIM/linux.dev".
type Check struct {
	Pass bool   `json:"pass"`
	Text string `json:"text"` // without the mark
}

// String is the line with b4's mark.
func (c Check) String() string {
	if c.Pass {
		return "✓ " + c.Text
	}
	return "✗ " + c.Text
}

// Checks are the attestation's lines, as b4 shows them: the aligned valid
// signature alone when there is one, else every signature (a valid one of
// another domain says whose it is: "(From: x@linux.dev)"); a mail without
// any says so.
func (a *Attestation) Checks() []Check {
	if a == nil {
		return []Check{{Text: "No signature: not checked"}}
	}
	for _, s := range a.Signatures {
		if s.counts() {
			return []Check{s.check(a.From)}
		}
	}
	var out []Check
	for _, s := range a.Signatures {
		out = append(out, s.check(a.From))
	}
	if a.Source != "" {
		out = append(out, Check{Pass: true, Text: "Trusted source: " + a.Source})
	}
	if len(out) == 0 {
		from := a.From
		if from == "" {
			from = "not one address"
		}
		out = append(out, Check{Text: "No signature (From: " + from + ")"})
	}
	return out
}

func (s Signature) check(from string) Check {
	name := "DKIM/" + s.Domain
	switch {
	case s.Result == Pass && len(s.Unsigned) > 0:
		return Check{Text: "Partly signed: " + name + " (not " + strings.Join(s.Unsigned, ", ") + ")"}
	case s.Result == Pass && s.Stale != "":
		return Check{Text: "Stale: " + name + " (" + s.Stale + ")"}
	case s.Result == Pass && s.Aligned && s.By != "":
		return Check{Pass: true, Text: "Signed: " + name + " (checked by " + s.By + ")"}
	case s.Result == Pass && s.Aligned:
		return Check{Pass: true, Text: "Signed: " + name}
	case s.Result == Pass:
		return Check{Pass: true, Text: "Signed: " + name + " (From: " + from + ")"}
	case s.Result == NoKey:
		return Check{Text: "No key: " + name}
	}
	return Check{Text: "BADSIG: " + name}
}

// Verify checks m's signatures and the trusted servers' results. It costs
// at most MaxSignatures verifications and Timeout of lookups; a mail it
// cannot read is simply not verified.
func (v *Verifier) Verify(ctx context.Context, m *Message) *Attestation {
	a := &Attestation{}
	o := OriginOf(m)
	a.From = o.Sender
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(m.Raw)))
	if err != nil {
		return a
	}
	if !h.Has("Dkim-Signature") {
		return a
	}
	v.Prefetch(m) // every key of the mail asked for at once
	ctx, cancel := context.WithTimeout(ctx, v.timeout())
	defer cancel()
	failed := map[string]bool{} // key names whose lookup failed
	var mu sync.Mutex
	lookup := func(name string) ([]string, error) {
		txts, err := v.lookup(ctx, name)
		if err != nil {
			mu.Lock()
			failed[strings.ToLower(name)] = true
			mu.Unlock()
		}
		return txts, err
	}
	verifs, err := dkim.VerifyWithOptions(bytes.NewReader(m.Raw), &dkim.VerifyOptions{LookupTXT: lookup, MaxVerifications: MaxSignatures})
	if err != nil && !errors.Is(err, dkim.ErrTooManySignatures) {
		return a
	}
	counts := fieldCounts(h)
	sigs := signatureTags(h)
	fromDomain := Domain(a.From)
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	for i, vf := range verifs {
		s := Signature{Domain: strings.ToLower(vf.Domain), Result: Pass}
		var tags map[string]string
		if i < len(sigs) {
			tags = sigs[i]
			s.Selector = tags["s"]
		}
		_, partial := tags["l"]
		switch {
		case partial:
			// l= leaves the end of the body unsigned: refused whoever
			// vouches for it.
			s.Result, s.Err = Fail, "the signature covers only part of the body (l=)"
		case vf.Err == nil:
			if missing := unsigned(vf.HeaderKeys, counts); missing != "" {
				s.Result, s.Err = Fail, "a "+missing+": field the signature does not cover was added"
			}
		case failed[strings.ToLower(s.Selector+"._domainkey."+s.Domain)]:
			s.Result, s.Err = NoKey, vf.Err.Error()
		case dkim.IsPermFail(vf.Err) || dkim.IsTempFail(vf.Err):
			s.Result, s.Err = PermError, vf.Err.Error()
		default:
			s.Result, s.Err = Fail, vf.Err.Error()
		}
		s.Aligned = aligned(s.Domain, fromDomain)
		s.Unsigned = uncovered(tags["h"], counts)
		s.Stale = v.stale(tags["t"], now)
		if s.Result == NoKey {
			if by := vouched(h, v.AuthservIDs, s, tags["b"]); by != "" {
				s.Result, s.By, s.Err = Pass, by, ""
			}
		}
		a.Signatures = append(a.Signatures, s)
	}
	return a
}

// uncovered lists the ThreadFields the mail has (counts) that a
// signature's h= does not name.
func uncovered(h string, counts map[string]int) []string {
	signed := map[string]bool{}
	for _, k := range strings.Split(h, ":") {
		signed[strings.ToLower(strings.TrimSpace(k))] = true
	}
	var out []string
	for _, f := range ThreadFields {
		if k := strings.ToLower(f); counts[k] > 0 && !signed[k] {
			out = append(out, f)
		}
	}
	return out
}

// stale says why a signature's time t= is out of the window at now, or "".
func (v *Verifier) stale(t string, now time.Time) string {
	maxAge, maxAhead := v.MaxAge, v.MaxAhead
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	if maxAhead == 0 {
		maxAhead = DefaultMaxAhead
	}
	if t == "" {
		if maxAge < 0 {
			return ""
		}
		return "is undated (no t=): its age cannot be checked"
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil || sec < 0 {
		return "has an unreadable time (t=)"
	}
	at := time.Unix(sec, 0)
	switch {
	case maxAge > 0 && now.Sub(at) > maxAge:
		return fmt.Sprintf("was made %s before the mail was read (at most %s)", words(now.Sub(at)), words(maxAge))
	case maxAhead > 0 && at.Sub(now) > maxAhead:
		return fmt.Sprintf("is dated %s ahead of the mail's reading (at most %s)", words(at.Sub(now)), words(maxAhead))
	}
	return ""
}

// words is a duration as a person says it: "12 days", "3 hours", "20 minutes".
func words(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	case d >= 2*time.Hour:
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	case d >= 2*time.Minute:
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	}
	return fmt.Sprintf("%d seconds", int(d/time.Second))
}

// VerifyAll verifies each mail that has no attestation yet.
func (v *Verifier) VerifyAll(ctx context.Context, msgs []*Message) {
	for _, m := range msgs {
		if m.Attestation == nil {
			m.Attestation = v.Verify(ctx, m)
		}
	}
}

// ErrDomainDown is a key not looked up: its domain's DNS did not answer
// a lookup within Timeout a short while ago (DownTTL).
var ErrDomainDown = errors.New("its domain's DNS did not answer a moment ago")

// Prefetch starts looking up the keys of m's signatures (at most
// MaxSignatures), without waiting: a source's reader calls it for the
// mails ahead of the one being acted on, so that their lookups run side
// by side while the mails before them are acted on, and Verify finds them
// answered or waits only what is left of their Timeout. A stranger's key
// that never answers then costs its own Timeout once, concurrently with
// every other, not one Timeout for each mail in turn.
func (v *Verifier) Prefetch(m *Message) {
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(m.Raw)))
	if err != nil || !h.Has("Dkim-Signature") {
		return
	}
	for _, tags := range signatureTags(h) {
		if tags["s"] == "" || tags["d"] == "" || (tags["q"] != "" && tags["q"] != "dns/txt") {
			continue
		}
		v.start(tags["s"] + "._domainkey." + tags["d"])
	}
}

// lookup asks for a key, or answers from the keys kept, or waits for the
// lookup of it in flight, at most until ctx ends.
func (v *Verifier) lookup(ctx context.Context, name string) ([]string, error) {
	l, txts, err := v.begin(name)
	if l == nil {
		return txts, err
	}
	select {
	case <-l.done:
		return l.txts, l.err
	case <-ctx.Done():
		return nil, &net.DNSError{Err: "no answer in time", Name: name, IsTimeout: true}
	}
}

// start begins a key's lookup unless it is kept, in flight or its domain
// down.
func (v *Verifier) start(name string) { v.begin(name) }

// begin is a key's lookup: kept (txts, err), or in flight (l), begun now
// if needed.
func (v *Verifier) begin(name string) (l *keyLookup, txts []string, err error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if k, ok := v.keys[name]; ok && now.Before(k.expires) {
		return nil, k.txts, k.err
	}
	if l := v.inflight[name]; l != nil {
		return l, nil, nil
	}
	_, domain, _ := strings.Cut(name, "._domainkey.")
	org := OrgDomain(domain)
	if org == "" {
		org = domain
	}
	if until, ok := v.down[org]; ok {
		if now.Before(until) {
			return nil, nil, fmt.Errorf("%s: %w", name, ErrDomainDown)
		}
		delete(v.down, org)
	}
	if v.inflight == nil {
		v.inflight, v.down, v.byOrg = map[string]*keyLookup{}, map[string]time.Time{}, map[string]*keyLookup{}
		n := v.MaxLookups
		if n <= 0 {
			n = 1024
		}
		v.sem = make(chan struct{}, n)
	}
	l = &keyLookup{done: make(chan struct{})}
	timeout := v.timeout()
	v.inflight[name] = l
	// One key of a domain is asked for at a time: the others wait for
	// its answer, and are not asked for when it found the domain down
	// (a flood's thousand selectors of one domain cost one timeout).
	first := v.byOrg[org]
	if first == nil {
		v.byOrg[org] = l
	}
	go v.run(name, org, l, timeout, first)
	return l, nil, nil
}

// run looks a key up, within Timeout from its start (the wait for a slot
// among MaxLookups included), keeps the answer and ends l.
func (v *Verifier) run(name, org string, l *keyLookup, timeout time.Duration, first *keyLookup) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	asked := false
	if first != nil {
		select {
		case <-first.done:
		case <-ctx.Done():
		}
		v.mu.Lock()
		until, down := v.down[org]
		v.mu.Unlock()
		if down && time.Now().Before(until) {
			v.finish(name, org, l, nil, fmt.Errorf("%s: %w", name, ErrDomainDown), false, false)
			return
		}
		if ctx.Err() != nil { // the domain's first lookup took all of this one's time
			v.finish(name, org, l, nil, &net.DNSError{Err: "no answer within " + timeout.String(), Name: name, IsTimeout: true}, false, false)
			return
		}
	}
	select {
	case v.sem <- struct{}{}:
		asked = true
		l.txts, l.err = v.ask(ctx, name, timeout)
		<-v.sem
	case <-ctx.Done():
	}
	if !asked || (l.err != nil && ctx.Err() != nil) {
		l.err = &net.DNSError{Err: "no answer within " + timeout.String(), Name: name, IsTimeout: true}
	}
	var dnsErr *net.DNSError
	timedOut := l.err != nil && errors.As(l.err, &dnsErr) && dnsErr.IsTimeout
	v.finish(name, org, l, l.txts, l.err, asked, timedOut)
}

// finish keeps what a lookup found and ends it.
func (v *Verifier) finish(name, org string, l *keyLookup, txts []string, err error, asked, timedOut bool) {
	l.txts, l.err = txts, err
	ttl := v.KeyTTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	if l.err != nil {
		// A failure is kept briefly: a burst of a stranger's mail does not
		// become a burst of queries, and a resolver back up is soon used.
		ttl = min(ttl, time.Minute)
	}
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.inflight, name)
	if v.byOrg[org] == l {
		delete(v.byOrg, org)
	}
	if v.keys == nil || len(v.keys) > 1<<16 {
		v.keys = map[string]cachedKey{}
	}
	switch {
	case !asked:
		// Never asked (MaxLookups were all busy, or the domain is
		// down): nothing more is known.
	case timedOut:
		// A timeout says nothing about this key, but much about the
		// domain: its DNS is not answering. Every key of it waits.
		down := v.DownTTL
		if down <= 0 {
			down = 5 * time.Minute
		}
		if len(v.down) > 1<<16 {
			v.down = map[string]time.Time{}
		}
		v.down[org] = now.Add(down)
	default:
		v.keys[name] = cachedKey{txts: l.txts, err: l.err, expires: now.Add(ttl)}
	}
	close(l.done)
}

// ask is one key's query, sent again after a fifth of its timeout and
// after three fifths while no answer came, as a stub resolver retransmits: a
// query lost in a burst (a resolver's socket overflows when a thousand
// strangers' lookups start at once) costs a retransmission, not the whole
// timeout.
func (v *Verifier) ask(ctx context.Context, name string, timeout time.Duration) ([]string, error) {
	look := v.LookupTXT
	if look == nil {
		look = net.DefaultResolver.LookupTXT
	}
	step := timeout / 5
	var err error
	for i, wait := range []time.Duration{step, 2 * step, 0} {
		if i == 0 && !v.pace(ctx) {
			return nil, ctx.Err()
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if wait > 0 {
			// Retransmissions spread (up to half a step later), so that a
			// burst's do not all land on the resolver at once again.
			wait += time.Duration(rand.Int64N(int64(step/2)+1)) * time.Duration(i+1) / 2
			actx, cancel = context.WithTimeout(ctx, wait)
		}
		var txts []string
		txts, err = look(actx, name)
		var dnsErr *net.DNSError
		timedOut := err != nil && (actx.Err() != nil || (errors.As(err, &dnsErr) && dnsErr.IsTimeout))
		cancel()
		if !timedOut || ctx.Err() != nil {
			return txts, err
		}
	}
	return nil, err
}

// The first queries of lookups are paced: paceBurst at once, then
// paceRate a second (retransmissions are not: a lost query's second try
// does not wait behind a flood's first ones). A resolver's socket overflows when a thousand
// queries land on it at once (dnsmasq took 497 of a burst of 900 here),
// and a maintainer's query lost among strangers' would cost the command
// its verification.
const (
	paceBurst = 100
	paceRate  = 500
)

// pace waits for the next query's turn; false when ctx ended first.
func (v *Verifier) pace(ctx context.Context) bool {
	interval := time.Second / paceRate
	now := time.Now()
	v.mu.Lock()
	slot := now.Add(-paceBurst * interval)
	if v.nextQuery.After(slot) {
		slot = v.nextQuery
	}
	v.nextQuery = slot.Add(interval)
	v.mu.Unlock()
	if d := time.Until(slot); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (v *Verifier) timeout() time.Duration {
	if v.Timeout > 0 {
		return v.Timeout
	}
	return 5 * time.Second
}

// fieldCounts counts the header's fields by lower-case name.
func fieldCounts(h textproto.Header) map[string]int {
	counts := map[string]int{}
	f := h.Fields()
	for f.Next() {
		counts[strings.ToLower(f.Key())]++
	}
	return counts
}

// unsigned names a field the signature lists (h=) of which the mail holds
// more instances than the signature covers. A verifier takes the
// bottom-most instances; a reader takes the topmost: an unsigned Subject:
// or From: put above the signed one would be read as the sender's.
func unsigned(keys []string, counts map[string]int) string {
	signed := map[string]int{}
	for _, k := range keys {
		signed[strings.ToLower(strings.TrimSpace(k))]++
	}
	for k, n := range signed {
		if counts[k] > n {
			return k
		}
	}
	return ""
}

// signatureTags are the tags of the DKIM-Signature fields, top first, as
// the verification reads them.
func signatureTags(h textproto.Header) []map[string]string {
	var out []map[string]string
	f := h.FieldsByKey("Dkim-Signature")
	for f.Next() && len(out) < MaxSignatures {
		tags := map[string]string{}
		for _, part := range strings.Split(f.Value(), ";") {
			k, val, ok := strings.Cut(part, "=")
			if !ok {
				continue
			}
			tags[strings.ToLower(strings.TrimSpace(k))] = strings.Join(strings.Fields(val), "")
		}
		out = append(out, tags)
	}
	return out
}

// vouched names the trusted server whose topmost block of
// Authentication-Results reports a DKIM pass for this very signature (its
// header.d and, when given, the start of its b= as header.b), and no
// contrary result: a server's word stands in for a key patchbot could not
// get (an old mail whose key was rotated), never against a check
// patchbot made itself.
func vouched(h textproto.Header, trusted []string, s Signature, b string) string {
	block := TrustedAuthResults(h, trusted)
	by := ""
	for _, ar := range block {
		for _, r := range ar.Results {
			if r.Method != "dkim" {
				continue
			}
			if r.Result == "none" {
				return "" // the server saw no signature at all
			}
			d := strings.ToLower(r.Props["header.d"])
			if d == "" {
				if _, after, ok := strings.Cut(r.Props["header.i"], "@"); ok {
					d = strings.ToLower(after)
				}
			}
			if d != s.Domain {
				continue
			}
			if hb := r.Props["header.b"]; hb != "" && (len(hb) < 8 || !strings.HasPrefix(b, hb)) {
				continue // another signature of the same domain
			}
			if r.Result != "pass" {
				return ""
			}
			by = ar.AuthServID
		}
	}
	return by
}

// aligned says whether a signing domain aligns with the From: domain in
// DMARC's relaxed sense: both have the same organizational domain.
func aligned(d, from string) bool {
	org := OrgDomain(d)
	return org != "" && org == OrgDomain(from)
}

// OrgDomain is a domain's organizational domain, as DMARC finds it: the
// registrable domain under its public suffix (lists.linux.dev and
// linux.dev are both linux.dev). A domain that is itself a public suffix
// (dev, co.uk) has none: "" aligns with nothing.
func OrgDomain(d string) string {
	d = strings.ToLower(strings.TrimSuffix(d, "."))
	org, err := publicsuffix.EffectiveTLDPlusOne(d)
	if err != nil {
		return ""
	}
	return org
}
