package graph

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Unreached is the depth of a vertex BFS did not reach.
const Unreached = -1

// AlgoOptions configure the CPU algorithms.
type AlgoOptions struct {
	// Workers bounds the goroutines (default GOMAXPROCS).
	Workers int
}

func (o AlgoOptions) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// BFSResult is the outcome of one breadth-first search.
type BFSResult struct {
	Source         uint64
	Depth          []int32 // per vertex; Unreached (-1) if not reached
	Levels         int     // frontiers expanded
	BottomUpLevels int     // of those, levels run bottom-up (undirected graphs only)
	Reached        uint64
	EdgesTouched   uint64 // neighbour-list elements read (GPU: the sum of the degrees of reached vertices)
	Elapsed        time.Duration
	Trace          []BFSLevel // per level, GPU engine only
	// ReadBackLevel and LateDepths, GPU engine only: the depths were read
	// back while the levels after the first ReadBackLevel ran (0: after
	// all of them), and LateDepths vertices reached meanwhile were patched
	// in (gpu.go, the early read back).
	ReadBackLevel int
	LateDepths    uint64
	// ReadBack, GPU engine only: the part of Elapsed after the last
	// level, the depths' read back (or what was left of it).
	ReadBack time.Duration
}

// BFSLevel is what one level of a BFS did and cost.
type BFSLevel struct {
	BottomUp bool    `json:"bottom_up"`
	Frontier uint64  `json:"frontier"` // vertices on this level
	Found    uint64  `json:"found"`    // vertices it reached for the next
	Seconds  float64 `json:"time_s"`
	// BytesRead is what the GPU cache read from storage during the level
	// (edges on storage only).
	BytesRead uint64 `json:"bytes_read,omitempty"`
	// LongLists counts the frontier's lists of more than 4096 edges on a
	// GPU top-down level, which all warps read together in segments.
	LongLists uint64 `json:"long_lists,omitempty"`
	// HeadsFirst marks a GPU level where Beamer's rule turned to
	// bottom-up: the heads were checked first, and then the vertices they
	// left were found bottom-up if ScanLines, the chunks of edges (lines)
	// holding the start of their lists, were fewer than TopDownLines, an
	// estimate of the lines a top-down step reads, and top-down otherwise.
	HeadsFirst   bool   `json:"heads_first,omitempty"`
	ScanLines    uint64 `json:"scan_lines,omitempty"`
	TopDownLines uint64 `json:"top_down_lines,omitempty"`
	// PastHeadsLines are those of ScanLines holding the start of a list
	// longer than all the heads, lines a scan may read whatever the heads
	// not yet checked say. Where those heads are on storage, RestSavedLines
	// estimates the lines they would save a bottom-up level, and HeadsRest
	// marks a level that read and checked them, as it does where those
	// lines outweigh them.
	PastHeadsLines uint64 `json:"past_heads_lines,omitempty"`
	RestSavedLines uint64 `json:"rest_saved_lines,omitempty"`
	HeadsRest      bool   `json:"heads_rest,omitempty"`
	// Phases are the level's steps on the GPU in order, each timed on the
	// host from the end of the one before: "read heads" and "expand
	// heads" (into GPU memory, a block at a time, at the first level that
	// checks them; expanded from a packed array), "check heads", "scan"
	// (bottom-up), "classify" and "expand" (top-down),
	// "small levels" (bfs_small_levels, see Fused), and "count" (the
	// level's own bookkeeping: its counters reset and read).
	Phases []Stage `json:"phases,omitempty"`
	// Fused marks a level run with the small levels around it in one
	// launch (bfs_small_levels): its time is the device's, from the end of
	// the level before; the first of such a run carries the launch's host
	// time and the bytes the whole run read.
	Fused bool `json:"fused,omitempty"`
}

// Direction-optimizing BFS (Beamer, Asanović and Patterson, SC'12): on an
// undirected graph a level whose frontier is large runs bottom-up, every
// unreached vertex looking through its own list for a neighbour on the
// current level and stopping at the first, instead of top-down through
// the frontier's lists. direction holds Beamer's rule as his GAP
// benchmark applies it: go bottom-up when the frontier's lists hold more
// than a 1/alpha share of the edges not yet checked; go back top-down
// when a shrinking frontier holds fewer than a 1/beta share of all
// vertices.
const (
	bottomUpAlpha = 14
	bottomUpBeta  = 24
)

// direction chooses the direction of each level of one BFS. The frontier's
// edges are counted where a level claims its vertices (the sum of their
// degrees, the level's scout count); as in GAP, only top-down levels take
// their frontier's edges off the edges not yet checked. Counting edges,
// not vertices, matters on skewed graphs: the hubs of a Kronecker graph are
// a small share of its vertices and hold half its edges.
type direction struct {
	n         uint64 // vertices
	unchecked uint64 // edges of the lists no top-down level has read
	bottomUp  bool
	prev      uint64 // the previous frontier's vertices
}

func newDirection(n, m uint64) direction { return direction{n: n, unchecked: m} }

