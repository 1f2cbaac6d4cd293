package graph

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// parallelRange calls fn on chunks [lo, hi) of [0, n) of at most chunk
// elements on up to workers goroutines, handing chunks out dynamically. It
// stops handing out chunks once ctx is done and returns ctx's error.
func parallelRange(ctx context.Context, workers, n, chunk int, fn func(lo, hi int)) error {
	if n <= 0 {
		return ctx.Err()
	}
	chunks := (n + chunk - 1) / chunk
	workers = max(1, min(workers, chunks))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo := c * chunk
				fn(lo, min(n, lo+chunk))
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// parallelChunksErr is parallelRange with a failing fn: the first error
// stops the others.
func parallelChunksErr(ctx context.Context, workers, n, chunk int, fn func(ctx context.Context, lo, hi int) error) error {
	if n <= 0 {
		return ctx.Err()
	}
	chunks := (n + chunk - 1) / chunk
	workers = max(1, min(workers, chunks))
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for {
				if err := gctx.Err(); err != nil {
					return err
				}
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return nil
				}
				lo := c * chunk
				if err := fn(gctx, lo, min(n, lo+chunk)); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// vertexChunks splits [0, n) into ranges of vertices holding about the same
// number of edges (and at most maxVerts vertices each).
func vertexChunks(off []uint64, edgesPer, maxVerts uint64) [][2]uint64 {
	n := uint64(len(off) - 1)
	var out [][2]uint64
	for lo := uint64(0); lo < n; {
		hi := lo + 1
		// gallop then binary search for the last vertex within edgesPer
		limit := off[lo] + edgesPer
		a, b := hi, min(n, lo+maxVerts)
		for a < b {
			mid := a + (b-a+1)/2
			if off[mid] <= limit {
				a = mid
			} else {
				b = mid - 1
			}
		}
		hi = max(hi, a)
		out = append(out, [2]uint64{lo, hi})
		lo = hi
	}
	return out
}

// parallelVertices calls fn on vertex ranges of balanced edge counts.
func parallelVertices(ctx context.Context, workers int, off []uint64, fn func(lo, hi uint64)) error {
	chunks := vertexChunks(off, 1<<16, 1<<14)
	return parallelRange(ctx, workers, len(chunks), 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			fn(chunks[c][0], chunks[c][1])
		}
	})
}
