package main

import (
	"fmt"
	"go/ast"
	"go/types"
	"sort"
	"strings"
)

// The walk of a request, as docs/architecture.md defines it: start at a
// function with one of its parameters (Pipeline.Execute and its req),
// follow each call that is handed that value or a value made from it, in
// the order the code is written (both sides of every branch, closures
// included), into the module's functions: a static call, a method of a
// concrete type, or a method of an interface that exactly one production
// type implements (a type in a non-test file of a package that is not a
// test-only package, the dry run's stand-ins DryRun* aside), never a
// function value. Write down the top-level folder of each function
// entered. A move is a change of folder between two functions entered in
// turn; a climb back up is a move into a folder that imports the one left.
//
// "Made from it": a variable assigned, declared or ranged from an
// expression that mentions the value or one made from it; a variable whose
// field or element is so assigned; the receiver of a method handed one;
// and, in a function entered, the parameters handed one. Each function is
// written down, and its body walked, the first time the walk enters it.

type walkResult struct {
	entered     []string // each function entered, in turn, with its folder
	calls       []string // the functions the start itself enters, in turn
	folders     []string // the folders entered, a move between each two
	moves       int
	climbs      int
	climbList   []string
	home        string // the start's folder
	homeEntries int    // times the walk is in home, counting the start
}

type walker struct {
	m       *module
	decls   map[*types.Func]*funcDecl
	impls   map[*types.Func]*types.Func // interface method -> the one production method, nil when not one
	walked  map[*types.Func]bool
	imports map[string]map[string]bool // folder -> folders it imports
	res     *walkResult
	last    string
	depth   int
}

type funcDecl struct {
	decl *ast.FuncDecl
	pkg  *pkg
}

func walk(m *module, from string) (*walkResult, error) {
	spec, param, ok := strings.Cut(from, ":")
	if !ok {
		return nil, fmt.Errorf("-walk %q: want PKG.TYPE.METHOD:PARAM", from)
	}
	w := &walker{m: m, decls: map[*types.Func]*funcDecl{}, impls: map[*types.Func]*types.Func{},
		walked: map[*types.Func]bool{}, imports: map[string]map[string]bool{}, res: &walkResult{}}
	for _, p := range m.pkgs {
		for _, f := range p.files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					if fn, ok := p.info.Defs[fd.Name].(*types.Func); ok {
						w.decls[fn] = &funcDecl{fd, p}
					}
				}
			}
		}
		for _, imp := range p.imports {
			if q := m.byPath[imp]; q != nil && q.folder() != p.folder() {
				if w.imports[p.folder()] == nil {
					w.imports[p.folder()] = map[string]bool{}
				}
				w.imports[p.folder()][q.folder()] = true
			}
		}
	}
	start, err := w.find(spec)
	if err != nil {
		return nil, err
	}
	d := w.decls[start]
	var tainted []types.Object
	for _, fl := range d.decl.Type.Params.List {
		for _, n := range fl.Names {
			if n.Name == param {
				tainted = append(tainted, d.pkg.info.Defs[n])
			}
		}
	}
	if len(tainted) == 0 {
		return nil, fmt.Errorf("-walk %q: %s has no parameter %q", from, spec, param)
	}
	w.res.home = d.pkg.folder()
	w.enter(start, tainted)
	return w.res, nil
}

// find resolves PKG.TYPE.METHOD or PKG.FUNC (PKG a path in the module).
func (w *walker) find(spec string) (*types.Func, error) {
	i := strings.LastIndex(spec, "/")
	parts := strings.Split(spec[i+1:], ".")
	if len(parts) < 2 {
		return nil, fmt.Errorf("-walk %q: want PKG.TYPE.METHOD or PKG.FUNC", spec)
	}
	p := w.m.byRel[spec[:i+1]+parts[0]]
	if p == nil {
		return nil, fmt.Errorf("-walk: no package %q in the module", spec[:i+1]+parts[0])
	}
	obj := p.types.Scope().Lookup(parts[1])
	if len(parts) == 3 && obj != nil {
		obj, _, _ = types.LookupFieldOrMethod(types.NewPointer(obj.Type()), true, p.types, parts[2])
	}
	fn, ok := obj.(*types.Func)
	if !ok || w.decls[fn] == nil {
		return nil, fmt.Errorf("-walk: %s is no function of the module with a body", spec)
	}
	return fn, nil
}

