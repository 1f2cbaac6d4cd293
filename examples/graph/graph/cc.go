package graph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// CCResult is the outcome of a connected-components run.
type CCResult struct {
	// Comp labels every vertex with the smallest vertex id of its
	// component.
	Comp         []uint64
	Components   uint64
	Largest      uint64 // vertices in the largest component
	EdgesTouched uint64 // neighbour-list elements used: the first ones of every vertex, the rest of those linked in the second pass
	Elapsed      time.Duration
	Trace        []Stage // per stage, GPU engine only
}

// Stage is the time and the bytes read from storage of one stage of a run.
type Stage struct {
	Name      string  `json:"name"`
	Seconds   float64 `json:"time_s"`
	BytesRead uint64  `json:"bytes_read,omitempty"` // by the GPU cache, edges on storage only
}

// Afforest parameters (Sutton et al., as in GAP): neighbours linked per
// vertex in the first pass, and samples to find the largest component.
const (
	ccSampleRounds = 2
	ccSamples      = 1024
)

// CC computes connected components (weakly connected components of a
// directed graph) with Afforest: link every vertex to one neighbour and
// compress, then to a second and compress (its heads, from the heads array,
// where the graph has one, else its first two neighbours, from the edges);
// find the largest intermediate component by sampling; then link the
// remaining neighbours of the vertices outside it (all vertices, when the
// graph is directed) and compress: the whole list of a vertex of more than
// two neighbours after the heads, which may be any of them, and from the
// third neighbour on after the first two. Links hook the larger of two roots under the
// smaller with a compare-and-swap, so every label ends as the smallest
// vertex id of its component.
func CC[V VertexID](ctx context.Context, g *Graph[V], opt AlgoOptions) (*CCResult, error) {
	start := time.Now()
	comp := make([]uint64, g.N)
	for i := range comp {
		comp[i] = uint64(i)
	}
	var pool bufPool[V]
	var touched atomic.Uint64
	chunks := vertexChunks(g.Offsets, maxSpan, 1<<14)
	// pass links every vertex with more than done neighbours (and a label
	// other than skip, with useSkip) to its neighbours from..to-1
	// (from <= done).
	pass := func(skip uint64, useSkip bool, from, done, to uint64) error {
		return parallelChunksErr(ctx, opt.workers(), len(chunks), 1, func(ctx context.Context, c, _ int) error {
			lo, hi := chunks[c][0], chunks[c][1]
			vs := make([]uint64, 0, hi-lo)
			var need uint64 // list elements the pass uses (the GPU kernels read exactly these)
			for v := lo; v < hi; v++ {
				d := g.Offsets[v+1] - g.Offsets[v]
				if d > done && (!useSkip || atomic.LoadUint64(&comp[v]) != skip) {
					vs = append(vs, v)
					need += min(d, to) - from
				}
			}
			buf := pool.get()
			defer pool.put(buf)
			_, err := visitLists(ctx, g, vs, *buf, func(v, first uint64, nb []V) {
				for k, w := range nb {
					pos := first + uint64(k)
					if pos >= to {
						return
					}
					if pos >= from {
						link(comp, v, uint64(w))
					}
				}
			})
			touched.Add(need)
			return err
		})
	}
	// Afforest's rounds: every vertex linked to its neighbour r, then
	// compress.
	heads := g.Heads != nil && g.Info.Heads >= ccSampleRounds
	for r := uint64(0); r < ccSampleRounds; r++ {
		var err error
		if heads {
			err = linkHeads(ctx, g, r, comp, opt.workers(), &touched)
		} else {
			err = pass(0, false, r, r, r+1)
		}
		if err != nil {
			return nil, fmt.Errorf("graph: CC first pass: %w", err)
		}
		if err := compress(ctx, comp, opt.workers()); err != nil {
			return nil, err
		}
	}
	skip, useSkip := uint64(0), false
	if !g.Directed && g.N > 0 {
		skip, useSkip = mostFrequent(comp, ccSamples), true
	}
	from := uint64(ccSampleRounds)
	if heads {
		from = 0
	}
	if err := pass(skip, useSkip, from, ccSampleRounds, ^uint64(0)); err != nil {
		return nil, fmt.Errorf("graph: CC second pass: %w", err)
	}
	if err := compress(ctx, comp, opt.workers()); err != nil {
		return nil, err
	}
	res := &CCResult{Comp: comp, EdgesTouched: touched.Load()}
	res.Components, res.Largest = componentSizes(comp)
	res.Elapsed = time.Since(start)
	return res, nil
}

