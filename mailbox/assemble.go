package mailbox

// Over 600 lines on purpose: series assembly is one pass of b4's rules
// over a thread (classify, group, version, take partial rerolls, carry
// the trailers), each step reading the entries the previous one made.

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// kind is what a mail is to series assembly.
type kind int

const (
	other kind = iota
	reply      // a follow-up: may carry trailers, never a patch
	cover      // the 0/n mail of a series
	patch      // carries a diff of its own
)

// entry is one mail with what assembly learned about it.
type entry struct {
	msg     *Message
	subj    Subject
	kind    kind
	version int    // may be inherited from the cover letter
	thread  string // thread key
	order   int    // position in the input
}

// replyShaped matches "AW: [", "Re: [", "SV:[" and other localized reply
// markers in front of a tag, as b4 does.
var replyShaped = regexp.MustCompile(`^\w{2,3}:\s*\[`)

// Assemble groups mails into patch series following b4's rules, one series
// per thread (see docs/mailbox.md for the full list):
//   - a mail whose subject is a reply ("Re:") is a follow-up, never a patch,
//     and a diff quoted with "> " is not a diff;
//   - a mail with a diff of its own is a patch, tagged or not;
//   - 0/n is the cover letter; within a thread the newest version wins and a
//     partial reroll takes its unchanged patches from the version before;
//   - the first of two mails with the same Message-ID, or with the same
//     version and index, is kept;
//   - Reviewed-by/Acked-by/Tested-by/... in follow-ups go to the patch they
//     answer (to the cover letter's CoverTrailers when they answer it);
//   - a newer version of the same series posted as a new thread replaces
//     the older one.
//
// Series come out in the order their first mail came in. Assemble is pure
// and never fails: what it cannot make whole is marked incomplete.
//
// Patch.Corrupt marks a patch whose diff is malformed: it stays in the
// series (and in Series.Reason) so that it can be reported as not
// applying, never as missing.
func Assemble(msgs []*Message) []*Series {
	threads, byID := candidates(msgs)
	var out []*Series
	for _, thread := range threads {
		if s := assembleThread(thread, byID); s != nil {
			out = append(out, s)
		}
	}
	return supersede(out)
}

// AssembleVersions is Assemble with every version of each thread's series
// that has a patch, oldest first within a thread, and no version dropped
// for a newer one: what `-v N` chooses from (see Choose).
func AssembleVersions(msgs []*Message) []*Series {
	threads, byID := candidates(msgs)
	var out []*Series
	for _, thread := range threads {
		out = append(out, assembleAllVersions(thread, byID)...)
	}
	return out
}

// candidates classifies msgs and groups them into threads, each split by
// who sent its patches (byIdentity): the mail each series is assembled
// from, in the order their first mail came in, with the entries by
// Message-ID.
func candidates(msgs []*Message) ([][]*entry, map[string]*entry) {
	entries, byID := classify(msgs)
	threads, order := groupThreads(entries, byID)
	var out [][]*entry
	for _, key := range order {
		out = append(out, byIdentity(threads[key])...)
	}
	return out, byID
}

// assembleAllVersions is every version of one thread's series that has a
// patch, oldest first.
func assembleAllVersions(thread []*entry, byID map[string]*entry) []*Series {
	versions := buildVersions(thread, byID)
	var vs []int
	for v, slots := range versions {
		if len(slots.patches) > 0 {
			vs = append(vs, v)
		}
	}
	sort.Ints(vs)
	out := make([]*Series, 0, len(vs))
	for _, v := range vs {
		out = append(out, assembleVersion(thread, versions, v, byID))
	}
	return out
}