func (w *walker) enter(fn *types.Func, tainted []types.Object) {
	if w.walked[fn] {
		return
	}
	w.walked[fn] = true
	d := w.decls[fn]
	folder := d.pkg.folder()
	if w.depth == 1 {
		w.res.calls = append(w.res.calls, funcName(fn))
	}
	w.depth++
	defer func() { w.depth-- }()
	w.res.entered = append(w.res.entered, folder+": "+funcName(fn))
	if folder != w.last {
		if w.last != "" {
			w.res.moves++
			if w.imports[folder][w.last] {
				w.res.climbs++
				w.res.climbList = append(w.res.climbList, w.last+" -> "+folder+" ("+funcName(fn)+")")
			}
		}
		w.res.folders = append(w.res.folders, folder)
		if folder == w.res.home {
			w.res.homeEntries++
		}
		w.last = folder
	}
	info := d.pkg.info
	t := map[types.Object]bool{}
	for _, o := range tainted {
		t[o] = true
	}
	spread(info, d.decl.Body, t)
	var calls []*ast.CallExpr
	ast.Inspect(d.decl.Body, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			calls = append(calls, c)
		}
		return true
	})
	sort.SliceStable(calls, func(i, j int) bool { return calls[i].Pos() < calls[j].Pos() })
	for _, c := range calls {
		callee, recv := w.callee(info, c)
		if callee == nil || w.decls[callee] == nil {
			continue
		}
		cd := w.decls[callee].decl
		var handed []types.Object
		if recv != nil && mentions(info, recv, t) && cd.Recv != nil {
			for _, n := range cd.Recv.List[0].Names {
				handed = append(handed, w.decls[callee].pkg.info.Defs[n])
			}
		}
		params := paramObjs(w.decls[callee].pkg.info, cd)
		for i, a := range c.Args {
			if !mentions(info, a, t) || len(params) == 0 {
				continue
			}
			handed = append(handed, params[min(i, len(params)-1)])
		}
		if len(handed) == 0 {
			continue
		}
		w.enter(callee, handed)
	}
}

// callee is the module function a call enters, and the receiver
// expression of a method call; nil for a function value, a conversion, a
// builtin, or an interface method that not exactly one production type
// implements.
func (w *walker) callee(info *types.Info, c *ast.CallExpr) (*types.Func, ast.Expr) {
	switch f := ast.Unparen(c.Fun).(type) {
	case *ast.Ident:
		fn, _ := info.Uses[f].(*types.Func)
		return origin(fn), nil
	case *ast.IndexExpr: // a generic function instantiated
		if id, ok := f.X.(*ast.Ident); ok {
			fn, _ := info.Uses[id].(*types.Func)
			return origin(fn), nil
		}
	case *ast.SelectorExpr:
		sel := info.Selections[f]
		if sel == nil { // pkg.F
			fn, _ := info.Uses[f.Sel].(*types.Func)
			return origin(fn), nil
		}
		if sel.Kind() != types.MethodVal {
			return nil, nil
		}
		fn := origin(sel.Obj().(*types.Func))
		if types.IsInterface(fn.Type().(*types.Signature).Recv().Type()) {
			return w.implementation(fn), f.X
		}
		return fn, f.X
	}
	return nil, nil
}

func origin(fn *types.Func) *types.Func {
	if fn == nil {
		return nil
	}
	return fn.Origin()
}

