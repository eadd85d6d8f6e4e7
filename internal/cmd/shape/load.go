package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// module is the module's packages, parsed and type-checked.
type module struct {
	path, root string
	fset       *token.FileSet
	pkgs       []*pkg // in dependency order, dependencies first
	byPath     map[string]*pkg
	byRel      map[string]*pkg
}

// pkg is one package of the module: its non-test files.
type pkg struct {
	path, rel, name string
	files           []*ast.File
	names           []string // the files' base names, as files
	lines           int
	imports         []string
	types           *types.Package
	info            *types.Info
	fset            *token.FileSet
}

// folder is the package's top-level folder in the module ("cmd" for
// cmd/patchbot).
func (p *pkg) folder() string {
	f, _, _ := strings.Cut(p.rel, "/")
	return f
}

// testOnly: a package of test servers and fakes (imaptest, pgtest, ...),
// imported by tests alone.
func (p *pkg) testOnly() bool { return strings.HasSuffix(p.name, "test") }

type listed struct {
	ImportPath, Dir, Name, Export string
	GoFiles, Imports              []string
	Module                        *struct{ Path, Dir string }
}

// load lists the module's packages with their dependencies (go list
// -export builds the dependencies' export data), then parses and
// type-checks the module's own packages from source.
func load(dir string) (*module, error) {
	out, err := goCmd(dir, "list", "-m", "-json")
	if err != nil {
		return nil, err
	}
	var mod struct{ Path, Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("go list -m: %w", err)
	}
	out, err = goCmd(mod.Dir, "list", "-deps", "-export", "-json=ImportPath,Dir,Name,Export,GoFiles,Imports,Module", "./...")
	if err != nil {
		return nil, err
	}
	m := &module{path: mod.Path, root: mod.Dir, fset: token.NewFileSet(), byPath: map[string]*pkg{}, byRel: map[string]*pkg{}}
	exports := map[string]string{}
	var own []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		exports[l.ImportPath] = l.Export
		if l.Module != nil && l.Module.Path == mod.Path {
			own = append(own, l)
		}
	}
	gc := importer.ForCompiler(m.fset, "gc", func(path string) (io.ReadCloser, error) {
		f := exports[path]
		if f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p := m.byPath[path]; p != nil {
			return p.types, nil
		}
		return gc.Import(path)
	})
	for _, l := range own {
		p, err := m.check(l, imp)
		if err != nil {
			return nil, err
		}
		m.pkgs = append(m.pkgs, p)
		m.byPath[p.path], m.byRel[p.rel] = p, p
	}
	return m, nil
}

func (m *module) check(l listed, imp types.Importer) (*pkg, error) {
	rel := strings.TrimPrefix(strings.TrimPrefix(l.ImportPath, m.path), "/")
	if rel == "" {
		rel = "."
	}
	p := &pkg{path: l.ImportPath, rel: rel, name: l.Name, imports: l.Imports, fset: m.fset}
	for _, name := range l.GoFiles {
		path := filepath.Join(l.Dir, name)
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(m.fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
		p.names = append(p.names, name)
		p.lines += bytes.Count(src, []byte("\n"))
	}
	p.info = &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
	conf := types.Config{Importer: imp}
	tp, err := conf.Check(l.ImportPath, m.fset, p.files, p.info)
	if err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", l.ImportPath, err)
	}
	p.types = tp
	return p, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// fileOf is the base name of the file pos is in.
func (m *module) fileOf(pos token.Pos) string { return filepath.Base(m.fset.Position(pos).Filename) }
