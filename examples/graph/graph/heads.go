package graph

import (
	"context"
	"fmt"
	"runtime"
)

// HeadsPerVertex is the number of heads per vertex of a saved graph: for
// every vertex, its HeadsPerVertex neighbours of the highest degree
// (HeadsOf), a vertex with fewer neighbours padded with its own id. The
// heads array is laid out in blocks of headsBlock columns, block b holding
// heads headsBlock*b up to headsBlock*(b+1)-1. In a packed array (graphs
// saved now: Info.HeadsPacked) block b holds only the vertices of more
// than headsBlock*b neighbours, whose heads are not all padding, in vertex
// order: on a Kronecker graph, of which about 45 % of the vertices are
// isolated and another 20 % have one or two neighbours, the array is
// less than half the size. In a full array (graphs saved before) block b
// holds every vertex, vertex v's heads at N*headsBlock*b + headsBlock*v,
// and graphs saved before there were more heads hold the first block alone.
// CC's first pass links every vertex to the two heads of the first block,
// so it reads those instead of the whole edges array, whose every line
// holds some vertex's first neighbours; BFS's bottom-up levels look for a
// parent among all of them before reading any list.
const HeadsPerVertex = 2 * headsBlock

// headsBlock is the columns of a block of the heads array (HeadsPerVertex),
// the heads CC's first pass links (kernels/graph.cu mirrors it as
// heads_block).
const headsBlock = ccSampleRounds

// headsTile is the vertices of a tile of a packed heads array's index: the
// index counts, for every tile, the vertices each block holds before it
// (kernels/graph.cu mirrors it as heads_tile).
const headsTile = 64

// headsAt returns the index of head r of vertex v in a full heads array of
// n vertices (HeadsPerVertex): the layout the GPU kernels read, and that a
// packed array is expanded into (expandHeads).
func headsAt(n, v, r uint64) uint64 {
	return n*headsBlock*(r/headsBlock) + headsBlock*v + r%headsBlock
}

// headsIndex says where the heads of a vertex lie in a heads array of per
// heads a vertex, packed or full (HeadsPerVertex).
type headsIndex struct {
	n, per uint64
	packed bool
	start  []uint64 // per block: the element it starts at
	held   []uint64 // per block: the vertices it holds
	// base holds, for a packed array, per block, the vertices the block
	// holds before tile t (vertex t*headsTile), t up to the tiles (the
	// last entry is held).
	base [][]uint64
}

// newHeadsIndex indexes the heads array of the graph of offsets off, per
// heads a vertex, packed or not.
func newHeadsIndex(off []uint64, per uint64, packed bool) *headsIndex {
	n := uint64(len(off) - 1)
	blocks := (per + headsBlock - 1) / headsBlock
	x := &headsIndex{n: n, per: per, packed: packed, start: make([]uint64, blocks), held: make([]uint64, blocks)}
	if packed {
		tiles := (n + headsTile - 1) / headsTile
		x.base = make([][]uint64, blocks)
		for b := range x.base {
			x.base[b] = make([]uint64, tiles+1)
		}
		// Count every tile's vertices per block, then sum.
		_ = parallelRange(context.Background(), runtime.GOMAXPROCS(0), int(tiles), 1<<12, func(lo, hi int) {
			for t := uint64(lo); t < uint64(hi); t++ {
				for v := t * headsTile; v < min(n, (t+1)*headsTile); v++ {
					d := off[v+1] - off[v]
					for b := range blocks {
						if d > headsBlock*b {
							x.base[b][t+1]++
						}
					}
				}
			}
		})
		for b := range x.base {
			for t := range tiles {
				x.base[b][t+1] += x.base[b][t]
			}
		}
	}
	at := uint64(0)
	for b := range blocks {
		x.start[b] = at
		x.held[b] = n
		if packed {
			x.held[b] = x.base[b][len(x.base[b])-1]
		}
		at += x.held[b] * x.cols(b)
	}
	return x
}

// blocks is the number of blocks of the array.
func (x *headsIndex) blocks() uint64 { return uint64(len(x.start)) }

// cols is the heads a vertex of block b.
func (x *headsIndex) cols(b uint64) uint64 { return min(headsBlock, x.per-b*headsBlock) }

// size is the number of elements of the array.
func (x *headsIndex) size() uint64 {
	if x.blocks() == 0 {
		return 0
	}
	b := x.blocks() - 1
	return x.start[b] + x.held[b]*x.cols(b)
}

// holds reports whether block b holds a vertex of degree d (a full array
// holds every vertex).
func (x *headsIndex) holds(b, d uint64) bool { return !x.packed || d > headsBlock*b }

