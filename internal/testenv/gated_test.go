package testenv

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// What a heavy test does, as the module's test code spells it, and the
// gate that must guard it. A test (or benchmark) is heavy when it reaches
// one of these, through the functions of its own package's test files and
// of the module's test-helper packages (a call is followed by its name:
// more than the test may reach, never less).
var (
	// Calls that build a kernel, import the default tree, or hand out the
	// real builder over the shared kernel cache.
	kernelCalls = map[string]bool{"DefaultKernel": true, "ImportDebian": true, "DefaultBuilder": true, "KernelTrees": true}
	// String literals that start QEMU: its binary's name, or a config
	// that chooses a real backend.
	vmBinary   = "qemu-system-x86_64"
	vmLiterals = []string{"backend: qemu", "backend: libvirt"}
	// Calls that give a real VM backend: vmrunner.New("qemu", ...) on the
	// host's QEMU (a Config literal with a QEMU binary of its own runs that
	// binary, a test's stand-in), and New("libvirt", ...) on the local
	// libvirtd (a Config literal with a URI of its own only dials, or
	// refuses, that URI); invm.DefaultVM is the real shape.
	vmCalls        = map[string]bool{"DefaultVM": true}
	browserCalls   = map[string]bool{"NewExecAllocator": true}
	browserLiteral = "chromium"
)

type kind string

const (
	kernelKind  kind = "builds a kernel"
	vmKind      kind = "starts QEMU"
	browserKind kind = "drives a browser"
)

// gateOf is the gate each kind needs.
var gateOf = map[kind]string{kernelKind: "NeedsKernel", vmKind: "NeedsVM", browserKind: "NeedsBrowser"}

// fn is what one function of the test code does directly.
type fn struct {
	pos   string
	sinks map[kind]string // kind -> what showed it
	gates map[string]bool // testenv.X called
	calls []string        // keys of the functions it calls
}

