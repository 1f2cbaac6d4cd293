package graph

import (
	"context"
	"sync"
)

// Reading neighbour lists: lists of vertices close together in the edges
// array are read in one request (a storage line holds many short lists),
// and no request is longer than maxSpan edges.
const (
	// spanGap is the largest gap, in edges, between two lists read in one
	// request; the gap is read and ignored.
	spanGap = 256
	// maxSpan bounds one request, in edges.
	maxSpan = 1 << 16
)

// bufPool holds read buffers of maxSpan edges of one id width.
type bufPool[V VertexID] struct{ p sync.Pool }

func (b *bufPool[V]) get() *[]V {
	if x, ok := b.p.Get().(*[]V); ok {
		return x
	}
	s := make([]V, maxSpan)
	return &s
}

func (b *bufPool[V]) put(s *[]V) { b.p.Put(s) }

// visitLists calls fn(v, first, nb) for the neighbour list of every vertex
// of vs (sorted ascending), where nb holds neighbours first, first+1, ...
// of v. A list longer than maxSpan arrives in several calls. It returns the
// number of list elements visited.
func visitLists[V VertexID](ctx context.Context, g *Graph[V], vs []uint64, buf []V, fn func(v, first uint64, nb []V)) (uint64, error) {
	var touched uint64
	off := g.Offsets
	for i := 0; i < len(vs); {
		v := vs[i]
		lo, hi := off[v], off[v+1]
		if hi-lo > maxSpan {
			// a long list on its own, in pieces
			for a := lo; a < hi; a += maxSpan {
				b := min(hi, a+maxSpan)
				nb, err := g.Edges.Read(ctx, a, b, buf)
				if err != nil {
					return touched, err
				}
				fn(v, a-lo, nb)
			}
			touched += hi - lo
			i++
			continue
		}
		j := i + 1
		for j < len(vs) {
			a, b := off[vs[j]], off[vs[j]+1]
			if a > hi+spanGap || b-lo > maxSpan {
				break
			}
			if b > hi {
				hi = b
			}
			j++
		}
		if hi > lo {
			data, err := g.Edges.Read(ctx, lo, hi, buf)
			if err != nil {
				return touched, err
			}
			for k := i; k < j; k++ {
				w := vs[k]
				a, b := off[w], off[w+1]
				if b > a {
					fn(w, 0, data[a-lo:b-lo])
					touched += b - a
				}
			}
		}
		i = j
	}
	return touched, nil
}
