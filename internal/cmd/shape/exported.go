package main

import "go/ast"

// api counts a package's exported API.
type api struct{ names, methods, fields int }

// exported counts, with go/ast, the top-level exported types, functions,
// constants and variables of p (names), the exported methods of its
// exported types (methods), and the exported fields of its exported
// struct types, an embedded exported type counting as one (fields).
func exported(p *pkg) api {
	var a api
	for _, f := range p.files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				switch {
				case d.Recv == nil:
					if d.Name.IsExported() {
						a.names++
					}
				case d.Name.IsExported() && ast.IsExported(recvName(d.Recv.List[0].Type)):
					a.methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						a.names++
						if st, ok := s.Type.(*ast.StructType); ok {
							a.fields += exportedFields(st)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								a.names++
							}
						}
					}
				}
			}
		}
	}
	return a
}

func exportedFields(st *ast.StructType) int {
	n := 0
	for _, fld := range st.Fields.List {
		if len(fld.Names) == 0 {
			if ast.IsExported(recvName(fld.Type)) {
				n++
			}
			continue
		}
		for _, name := range fld.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

// recvName is the name of a receiver's or an embedded field's type: T in
// T, *T, pkg.T, T[P].
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
