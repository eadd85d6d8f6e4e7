package web

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"
	"time"
)

var (
	pagesOnce sync.Once
	pages     map[string]*template.Template
	pagesErr  error
)

var funcs = template.FuncMap{
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	},
	"date": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return humanDuration(time.Since(t)) + " ago"
	},
	"until": func(t time.Time) string { return "in " + humanDuration(time.Until(t)) },
	// lease is when a worker's hold on its job ends: "ends in 45 s", or
	// "ran out 3 s ago" (the worker stopped renewing it).
	"lease": func(t time.Time) string {
		if d := time.Until(t); d >= 0 {
			return "ends in " + humanDuration(d)
		}
		return "ran out " + humanDuration(time.Since(t)) + " ago"
	},
	"dur": humanDuration,
	"size": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
	"pct":   func(f float64) string { return fmt.Sprintf("%g%%", f*100) },
	"join":  strings.Join,
	"add":   func(a, b int) int { return a + b },
	"sub":   func(a, b int) int { return a - b },
	"lines": func(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") },
}

// humanDuration is "3 s", "4 min", "2 h 5 min", "3 days".
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 && h < 10 {
			return fmt.Sprintf("%d h %d min", h, m)
		}
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// parseTemplates parses every page once: the layout with each page's
// content.
func parseTemplates() error {
	pagesOnce.Do(func() {
		pages = map[string]*template.Template{}
		for _, name := range []string{"home", "runs", "run", "series", "job", "submit"} {
			t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html",
				"templates/parts.html", "templates/"+name+".html")
			if err != nil {
				pagesErr = fmt.Errorf("dashboard templates: %w", err)
				return
			}
			pages[name] = t
		}
	})
	return pagesErr
}

type pageData struct {
	Title string
	Page  string
	Data  any
}

func renderPage(w io.Writer, page, title string, data any) error {
	t := pages[page]
	if t == nil {
		return fmt.Errorf("no page %q", page)
	}
	return t.Execute(w, pageData{Title: title, Page: page, Data: data})
}
