package array_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

// odd is an element size (9 bytes) the device library does not serve
// directly: the GPU engine moves it through its raw byte view, with line
// padding (4096 is not a multiple of 9).
type odd struct {
	A uint64
	B uint8
}

// engines opens the same kind of store twice, once per engine.
func enginePair(t *testing.T, ctx context.Context, cacheBytes int64, lineSize int) (cpu, gpu *bam.Store) {
	t.Helper()
	open := func(e bam.Engine, name string) *bam.Store {
		dir := filepath.Join(t.TempDir(), name)
		s, err := bam.Create(ctx, dir, bam.CreateOptions{
			Options:       bam.Options{Engine: e, CacheBytes: cacheBytes, QueuePairs: 4, QueueDepth: 64},
			Namespaces:    3,
			NamespaceSize: 64 << 20,
			LineSize:      lineSize,
		})
		if err != nil {
			t.Fatalf("create %s store: %v", name, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return open(bam.EngineCPU, "cpu"), open(bam.EngineGPU, "gpu")
}

// TestGPUDifferential runs the same random operation sequence against the
// CPU and GPU engines and a slice, for caches far smaller than the data.
func TestGPUDifferential(t *testing.T) {
	cudatest.Device(t)
	for _, tc := range []struct {
		cache    int64
		lineSize int
	}{{64 << 10, 4096}, {16 << 10, 512}, {4 << 20, 8192}} {
		t.Run(fmt.Sprintf("cache%d-line%d", tc.cache, tc.lineSize), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cpu, gpu := enginePair(t, ctx, tc.cache, tc.lineSize)
			differential[uint64](t, ctx, cpu, gpu, 100_000, func(r *rand.Rand) uint64 { return r.Uint64() })
			differential[uint32](t, ctx, cpu, gpu, 50_000, func(r *rand.Rand) uint32 { return r.Uint32() })
			differential[odd](t, ctx, cpu, gpu, 20_000, func(r *rand.Rand) odd { return odd{r.Uint64(), uint8(r.Uint32())} })
		})
	}
}

func differential[T comparable](t *testing.T, ctx context.Context, cpu, gpu *bam.Store, n uint64, gen func(*rand.Rand) T) {
	t.Helper()
	var zero T
	name := fmt.Sprintf("a-%T-%d", zero, n)
	ac, err := array.Create[T](ctx, cpu, name, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := array.Create[T](ctx, gpu, name, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	oracle := make([]T, n)
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	both := func(op string, f func(a *array.Array[T]) error) {
		t.Helper()
		if err := f(ac); err != nil {
			t.Fatalf("%s on CPU: %v", op, err)
		}
		if err := f(ag); err != nil {
			t.Fatalf("%s on GPU: %v", op, err)
		}
	}
	for step := 0; step < 60; step++ {
		switch rng.IntN(6) {
		case 0: // Scatter
			k := 1 + rng.IntN(5000)
			idx := make([]uint64, k)
			vals := make([]T, k)
			seen := map[uint64]bool{}
			for i := range idx {
				for {
					idx[i] = rng.Uint64N(n)
					if !seen[idx[i]] {
						break
					}
				}
				seen[idx[i]] = true
				vals[i] = gen(rng)
				oracle[idx[i]] = vals[i]
			}
			both("scatter", func(a *array.Array[T]) error { return a.Scatter(ctx, idx, vals) })
		case 1: // WriteRange
			lo := rng.Uint64N(n)
			k := min(n-lo, 1+rng.Uint64N(20000))
			vals := make([]T, k)
			for i := range vals {
				vals[i] = gen(rng)
				oracle[lo+uint64(i)] = vals[i]
			}
			both("write range", func(a *array.Array[T]) error { return a.WriteRange(ctx, lo, vals) })
		case 2: // Gather
			k := 1 + rng.IntN(5000)
			idx := make([]uint64, k)
			for i := range idx {
				idx[i] = rng.Uint64N(n)
			}
			gc, gg := make([]T, k), make([]T, k)
			if err := ac.Gather(ctx, idx, gc); err != nil {
				t.Fatal(err)
			}
			if err := ag.Gather(ctx, idx, gg); err != nil {
				t.Fatal(err)
			}
			for i, j := range idx {
				if gc[i] != oracle[j] || gg[i] != oracle[j] {
					t.Fatalf("step %d gather element %d: cpu %v gpu %v want %v", step, j, gc[i], gg[i], oracle[j])
				}
			}
		case 3: // ReadRange
			lo := rng.Uint64N(n)
			k := min(n-lo, 1+rng.Uint64N(30000))
			rc, rg := make([]T, k), make([]T, k)
			if err := ac.ReadRange(ctx, lo, rc); err != nil {
				t.Fatal(err)
			}
			if err := ag.ReadRange(ctx, lo, rg); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rc, oracle[lo:lo+k]) || !reflect.DeepEqual(rg, oracle[lo:lo+k]) {
				t.Fatalf("step %d read range [%d,%d) differs", step, lo, lo+k)
			}
		case 4: // Set/Get
			i := rng.Uint64N(n)
			v := gen(rng)
			oracle[i] = v
			both("set", func(a *array.Array[T]) error { return a.Set(ctx, i, v) })
			for _, a := range []*array.Array[T]{ac, ag} {
				got, err := a.Get(ctx, i)
				if err != nil || got != v {
					t.Fatalf("get %d: %v %v, want %v", i, got, err, v)
				}
			}
		case 5:
			both("flush", func(a *array.Array[T]) error { return a.Flush(ctx) })
		}
	}
	// Concurrent writers of disjoint elements of the same lines, and
	// readers, on both engines.
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := []error{}
	for w := 0; w < 8; w++ {
		idx := make([]uint64, 0, n/8)
		for i := uint64(w); i < n; i += 8 {
			idx = append(idx, i)
		}
		vals := make([]T, len(idx))
		for i := range vals {
			vals[i] = gen(rng)
			oracle[idx[i]] = vals[i]
		}
		for _, a := range []*array.Array[T]{ac, ag} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if err := a.Scatter(ctx, idx, vals); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]T, 1000)
				if err := a.ReadRange(ctx, 0, buf); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	both("final flush", func(a *array.Array[T]) error { return a.Flush(ctx) })
	fc, fg := make([]T, n), make([]T, n)
	if err := ac.ReadRange(ctx, 0, fc); err != nil {
		t.Fatal(err)
	}
	if err := ag.ReadRange(ctx, 0, fg); err != nil {
		t.Fatal(err)
	}
	for i := range oracle {
		if fc[i] != oracle[i] || fg[i] != oracle[i] {
			t.Fatalf("final element %d: cpu %v gpu %v want %v", i, fc[i], fg[i], oracle[i])
		}
	}
	st := ag.Stats()
	t.Logf("%s: GPU engine stats %+v amplification %.2f", name, st, st.Amplification())
}
