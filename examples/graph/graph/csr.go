package graph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync/atomic"
)

// ErrFormat is wrapped by every error about malformed input: bad counts,
// vertex ids out of range, truncated files, wrong headers, inconsistent
// offsets.
var ErrFormat = errors.New("graph: malformed input")

// VertexID is the element type of an edges array.
type VertexID interface{ ~uint32 | ~uint64 }

// Wide reports whether a graph of n vertices needs 64-bit vertex ids.
func Wide(n uint64) bool { return n > math.MaxUint32+1 }

// EdgeList is a list of directed edges Src[i] -> Dst[i] over the vertices
// [0, N), with optional per-edge weights W (nil, or one per edge).
type EdgeList[V VertexID] struct {
	N        uint64
	Src, Dst []V
	W        []float32
}

// Len is the number of edges.
func (e *EdgeList[V]) Len() int { return len(e.Src) }

// Check validates lengths and vertex ids.
func (e *EdgeList[V]) Check() error {
	if len(e.Src) != len(e.Dst) || (e.W != nil && len(e.W) != len(e.Src)) {
		return fmt.Errorf("%w: edge list with %d sources, %d destinations and %d weights", ErrFormat, len(e.Src), len(e.Dst), len(e.W))
	}
	for i := range e.Src {
		if uint64(e.Src[i]) >= e.N || uint64(e.Dst[i]) >= e.N {
			return fmt.Errorf("%w: edge %d (%d, %d) names a vertex outside [0, %d)", ErrFormat, i, e.Src[i], e.Dst[i], e.N)
		}
	}
	return nil
}

// CSR is a graph in compressed sparse rows: the neighbours of v are
// Edges[Offsets[v]:Offsets[v+1]] (with Weights at the same positions when
// Weights is not nil).
type CSR[V VertexID] struct {
	N        uint64
	Offsets  []uint64 // N+1 entries
	Edges    []V
	Weights  []float32
	Directed bool // false: every edge (u, v) has its reverse (v, u)
}

// Degree returns the number of neighbours of v.
func (g *CSR[V]) Degree(v uint64) uint64 { return g.Offsets[v+1] - g.Offsets[v] }

// Neighbors returns the neighbour list of v.
func (g *CSR[V]) Neighbors(v uint64) []V { return g.Edges[g.Offsets[v]:g.Offsets[v+1]] }

// Check validates the offsets and the vertex ids of the edges.
func (g *CSR[V]) Check() error {
	if err := checkOffsets(g.Offsets, g.N, uint64(len(g.Edges))); err != nil {
		return err
	}
	if g.Weights != nil && len(g.Weights) != len(g.Edges) {
		return fmt.Errorf("%w: %d weights for %d edges", ErrFormat, len(g.Weights), len(g.Edges))
	}
	for i, v := range g.Edges {
		if uint64(v) >= g.N {
			return fmt.Errorf("%w: edge %d names vertex %d of %d", ErrFormat, i, v, g.N)
		}
	}
	return nil
}

func checkOffsets(off []uint64, n, m uint64) error {
	if uint64(len(off)) != n+1 {
		return fmt.Errorf("%w: %d offsets for %d vertices (want %d)", ErrFormat, len(off), n, n+1)
	}
	if off[0] != 0 {
		return fmt.Errorf("%w: first offset is %d, want 0", ErrFormat, off[0])
	}
	if off[n] != m {
		return fmt.Errorf("%w: last offset is %d, want the edge count %d", ErrFormat, off[n], m)
	}
	for v := uint64(0); v < n; v++ {
		if off[v+1] < off[v] {
			return fmt.Errorf("%w: offsets decrease at vertex %d (%d then %d)", ErrFormat, v, off[v], off[v+1])
		}
	}
	return nil
}

// BuildOptions choose what Build does to the edges.
type BuildOptions struct {
	// Symmetrize adds the reverse of every edge; the result is undirected.
	Symmetrize bool
	// KeepSelfLoops keeps edges (v, v) (dropped by default).
	KeepSelfLoops bool
	// KeepDuplicates keeps repeated edges (removed by default; of
	// duplicates with weights, the smallest weight is kept).
	KeepDuplicates bool
	// Workers bounds the goroutines (default GOMAXPROCS).
	Workers int
	// Progress receives the phases (default none).
	Progress Progress
}