// byIdentity splits a thread by who sent its patches and cover letters:
// each sender, as verified (Message.Identity's key), has a series of its
// own, and the follow-ups go with every one. So a stranger's "v2" posted
// in someone's thread, or an unverified mail in a verified author's name,
// is a candidate of its own: it never replaces, fills a slot of, or hides
// the author's series.
func byIdentity(thread []*entry) [][]*entry {
	var keys []string
	seen := map[string]bool{}
	for _, e := range thread {
		if e.kind == patch || e.kind == cover {
			if k := e.msg.Identity().Key(); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	if len(keys) <= 1 {
		return [][]*entry{thread}
	}
	out := make([][]*entry, len(keys))
	for i, k := range keys {
		for _, e := range thread {
			if (e.kind != patch && e.kind != cover) || e.msg.Identity().Key() == k {
				out[i] = append(out[i], e)
			}
		}
	}
	return out
}

func classify(msgs []*Message) ([]*entry, map[string]*entry) {
	byID := make(map[string]*entry, len(msgs))
	entries := make([]*entry, 0, len(msgs))
	for i, m := range msgs {
		if m == nil {
			continue
		}
		if m.MessageID != "" {
			if _, dup := byID[m.MessageID]; dup {
				continue
			}
		}
		e := &entry{msg: m, subj: ParseSubject(m.Subject), order: i}
		e.version = e.subj.Version
		switch {
		case e.subj.Reply || replyShaped.MatchString(m.Subject):
			e.kind = reply
		case m.Diff == "" && (m.InReplyTo != "" || len(m.References) > 0) && hasTrailer(m.Body):
			// A review that forgot "Re:". As in b4, this comes before the
			// cover letter test: a 0/n that answers an earlier mail and
			// holds trailer-like lines (base-commit:) is a follow-up too,
			// so trailers answering it are not the series' (b4 0.17 does
			// the same; it still serves as the cover letter, by its
			// diffstat).
			e.kind = reply
		case e.subj.Counted() && e.subj.Index == 0:
			e.kind = cover
		case m.Diff != "":
			e.kind = patch
		}
		if e.kind == patch && !e.subj.Counted() {
			e.subj.Index, e.subj.Total = 1, 1
		}
		if m.MessageID != "" {
			byID[m.MessageID] = e
		}
		entries = append(entries, e)
	}
	return entries, byID
}

// groupThreads keys each mail by the root of its thread: the mail found
// by walking up In-Reply-To (else the References) through the mails at
// hand, or, when the root is not at hand, the first Message-ID the top
// mail refers to. In-Reply-To comes first, as in b4: some mailers list
// References parent first. Mails sent without threading headers but
// numbered m/n (git send-email --no-thread) are grouped by sender,
// version and count; a numbered patch without a Message-ID joins the
// series of the same sender, version and count.
func groupThreads(entries []*entry, byID map[string]*entry) (map[string][]*entry, []string) {
	referenced := map[string]bool{}
	for _, e := range entries {
		for _, r := range e.msg.References {
			referenced[r] = true
		}
		referenced[e.msg.InReplyTo] = true
	}
	for _, e := range entries {
		e.thread = threadKey(e, byID, referenced)
	}
	adoptOrphans(entries)
	threads := map[string][]*entry{}
	var order []string
	for _, e := range entries {
		if _, ok := threads[e.thread]; !ok {
			order = append(order, e.thread)
		}
		threads[e.thread] = append(threads[e.thread], e)
	}
	return threads, order
}

func threadKey(e *entry, byID map[string]*entry, referenced map[string]bool) string {
	// Up to the root; a bounded walk, as Message-IDs can form a loop.
	top := e
	for range 1000 {
		p := parentOf(top, byID)
		if p == nil || p == e {
			break
		}
		top = p
	}
	m := top.msg
	if len(m.References) > 0 {
		return m.References[0]
	}
	if m.InReplyTo != "" {
		return m.InReplyTo
	}
	if top == e && e.subj.Total > 1 && e.kind != reply && !referenced[m.MessageID] {
		return fmt.Sprintf("unthreaded:%s:v%d:%d", m.Identity().Key(), e.version, e.subj.Total)
	}
	if m.MessageID == "" {
		return fmt.Sprintf("no-id:%d", top.order)
	}
	return m.MessageID
}

// adoptOrphans puts a numbered patch that has neither a Message-ID nor
// threading headers into the thread of the same sender's patches of the
// same version and count, when there is exactly one such thread: a mail
// that lost its Message-ID does not split its series.
func adoptOrphans(entries []*entry) {
	type key struct {
		from           string
		version, total int
	}
	homes := map[key]map[string]bool{}
	for _, e := range entries {
		if e.kind == patch && e.msg.MessageID != "" && e.subj.Counted() {
			k := key{e.msg.Identity().Key(), e.version, e.subj.Total}
			if homes[k] == nil {
				homes[k] = map[string]bool{}
			}
			homes[k][e.thread] = true
		}
	}
	for _, e := range entries {
		m := e.msg
		if e.kind != patch || m.MessageID != "" || m.InReplyTo != "" || len(m.References) > 0 || !e.subj.Counted() {
			continue
		}
		if h := homes[key{m.Identity().Key(), e.version, e.subj.Total}]; len(h) == 1 {
			for thread := range h {
				e.thread = thread
			}
		}
	}
}

// versionSlots holds, for one version, the cover letter and patches by index.
type versionSlots struct {
	version int
	total   int
	cover   *entry
	patches map[int]*entry
}

func buildVersions(thread []*entry, byID map[string]*entry) map[int]*versionSlots {
	versions := map[int]*versionSlots{}
	slots := func(v int) *versionSlots {
		vs, ok := versions[v]
		if !ok {
			vs = &versionSlots{version: v, patches: map[int]*entry{}}
			versions[v] = vs
		}
		return vs
	}
	for _, e := range thread {
		if e.kind == cover {
			vs := slots(e.version)
			if vs.cover == nil {
				vs.cover = e
				vs.total = max(vs.total, e.subj.Total)
			}
		}
	}
	for _, e := range thread {
		if e.kind != patch {
			continue
		}
		// A patch without "vN" answering a cover letter that has one
		// belongs to that cover's version.
		if e.version == 1 && e.msg.InReplyTo != "" {
			if p, ok := byID[e.msg.InReplyTo]; ok && p.thread == e.thread && (p.kind == cover || (p.kind == patch && p.subj.Index == 1)) {
				e.version = p.version
			}
		}
		vs := slots(e.version)
		if _, dup := vs.patches[e.subj.Index]; !dup {
			vs.patches[e.subj.Index] = e
		}
		vs.total = max(vs.total, e.subj.Total)
	}
	return versions
}

// assembleThread is the newest version of a thread's series that has a
// patch, or nil.
func assembleThread(thread []*entry, byID map[string]*entry) *Series {
	versions := buildVersions(thread, byID)
	newest := 0
	for v, vs := range versions {
		if len(vs.patches) > 0 && v > newest {
			newest = v
		}
	}
	if newest == 0 {
		return nil
	}
	return assembleVersion(thread, versions, newest, byID)
}

func assembleVersion(thread []*entry, versions map[int]*versionSlots, newest int, byID map[string]*entry) *Series {
	vs := versions[newest]
	s := &Series{Version: newest, Total: vs.total}
	var reasons []string
	taken := map[int]*entry{}
	for i, e := range vs.patches {
		taken[i] = e
	}
	if len(taken) < vs.total {
		if from := partialReroll(vs, versions, byID); from != nil {
			var filled []string
			for i := 1; i <= vs.total; i++ {
				if _, ok := taken[i]; !ok {
					if e, ok := from[i]; ok {
						taken[i] = e
						filled = append(filled, fmt.Sprintf("%d/%d from v%d", i, vs.total, e.version))
					}
				}
			}
			if len(filled) > 0 {
				s.PartialReroll = true
				reasons = append(reasons, "partial reroll: "+strings.Join(filled, ", "))
			}
		}
	}
	for i := 1; i <= vs.total; i++ {
		if _, ok := taken[i]; !ok {
			s.Missing = append(s.Missing, i)
		}
	}
	s.Complete = len(s.Missing) == 0
	if !s.Complete {
		reasons = append([]string{fmt.Sprintf("missing %s of %d", indexList(s.Missing), vs.total)}, reasons...)
	}

	s.Cover = coverOf(vs, byID)
	if s.Cover == nil && s.PartialReroll {
		for v := newest - 1; v > 0 && s.Cover == nil; v-- {
			if prev, ok := versions[v]; ok {
				s.Cover = coverOf(prev, byID)
			}
		}
	}
	trailers, coverTrailers := collectTrailers(thread, byID, s.Cover)
	carryTrailers(trailers, taken, versions, newest)
	s.CoverTrailers = coverTrailers
	if s.CoverTrailers == nil {
		s.CoverTrailers = []Trailer{}
	}

	idx := make([]int, 0, len(taken))
	for i := range taken {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var corrupt []string
	for _, i := range idx {
		e := taken[i]
		m := e.msg
		// As b4 am does: the trailers given to the cover letter go to
		// every patch, after the patch's own.
		trs := appendNew(append([]Trailer{}, trailers[m.MessageID]...), coverTrailers)
		p := &Patch{
			Index:     i,
			Subject:   m.Subject,
			MessageID: m.MessageID,
			Author:    m.Author,
			Files:     DiffFiles(m.Diff),
			Trailers:  trs,
			Version:   e.version,
			Diff:      m.Diff,
			Corrupt:   diffProblem(m.Diff),
			Message:   m,
		}
		if m.Attestation != nil {
			p.Attestation = m.Attestation.Checks()
		}
		if p.Corrupt != "" {
			corrupt = append(corrupt, fmt.Sprintf("patch %d/%d does not apply: %s", i, vs.total, p.Corrupt))
		}
		p.Raw = amMail(m, e.subj, newest, e.version != newest, p.Trailers)
		s.Patches = append(s.Patches, p)
		if s.Base == "" {
			s.Base = m.BaseCommit
		}
	}
	s.Reason = strings.Join(append(reasons, corrupt...), "; ")
	head := s.Cover
	if head == nil {
		head = s.Patches[0].Message
	} else if head.BaseCommit != "" {
		s.Base = head.BaseCommit
	}
	s.Subject = head.Subject
	s.Title = ParseSubject(head.Subject).Title
	s.Author = head.From
	s.Identity = head.Identity()
	s.Date = head.Date
	s.To, s.Cc = head.To, head.Cc
	s.ThreadID = thread[0].thread
	if strings.HasPrefix(s.ThreadID, "unthreaded:") || strings.HasPrefix(s.ThreadID, "no-id:") {
		s.ThreadID = head.MessageID
	}
	return s
}

// partialReroll returns the patches of the version before vs when vs is a
// partial reroll in b4's sense: every patch it has answers (directly or up
// the thread) the patch with the same m/n of an earlier version.
func partialReroll(vs *versionSlots, versions map[int]*versionSlots, byID map[string]*entry) map[int]*entry {
	prev, ok := versions[vs.version-1]
	if !ok || vs.version <= 1 || prev.total != vs.total {
		return nil
	}
	for _, e := range vs.patches {
		found := false
		id := e.msg.InReplyTo
		for range 100 {
			p, ok := byID[id]
			if !ok {
				break
			}
			if p.kind == patch && p.subj.Index == e.subj.Index && p.subj.Total == e.subj.Total && p.version < e.version {
				found = true
				break
			}
			id = p.msg.InReplyTo
		}
		if !found {
			return nil
		}
	}
	out := map[int]*entry{}
	if prevFilled := partialReroll(prev, versions, byID); prevFilled != nil {
		for i, e := range prevFilled {
			out[i] = e
		}
	}
	for i, e := range prev.patches {
		out[i] = e
	}
	return out
}

// coverOf is the 0/n mail, or else, as b4 does, the mail a patch of the
// series answers when it is no patch and either has a diffstat (a cover
// letter without 0/n) or is the thread's root from the patch's own sender
// (a "naked" cover letter) -- not, say, a bug report someone else sent.
func coverOf(vs *versionSlots, byID map[string]*entry) *Message {
	if vs.cover != nil {
		return vs.cover.msg
	}
	for i := 1; i <= vs.total; i++ {
		e, ok := vs.patches[i]
		if !ok || e.msg.InReplyTo == "" {
			continue
		}
		p, ok := byID[e.msg.InReplyTo]
		if !ok || p.msg.Diff != "" || p.kind == patch {
			continue
		}
		if hasDiffstat(p.msg.Body) || (p.msg.InReplyTo == "" && p.kind == other && sameSender(p.msg, e.msg)) {
			return p.msg
		}
	}
	return nil
}

var diffstat = regexp.MustCompile(`(?mi)^\s*\d+ file.*\d+ (insertion|deletion)`)

func hasDiffstat(body string) bool { return diffstat.MatchString(body) }

func sameSender(a, b *Message) bool {
	x, y := AddrOf(a.From), AddrOf(b.From)
	return x != "" && strings.EqualFold(x, y)
}

// collectTrailers walks each follow-up up the thread to the patch it
// answers and gives that patch the follow-up's trailers; those answering
// the cover letter are the cover trailers.
func collectTrailers(thread []*entry, byID map[string]*entry, coverMsg *Message) (map[string][]Trailer, []Trailer) {
	byPatch := map[string][]Trailer{}
	var coverTrailers []Trailer
	for _, e := range thread {
		if e.kind != reply {
			continue
		}
		trs := followupTrailers(e.msg)
		if len(trs) == 0 {
			continue
		}
		parent := parentOf(e, byID)
		for range 1000 {
			if parent == nil || parent == e {
				break
			}
			if parent.kind == patch {
				byPatch[parent.msg.MessageID] = appendNew(byPatch[parent.msg.MessageID], trs)
				break
			}
			if parent.kind != reply {
				if coverMsg != nil && parent.msg == coverMsg {
					coverTrailers = appendNew(coverTrailers, trs)
				}
				break
			}
			parent = parentOf(parent, byID)
		}
	}
	return byPatch, coverTrailers
}

// carryTrailers gives a patch the trailers its earlier version got when the
// diff did not change between versions (b4 compares patchwork hashes).
func carryTrailers(trailers map[string][]Trailer, taken map[int]*entry, versions map[int]*versionSlots, newest int) {
	for _, e := range taken {
		key := ""
		for v := e.version - 1; v > 0; v-- {
			vs, ok := versions[v]
			if !ok {
				continue
			}
			old, ok := vs.patches[e.subj.Index]
			if !ok || len(trailers[old.msg.MessageID]) == 0 {
				continue
			}
			if key == "" {
				key = diffKey(e.msg.Diff)
			}
			if diffKey(old.msg.Diff) == key {
				id := e.msg.MessageID
				trailers[id] = appendNew(trailers[id], trailers[old.msg.MessageID])
			}
		}
	}
}

// diffKey is a diff reduced to what a reroll keeps when the change is the
// same: file names and changed lines, without index hashes and line numbers.
func diffKey(diff string) string {
	var b strings.Builder
	for line := range strings.Lines(diff) {
		switch {
		case strings.HasPrefix(line, "index "), strings.HasPrefix(line, "@@"):
			continue
		case strings.HasPrefix(line, "+"), strings.HasPrefix(line, "-"), strings.HasPrefix(line, "diff "):
			b.WriteString(line)
		}
	}
	return b.String()
}

// parentOf is the mail e answers, as b4 finds it: In-Reply-To when it
// names a mail at hand, else the first References entry at hand.
func parentOf(e *entry, byID map[string]*entry) *entry {
	if e.msg.InReplyTo != "" {
		if p := byID[e.msg.InReplyTo]; p != e {
			return p
		}
		return nil
	}
	for _, r := range e.msg.References {
		if p, ok := byID[r]; ok && p != e {
			return p
		}
	}
	return nil
}

func appendNew(list, add []Trailer) []Trailer {
	for _, t := range add {
		dup := false
		for _, o := range list {
			if strings.EqualFold(o.Name, t.Name) && strings.EqualFold(o.Value, t.Value) {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, t)
		}
	}
	return list
}

// followupTrailers are the trailers a follow-up gives (see findTrailers):
// a person trailer only when it names the sender.
func followupTrailers(m *Message) []Trailer {
	name, addr := fromNameAddr(m.From)
	var out []Trailer
	for _, t := range findTrailers(m.Body) {
		if notFollowups[strings.ToLower(t.Name)] || t.isPerson() && !givenBySender(t, name, addr) {
			continue
		}
		t.MessageID = m.MessageID
		out = append(out, t)
	}
	return out
}

// supersede drops a series when a newer version of it (same sender as
// verified, same title) was assembled from another thread: v2 posted as a
// new thread. An unverified post does not supersede a verified one, nor
// the other way round.
func supersede(all []*Series) []*Series {
	type key struct{ author, title string }
	best := map[key]*Series{}
	for _, s := range all {
		k := key{s.Identity.Key(), strings.ToLower(s.Title)}
		if b, ok := best[k]; !ok || s.Version > b.Version || (s.Version == b.Version && s.Date.After(b.Date)) {
			best[k] = s
		}
	}
	out := all[:0]
	for _, s := range all {
		if best[key{s.Identity.Key(), strings.ToLower(s.Title)}] == s {
			out = append(out, s)
		}
	}
	return out
}

func indexList(idx []int) string {
	parts := make([]string, len(idx))
	for i, n := range idx {
		parts[i] = fmt.Sprint(n)
	}
	if len(parts) == 1 {
		return "patch " + parts[0]
	}
	return "patches " + strings.Join(parts, ", ")
}
