package graph

import (
	"context"
	"errors"
	"fmt"
)

// ErrInvalidResult is wrapped by the validators' errors.
var ErrInvalidResult = errors.New("graph: result fails validation")

// forEachEdge streams the whole edges array and calls fn(u, nb) for every
// vertex with its neighbour list (a long list in pieces).
func forEachEdge[V VertexID](ctx context.Context, g *Graph[V], workers int, fn func(u uint64, nb []V) error) error {
	chunks := vertexChunks(g.Offsets, maxSpan, 1<<14)
	var pool bufPool[V]
	return parallelChunksErr(ctx, workers, len(chunks), 1, func(ctx context.Context, c, _ int) error {
		lo, hi := chunks[c][0], chunks[c][1]
		vs := make([]uint64, 0, hi-lo)
		for v := lo; v < hi; v++ {
			vs = append(vs, v)
		}
		buf := pool.get()
		defer pool.put(buf)
		var ferr error
		_, err := visitLists(ctx, g, vs, *buf, func(v, _ uint64, nb []V) {
			if ferr == nil {
				ferr = fn(v, nb)
			}
		})
		if err != nil {
			return err
		}
		return ferr
	})
}

// ValidateBFS checks depths edge by edge: the source has depth 0; for every
// edge (u, v) from a reached u, v is reached and depth[v] <= depth[u]+1
// (and, in an undirected graph, the depths differ by at most one); every
// reached vertex other than the source has a neighbour one level up (in a
// directed graph: an in-neighbour).
func ValidateBFS[V VertexID](ctx context.Context, g *Graph[V], src uint64, depth []int32, workers int) error {
	if uint64(len(depth)) != g.N {
		return fmt.Errorf("%w: %d depths for %d vertices", ErrInvalidResult, len(depth), g.N)
	}
	if src >= g.N || depth[src] != 0 {
		return fmt.Errorf("%w: source %d has depth %v, want 0", ErrInvalidResult, src, depthAt(depth, src))
	}
	for v, d := range depth {
		if d < Unreached {
			return fmt.Errorf("%w: vertex %d has depth %d", ErrInvalidResult, v, d)
		}
	}
	hasParent := make([]uint64, (g.N+63)/64) // bit v: v has a neighbour one level up
	err := forEachEdge(ctx, g, workers, func(u uint64, nb []V) error {
		du := depth[u]
		for _, w := range nb {
			v := uint64(w)
			dv := depth[v]
			switch {
			case du == Unreached:
				if !g.Directed && dv != Unreached {
					return fmt.Errorf("%w: edge (%d, %d): %d unreached but %d at depth %d", ErrInvalidResult, u, v, u, v, dv)
				}
				continue
			case dv == Unreached:
				return fmt.Errorf("%w: edge (%d, %d): %d at depth %d but %d unreached", ErrInvalidResult, u, v, u, du, v)
			case dv > du+1:
				return fmt.Errorf("%w: edge (%d, %d): depths %d and %d differ by more than one", ErrInvalidResult, u, v, du, dv)
			case !g.Directed && du > dv+1:
				return fmt.Errorf("%w: edge (%d, %d): depths %d and %d differ by more than one", ErrInvalidResult, u, v, du, dv)
			}
			if dv == du+1 {
				setBit(hasParent, v)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for v, d := range depth {
		if d > 0 && !getBit(hasParent, uint64(v)) {
			return fmt.Errorf("%w: vertex %d at depth %d has no neighbour at depth %d", ErrInvalidResult, v, d, d-1)
		}
	}
	return nil
}

func depthAt(depth []int32, v uint64) any {
	if v < uint64(len(depth)) {
		return depth[v]
	}
	return "none"
}

// ValidateCC checks labels against a union-find over every edge: two
// vertices share a label exactly when the union-find joins them, and every
// label is the smallest vertex id of its component.
func ValidateCC[V VertexID](ctx context.Context, g *Graph[V], comp []uint64) error {
	if uint64(len(comp)) != g.N {
		return fmt.Errorf("%w: %d labels for %d vertices", ErrInvalidResult, len(comp), g.N)
	}
	uf := NewUnionFind(g.N)
	err := forEachEdge(ctx, g, 1, func(u uint64, nb []V) error {
		for _, w := range nb {
			uf.Union(u, uint64(w))
		}
		return nil
	})
	if err != nil {
		return err
	}
	minOf := make([]uint64, g.N) // union-find root -> smallest member
	for i := range minOf {
		minOf[i] = ^uint64(0)
	}
	for v := uint64(0); v < g.N; v++ {
		r := uf.Find(v)
		minOf[r] = min(minOf[r], v)
	}
	for v := uint64(0); v < g.N; v++ {
		if want := minOf[uf.Find(v)]; comp[v] != want {
			return fmt.Errorf("%w: vertex %d has label %d, its component's smallest vertex is %d", ErrInvalidResult, v, comp[v], want)
		}
	}
	return nil
}

// UnionFind is a sequential disjoint-set forest with path halving and
// union by size: the oracle of ValidateCC.
type UnionFind struct {
	parent []uint64
	size   []uint64
}

// NewUnionFind makes n singleton sets.
func NewUnionFind(n uint64) *UnionFind {
	u := &UnionFind{parent: make([]uint64, n), size: make([]uint64, n)}
	for i := range u.parent {
		u.parent[i] = uint64(i)
		u.size[i] = 1
	}
	return u
}

// Find returns the representative of v's set.
func (u *UnionFind) Find(v uint64) uint64 {
	for u.parent[v] != v {
		u.parent[v] = u.parent[u.parent[v]]
		v = u.parent[v]
	}
	return v
}

// Union joins the sets of a and b.
func (u *UnionFind) Union(a, b uint64) {
	ra, rb := u.Find(a), u.Find(b)
	if ra == rb {
		return
	}
	if u.size[ra] < u.size[rb] {
		ra, rb = rb, ra
	}
	u.parent[rb] = ra
	u.size[ra] += u.size[rb]
}

func setBit(bm []uint64, v uint64) { atomicOr(&bm[v/64], 1<<(v%64)) }
func getBit(bm []uint64, v uint64) bool {
	return bm[v/64]&(1<<(v%64)) != 0
}
