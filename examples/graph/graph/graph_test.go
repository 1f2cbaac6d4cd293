package graph

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
)

func edgeList(n uint64, pairs ...uint64) *EdgeList[uint32] {
	el := &EdgeList[uint32]{N: n}
	for i := 0; i+1 < len(pairs); i += 2 {
		el.Src = append(el.Src, uint32(pairs[i]))
		el.Dst = append(el.Dst, uint32(pairs[i+1]))
	}
	return el
}

func adjacency[V VertexID](g *CSR[V]) [][]V {
	out := make([][]V, g.N)
	for v := range g.N {
		out[v] = slices.Clone(g.Neighbors(v))
		if out[v] == nil {
			out[v] = []V{}
		}
	}
	return out
}

func TestBuild(t *testing.T) {
	// 0-1 twice, a self-loop on 2, 3 isolated, 4-5 a second component
	el := edgeList(6, 0, 1, 1, 0, 0, 1, 2, 2, 1, 2, 4, 5)
	tests := []struct {
		name string
		opt  BuildOptions
		want [][]uint32
	}{
		{"directed, cleaned", BuildOptions{}, [][]uint32{{1}, {0, 2}, {}, {}, {5}, {}}},
		{"symmetric, cleaned", BuildOptions{Symmetrize: true}, [][]uint32{{1}, {0, 2}, {1}, {}, {5}, {4}}},
		{"keep self-loops", BuildOptions{KeepSelfLoops: true}, [][]uint32{{1}, {0, 2}, {2}, {}, {5}, {}}},
		{"keep duplicates", BuildOptions{KeepDuplicates: true}, [][]uint32{{1, 1}, {0, 2}, {}, {}, {5}, {}}},
		{"symmetric with everything", BuildOptions{Symmetrize: true, KeepSelfLoops: true, KeepDuplicates: true},
			[][]uint32{{1, 1, 1}, {0, 0, 0, 2}, {1, 2, 2}, {}, {5}, {4}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range []int{1, 3} {
				tc.opt.Workers = w
				g, err := Build(context.Background(), el, tc.opt)
				if err != nil {
					t.Fatal(err)
				}
				if err := g.Check(); err != nil {
					t.Fatal(err)
				}
				if got := adjacency(g); !slices.EqualFunc(got, tc.want, slices.Equal) {
					t.Fatalf("workers %d: got %v, want %v", w, got, tc.want)
				}
				if g.Directed == tc.opt.Symmetrize {
					t.Errorf("Directed = %v with Symmetrize %v", g.Directed, tc.opt.Symmetrize)
				}
			}
		})
	}
}

func TestBuildWeightsKeepSmallest(t *testing.T) {
	el := edgeList(3, 0, 1, 0, 1, 0, 2)
	el.W = []float32{5, 2, 7}
	g, err := Build(context.Background(), el, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Edges, []uint32{1, 2}) || !slices.Equal(g.Weights, []float32{2, 7}) {
		t.Fatalf("edges %v weights %v", g.Edges, g.Weights)
	}
}