// next returns whether the level whose frontier has nf vertices, whose
// lists hold scout edges (counted as the level before claimed them), runs
// bottom-up.
func (d *direction) next(nf, scout uint64) bool {
	if !d.bottomUp {
		d.bottomUp = scout*bottomUpAlpha > d.unchecked
	} else {
		d.bottomUp = !(nf < d.prev && nf*bottomUpBeta < d.n)
	}
	d.prev = nf
	if !d.bottomUp {
		d.unchecked -= min(scout, d.unchecked)
	}
	return d.bottomUp
}

// topDown overrules a turn to bottom-up that next just gave: the level runs
// top-down after all (the GPU runner's probe found it reads fewer lines).
func (d *direction) topDown(scout uint64) {
	d.bottomUp = false
	d.unchecked -= min(scout, d.unchecked)
}

// frontierChunk is the number of frontier vertices one task expands.
const frontierChunk = 512

// BFS computes the depth of every vertex from src, level by level: the
// frontier (sorted) is split among workers, each reading the neighbour
// lists of its vertices (adjacent lists in one request) and claiming
// unvisited neighbours with a compare-and-swap on their depth.
func BFS[V VertexID](ctx context.Context, g *Graph[V], src uint64, opt AlgoOptions) (*BFSResult, error) {
	return BFSInto(ctx, g, src, nil, opt)
}