func (o *BuildOptions) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// Build turns an edge list into a CSR with sorted neighbour lists. The
// edge list is not modified.
func Build[V VertexID](ctx context.Context, el *EdgeList[V], opt BuildOptions) (*CSR[V], error) {
	if err := el.Check(); err != nil {
		return nil, err
	}
	if el.N == 0 {
		return &CSR[V]{Offsets: []uint64{0}, Directed: !opt.Symmetrize}, nil
	}
	prog := progressOr(opt.Progress)
	w := opt.workers()
	m := el.Len()
	keep := func(i int) bool { return opt.KeepSelfLoops || el.Src[i] != el.Dst[i] }

	// Count degrees.
	deg := make([]uint64, el.N+1)
	bar := prog.Start("count degrees", int64(m))
	err := parallelRange(ctx, w, m, 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if !keep(i) {
				continue
			}
			atomic.AddUint64(&deg[el.Src[i]], 1)
			if opt.Symmetrize {
				atomic.AddUint64(&deg[el.Dst[i]], 1)
			}
		}
		bar.Add(int64(hi - lo))
	})
	bar.Done()
	if err != nil {
		return nil, err
	}
	// Offsets by prefix sum; deg becomes the insertion cursor.
	off := make([]uint64, el.N+1)
	var sum uint64
	for v := uint64(0); v < el.N; v++ {
		off[v] = sum
		sum += deg[v]
		deg[v] = off[v]
	}
	off[el.N] = sum
	edges := make([]V, sum)
	var weights []float32
	if el.W != nil {
		weights = make([]float32, sum)
	}
	bar = prog.Start("place edges", int64(m))
	err = parallelRange(ctx, w, m, 1<<16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if !keep(i) {
				continue
			}
			u, v := el.Src[i], el.Dst[i]
			p := atomic.AddUint64(&deg[u], 1) - 1
			edges[p] = v
			if weights != nil {
				weights[p] = el.W[i]
			}
			if opt.Symmetrize {
				p = atomic.AddUint64(&deg[v], 1) - 1
				edges[p] = u
				if weights != nil {
					weights[p] = el.W[i]
				}
			}
		}
		bar.Add(int64(hi - lo))
	})
	bar.Done()
	if err != nil {
		return nil, err
	}
	g := &CSR[V]{N: el.N, Offsets: off, Edges: edges, Weights: weights, Directed: !opt.Symmetrize}
	if err := g.sortLists(ctx, w, !opt.KeepDuplicates, prog); err != nil {
		return nil, err
	}
	return g, nil
}

// sortLists sorts every neighbour list (by id, then weight) and, with
// dedup, removes repeated neighbours and compacts the arrays.
func (g *CSR[V]) sortLists(ctx context.Context, workers int, dedup bool, prog Progress) error {
	newDeg := make([]uint64, g.N)
	bar := prog.Start("sort lists", int64(len(g.Edges)))
	err := parallelVertices(ctx, workers, g.Offsets, func(lo, hi uint64) {
		for v := lo; v < hi; v++ {
			a, b := g.Offsets[v], g.Offsets[v+1]
			nb := g.Edges[a:b]
			if g.Weights == nil {
				slices.Sort(nb)
				if dedup {
					nb = slices.Compact(nb)
				}
			} else {
				ws := g.Weights[a:b]
				sort.Sort(pairSorter[V]{nb, ws})
				if dedup {
					k := 0
					for i := range nb {
						if i == 0 || nb[i] != nb[k-1] {
							nb[k], ws[k] = nb[i], ws[i]
							k++
						}
					}
					nb = nb[:k]
				}
			}
			newDeg[v] = uint64(len(nb))
		}
		bar.Add(int64(g.Offsets[hi] - g.Offsets[lo]))
	})
	bar.Done()
	if err != nil || !dedup {
		return err
	}
	// Compact in place: lists only move towards the front.
	var pos uint64
	for v := uint64(0); v < g.N; v++ {
		a := g.Offsets[v]
		d := newDeg[v]
		if pos != a {
			copy(g.Edges[pos:pos+d], g.Edges[a:a+d])
			if g.Weights != nil {
				copy(g.Weights[pos:pos+d], g.Weights[a:a+d])
			}
		}
		g.Offsets[v] = pos
		pos += d
	}
	g.Offsets[g.N] = pos
	g.Edges = slices.Clip(g.Edges[:pos])
	if g.Weights != nil {
		g.Weights = slices.Clip(g.Weights[:pos])
	}
	return nil
}

type pairSorter[V VertexID] struct {
	v []V
	w []float32
}

func (p pairSorter[V]) Len() int { return len(p.v) }
func (p pairSorter[V]) Less(i, j int) bool {
	if c := cmp.Compare(p.v[i], p.v[j]); c != 0 {
		return c < 0
	}
	return p.w[i] < p.w[j]
}
func (p pairSorter[V]) Swap(i, j int) {
	p.v[i], p.v[j] = p.v[j], p.v[i]
	p.w[i], p.w[j] = p.w[j], p.w[i]
}

// Narrow converts a 64-bit edge list to 32-bit ids; it fails when a vertex
// count needs 64 bits.
func Narrow(el *EdgeList[uint64]) (*EdgeList[uint32], error) {
	if Wide(el.N) {
		return nil, fmt.Errorf("graph: %d vertices need 64-bit ids", el.N)
	}
	out := &EdgeList[uint32]{N: el.N, Src: make([]uint32, len(el.Src)), Dst: make([]uint32, len(el.Dst)), W: el.W}
	for i := range el.Src {
		out.Src[i], out.Dst[i] = uint32(el.Src[i]), uint32(el.Dst[i])
	}
	return out, nil
}
