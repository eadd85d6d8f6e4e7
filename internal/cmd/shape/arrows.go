package main

import (
	"go/ast"
	"go/types"
	"path/filepath"
	"sort"
)

// fileArrows are the arrows between p's files: file A points at file B
// when A uses a function, type, variable, constant, method or field
// declared in B. The files are layered when they can be ordered so that
// every arrow points down, at a file below; cycles forbid that. cyclic
// are the arrows on a cycle (B reaches A again); back are the arrows that
// point up in the order of the files that needs the fewest such arrows
// (a minimum feedback arc set: exact for up to 22 files on one cycle, by
// dynamic programming over the subsets, else a greedy order), listed as
// the arrows that run back up.
func fileArrows(p *pkg) (arrows, cyclic, back [][2]string) {
	own := map[string]bool{}
	for _, n := range p.names {
		own[n] = true
	}
	edges := map[string]map[string]bool{}
	for i, f := range p.files {
		from := p.names[i]
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.info.Uses[id]
			if obj == nil || obj.Pkg() != p.types || !declaredAtTop(obj) {
				return true
			}
			to := filesBase(p, obj)
			if to == from || !own[to] {
				return true
			}
			if edges[from] == nil {
				edges[from] = map[string]bool{}
			}
			edges[from][to] = true
			return true
		})
	}
	for a, tos := range edges {
		for b := range tos {
			arrows = append(arrows, [2]string{a, b})
		}
	}
	sort.Slice(arrows, func(i, j int) bool {
		return arrows[i][0] < arrows[j][0] || arrows[i][0] == arrows[j][0] && arrows[i][1] < arrows[j][1]
	})
	comp := sccs(p.names, edges)
	members := map[int][]string{}
	for _, a := range arrows {
		if comp[a[0]] == comp[a[1]] {
			cyclic = append(cyclic, a)
		}
	}
	for _, n := range p.names {
		members[comp[n]] = append(members[comp[n]], n)
	}
	for _, ns := range members {
		if len(ns) < 2 {
			continue
		}
		pos := map[string]int{}
		for i, n := range fewestUp(ns, edges) {
			pos[n] = i
		}
		for _, a := range cyclic {
			if _, ok := pos[a[0]]; ok && pos[a[1]] < pos[a[0]] {
				back = append(back, a)
			}
		}
	}
	sort.Slice(back, func(i, j int) bool {
		return back[i][0] < back[j][0] || back[i][0] == back[j][0] && back[i][1] < back[j][1]
	})
	return arrows, cyclic, back
}

// exactUpTo is the most files on one cycle that fewestUp orders exactly.
const exactUpTo = 22

// fewestUp orders the files of one cycle from the top so that as few
// arrows as possible point up (at a file above): exactly by dynamic
// programming over the subsets placed at the top, or greedily (Eades,
// Lin and Smyth) for more than exactUpTo files.
func fewestUp(ns []string, edges map[string]map[string]bool) []string {
	sort.Strings(ns)
	k := len(ns)
	uses := make([]uint32, k) // uses[i]: the files i points at
	for i, a := range ns {
		for j, b := range ns {
			if edges[a][b] {
				uses[i] |= 1 << j
			}
		}
	}
	if k > exactUpTo {
		return greedyOrder(ns, uses)
	}
	cost := make([]int32, 1<<k)
	from := make([]int8, 1<<k)
	for s := 1; s < 1<<k; s++ {
		cost[s] = -1
		for v := 0; v < k; v++ {
			if s&(1<<v) == 0 {
				continue
			}
			rest := s &^ (1 << v)
			c := cost[rest] + int32(bits(uses[v]&uint32(rest))) // v, placed below rest, points up at rest
			if cost[s] < 0 || c < cost[s] {
				cost[s], from[s] = c, int8(v)
			}
		}
	}
	order := make([]string, k)
	for s, i := 1<<k-1, k-1; s != 0; i-- {
		v := from[s]
		order[i] = ns[v]
		s &^= 1 << v
	}
	return order
}

func greedyOrder(ns []string, uses []uint32) []string {
	k := len(ns)
	left := uint32(1<<k - 1)
	var top, bottom []string
	for left != 0 {
		best, score := -1, 0
		for v := 0; v < k; v++ {
			if left&(1<<v) == 0 {
				continue
			}
			in := 0
			for u := 0; u < k; u++ {
				if left&(1<<u) != 0 && uses[u]&(1<<v) != 0 {
					in++
				}
			}
			if d := in - bits(uses[v]&left); best < 0 || -d > score {
				best, score = v, -d
			}
		}
		if bits(uses[best]&left) == 0 { // used by others alone: the bottom
			bottom = append([]string{ns[best]}, bottom...)
		} else {
			top = append(top, ns[best])
		}
		left &^= 1 << best
	}
	return append(top, bottom...)
}

func bits(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// declaredAtTop: obj is declared at the package's top level, or is a
// method or a field (which belong to a top-level type).
func declaredAtTop(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		if sig, ok := o.Type().(*types.Signature); ok && sig.Recv() != nil {
			return true
		}
	case *types.Var:
		if o.IsField() {
			return true
		}
	}
	return obj.Parent() == obj.Pkg().Scope()
}

func filesBase(p *pkg, obj types.Object) string {
	return filepath.Base(p.fset.Position(obj.Pos()).Filename)
}

// sccs numbers the strongly connected components of the graph (Tarjan).
func sccs(nodes []string, edges map[string]map[string]bool) map[string]int {
	index, low, comp := map[string]int{}, map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	next, ncomp := 0, 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		var outs []string
		for w := range edges[v] {
			outs = append(outs, w)
		}
		sort.Strings(outs)
		for _, w := range outs {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = ncomp
				if w == v {
					break
				}
			}
			ncomp++
		}
	}
	for _, v := range nodes {
		if _, seen := index[v]; !seen {
			visit(v)
		}
	}
	return comp
}