func TestBuildRejectsOutOfRange(t *testing.T) {
	_, err := Build(context.Background(), edgeList(2, 0, 2), BuildOptions{})
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("err = %v, want ErrFormat", err)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	for _, kind := range []Kind{Kronecker, Uniform} {
		t.Run(string(kind), func(t *testing.T) {
			a, err := Generate[uint32](context.Background(), GenOptions{Kind: kind, Scale: 10, Seed: 7, Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Generate[uint32](context.Background(), GenOptions{Kind: kind, Scale: 10, Seed: 7, Workers: 4})
			if err != nil {
				t.Fatal(err)
			}
			if a.N != 1024 || a.Len() != 16*1024 {
				t.Fatalf("n=%d m=%d", a.N, a.Len())
			}
			if !slices.Equal(a.Src, b.Src) || !slices.Equal(a.Dst, b.Dst) {
				t.Fatal("result depends on the worker count")
			}
			c, _ := Generate[uint32](context.Background(), GenOptions{Kind: kind, Scale: 10, Seed: 8})
			if slices.Equal(a.Src, c.Src) {
				t.Fatal("seed has no effect")
			}
			if err := a.Check(); err != nil {
				t.Fatal(err)
			}
			w, _ := Generate[uint64](context.Background(), GenOptions{Kind: kind, Scale: 10, Seed: 7})
			for i := range w.Src {
				if w.Src[i] != uint64(a.Src[i]) || w.Dst[i] != uint64(a.Dst[i]) {
					t.Fatal("64-bit ids draw a different graph")
				}
			}
		})
	}
}

func TestKroneckerIsSkewed(t *testing.T) {
	ctx := context.Background()
	maxDeg := func(kind Kind) uint64 {
		el, err := Generate[uint32](ctx, GenOptions{Kind: kind, Scale: 12, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		g, err := Build(ctx, el, BuildOptions{Symmetrize: true})
		if err != nil {
			t.Fatal(err)
		}
		var m uint64
		for v := range g.N {
			m = max(m, g.Degree(v))
		}
		return m
	}
	k, u := maxDeg(Kronecker), maxDeg(Uniform)
	if k < 10*u {
		t.Fatalf("max degree kron %d, urand %d: Kronecker should be heavily skewed", k, u)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, o := range []GenOptions{{Kind: "x", Scale: 4}, {Kind: Kronecker, Scale: 0}, {Kind: Uniform, Scale: 41}, {Kind: Uniform, Scale: 33}} {
		if _, err := Generate[uint32](context.Background(), o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// Importers.

const snapFixture = `# Directed graph: fixture.txt
# Nodes: 8 Edges: 9
# FromNodeId	ToNodeId
0	1
0 2
1	  2
% another comment style
7 7

0  3
4	5
0 4
  0   5
5 4
`

func TestReadSNAP(t *testing.T) {
	im, err := ReadSNAP(strings.NewReader(snapFixture), 0)
	if err != nil {
		t.Fatal(err)
	}
	el := im.Edges
	if el.N != 8 || el.Len() != 9 || el.W != nil {
		t.Fatalf("n=%d m=%d w=%v", el.N, el.Len(), el.W)
	}
	g, err := Build(context.Background(), el, BuildOptions{Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	// vertex 0's list spans five lines; 7 is a self-loop only; 6 isolated
	want := [][]uint64{{1, 2, 3, 4, 5}, {0, 2}, {0, 1}, {0}, {0, 5}, {0, 4}, {}, {}}
	if got := adjacency(g); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestReadSNAPWeighted(t *testing.T) {
	im, err := ReadSNAP(strings.NewReader("0 1 0.5\n1 2 2\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(im.Edges.W, []float32{0.5, 2}) {
		t.Fatalf("weights %v", im.Edges.W)
	}
}

func TestReadSNAPErrors(t *testing.T) {
	tests := map[string]string{
		"one field":     "0 1\n2\n",
		"four fields":   "0 1 2 3\n",
		"not a number":  "0 x\n",
		"negative":      "-1 2\n",
		"mixed weights": "0 1\n1 2 3.5\n",
		"bad weight":    "0 1 abc\n",
		"huge id":       "0 99999999999999999999999\n",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSNAP(strings.NewReader(in), 0)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "line") {
				t.Fatalf("err = %v, want ErrFormat naming the line", err)
			}
		})
	}
	if _, err := ReadSNAP(strings.NewReader("0 5\n"), 4); !errors.Is(err, ErrFormat) {
		t.Fatalf("id beyond declared count: err = %v", err)
	}
}

const mtxFixture = `%%MatrixMarket matrix coordinate pattern symmetric
% a comment
5 5 4
2 1
3 1
3 2
5 4
`

func TestReadMatrixMarket(t *testing.T) {
	im, err := ReadMatrixMarket(strings.NewReader(mtxFixture))
	if err != nil {
		t.Fatal(err)
	}
	if !im.Undirected || im.Edges.N != 5 || im.Edges.Len() != 4 {
		t.Fatalf("%+v", im)
	}
	g, err := Build(context.Background(), im.Edges, BuildOptions{Symmetrize: im.Undirected})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]uint64{{1, 2}, {0, 2}, {0, 1}, {4}, {3}}
	if got := adjacency(g); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("got %v", got)
	}
	im, err = ReadMatrixMarket(strings.NewReader("%%MatrixMarket matrix coordinate real general\n3 4 2\n1 4 2.5\n3 1 -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if im.Undirected || im.Edges.N != 4 || !slices.Equal(im.Edges.W, []float32{2.5, -1}) || !slices.Equal(im.Edges.Dst, []uint64{3, 0}) {
		t.Fatalf("%+v %+v", im, im.Edges)
	}
}

func TestReadMatrixMarketErrors(t *testing.T) {
	tests := map[string]string{
		"empty":            "",
		"wrong header":     "%%NotMatrixMarket matrix coordinate pattern general\n1 1 0\n",
		"dense":            "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
		"complex":          "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
		"hermitian":        "%%MatrixMarket matrix coordinate pattern hermitian\n1 1 0\n",
		"no size":          "%%MatrixMarket matrix coordinate pattern general\n% only comments\n",
		"bad size":         "%%MatrixMarket matrix coordinate pattern general\n2 x 1\n1 1\n",
		"truncated":        "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n2 3\n",
		"too many":         "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n2 3\n",
		"zero index":       "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n0 2\n",
		"row out of range": "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n4 2\n",
		"missing value":    "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2\n",
		"extra field":      "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2 3\n",
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ReadMatrixMarket(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
}

func TestBELRoundTrip(t *testing.T) {
	el := edgeList(5, 0, 1, 1, 2, 2, 0, 3, 4)
	el.W = []float32{1, 2, 3, 4}
	g, err := Build(context.Background(), el, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var col, dst, val bytes.Buffer
	if err := WriteBEL(g, &col, &dst, &val); err != nil {
		t.Fatal(err)
	}
	h, err := ReadBEL(bytes.NewReader(col.Bytes()), bytes.NewReader(dst.Bytes()), bytes.NewReader(val.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	n, err := NarrowCSR(h)
	if err != nil {
		t.Fatal(err)
	}
	if n.N != g.N || !slices.Equal(n.Offsets, g.Offsets) || !slices.Equal(n.Edges, g.Edges) || !slices.Equal(n.Weights, g.Weights) {
		t.Fatalf("round trip: got %+v, want %+v", n, g)
	}
	// the variant whose header counts vertices, not offsets
	cb := slices.Clone(col.Bytes())
	cb[0]--
	if h, err := ReadBEL(bytes.NewReader(cb), bytes.NewReader(dst.Bytes()), nil); err != nil || h.N != 5 {
		t.Fatalf("vertex-count header: %v", err)
	}
}

func TestReadBELErrors(t *testing.T) {
	g, _ := Build(context.Background(), edgeList(3, 0, 1, 1, 2), BuildOptions{})
	var col, dst bytes.Buffer
	if err := WriteBEL(g, &col, &dst, nil); err != nil {
		t.Fatal(err)
	}
	c, d := col.Bytes(), dst.Bytes()
	mut := func(b []byte, f func([]byte)) []byte { b = slices.Clone(b); f(b); return b }
	tests := map[string][2][]byte{
		"short col header":   {c[:10], d},
		"truncated col":      {c[:len(c)-4], d},
		"col count too big":  {mut(c, func(b []byte) { b[0] = 9 }), d},
		"truncated dst":      {c, d[:len(d)-8]},
		"dst count wrong":    {c, mut(d, func(b []byte) { b[0] = 7 })},
		"edge out of range":  {c, mut(d, func(b []byte) { b[16] = 3 })},
		"offsets decreasing": {mut(c, func(b []byte) { b[16+8] = 2; b[16+16] = 1 }), d},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ReadBEL(bytes.NewReader(in[0]), bytes.NewReader(in[1]), nil); !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
	if _, err := ReadBEL(bytes.NewReader(c), bytes.NewReader(d), bytes.NewReader(make([]byte, 20))); !errors.Is(err, ErrFormat) {
		t.Fatalf("bad .val: err = %v", err)
	}
}

func TestReadRawEdges(t *testing.T) {
	b32 := []byte{0, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0}
	im, err := ReadRawEdges(bytes.NewReader(b32), 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if im.Edges.N != 4 || !slices.Equal(im.Edges.Src, []uint64{0, 3}) || !slices.Equal(im.Edges.Dst, []uint64{3, 1}) {
		t.Fatalf("%+v", im.Edges)
	}
	b64 := make([]byte, 16)
	b64[0], b64[8] = 2, 5
	if im, err = ReadRawEdges(bytes.NewReader(b64), 8, 0); err != nil || im.Edges.N != 6 {
		t.Fatalf("64-bit: %v %+v", err, im)
	}
	if _, err := ReadRawEdges(bytes.NewReader(b32[:13]), 4, 0); !errors.Is(err, ErrFormat) {
		t.Fatalf("truncated: err = %v", err)
	}
	if _, err := ReadRawEdges(bytes.NewReader(b32), 4, 3); !errors.Is(err, ErrFormat) {
		t.Fatalf("out of range: err = %v", err)
	}
	if _, err := ReadRawEdges(bytes.NewReader(b32), 3, 0); err == nil {
		t.Fatal("width 3 accepted")
	}
}

// Algorithms.

// refBFS is a plain sequential BFS.
func refBFS[V VertexID](g *CSR[V], src uint64) []int32 {
	d := make([]int32, g.N)
	for i := range d {
		d[i] = -1
	}
	d[src] = 0
	q := []uint64{src}
	for len(q) > 0 {
		u := q[0]
		q = q[1:]
		for _, w := range g.Neighbors(u) {
			if d[w] < 0 {
				d[w] = d[u] + 1
				q = append(q, uint64(w))
			}
		}
	}
	return d
}

func randomGraph(t *testing.T, r *rand.Rand, sym bool) *CSR[uint32] {
	t.Helper()
	n := 1 + r.Uint64N(300)
	m := r.Uint64N(3 * n)
	el := &EdgeList[uint32]{N: n}
	for range m {
		el.Src = append(el.Src, uint32(r.Uint64N(n)))
		el.Dst = append(el.Dst, uint32(r.Uint64N(n)))
	}
	g, err := Build(context.Background(), el, BuildOptions{Symmetrize: sym, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestAlgorithmsInMemoryAgainstOracles(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	bottomUp := 0 // searches that ran some level bottom-up
	defer func() {
		if bottomUp == 0 && !t.Failed() {
			t.Error("no search ran a level bottom-up")
		}
	}()
	for i := range 60 {
		sym := i%3 != 0
		c := randomGraph(t, r, sym)
		g := InMemory("t", c)
		src := r.Uint64N(c.N)
		res, err := BFS(ctx, g, src, AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if want := refBFS(c, src); !slices.Equal(res.Depth, want) {
			t.Fatalf("graph %d: BFS depths differ from the reference", i)
		}
		if err := ValidateBFS(ctx, g, src, res.Depth, 2); err != nil {
			t.Fatalf("graph %d: %v", i, err)
		}
		switch {
		case res.BottomUpLevels > 0 && c.Directed:
			t.Fatalf("graph %d: %d bottom-up levels on a directed graph", i, res.BottomUpLevels)
		case res.BottomUpLevels > 0:
			// Bottom-up levels read the lists of unreached vertices, up
			// to their first parent: at most every list once a level.
			bottomUp++
			if res.EdgesTouched == 0 && len(c.Edges) > 0 || res.EdgesTouched > uint64(res.Levels)*uint64(len(c.Edges)) {
				t.Fatalf("graph %d: edges touched %d over %d levels of %d edges", i, res.EdgesTouched, res.Levels, len(c.Edges))
			}
		case res.EdgesTouched != EdgesTouchedFromDepth(c.Offsets, res.Depth):
			t.Fatalf("edges touched %d, want %d", res.EdgesTouched, EdgesTouchedFromDepth(c.Offsets, res.Depth))
		}
		cc, err := CC(ctx, g, AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateCC(ctx, g, cc.Comp); err != nil {
			t.Fatalf("graph %d (directed %v): %v", i, c.Directed, err)
		}
		// The first pass over the edges (graphs saved without heads)
		// finds the same components. Each run reads at most every list
		// element once, and the heads (2N) besides with them.
		noHeads := *g
		noHeads.Heads, noHeads.Info.Heads = nil, 0
		cc2, err := CC(ctx, &noHeads, AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if m := uint64(len(c.Edges)); !slices.Equal(cc2.Comp, cc.Comp) || cc2.EdgesTouched > m || cc.EdgesTouched > m+HeadsPerVertex*c.N {
			t.Fatalf("graph %d: CC without heads: touched %d, with %d (%d edges); components equal %v", i, cc2.EdgesTouched, cc.EdgesTouched, m, slices.Equal(cc2.Comp, cc.Comp))
		}
		// A full heads array (graphs saved before they were packed) gives
		// the same results.
		full := *g
		full.Heads, full.HeadsPacked, full.headsIx = SliceSource[uint32](expandHeads(g.headsIndex(), c.Offsets, HeadsOf(c))), false, nil
		if res3, err := BFS(ctx, &full, src, AlgoOptions{Workers: 3}); err != nil || !slices.Equal(res3.Depth, res.Depth) || res3.EdgesTouched != res.EdgesTouched {
			t.Fatalf("graph %d: BFS over full heads: err %v; depths equal %v; touched %d, packed %d", i, err, err == nil && slices.Equal(res3.Depth, res.Depth), res3.EdgesTouched, res.EdgesTouched)
		}
		if cc3, err := CC(ctx, &full, AlgoOptions{Workers: 3}); err != nil || !slices.Equal(cc3.Comp, cc.Comp) {
			t.Fatalf("graph %d: CC over full heads: err %v", i, err)
		}
		// BFS's bottom-up levels without the heads give the same depths,
		// written over a buffer of stale values (BFSInto).
		if _, err := BFSInto(ctx, &noHeads, src, make([]int32, c.N+1), AlgoOptions{Workers: 3}); err == nil {
			t.Fatalf("graph %d: BFSInto accepted a buffer of %d depths for %d vertices", i, c.N+1, c.N)
		}
		res2, err := BFSInto(ctx, &noHeads, src, slices.Repeat([]int32{0x5eed}, int(c.N)), AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res2.Depth, res.Depth) || res2.BottomUpLevels != res.BottomUpLevels {
			t.Fatalf("graph %d: BFS without heads: %d bottom-up levels, with %d; depths equal %v", i, res2.BottomUpLevels, res.BottomUpLevels, slices.Equal(res2.Depth, res.Depth))
		}
	}
}

func TestHeadsOf(t *testing.T) {
	// Degrees 0, 1, 3, 0, 5, 1, 1. Vertex 4's heads: 2 (degree 3), then
	// 1, 5 and 6 (degree 1: list order), over 0 (degree 0); vertex 2's: 4
	// (degree 5), 1, 3 and its own id; vertices with fewer neighbours than
	// heads are padded with their own id. Full, the array holds the first
	// two heads of every vertex, then the next two (headsAt); packed, the
	// first block holds the vertices with a neighbour (1, 2, 4, 5, 6) and
	// the second those with more than two (2, 4).
	c := &CSR[uint32]{N: 7, Offsets: []uint64{0, 0, 1, 4, 4, 9, 10, 11},
		Edges: []uint32{2, 1, 3, 4, 1, 2, 5, 0, 6, 4, 4}}
	heads := [][HeadsPerVertex]uint32{{0, 0, 0, 0}, {2, 1, 1, 1}, {4, 1, 3, 2}, {3, 3, 3, 3}, {2, 1, 5, 6}, {4, 5, 5, 5}, {4, 6, 6, 6}}
	want := make([]uint32, len(heads)*HeadsPerVertex)
	for v, h := range heads {
		for r, w := range h {
			want[headsAt(c.N, uint64(v), uint64(r))] = w
		}
	}
	if want[2] != 2 || want[2*7+2] != 1 { // vertex 1's first head, then its third (padding)
		t.Fatalf("headsAt lays out %v", want)
	}
	packed := []uint32{2, 1, 4, 1, 2, 1, 4, 5, 4, 6, 3, 2, 5, 6}
	got := HeadsOf(c)
	if !slices.Equal(got, packed) {
		t.Fatalf("heads %v, want %v", got, packed)
	}
	x := newHeadsIndex(c.Offsets, HeadsPerVertex, true)
	if x.size() != uint64(len(packed)) || x.held[0] != 5 || x.held[1] != 2 || x.start[1] != 10 {
		t.Fatalf("index: %d elements, blocks hold %v from %v", x.size(), x.held, x.start)
	}
	if from, to := x.span(c.Offsets, 1, 3, 7); from != 12 || to != 14 { // vertex 4's second block
		t.Fatalf("span of block 1, vertices 3-6: [%d, %d)", from, to)
	}
	if full := expandHeads(x, c.Offsets, got); !slices.Equal(full, want) {
		t.Fatalf("expanded heads %v, want %v", full, want)
	}
}

// TestHeadsIndex checks a packed heads array's index against counting, on
// a graph of isolated vertices, short and long lists across many tiles.
func TestHeadsIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []uint64{0, 1, headsTile - 1, headsTile, 5*headsTile + 17} {
		off := make([]uint64, n+1)
		for v := range n {
			d := uint64(0)
			if r.IntN(3) > 0 {
				d = r.Uint64N(6)
			}
			off[v+1] = off[v] + d
		}
		x := newHeadsIndex(off, HeadsPerVertex, true)
		var at uint64
		for b := range x.blocks() {
			if x.start[b] != at {
				t.Fatalf("n=%d: block %d starts at %d, want %d", n, b, x.start[b], at)
			}
			k := uint64(0)
			for v := range n + 1 {
				if got := x.rank(off, b, v); got != k {
					t.Fatalf("n=%d: block %d: rank(%d) = %d, want %d", n, b, v, got, k)
				}
				if v < n && off[v+1]-off[v] > b*headsBlock {
					k++
				}
			}
			if x.held[b] != k {
				t.Fatalf("n=%d: block %d holds %d, want %d", n, b, x.held[b], k)
			}
			at += k * headsBlock
		}
		if x.size() != at {
			t.Fatalf("n=%d: size %d, want %d", n, x.size(), at)
		}
		full := newHeadsIndex(off, HeadsPerVertex, false)
		if full.size() != n*HeadsPerVertex || full.rank(off, 1, n) != n {
			t.Fatalf("n=%d: full index: size %d", n, full.size())
		}
	}
}

func TestValidatorsCatchErrors(t *testing.T) {
	ctx := context.Background()
	// path 0-1-2-3, and 4-5 apart
	c, _ := Build(ctx, edgeList(6, 0, 1, 1, 2, 2, 3, 4, 5), BuildOptions{Symmetrize: true})
	g := InMemory("t", c)
	good := []int32{0, 1, 2, 3, -1, -1}
	if err := ValidateBFS(ctx, g, 0, good, 1); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string][]int32{
		"skipped level":   {0, 1, 3, 4, -1, -1},
		"source not zero": {1, 1, 2, 3, -1, -1},
		"unreached":       {0, 1, 2, -1, -1, -1},
		"spurious":        {0, 1, 2, 3, 1, -1},
		"too shallow":     {0, 1, 1, 2, -1, -1},
		"short":           {0, 1},
	} {
		if err := ValidateBFS(ctx, g, 0, d, 1); !errors.Is(err, ErrInvalidResult) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if err := ValidateCC(ctx, g, []uint64{0, 0, 0, 0, 4, 4}); err != nil {
		t.Fatal(err)
	}
	for name, comp := range map[string][]uint64{
		"merged":     {0, 0, 0, 0, 0, 0},
		"split":      {0, 0, 2, 2, 4, 4},
		"not min id": {1, 1, 1, 1, 4, 4},
	} {
		if err := ValidateCC(ctx, g, comp); !errors.Is(err, ErrInvalidResult) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

// Store round trip and the algorithms on the CPU engine.

func newStore(t *testing.T, cache int64) *bam.Store {
	t.Helper()
	s, err := bam.Create(context.Background(), t.TempDir(), bam.CreateOptions{
		NamespaceSize: 64 << 20,
		Options:       bam.Options{CacheBytes: cache, Engine: bam.EngineCPU},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreRoundTripAndEngineAlgorithms(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 64<<10) // 16 lines: constant eviction
	el, err := Generate[uint32](ctx, GenOptions{Kind: Kronecker, Scale: 11, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(ctx, el, BuildOptions{Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(ctx, s, "k11", c, SaveOptions{Meta: map[string]string{"graph.generator": "kron"}}); err != nil {
		t.Fatal(err)
	}
	if err := Save(ctx, s, "k11", c, SaveOptions{}); !errors.Is(err, bam.ErrExists) {
		t.Fatalf("second save: err = %v, want ErrExists", err)
	}
	info, err := Stat(s, "k11")
	if err != nil {
		t.Fatal(err)
	}
	if info.N != c.N || info.M != uint64(len(c.Edges)) || info.Directed || info.IDBits != 32 || info.Meta["graph.generator"] != "kron" || info.Heads != HeadsPerVertex {
		t.Fatalf("info %+v", info)
	}
	back, err := LoadCSR[uint32](ctx, s, "k11")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Offsets, c.Offsets) || !slices.Equal(back.Edges, c.Edges) {
		t.Fatal("graph changed in the store")
	}
	if _, err := Load[uint64](ctx, s, "k11"); !errors.Is(err, bam.ErrTypeMismatch) {
		t.Fatalf("64-bit open of a 32-bit graph: err = %v", err)
	}
	g, err := Load[uint32](ctx, s, "k11")
	if err != nil {
		t.Fatal(err)
	}
	heads := make([]uint32, g.HeadsArray.Len())
	if err := g.HeadsArray.ReadRange(ctx, 0, heads); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(heads, HeadsOf(c)) {
		t.Fatal("stored heads differ from HeadsOf")
	}
	src := uint64(0)
	for c.Degree(src) < 2 {
		src++
	}
	res, err := BFS(ctx, g, src, AlgoOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Depth, refBFS(c, src)) {
		t.Fatal("BFS on the engine differs from the reference")
	}
	if err := ValidateBFS(ctx, g, src, res.Depth, 2); err != nil {
		t.Fatal(err)
	}
	cc, err := CC(ctx, g, AlgoOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateCC(ctx, g, cc.Comp); err != nil {
		t.Fatal(err)
	}
	mem, _ := CC(ctx, InMemory("m", c), AlgoOptions{})
	if !slices.Equal(mem.Comp, cc.Comp) || cc.Components < 2 {
		t.Fatalf("engine and memory components differ (components %d)", cc.Components)
	}
	if st := g.Array.Stats(); st.Misses == 0 || st.BytesRead == 0 {
		t.Fatalf("no storage reads counted: %+v", st)
	}
}

func TestLoadRejectsWrongHeads(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 1<<20)
	c, _ := Build(ctx, edgeList(4, 0, 1, 1, 2, 2, 3), BuildOptions{Symmetrize: true})
	if err := Save(ctx, s, "g", c, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx, headsName("g")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load[uint32](ctx, s, "g"); !errors.Is(err, bam.ErrNotFound) {
		t.Fatalf("heads missing: err = %v, want ErrNotFound", err)
	}
	if _, err := array.Create[uint32](ctx, s, headsName("g"), 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Load[uint32](ctx, s, "g"); !errors.Is(err, ErrFormat) {
		t.Fatalf("heads of 3 elements: err = %v, want ErrFormat", err)
	}
}

func TestLoadRejectsCorruptOffsets(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 1<<20)
	c, _ := Build(ctx, edgeList(4, 0, 1, 1, 2, 2, 3), BuildOptions{})
	c.Offsets[2] = 9 // beyond the edges, so offsets decrease after it
	err := Save(ctx, s, "bad", c, SaveOptions{})
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("save of corrupt CSR: err = %v", err)
	}
}

func TestDirectionRule(t *testing.T) {
	// 1000 vertices, 14000 edges: bottom-up once the frontier's lists hold
	// more than 1/14 of the edges no top-down level has read.
	d := newDirection(1000, 14000)
	steps := []struct {
		nf, scout uint64
		want      bool
	}{
		{1, 10, false},   // 13990 unchecked
		{10, 990, false}, // 990*14 = 13860 <= 13990; 13000 unchecked
		{20, 1000, true}, // few vertices, many edges: 14000 > 13000
		{500, 0, true},   // growing
		{100, 0, true},   // shrinking, but 100*24 > 1000
		{30, 0, false},   // shrinking and 30*24 < 1000
		{20, 1000, true}, // 14000 > 13000: bottom-up levels left the count alone
	}
	for i, s := range steps {
		if got := d.next(s.nf, s.scout); got != s.want {
			t.Fatalf("step %d (frontier %d, %d edges): bottom-up %v, want %v", i, s.nf, s.scout, got, s.want)
		}
	}
	d = newDirection(1000, 14000)
	if !d.next(20, 5000) {
		t.Fatal("a frontier holding a third of the edges stays top-down")
	}
	d.topDown(5000)
	if d.bottomUp || d.unchecked != 9000 {
		t.Fatalf("after topDown: bottom-up %v, %d unchecked; want false, 9000", d.bottomUp, d.unchecked)
	}
}

// TestFullHeadsLoad checks that a graph whose heads array is full (saved
// before heads were packed) loads as such and gives the results of the
// packed one on the CPU engine.
func TestFullHeadsLoad(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 64<<10)
	el, err := Generate[uint32](ctx, GenOptions{Kind: Kronecker, Scale: 10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Build(ctx, el, BuildOptions{Symmetrize: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"packed", "full"} {
		if err := Save(ctx, s, name, c, SaveOptions{fullHeads: name == "full"}); err != nil {
			t.Fatal(err)
		}
	}
	var depth [][]int32
	var comp [][]uint64
	for _, name := range []string{"packed", "full"} {
		g, err := Load[uint32](ctx, s, name)
		if err != nil {
			t.Fatal(err)
		}
		if g.HeadsPacked != (name == "packed") || g.HeadsArray.Len() != g.headsIndex().size() {
			t.Fatalf("%s: packed %v, %d heads", name, g.HeadsPacked, g.HeadsArray.Len())
		}
		b, err := BFS(ctx, g, PickSource(g.Offsets, 1), AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if b.BottomUpLevels == 0 {
			t.Fatalf("%s: no bottom-up level", name)
		}
		cc, err := CC(ctx, g, AlgoOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		depth, comp = append(depth, b.Depth), append(comp, cc.Comp)
	}
	if full := newHeadsIndex(c.Offsets, HeadsPerVertex, false); full.size() != c.N*HeadsPerVertex {
		t.Fatalf("full index: %d elements", full.size())
	}
	if !slices.Equal(depth[0], depth[1]) || !slices.Equal(comp[0], comp[1]) {
		t.Fatal("results over full heads differ from those over packed heads")
	}
}
