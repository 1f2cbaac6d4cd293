package graph

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
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
	Source       uint64
	Depth        []int32 // per vertex; Unreached (-1) if not reached
	Levels       int     // frontiers expanded
	Reached      uint64
	EdgesTouched uint64 // neighbour-list elements read (sum of the degrees of reached vertices)
	Elapsed      time.Duration
}

// frontierChunk is the number of frontier vertices one task expands.
const frontierChunk = 512

// BFS computes the depth of every vertex from src, level by level: the
// frontier (sorted) is split among workers, each reading the neighbour
// lists of its vertices (adjacent lists in one request) and claiming
// unvisited neighbours with a compare-and-swap on their depth.
func BFS[V VertexID](ctx context.Context, g *Graph[V], src uint64, opt AlgoOptions) (*BFSResult, error) {
	if src >= g.N {
		return nil, fmt.Errorf("graph: BFS source %d is not a vertex (graph has %d)", src, g.N)
	}
	start := time.Now()
	depth := make([]int32, g.N)
	for i := range depth {
		depth[i] = Unreached
	}
	depth[src] = 0
	next := make([]uint64, (g.N+63)/64)
	frontier := []uint64{src}
	res := &BFSResult{Source: src, Depth: depth, Reached: 1}
	var pool bufPool[V]
	var touched atomic.Uint64
	for level := int32(0); len(frontier) > 0; level++ {
		if level == 1<<30 {
			return nil, fmt.Errorf("graph: BFS exceeded %d levels", level)
		}
		err := parallelChunksErr(ctx, opt.workers(), len(frontier), frontierChunk, func(ctx context.Context, lo, hi int) error {
			buf := pool.get()
			defer pool.put(buf)
			n, err := visitLists(ctx, g, frontier[lo:hi], *buf, func(_, _ uint64, nb []V) {
				for _, w := range nb {
					u := uint64(w)
					if atomic.LoadInt32(&depth[u]) == Unreached && atomic.CompareAndSwapInt32(&depth[u], Unreached, level+1) {
						atomic.OrUint64(&next[u/64], 1<<(u%64))
					}
				}
			})
			touched.Add(n)
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