// linkHeads is round r of CC's first pass over the heads array's first
// block: every vertex linked to its head r, the heads read as one run per
// chunk of vertices.
func linkHeads[V VertexID](ctx context.Context, g *Graph[V], r uint64, comp []uint64, workers int, touched *atomic.Uint64) error {
	hx := g.headsIndex()
	per := hx.cols(0) // the first block: every vertex's first two heads
	var pool bufPool[V]
	return parallelChunksErr(ctx, workers, int(g.N), int(maxSpan/per), func(ctx context.Context, lo, hi int) error {
		buf := pool.get()
		defer pool.put(buf)
		from, to := hx.span(g.Offsets, 0, uint64(lo), uint64(hi))
		h, err := g.Heads.Read(ctx, from, to, *buf)
		if err != nil {
			return err
		}
		var need, at uint64 // at: the element of h holding v's heads
		for v := uint64(lo); v < uint64(hi); v++ {
			d := g.Degree(v)
			if d > r {
				need++
				link(comp, v, uint64(h[at+r]))
			}
			if hx.holds(0, d) {
				at += per
			}
		}
		touched.Add(need)
		return nil
	})
}

// find returns the root of x's tree, halving the path it walks (every
// vertex on it pointed at its grandparent), as ECL-CC. Labels never exceed
// their vertex and only decrease, so a store into a vertex that is no root
// may race with others and still leave an ancestor there.
func find(comp []uint64, x uint64) uint64 {
	cur := atomic.LoadUint64(&comp[x])
	if cur == x {
		return x
	}
	prev := x
	for {
		next := atomic.LoadUint64(&comp[cur])
		if next >= cur {
			return cur
		}
		atomic.StoreUint64(&comp[prev], next)
		prev, cur = cur, next
	}
}

// link joins the trees of u and v, hooking the larger root under the
// smaller.
func link(comp []uint64, u, v uint64) {
	ru, rv := find(comp, u), find(comp, v)
	for ru != rv {
		high, low := max(ru, rv), min(ru, rv)
		if atomic.CompareAndSwapUint64(&comp[high], high, low) {
			return
		}
		// high was hooked meanwhile: go on from its parent.
		p := atomic.LoadUint64(&comp[high])
		if high == ru {
			ru = p
		} else {
			rv = p
		}
	}
}

// compress points every vertex at its root.
func compress(ctx context.Context, comp []uint64, workers int) error {
	return parallelRange(ctx, workers, len(comp), 1<<16, func(lo, hi int) {
		for v := lo; v < hi; v++ {
			for {
				c := atomic.LoadUint64(&comp[v])
				cc := atomic.LoadUint64(&comp[c])
				if c == cc {
					break
				}
				atomic.StoreUint64(&comp[v], cc)
			}
		}
	})
}

// mostFrequent returns the most frequent label among k samples (a fixed
// seed: runs are reproducible).
func mostFrequent(comp []uint64, k int) uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	counts := map[uint64]int{}
	best, bestN := uint64(0), 0
	for range k {
		c := atomic.LoadUint64(&comp[r.Uint64N(uint64(len(comp)))])
		counts[c]++
		if counts[c] > bestN {
			best, bestN = c, counts[c]
		}
	}
	return best
}

// componentSizes counts components (roots) and the largest one's size.
// Labels are vertex ids.
func componentSizes(comp []uint64) (n, largest uint64) {
	size := make([]uint64, len(comp))
	for _, c := range comp {
		if c < uint64(len(size)) {
			size[c]++
		}
	}
	for _, s := range size {
		if s > 0 {
			n++
			largest = max(largest, s)
		}
	}
	return n, largest
}
