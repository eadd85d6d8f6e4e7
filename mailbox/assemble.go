package mailbox

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
func Assemble(msgs []*Message) []*Series {
	entries, byID := classify(msgs)
	threads, order := groupThreads(entries, byID)
	var out []*Series
	for _, key := range order {
		if s := assembleThread(threads[key], byID); s != nil {
			out = append(out, s)
		}
	}
	return supersede(out)
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
		case e.subj.Counted() && e.subj.Index == 0:
			e.kind = cover
		case m.Diff != "":
			e.kind = patch
		case m.InReplyTo != "" && len(followupTrailers(m)) > 0:
			e.kind = reply // a review that forgot "Re:"
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

// groupThreads keys each mail by the first Message-ID of its thread. Mails
// sent without threading headers but numbered m/n (git send-email
// --no-thread) are grouped by sender, version and count instead.
func groupThreads(entries []*entry, byID map[string]*entry) (map[string][]*entry, []string) {
	referenced := map[string]bool{}
	for _, e := range entries {
		for _, r := range e.msg.References {
			referenced[r] = true
		}
		referenced[e.msg.InReplyTo] = true
	}
	threads := map[string][]*entry{}
	var order []string
	for _, e := range entries {
		e.thread = threadKey(e, byID, referenced)
		if _, ok := threads[e.thread]; !ok {
			order = append(order, e.thread)
		}
		threads[e.thread] = append(threads[e.thread], e)
	}
	return threads, order
}

func threadKey(e *entry, byID map[string]*entry, referenced map[string]bool) string {
	m := e.msg
	if len(m.References) > 0 {
		return m.References[0]
	}
	if m.InReplyTo != "" {
		// Walk up as far as we have the parents.
		id := m.InReplyTo
		for range 1000 {
			p, ok := byID[id]
			if !ok {
				break
			}
			if len(p.msg.References) > 0 {
				return p.msg.References[0]
			}
			if p.msg.InReplyTo == "" {
				return id
			}
			id = p.msg.InReplyTo
		}
		return id
	}
	if e.subj.Total > 1 && e.kind != reply && !referenced[m.MessageID] {
		return fmt.Sprintf("unthreaded:%s:v%d:%d", AddrOf(m.From), e.version, e.subj.Total)
	}
	if m.MessageID == "" {
		return fmt.Sprintf("no-id:%d", e.order)
	}
	return m.MessageID
}

// versionSlots holds, for one version, the cover letter and patches by index.
type versionSlots struct {
	version int
	total   int
	cover   *entry
	patches map[int]*entry
}

func assembleThread(thread []*entry, byID map[string]*entry) *Series {
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
	newest := 0
	for v, vs := range versions {
		if len(vs.patches) > 0 && v > newest {
			newest = v
		}
	}
	if newest == 0 {
		return nil
	}
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
	s.Reason = strings.Join(reasons, "; ")

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

	idx := make([]int, 0, len(taken))
	for i := range taken {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		e := taken[i]
		m := e.msg
		p := &Patch{
			Index:     i,
			Subject:   m.Subject,
			MessageID: m.MessageID,
			Author:    m.Author,
			Files:     DiffFiles(m.Diff),
			Trailers:  trailers[m.MessageID],
			Version:   e.version,
			Diff:      m.Diff,
			Message:   m,
		}
		if p.Trailers == nil {
			p.Trailers = []Trailer{}
		}
		p.Raw = amMail(m, e.subj, newest, i, vs.total, p.Trailers)
		s.Patches = append(s.Patches, p)
		if s.Base == "" {
			s.Base = m.BaseCommit
		}
	}
	head := s.Cover
	if head == nil {
		head = s.Patches[0].Message
	} else if head.BaseCommit != "" {
		s.Base = head.BaseCommit
	}
	s.Subject = head.Subject
	s.Title = ParseSubject(head.Subject).Title
	s.Author = head.From
	s.Date = head.Date
	s.To, s.Cc = head.To, head.Cc
	s.ThreadID = thread[0].thread
	if strings.HasPrefix(s.ThreadID, "unthreaded:") {
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

// coverOf is the 0/n mail, or else, as b4 does, the mail the first patch
// answers when that mail is no patch and no reply itself.
func coverOf(vs *versionSlots, byID map[string]*entry) *Message {
	if vs.cover != nil {
		return vs.cover.msg
	}
	for i := 1; i <= vs.total; i++ {
		e, ok := vs.patches[i]
		if !ok || e.msg.InReplyTo == "" {
			continue
		}
		if p, ok := byID[e.msg.InReplyTo]; ok && p.kind == other && strings.Contains(p.msg.Body, " changed, ") {
			return p.msg // has a diffstat, no diff: a cover letter without 0/n
		}
		break
	}
	return nil
}

// collectTrailers walks each follow-up up the thread to the patch it
// answers and gives that patch the follow-up's trailers.
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
		for range 100 {
			if parent == nil {
				break
			}
			if parent.kind == patch {
				byPatch[parent.msg.MessageID] = appendNew(byPatch[parent.msg.MessageID], trs)
				break
			}
			if parent.kind == cover || (coverMsg != nil && parent.msg == coverMsg) {
				if parent.msg == coverMsg {
					coverTrailers = appendNew(coverTrailers, trs)
				}
				break
			}
			if parent.kind != reply {
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

func parentOf(e *entry, byID map[string]*entry) *entry {
	if e.msg.InReplyTo != "" {
		return byID[e.msg.InReplyTo]
	}
	refs := e.msg.References
	for i := len(refs) - 1; i >= 0; i-- {
		if p, ok := byID[refs[i]]; ok && p != e {
			return p
		}
	}
	return nil
}

func appendNew(list, add []Trailer) []Trailer {
	for _, t := range add {
		dup := false
		for _, o := range list {
			if strings.EqualFold(o.Name, t.Name) && o.Value == t.Value {
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

// followupNames are the trailers a reviewer gives in a reply.
var followupNames = map[string]string{
	"reviewed-by":  "Reviewed-by",
	"acked-by":     "Acked-by",
	"tested-by":    "Tested-by",
	"reported-by":  "Reported-by",
	"suggested-by": "Suggested-by",
	"nacked-by":    "Nacked-by",
}

// followupTrailers finds review trailers in the unquoted lines of a reply.
// Like b4 (without --sloppy-trailers), a trailer naming someone else than
// the sender is ignored: it is usually pasted from another mail.
func followupTrailers(m *Message) []Trailer {
	var out []Trailer
	from := AddrOf(m.From)
	for line := range strings.Lines(m.Body) {
		line = strings.TrimSpace(line)
		name, value, ok := strings.Cut(line, ":")
		if !ok || strings.ContainsAny(name, " \t>") {
			continue
		}
		canon, ok := followupNames[strings.ToLower(name)]
		if !ok {
			continue
		}
		value = collapseSpace(value)
		if value == "" || (from != "" && !strings.Contains(strings.ToLower(value), from)) {
			continue
		}
		out = append(out, Trailer{Name: canon, Value: value, MessageID: m.MessageID})
	}
	return out
}

// supersede drops a series when a newer version of it (same sender, same
// title) was assembled from another thread: v2 posted as a new thread.
func supersede(all []*Series) []*Series {
	type key struct{ author, title string }
	best := map[key]*Series{}
	for _, s := range all {
		k := key{AddrOf(s.Author), strings.ToLower(s.Title)}
		if b, ok := best[k]; !ok || s.Version > b.Version || (s.Version == b.Version && s.Date.After(b.Date)) {
			best[k] = s
		}
	}
	out := all[:0]
	for _, s := range all {
		if best[key{AddrOf(s.Author), strings.ToLower(s.Title)}] == s {
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
