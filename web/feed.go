package web

import (
	"encoding/xml"
	"net/http"
	"strings"
	"time"
)

// The Atom feed of results (RFC 4287): one entry per finished run, newest
// first, titled with the series and summarised by the reply's verdict.

type atomFeed struct {
	XMLName xml.Name    `xml:"http://www.w3.org/2005/Atom feed"`
	Title   string      `xml:"title"`
	ID      string      `xml:"id"`
	Updated string      `xml:"updated"`
	Links   []atomLink  `xml:"link"`
	Author  atomPerson  `xml:"author"`
	Entries []atomEntry `xml:"entry"`
}

type atomLink struct {
	Rel  string `xml:"rel,attr,omitempty"`
	Type string `xml:"type,attr,omitempty"`
	Href string `xml:"href,attr"`
}

type atomPerson struct {
	Name string `xml:"name"`
}

type atomEntry struct {
	Title    string       `xml:"title"`
	ID       string       `xml:"id"`
	Updated  string       `xml:"updated"`
	Link     atomLink     `xml:"link"`
	Author   atomPerson   `xml:"author"`
	Summary  string       `xml:"summary"`
	Category atomCategory `xml:"category"`
}

type atomCategory struct {
	Term string `xml:"term,attr"`
}

const feedEntries = 50

func (s *server) feed(w http.ResponseWriter, r *http.Request) {
	if err := s.runs.refresh(); err != nil {
		s.fail(w, r, err)
		return
	}
	// Atom wants absolute links; without a configured base URL, the
	// address the request came to is the best there is.
	base := s.o.BaseURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	es, _ := s.runs.page(0, feedEntries)
	f := atomFeed{Title: "patchbot results", ID: base + "/", Author: atomPerson{Name: "patchbot"},
		Links: []atomLink{{Rel: "self", Type: "application/atom+xml", Href: base + "/feed.atom"},
			{Rel: "alternate", Type: "text/html", Href: base + "/"}}}
	updated := time.Unix(0, 0).UTC()
	for _, sum := range s.summaries(es) {
		link := base + s.runPath(sum.Name)
		title := sum.Subject
		if title == "" {
			title = sum.Name
		}
		f.Entries = append(f.Entries, atomEntry{Title: title, ID: link, Updated: sum.Finished.UTC().Format(time.RFC3339),
			Link: atomLink{Rel: "alternate", Type: "text/html", Href: link}, Author: atomPerson{Name: authorName(sum.Author)},
			Summary: sum.Verdict, Category: atomCategory{Term: sum.Outcome}})
		if sum.Finished.After(updated) {
			updated = sum.Finished.UTC()
		}
	}
	f.Updated = updated.Format(time.RFC3339)
	out, err := xml.MarshalIndent(f, "", "  ")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/atom+xml; charset=utf-8")
	w.Write([]byte(xml.Header))
	w.Write(out)
	w.Write([]byte("\n"))
}

// authorName is the name part of "Name <addr>", or the whole.
func authorName(a string) string {
	if i := strings.Index(a, "<"); i > 0 {
		return strings.Trim(strings.TrimSpace(a[:i]), `"`)
	}
	if a == "" {
		return "unknown"
	}
	return a
}