// implementation is the method of the one production type of the module
// that implements m's interface, nil when there is not exactly one.
func (w *walker) implementation(m *types.Func) *types.Func {
	if impl, ok := w.impls[m]; ok {
		return impl
	}
	iface, _ := m.Type().(*types.Signature).Recv().Type().Underlying().(*types.Interface)
	var found []*types.Func
	for _, p := range w.m.pkgs {
		if p.testOnly() || iface == nil {
			continue
		}
		for _, name := range p.types.Scope().Names() {
			tn, ok := p.types.Scope().Lookup(name).(*types.TypeName)
			if !ok || tn.IsAlias() || types.IsInterface(tn.Type()) || strings.HasPrefix(name, "DryRun") {
				continue
			}
			for _, t := range []types.Type{tn.Type(), types.NewPointer(tn.Type())} {
				if types.Implements(t, iface) {
					obj, _, _ := types.LookupFieldOrMethod(t, true, m.Pkg(), m.Name())
					if fn, ok := obj.(*types.Func); ok {
						found = append(found, fn)
					}
					break
				}
			}
		}
	}
	var impl *types.Func
	if len(found) == 1 {
		impl = found[0]
	}
	w.impls[m] = impl
	return impl
}

// spread marks, to a fixed point, the variables of body made from a
// marked one (see the file's comment).
func spread(info *types.Info, body *ast.BlockStmt, t map[types.Object]bool) {
	mark := func(e ast.Expr) bool {
		if o := root(info, e); o != nil && !t[o] {
			t[o] = true
			return true
		}
		return false
	}
	for changed := true; changed; {
		changed = false
		ast.Inspect(body, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				for _, r := range s.Rhs {
					if mentions(info, r, t) {
						for _, l := range s.Lhs {
							changed = mark(l) || changed
						}
						break
					}
				}
			case *ast.ValueSpec:
				for _, v := range s.Values {
					if mentions(info, v, t) {
						for _, n := range s.Names {
							changed = mark(n) || changed
						}
						break
					}
				}
			case *ast.RangeStmt:
				if mentions(info, s.X, t) {
					if s.Key != nil {
						changed = mark(s.Key) || changed
					}
					if s.Value != nil {
						changed = mark(s.Value) || changed
					}
				}
			case *ast.CallExpr:
				if sel, ok := ast.Unparen(s.Fun).(*ast.SelectorExpr); ok && info.Selections[sel] != nil {
					for _, a := range s.Args {
						if mentions(info, a, t) {
							changed = mark(sel.X) || changed
							break
						}
					}
				}
			}
			return true
		})
	}
}

// root is the variable an expression stores into: x in x, x.f, x[i], *x.
func root(info *types.Info, e ast.Expr) types.Object {
	for {
		switch x := ast.Unparen(e).(type) {
		case *ast.Ident:
			if o := info.Defs[x]; o != nil {
				return o
			}
			if v, ok := info.Uses[x].(*types.Var); ok {
				return v
			}
			return nil
		case *ast.SelectorExpr:
			if info.Selections[x] == nil {
				return nil
			}
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// mentions reports whether e uses a marked variable.
func mentions(info *types.Info, e ast.Expr, t map[types.Object]bool) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && (t[info.Uses[id]] || t[info.Defs[id]]) {
			found = true
		}
		return !found
	})
	return found
}

func paramObjs(info *types.Info, d *ast.FuncDecl) []types.Object {
	var out []types.Object
	for _, fl := range d.Type.Params.List {
		if len(fl.Names) == 0 {
			out = append(out, nil)
			continue
		}
		for _, n := range fl.Names {
			out = append(out, info.Defs[n])
		}
	}
	return out
}

// funcName is pkg.Func or pkg.Type.Method.
func funcName(fn *types.Func) string {
	name := fn.Pkg().Name() + "."
	if recv := fn.Type().(*types.Signature).Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			name += n.Obj().Name() + "."
		}
	}
	return name + fn.Name()
}