// BFSInto is BFS writing the depths into into, one element per vertex,
// instead of a new slice (nil: a new slice), so that repeated searches
// reuse one result buffer (see GPU.BFSInto). Every element is
// overwritten; the result's Depth is into.
func BFSInto[V VertexID](ctx context.Context, g *Graph[V], src uint64, into []int32, opt AlgoOptions) (*BFSResult, error) {
	if src >= g.N {
		return nil, fmt.Errorf("graph: BFS source %d is not a vertex (graph has %d)", src, g.N)
	}
	if into != nil && uint64(len(into)) != g.N {
		return nil, fmt.Errorf("graph: BFS result buffer holds %d depths, the graph has %d vertices", len(into), g.N)
	}
	start := time.Now()
	depth := into
	if depth == nil {
		depth = make([]int32, g.N)
	}
	// Set on all workers: over a large graph one thread filling the array
	// (first touches of fresh pages) is a share of the whole run worth
	// having.
	if err := parallelRange(ctx, opt.workers(), len(depth), 1<<20, func(lo, hi int) {
		for i := range depth[lo:hi] {
			depth[lo+i] = Unreached
		}
	}); err != nil {
		return nil, err
	}
	depth[src] = 0
	next := make([]uint64, (g.N+63)/64)
	frontier := []uint64{src}
	res := &BFSResult{Source: src, Depth: depth, Reached: 1}
	var pool bufPool[V]
	var touched, scout atomic.Uint64 // scout: the edges of the vertices a top-down level claimed
	scout.Store(g.Degree(src))
	dir := newDirection(g.N, g.Offsets[g.N])
	for level := int32(0); len(frontier) > 0; level++ {
		if level == 1<<30 {
			return nil, fmt.Errorf("graph: BFS exceeded %d levels", level)
		}
		if !g.Directed && dir.next(uint64(len(frontier)), scout.Swap(0)) {
			n, err := claimParents(ctx, g, depth, level, next, opt.workers(), &pool, &scout)
			touched.Add(n)
			if err != nil {
				return nil, fmt.Errorf("graph: BFS level %d (bottom-up): %w", level, err)
			}
			res.Levels++
			res.BottomUpLevels++
			frontier = collect(next, frontier[:0])
			res.Reached += uint64(len(frontier))
			continue
		}
		err := parallelChunksErr(ctx, opt.workers(), len(frontier), frontierChunk, func(ctx context.Context, lo, hi int) error {
			buf := pool.get()
			defer pool.put(buf)
			var claimed uint64 // their edges
			n, err := visitLists(ctx, g, frontier[lo:hi], *buf, func(_, _ uint64, nb []V) {
				for _, w := range nb {
					u := uint64(w)
					if atomic.LoadInt32(&depth[u]) == Unreached && atomic.CompareAndSwapInt32(&depth[u], Unreached, level+1) {
						atomic.OrUint64(&next[u/64], 1<<(u%64))
						claimed += g.Degree(u)
					}
				}
			})
			touched.Add(n)
			scout.Add(claimed)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("graph: BFS level %d: %w", level, err)
		}
		res.Levels++
		frontier = collect(next, frontier[:0])
		res.Reached += uint64(len(frontier))
	}
	res.EdgesTouched = touched.Load()
	res.Elapsed = time.Since(start)
	return res, nil
}

// claimParents is BFS's bottom-up step: every unreached vertex whose list
// holds a vertex of depth level gets depth level+1 and its bit in next. The
// lists of a chunk of consecutive vertices are read together (they lie
// next to each other); a vertex's scan stops at its first parent. On a
// graph with a heads array, a chunk's heads are read first and settle the
// vertices with a parent among them; only the others' lists are read, and
// only those of more neighbours than the heads hold (the heads hold the
// whole list of the rest). It returns the list elements read, heads
// included, and adds the degrees of the vertices it reached to scout.
func claimParents[V VertexID](ctx context.Context, g *Graph[V], depth []int32, level int32, next []uint64, workers int, pool *bufPool[V], scout *atomic.Uint64) (uint64, error) {
	var touched atomic.Uint64
	var lists sync.Pool    // *[]uint64: a chunk's unreached vertices
	var headBufs sync.Pool // *[]V: a chunk's heads, per a vertex
	per := uint64(0)
	var hx *headsIndex
	if g.Heads != nil {
		per, hx = uint64(g.Info.Heads), g.headsIndex()
	}
	chunk := frontierChunk * 8
	if per > 0 {
		chunk = min(chunk, int(maxSpan/per))
	}
	err := parallelChunksErr(ctx, workers, int(g.N), chunk, func(ctx context.Context, lo, hi int) error {
		p, _ := lists.Get().(*[]uint64)
		if p == nil {
			p = new([]uint64)
		}
		defer lists.Put(p)
		hp, _ := headBufs.Get().(*[]V)
		if hp == nil {
			hp = new([]V)
		}
		defer headBufs.Put(hp)
		buf := pool.get()
		defer pool.put(buf)
		// The chunk's heads, a run per block (headsIndex.span), each read
		// when a vertex first needs it (into hd, a block after the other,
		// where the source copies): a chunk whose vertices all have a
		// parent among their first block, or too few neighbours for the
		// second, reads only the first.
		hd := (*hp)[:0]
		var runs [][]V
		if per > 0 {
			hd = slices.Grow(hd, int(uint64(hi-lo)*per))[:uint64(hi-lo)*per]
			runs = make([][]V, hx.blocks())
		}
		*hp = hd
		headsRun := func(b uint64) ([]V, error) {
			if runs[b] == nil {
				from, to := hx.span(g.Offsets, b, uint64(lo), uint64(hi))
				run, err := g.Heads.Read(ctx, from, to, hd[uint64(hi-lo)*headsBlock*b:])
				if err != nil {
					return nil, err
				}
				runs[b] = run
			}
			return runs[b], nil
		}
		var at [HeadsPerVertex / headsBlock]uint64 // per block: the element of its run holding the next vertex's heads
		vs := (*p)[:0]
		var seen, claimed uint64 // list elements read; the degrees of the vertices reached
	vertices:
		for v := lo; v < hi; v++ {
			var d uint64
			var mine [len(at)]uint64 // v's heads in the runs
			if per > 0 {
				d = g.Degree(uint64(v))
				for b := range hx.blocks() {
					mine[b] = at[b]
					if hx.holds(b, d) {
						at[b] += hx.cols(b)
					}
				}
			}
			if atomic.LoadInt32(&depth[v]) != Unreached {
				continue
			}
			if per > 0 {
				// Heads past the degree are padding (the vertex itself).
				for r := range min(d, per) {
					b := r / headsBlock
					run, err := headsRun(b)
					if err != nil {
						return err
					}
					if w := run[mine[b]+r%headsBlock]; atomic.LoadInt32(&depth[w]) == level {
						atomic.StoreInt32(&depth[v], level+1)
						atomic.OrUint64(&next[v/64], 1<<(v%64))
						seen += min(d, per)
						claimed += d
						continue vertices
					}
				}
				seen += min(d, per)
				if d <= per {
					continue
				}
			}
			vs = append(vs, uint64(v))
		}
		*p = vs
		touched.Add(seen)
		found := ^uint64(0) // the last vertex that found a parent (long lists arrive in pieces)
		n, err := visitLists(ctx, g, vs, *buf, func(v, _ uint64, nb []V) {
			if v == found {
				return
			}
			for _, w := range nb {
				if atomic.LoadInt32(&depth[w]) == level {
					atomic.StoreInt32(&depth[v], level+1)
					atomic.OrUint64(&next[v/64], 1<<(v%64))
					claimed += g.Degree(v)
					found = v
					return
				}
			}
		})
		touched.Add(n)
		scout.Add(claimed)
		return err
	})
	return touched.Load(), err
}

// collect appends the set bits of bm (ascending) to out and clears bm.
func collect(bm []uint64, out []uint64) []uint64 {
	out = slices.Grow(out, 0)
	for i, w := range bm {
		if w == 0 {
			continue
		}
		bm[i] = 0
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, uint64(i)*64+uint64(b))
			w &= w - 1
		}
	}
	return out
}

// EdgesTouchedFromDepth is the number of neighbour-list elements a BFS that
// reached the vertices with depth >= 0 read: the sum of their degrees.
func EdgesTouchedFromDepth(off []uint64, depth []int32) uint64 {
	var n uint64
	for v, d := range depth {
		if d >= 0 {
			n += off[v+1] - off[v]
		}
	}
	return n
}