// rank is the number of vertices before v that block b holds.
func (x *headsIndex) rank(off []uint64, b, v uint64) uint64 {
	if !x.packed {
		return v
	}
	t := v / headsTile
	k := x.base[b][t]
	for u := t * headsTile; u < v; u++ {
		if off[u+1]-off[u] > headsBlock*b {
			k++
		}
	}
	return k
}

// span returns the elements of block b holding the heads of vertices lo up
// to hi.
func (x *headsIndex) span(off []uint64, b, lo, hi uint64) (from, to uint64) {
	c := x.cols(b)
	return x.start[b] + c*x.rank(off, b, lo), x.start[b] + c*x.rank(off, b, hi)
}

// check reports an error wrapping ErrFormat if an array of elems elements
// is not the one x describes.
func (x *headsIndex) check(name string, elems uint64) error {
	if elems != x.size() {
		return fmt.Errorf("%w: graph %q: heads array has %d elements for %d vertices (want %d)", ErrFormat, name, elems, x.n, x.size())
	}
	return nil
}

// expandHeads returns the full heads array (headsAt) of a packed one,
// heads of the graph of offsets off: a vertex a block does not hold gets
// its own id (the padding it would have had). The in-memory baselines read
// the full array, as the kernels do on storage after graph_heads_expand.
func expandHeads[V VertexID](x *headsIndex, off []uint64, heads []V) []V {
	full := make([]V, x.n*x.per)
	if !x.packed {
		copy(full, heads)
		return full
	}
	tiles := (x.n + headsTile - 1) / headsTile
	_ = parallelRange(context.Background(), runtime.GOMAXPROCS(0), int(tiles), 1<<12, func(lo, hi int) {
		for b := range x.blocks() {
			c := x.cols(b)
			k := x.start[b] + c*x.base[b][lo] // the next packed element of block b
			for v := uint64(lo) * headsTile; v < min(x.n, uint64(hi)*headsTile); v++ {
				held := x.holds(b, off[v+1]-off[v])
				for r := range c {
					w := V(v)
					if held {
						w = heads[k+r]
					}
					full[headsAt(x.n, v, b*headsBlock+r)] = w
				}
				if held {
					k += c
				}
			}
		}
	})
	return full
}

// HeadsOf returns the packed heads array of g (HeadsPerVertex heads per
// vertex, in blocks: HeadsPerVertex): the neighbours of every vertex with
// the highest degrees, the earlier in its list first among equal degrees,
// padded with the vertex's own id. The hubs are what a vertex is most
// likely to reach first: on a Kronecker graph the large bottom-up level of
// a BFS, whose frontier holds the hubs, then finds the parent of nearly
// every vertex among its heads. Readers must not assume the heads are a
// list's first neighbours (graphs saved before this rule hold those); a
// vertex with at most as many neighbours as heads has all of them among
// its heads either way.
func HeadsOf[V VertexID](g *CSR[V]) []V {
	x := newHeadsIndex(g.Offsets, HeadsPerVertex, true)
	h := make([]V, x.size())
	tiles := (g.N + headsTile - 1) / headsTile
	_ = parallelRange(context.Background(), runtime.GOMAXPROCS(0), int(tiles), 1<<10, func(lo, hi int) {
		var next [HeadsPerVertex / headsBlock]uint64 // per block: the next element
		for b := range next {
			next[b] = x.start[b] + headsBlock*x.base[b][lo]
		}
		var hv [HeadsPerVertex]V
		var best [HeadsPerVertex]uint64 // the degrees of the heads chosen so far
		for v := uint64(lo) * headsTile; v < min(g.N, uint64(hi)*headsTile); v++ {
			k := 0 // heads chosen
			for _, w := range g.Edges[g.Offsets[v]:g.Offsets[v+1]] {
				d := g.Degree(uint64(w))
				if k == HeadsPerVertex && d <= best[k-1] {
					continue
				}
				// Insert w after the heads of at least its degree.
				j := min(k, HeadsPerVertex-1)
				for j > 0 && best[j-1] < d {
					hv[j], best[j] = hv[j-1], best[j-1]
					j--
				}
				hv[j], best[j] = w, d
				k = min(k+1, HeadsPerVertex)
			}
			for ; k < HeadsPerVertex; k++ {
				hv[k] = V(v)
			}
			d := g.Degree(v)
			for b := range uint64(len(next)) {
				if x.holds(b, d) {
					copy(h[next[b]:next[b]+headsBlock], hv[b*headsBlock:])
					next[b] += headsBlock
				}
			}
		}
	})
	return h
}
