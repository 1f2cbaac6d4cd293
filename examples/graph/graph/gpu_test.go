package graph

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

// TestGPUAgainstCPU runs BFS and CC on the GPU with the edges on storage
// (a cache much smaller than the edges), in GPU memory and in pinned host
// memory, and checks every result against the validators and the CPU
// engine's results, for 32- and 64-bit ids and a directed graph. With
// -test.short the grid runs fewer variants (see below).
func TestGPUAgainstCPU(t *testing.T) {
	cudatest.Device(t)
	ctx := context.Background()
	dir := t.TempDir()
	s, err := bam.Create(ctx, dir, bam.CreateOptions{NamespaceSize: 256 << 20, Options: bam.Options{Engine: bam.EngineCPU}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type tc struct {
		name  string
		kind  Kind
		scale int
		sym   bool
		wide  bool
	}
	cases := []tc{
		{"kron14", Kronecker, 14, true, false},
		{"urand13", Uniform, 13, true, false},
		{"kron12-directed", Kronecker, 12, false, false},
		{"kron12-wide", Kronecker, 12, true, true},
		{"hubs", "", 0, true, false}, // hubGraph: lists longer than a top-down warp takes alone
		// gridGraph: 1203 small levels, more than one launch of
		// bfs_small_levels takes.
		{"grid", "grid", 0, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.wide {
				runGPUCase[uint64](t, ctx, dir, s, c.name, c.kind, c.scale, c.sym)
			} else {
				runGPUCase[uint32](t, ctx, dir, s, c.name, c.kind, c.scale, c.sym)
			}
		})
	}
}

func runGPUCase[V VertexID](t *testing.T, ctx context.Context, dir string, s *bam.Store, name string, kind Kind, scale int, sym bool) {
	var el *EdgeList[V]
	var err error
	switch kind {
	case "":
		el = hubGraph[V]()
	case "grid":
		el = gridGraph[V](1200, 4)
	default:
		if el, err = Generate[V](ctx, GenOptions{Kind: kind, Scale: scale, Seed: 5}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Build(ctx, el, BuildOptions{Symmetrize: sym})
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(ctx, s, name, c, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same graph with its heads full, as graphs were saved before the
	// heads were packed.
	if err := Save(ctx, s, name+"-full", c, SaveOptions{fullHeads: true}); err != nil {
		t.Fatal(err)
	}
	mem := InMemory(name, c)
	src := uint64(0)
	for c.Degree(src) < 2 {
		src++
	}
	want, err := BFS(ctx, mem, src, AlgoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantCC, err := CC(ctx, mem, AlgoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var zero V
	cache := max(8<<20, uint64(len(c.Edges))*uint64(sizeOf(zero))/8)
	ccOpt := CCOptions(s, name, GPUOptions{CacheBytes: cache})
	if ccOpt.LineSize != DefaultCCLineSize {
		t.Fatalf("CC's options on a one-namespace store: lines of %d bytes, want %d", ccOpt.LineSize, DefaultCCLineSize)
	}
	for _, v := range []struct {
		name    string
		p       Placement
		opt     GPUOptions
		noHeads bool   // CC's first pass over the edges, as for graphs saved without heads
		graph   string // the graph saved as name+graph
		pieces  bool   // CC's first round over the heads on storage in pieces of a few tiles
		lateCap uint64 // BFS's early read back patches at most this many depths in
	}{
		{string(OnStorage), OnStorage, GPUOptions{CacheBytes: cache}, false, "", false, 0},
		{"storage-cc-lines", OnStorage, ccOpt, false, "", true, 0},
		{"storage-no-heads", OnStorage, ccOpt, true, "", false, 0},
		{"storage-full-heads", OnStorage, GPUOptions{CacheBytes: cache}, false, "-full", true, 0},
		{string(InDevice), InDevice, GPUOptions{CacheBytes: cache}, false, "", false, 0},
		{string(ZeroCopy), ZeroCopy, GPUOptions{CacheBytes: cache}, false, "", false, 0},
		{"device-full-heads", InDevice, GPUOptions{CacheBytes: cache}, false, "-full", false, 0},
		// An early read back whose late vertices overflow: read whole again.
		{"storage-late-cap", OnStorage, GPUOptions{CacheBytes: cache}, false, "", false, 1},
	} {
		// Under -test.short (the sanitizer runs) the grid runs on storage
		// and in device memory only: each run of its 1203 levels takes
		// about 36 s under racecheck, where the other graphs' take one or
		// two. The other graphs run every variant, through the same
		// kernels.
		if testing.Short() && kind == "grid" && v.name != string(OnStorage) && v.name != string(InDevice) {
			continue
		}
		p := v.p
		t.Run(v.name, func(t *testing.T) {
			r, err := OpenGPU[V](ctx, dir, s, name+v.graph, p, v.opt)
			if err != nil {
				t.Fatal(err)
			}
			if r.Info.HeadsPacked != (v.graph == "") {
				t.Fatalf("heads packed %v", r.Info.HeadsPacked)
			}
			if v.pieces {
				r.headsStage = 5 * headsTile * headsBlock * uint64(sizeOf(zero))
			}
			r.lateCap = v.lateCap
			defer func() {
				if err := r.Close(); err != nil {
					t.Error(err)
				}
			}()
			firstStage := "init, link heads"
			if v.noHeads {
				r.Info.Heads = 0
				firstStage = "init, link first"
			}
			if _, err := r.BFSInto(ctx, src, make([]int32, 1)); err == nil {
				t.Fatal("BFSInto accepted a result buffer of one element")
			}
			for run := 0; run < 2; run++ { // cold, then warm cache
				// The warm run writes into a buffer of stale values,
				// every one of which it must overwrite.
				var into []int32
				if run == 1 {
					into = slices.Repeat([]int32{0x5eed}, len(want.Depth))
				}
				got, err := r.BFSInto(ctx, src, into)
				if err != nil {
					t.Fatal(err)
				}
				if err := ValidateBFS(ctx, mem, src, got.Depth, 0); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Depth, want.Depth) {
					t.Fatal("GPU depths differ from the CPU's")
				}
				checkTrace(t, got, p == OnStorage && run == 0)
				checkReadBack(t, got, v.lateCap)
				checkHeadsRest(t, r, got)
				if kind == "grid" {
					// Every level is small: the top-down ones run fused,
					// in more than one launch, but for the last few,
					// where Beamer's rule turns bottom-up (and the
					// probe may send a level back top-down after the
					// heads).
					fused := 0
					for i, l := range got.Trace {
						if !l.BottomUp && !l.Fused && !l.HeadsFirst {
							t.Fatalf("level %d of %d ran top-down, not fused", i, got.Levels)
						}
						if l.Fused {
							fused++
						}
					}
					if fused <= smallMaxLevels {
						t.Fatalf("%d of %d levels fused, want more than %d", fused, got.Levels, smallMaxLevels)
					}
				}
				cc, err := r.CC(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := ValidateCC(ctx, mem, cc.Comp); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(cc.Comp, wantCC.Comp) {
					t.Fatal("GPU components differ from the CPU's")
				}
				var sum float64
				for _, st := range cc.Trace {
					sum += st.Seconds
				}
				if len(cc.Trace) == 0 || math.Abs(sum-cc.Elapsed.Seconds()) > 1e-6 {
					t.Fatalf("CC stages add up to %g s, the run took %g s: %+v", sum, cc.Elapsed.Seconds(), cc.Trace)
				}
				if cc.Trace[0].Name != firstStage {
					t.Fatalf("CC's first stage is %q, want %q", cc.Trace[0].Name, firstStage)
				}
			}
			if p == OnStorage {
				st, err := r.CacheStats()
				if err != nil {
					t.Fatal(err)
				}
				if st.Fills == 0 {
					t.Fatalf("no cache fills counted: %+v", st)
				}
			}
		})
	}
}

// checkReadBack checks what a GPU BFS says of its early read back: begun
// after a level that was not the last, with the vertices reached on the
// levels after it patched in (lateCap > 0: at most lateCap of them, else
// the depths read whole at the end).
func checkReadBack(t *testing.T, r *BFSResult, lateCap uint64) {
	t.Helper()
	t.Logf("read back from level %d of %d, %d depths patched in", r.ReadBackLevel, r.Levels, r.LateDepths)
	if r.ReadBackLevel == 0 {
		if r.LateDepths != 0 {
			t.Fatalf("%d depths patched in without an early read back", r.LateDepths)
		}
		return
	}
	if r.ReadBackLevel >= r.Levels {
		t.Fatalf("early read back from level %d of %d", r.ReadBackLevel, r.Levels)
	}
	var late uint64
	for _, l := range r.Trace[r.ReadBackLevel:] {
		late += l.Found
	}
	if r.LateDepths != late {
		t.Fatalf("%d depths patched in, the levels after %d found %d", r.LateDepths, r.ReadBackLevel, late)
	}
	if lateCap > 0 && late > lateCap {
		t.Fatalf("%d depths patched in, at most %d wanted", late, lateCap)
	}
}

// checkTrace checks a GPU BFS's level trace against its result: one entry
// per level, each level's frontier the vertices the one before found, and
// (with a cold cache on storage) some bytes read.
func checkTrace(t *testing.T, r *BFSResult, cold bool) {
	t.Helper()
	if len(r.Trace) != r.Levels {
		t.Fatalf("trace of %d levels, result says %d", len(r.Trace), r.Levels)
	}
	reached, up, read := uint64(1), 0, uint64(0)
	for i, l := range r.Trace {
		if i == 0 && l.Frontier != 1 || i > 0 && l.Frontier != r.Trace[i-1].Found {
			t.Fatalf("level %d: frontier %d after a level that found %d", i, l.Frontier, r.Trace[max(i, 1)-1].Found)
		}
		// A fused level's time is the device clock's, which may not tick
		// over a level of a few vertices.
		if l.Seconds < 0 || !l.Fused && l.Seconds == 0 {
			t.Fatalf("level %d took %g s", i, l.Seconds)
		}
		if l.HeadsFirst {
			t.Logf("level %d: heads first, then %d lines bottom-up against %d top-down: bottom-up %v", i, l.ScanLines, l.TopDownLines, l.BottomUp)
			if l.BottomUp != (l.ScanLines < l.TopDownLines) {
				t.Fatalf("level %d: bottom-up %v with %d lines to scan against %d top-down", i, l.BottomUp, l.ScanLines, l.TopDownLines)
			}
		}
		reached += l.Found
		read += l.BytesRead
		if l.BottomUp {
			up++
		}
	}
	var counted uint64
	for _, d := range r.Depth {
		if d >= 0 {
			counted++
		}
	}
	if counted != r.Reached {
		t.Fatalf("%d vertices have a depth, result says %d reached", counted, r.Reached)
	}
	if reached != r.Reached || up != r.BottomUpLevels {
		t.Fatalf("trace reaches %d vertices in %d bottom-up levels, result %d in %d", reached, up, r.Reached, r.BottomUpLevels)
	}
	if cold && read == 0 {
		t.Fatal("a cold BFS on storage read no bytes, by its trace")
	}
}

// checkHeadsRest checks where a GPU BFS read the heads past the first
// block: at most once, only at a level the probe sent bottom-up, and there
// exactly when restPays says so.
func checkHeadsRest[V VertexID](t *testing.T, r *GPU[V], res *BFSResult) {
	t.Helper()
	in := uint32(r.Info.Heads)
	if r.Placement == OnStorage {
		in = min(in, headsBlock)
	}
	for i, l := range res.Trace {
		if l.PastHeadsLines > l.ScanLines {
			t.Fatalf("level %d: %d lines past the heads of %d to scan", i, l.PastHeadsLines, l.ScanLines)
		}
		if !l.HeadsFirst || !l.BottomUp || in == uint32(r.Info.Heads) {
			if l.HeadsRest {
				t.Fatalf("level %d read the rest of the heads: heads first %v, bottom-up %v, %d of %d in", i, l.HeadsFirst, l.BottomUp, in, r.Info.Heads)
			}
			continue
		}
		if sure := l.ScanLines - l.PastHeadsLines; l.RestSavedLines < sure || l.RestSavedLines > l.ScanLines {
			t.Fatalf("level %d: rest of the heads saves %d lines of %d, %d of them for sure", i, l.RestSavedLines, l.ScanLines, sure)
		}
		want := r.restPays(l.RestSavedLines, in)
		t.Logf("level %d: rest of the heads saves %d of %d lines to scan: rest read %v", i, l.RestSavedLines, l.ScanLines, l.HeadsRest)
		if l.HeadsRest != want {
			t.Fatalf("level %d: rest of the heads read %v, restPays says %v (%d lines saved of %d)", i, l.HeadsRest, want, l.RestSavedLines, l.ScanLines)
		}
		if l.HeadsRest {
			in = uint32(r.Info.Heads)
		}
	}
}

// hubGraph has three hubs next to vertex 0, whose lists (5000, 5500 and
// 7000 neighbours, the last sharing 1000 with the first) are longer than
// the kernels' long-list threshold (big_list in kernels/graph.cu, 4096), a
// path hanging off one hub's neighbour, and a component of its own. A BFS
// from vertex 0 has all three long lists on one top-down level.
// gridGraph is a w×h grid, vertex y*w+x joined to its right and lower
// neighbours: from vertex 0, w+h-1 levels of at most h vertices each.
func gridGraph[V VertexID](w, h int) *EdgeList[V] {
	el := &EdgeList[V]{N: uint64(w * h)}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := y*w + x
			if x+1 < w {
				el.Src, el.Dst = append(el.Src, V(v)), append(el.Dst, V(v+1))
			}
			if y+1 < h {
				el.Src, el.Dst = append(el.Src, V(v)), append(el.Dst, V(v+w))
			}
		}
	}
	return el
}

func hubGraph[V VertexID]() *EdgeList[V] {
	el := &EdgeList[V]{N: 20100}
	add := func(a, b int) {
		el.Src = append(el.Src, V(a))
		el.Dst = append(el.Dst, V(b))
	}
	add(0, 1)
	add(0, 2)
	add(0, 3)
	for v := 4; v < 5004; v++ {
		add(1, v)
	}
	for v := 5004; v < 10504; v++ {
		add(2, v)
	}
	for v := 10504; v < 16504; v++ {
		add(3, v)
	}
	for v := 3000; v < 4000; v++ {
		add(3, v)
	}
	for v := 16504; v < 16550; v++ {
		add(v, v+1) // a path from 16504, off hub 3's neighbour 16503
	}
	add(16503, 16504)
	for v := 20060; v < 20099; v++ {
		add(v, v+1) // a separate component
	}
	return el
}