// TestEveryHeavyTestIsGated reads every test file of the module (and the
// test-helper packages, the non-test files that import "testing") and
// fails where a test that builds a kernel, starts QEMU or drives a browser
// reaches no matching gate of this package, and where test code asks
// testing.Short, exec.LookPath, os.Geteuid or an environment variable for
// a skip of its own instead of the gate: so that no heavy test can forget
// -short, and none hides behind a variable CI never sets.
func TestEveryHeavyTestIsGated(t *testing.T) {
	root := moduleRoot(t)
	modPath := modulePath(t, root)
	fset := token.NewFileSet()
	funcs := map[string]*fn{}
	var tests []string
	var problems []string
	self := filepath.Join(root, "internal", "testenv")

	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || filepath.Dir(path) == self {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		isTest := strings.HasSuffix(path, "_test.go")
		imports := map[string]string{} // local name -> import path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			imports[name] = p
		}
		if !isTest && imports["testing"] != "testing" {
			return nil // production code: its calls are sinks, not followed
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.Dir(path)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			key := funcKey(dir, fd.Recv != nil, fd.Name.Name)
			info := funcs[key]
			if info == nil {
				info = &fn{sinks: map[kind]string{}, gates: map[string]bool{}}
				funcs[key] = info
			}
			info.pos = fmt.Sprintf("%s:%d", rel, fset.Position(fd.Pos()).Line)
			scan(fd.Body, dir, root, modPath, imports, info, func(pos token.Pos, msg string) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, fset.Position(pos).Line, msg))
			})
			if isTest && fd.Recv == nil && (isTestName(fd.Name.Name, "Test") || isTestName(fd.Name.Name, "Benchmark")) {
				tests = append(tests, key)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 100 {
		t.Fatalf("found %d tests under %s: not the module's test files", len(tests), root)
	}

	heavy := 0
	for _, key := range tests {
		sinks, gates := reach(funcs, key)
		if len(sinks) == 0 {
			continue
		}
		heavy++
		for k, what := range sinks {
			if !gates[gateOf[k]] {
				problems = append(problems, fmt.Sprintf("%s: %s %s (%s) without testenv.%s",
					funcs[key].pos, strings.SplitN(key, "\x00", 3)[2], k, what, gateOf[k]))
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d tests and benchmarks read, %d of them heavy", len(tests), heavy)
	if heavy < 20 {
		t.Errorf("only %d heavy tests recognized: the sinks above no longer match the code", heavy)
	}
}

func funcKey(dir string, method bool, name string) string {
	if method {
		return dir + "\x00method\x00" + name
	}
	return dir + "\x00func\x00" + name
}

func isTestName(name, prefix string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	rest := name[len(prefix):]
	return rest == "" || !('a' <= rest[0] && rest[0] <= 'z')
}

// scan records what body does directly, and reports skips of its own.
func scan(body *ast.BlockStmt, dir, root, modPath string, imports map[string]string, info *fn, report func(token.Pos, string)) {
	pkgDir := func(name string) (string, bool) {
		p, ok := imports[name]
		if !ok {
			return "", false
		}
		if p == modPath || strings.HasPrefix(p, modPath+"/") {
			return filepath.Join(root, strings.TrimPrefix(strings.TrimPrefix(p, modPath), "/")), true
		}
		return "", true
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(n.Value)
			if s == vmBinary {
				info.sinks[vmKind] = strconv.Quote(s)
			}
			for _, lit := range vmLiterals {
				if strings.Contains(s, lit) {
					info.sinks[vmKind] = strconv.Quote(lit)
				}
			}
			if s == browserLiteral {
				info.sinks[browserKind] = strconv.Quote(s)
			}
		case *ast.IfStmt:
			if what := ownSkip(n); what != "" {
				report(n.Pos(), what+" decides a skip: ask internal/testenv (Tools, Root, Files, Long, Needs*)")
			}
		case *ast.CallExpr:
			var name string
			switch f := n.Fun.(type) {
			case *ast.Ident:
				name = f.Name
				info.calls = append(info.calls, funcKey(dir, false, name))
			case *ast.SelectorExpr:
				name = f.Sel.Name
				x, _ := f.X.(*ast.Ident)
				d, isPkg := "", false
				if x != nil {
					d, isPkg = pkgDir(x.Name)
				}
				switch {
				case !isPkg:
					info.calls = append(info.calls, funcKey(dir, true, name))
				case imports[x.Name] == "testing" && name == "Short":
					report(n.Pos(), "testing.Short() outside internal/testenv: use testenv.Long or a Needs* gate")
				case imports[x.Name] == "os/exec" && name == "LookPath":
					report(n.Pos(), "exec.LookPath in test code: use testenv.Tool or testenv.Tools")
				case strings.HasSuffix(imports[x.Name], "/internal/testenv"):
					info.gates[name] = true
				case d != "":
					info.calls = append(info.calls, funcKey(d, false, name))
				}
			default:
				return true
			}
			switch {
			case kernelCalls[name]:
				info.sinks[kernelKind] = name
			case vmCalls[name]:
				info.sinks[vmKind] = name
			case browserCalls[name]:
				info.sinks[browserKind] = name
			case name == "New" && len(n.Args) > 0:
				if lit, ok := n.Args[0].(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					if (s == "qemu" && !hasField(n.Args[1:], "QEMU")) || (s == "libvirt" && !hasField(n.Args[1:], "URI")) {
						info.sinks[vmKind] = "New(" + lit.Value + ")"
					}
				}
			}
		}
		return true
	})
}

// hasField reports whether the first of args is a composite literal that
// sets field.
func hasField(args []ast.Expr, field string) bool {
	if len(args) == 0 {
		return false
	}
	cl, ok := args[0].(*ast.CompositeLit)
	if !ok {
		return false
	}
	for _, e := range cl.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if id, ok := kv.Key.(*ast.Ident); ok && id.Name == field {
				return true
			}
		}
	}
	return false
}

// ownSkip names what an if statement asks that the gates should: an
// environment variable, the user id, -short or a tool's presence, when
// its body skips the test.
func ownSkip(s *ast.IfStmt) string {
	skips := false
	ast.Inspect(s.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Skip") {
				skips = true
			}
		}
		return !skips
	})
	if !skips {
		return ""
	}
	var what string
	check := func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := c.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" {
				switch sel.Sel.Name {
				case "Getenv", "LookupEnv":
					what = "an environment variable"
				case "Geteuid", "Getuid":
					what = "the user id"
				}
			}
			return what == ""
		})
	}
	if s.Init != nil {
		check(s.Init)
	}
	check(s.Cond)
	return what
}

// reach follows the calls from key and returns every sink and gate on the
// way.
func reach(funcs map[string]*fn, key string) (map[kind]string, map[string]bool) {
	sinks, gates := map[kind]string{}, map[string]bool{}
	seen := map[string]bool{key: true}
	queue := []string{key}
	for len(queue) > 0 {
		f := funcs[queue[0]]
		queue = queue[1:]
		if f == nil {
			continue
		}
		for k, v := range f.sinks {
			if _, ok := sinks[k]; !ok {
				sinks[k] = v
			}
		}
		for g := range f.gates {
			gates[g] = true
		}
		for _, c := range f.calls {
			if !seen[c] {
				seen[c] = true
				queue = append(queue, c)
			}
		}
	}
	return sinks, gates
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.TrimSpace(p)
		}
	}
	t.Fatal(errors.New("go.mod names no module"))
	return ""
}
