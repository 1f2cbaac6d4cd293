package kv

import (
	"context"
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
