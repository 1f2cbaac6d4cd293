package kv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bam-go/bam/internal/cuda/cudatest"
)

// TestGPUGetManyMatchesCPU loads a table several times the GPU cache,
// looks the same keys (present and absent) up on the CPU and on the GPU,
// and requires identical answers; then writes more and checks that GPU
// lookups see the writes (checkpoint + cache invalidation).
func TestGPUGetManyMatchesCPU(t *testing.T) {
	cudatest.Device(t)
	ctx := context.Background()
	s := newStore(t, t.TempDir(), 4096)
	defer s.Close()
	type value [6]uint64
	const n = 200_000
	tb, err := Create[uint64, value](ctx, s, "g", &Options{Capacity: n})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	keys := make([]uint64, n)
	vals := make([]value, n)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range keys {
		keys[i] = rng.Uint64()
		vals[i] = value{keys[i], uint64(i), ^keys[i]}
	}
	if err := tb.PutMany(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	info := tb.Info()
	g, err := NewGPU(tb, GPUOptions{CacheBytes: uint64(info.Buckets) * 4096 / 4})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	check := func(round int) {
		q := make([]uint64, 50_000)
		for i := range q {
			if i%5 == 0 {
				q[i] = rng.Uint64() // almost surely absent
			} else {
				q[i] = keys[rng.IntN(n)]
			}
		}
		cv, gv := make([]value, len(q)), make([]value, len(q))
		cf, gf := make([]bool, len(q)), make([]bool, len(q))
		if err := tb.GetMany(ctx, q, cv, cf); err != nil {
			t.Fatal(err)
		}
		if err := g.GetMany(ctx, q, gv, gf); err != nil {
			t.Fatal(err)
		}
		hits := 0
		for i := range q {
			if cf[i] != gf[i] || cv[i] != gv[i] {
				t.Fatalf("round %d key %x: CPU %v %v, GPU %v %v", round, q[i], cf[i], cv[i], gf[i], gv[i])
			}
			if cf[i] {
				hits++
			}
		}
		if hits < len(q)/2 {
			t.Fatalf("round %d: only %d of %d keys found", round, hits, len(q))
		}
	}
	check(0)
	check(1)
	// Overwrite and delete some keys: the GPU must see it.
	for i := range 1000 {
		vals[i][1] = 1 << 50
	}
	if err := tb.PutMany(ctx, keys[:1000], vals[:1000]); err != nil {
		t.Fatal(err)
	}
	if err := tb.DeleteMany(ctx, keys[1000:2000]); err != nil {
		t.Fatal(err)
	}
	gv := make([]value, 2000)
	gf := make([]bool, 2000)
	if err := g.GetMany(ctx, keys[:2000], gv, gf); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if i < 1000 && (!gf[i] || gv[i] != vals[i]) || i >= 1000 && gf[i] {
			t.Fatalf("after writes, key %d: %v %v", i, gf[i], gv[i])
		}
	}
	check(2)
	st, _ := g.Engine().Stats()
	t.Logf("GPU engine: %+v", st)
}

// TestGPUGetManyConcurrent runs GPU lookups from several goroutines on one
// GPUTable over a cache a quarter of the table, each checking its answers
// against the values it knows; their buffers come and go while the others'
// lookup kernels run. With 8, 2 and 1 ways a warp's 32 buckets often want
// more of a set's ways than it has.
func TestGPUGetManyConcurrent(t *testing.T) {
	cudatest.Device(t)
	ctx := context.Background()
	s := newStore(t, t.TempDir(), 4096)
	defer s.Close()
	const n = 50_000
	tb, err := Create[uint64, uint64](ctx, s, "c", &Options{Capacity: n})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	key := func(i uint64) uint64 { return i*0x9e3779b97f4a7c15 + 1 }
	keys := make([]uint64, n)
	vals := make([]uint64, n)
	for i := range keys {
		keys[i] = key(uint64(i))
		vals[i] = ^keys[i]
	}
	if err := tb.PutMany(ctx, keys, vals); err != nil {
		t.Fatal(err)
	}
	info := tb.Info()
	for _, ways := range []int{8, 2, 1} {
		t.Run(fmt.Sprintf("ways=%d", ways), func(t *testing.T) {
			g, err := NewGPU(tb, GPUOptions{CacheBytes: max(uint64(info.Buckets)*4096/4, uint64(ways)*4096), Ways: ways})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			const workers, rounds, batch = 4, 6, 3000
			errs := make(chan error, workers)
			for w := range workers {
				go func() {
					rng := rand.New(rand.NewPCG(uint64(w), 9))
					q := make([]uint64, batch)
					want := make([]uint64, batch)
					got := make([]uint64, batch)
					found := make([]bool, batch)
					for r := range rounds {
						for i := range q {
							j := rng.IntN(n)
							if i%4 == 3 { // absent: the key map is one to one (odd multiplier)
								q[i], want[i] = key(uint64(n+j)), 0
							} else {
								q[i], want[i] = keys[j], vals[j]
							}
						}
						if err := g.GetMany(ctx, q, got, found); err != nil {
							errs <- err
							return
						}
						for i := range q {
							if present := i%4 != 3; found[i] != present || got[i] != want[i] {
								errs <- fmt.Errorf("worker %d round %d: key %x: got %v %x, want %v %x", w, r, q[i], found[i], got[i], present, want[i])
								return
							}
						}
					}
					errs <- nil
				}()
			}
			for range workers {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			st, _ := g.Engine().Stats()
			t.Logf("%d buckets, cache of %d sets of %d ways: %d misses, %d fills", info.Buckets, g.Engine().Sets(), ways, st.Misses, st.Fills)
		})
	}
}

func TestLookupGrid(t *testing.T) {
	for _, c := range []struct {
		n, ways       uint64
		block, blocks uint32
	}{
		{1000, 96, 32, 1},             // a tiny cache: one warp
		{1000, 1024, 256, 1},          // a quarter of 1024 lines: 256 lanes
		{1000, 640, 160, 1},           // 160 lanes: five warps
		{1 << 20, 65536, 256, 64},     // 256 MiB of 4 KiB lines
		{100, 65536, 256, 1},          // no more blocks than keys need
		{1 << 30, 1 << 30, 256, 1056}, // capped at 132*8 blocks
	} {
		lc := lookupGrid(c.n, c.ways)
		if lc.Block.X != c.block || lc.Grid.X != c.blocks {
			t.Errorf("lookupGrid(%d, %d) = %d blocks of %d, want %d of %d", c.n, c.ways, lc.Grid.X, lc.Block.X, c.blocks, c.block)
		}
		if lanes := uint64(lc.Block.X) * uint64(lc.Grid.X); lanes > max(c.ways/4, 32) || lc.Block.X%32 != 0 {
			t.Errorf("lookupGrid(%d, %d): %d lanes in blocks of %d", c.n, c.ways, lanes, lc.Block.X)
		}
	}
}
