// Command shape prints figures that describe the shape of the code of the
// Go module it runs in, so that docs/architecture.md quotes a command
// rather than a count typed by hand:
//
//   - the lines of each package (its non-test .go files, as wc -l counts
//     them);
//   - each package's exported API, counted with go/ast: top-level exported
//     types, functions, constants and variables (names), exported methods
//     of exported types (methods), and the exported fields of exported
//     struct types (fields, an embedded exported type counting as one);
//   - the file-to-file arrows inside one package (-arrows, default
//     service): file A points at file B when A uses something declared in
//     B. The files of a package are layered when they can be ordered with
//     every arrow pointing down; the arrows that run back up are those
//     pointing up in the order that needs fewest of them (arrows.go);
//   - the walk of a request (-walk, default service.Pipeline.Execute's
//     req): see walk.go;
//   - identical runs of six or more lines of logic in production code
//     (-dupes): see dupes.go.
//
// Usage, from anywhere in the module:
//
//	go run ./internal/cmd/shape [-arrows service] [-walk service.Pipeline.Execute:req] [-v]
//
// It type-checks the module's packages from source with go/types, the
// dependencies from the export data that `go list -export` builds.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("C", ".", "a directory inside the module to measure")
	arrowsPkg := flag.String("arrows", "service", "the package (path in the module) whose file-to-file arrows to count")
	walkFrom := flag.String("walk", "service.Pipeline.Execute:req", "where the walk starts: PKG.TYPE.METHOD:PARAM or PKG.FUNC:PARAM")
	verbose := flag.Bool("v", false, "list every arrow back up, every function the walk enters and every duplicate run")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: shape [-C DIR] [-arrows PKG] [-walk PKG.TYPE.METHOD:PARAM] [-v]\n\n"+
			"Prints the lines and exported names of each package of the module, the file-to-file\n"+
			"arrows back up inside one package, the walk of a request through the stages, and\n"+
			"identical runs of six or more lines of logic in production code.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "shape: stray argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	m, err := load(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shape:", err)
		os.Exit(1)
	}
	if err := report(os.Stdout, m, *arrowsPkg, *walkFrom, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "shape:", err)
		os.Exit(1)
	}
}

func report(w io.Writer, m *module, arrowsPkg, walkFrom string, verbose bool) error {
	fmt.Fprintf(w, "module %s\n\n", m.path)
	fmt.Fprintf(w, "| package | lines | names | methods | fields |\n|---|---|---|---|---|\n")
	for _, p := range m.pkgs {
		a := exported(p)
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", p.rel, p.lines, a.names, a.methods, a.fields)
	}

	p := m.byRel[arrowsPkg]
	if p == nil {
		return fmt.Errorf("no package %q in the module", arrowsPkg)
	}
	arrows, cyclic, back := fileArrows(p)
	fmt.Fprintf(w, "\n%s: %d files, %d file-to-file arrows, %d on a cycle, %d back up in the order of its files that needs fewest\n",
		p.rel, len(p.files), len(arrows), len(cyclic), len(back))
	if verbose {
		for _, a := range back {
			fmt.Fprintf(w, "  back up: %s -> %s\n", a[0], a[1])
		}
	}

	wk, err := walk(m, walkFrom)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nwalk of %s: %d functions entered, %d moves, %d climbs back up, %s entered %d times\n",
		walkFrom, len(wk.entered), wk.moves, wk.climbs, wk.home, wk.homeEntries)
	fmt.Fprintf(w, "  the start enters: %s\n", strings.Join(wk.calls, ", "))
	fmt.Fprintf(w, "  folders: %s\n", strings.Join(wk.folders, ", "))
	if len(wk.climbList) > 0 {
		fmt.Fprintf(w, "  climbs: %s\n", strings.Join(wk.climbList, "; "))
	}
	if verbose {
		for _, e := range wk.entered {
			fmt.Fprintf(w, "  enter %s\n", e)
		}
	}

	ds := dupes(m)
	fmt.Fprintf(w, "\nidentical runs of %d or more lines of logic in production code: %d\n", minRun, len(ds))
	sort.Slice(ds, func(i, j int) bool { return ds[i].String() < ds[j].String() })
	for _, d := range ds {
		if verbose || len(ds) <= 20 {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	return nil
}
