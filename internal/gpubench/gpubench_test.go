package gpubench

import (
	"context"
	"errors"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
)

func TestPercentileNearestRank(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		q    float64
		want float64
	}{{0.5, 5}, {0.99, 10}, {1, 10}, {0.1, 1}, {0.01, 1}, {0.11, 2}}
	for _, tc := range tests {
		if got := percentile(s, tc.q); got != tc.want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v", got)
	}
	d := distOf([]float64{3, 1, 2})
	if d.P50 != 2 || d.Max != 3 {
		t.Errorf("distOf = %+v", d)
	}
}

func TestThreadsLaunchesExactly(t *testing.T) {
	for _, n := range []uint64{1, 32, 96, 256, 1024, 65536, 1 << 20, 256*3 + 32} {
		c := threads(n)
		if got := uint64(c.Grid.X) * uint64(c.Block.X); got != n {
			t.Errorf("threads(%d) launches %d x %d = %d", n, c.Grid.X, c.Block.X, got)
		}
		if c.Block.X > block {
			t.Errorf("threads(%d): block %d", n, c.Block.X)
		}
	}
}

func TestParamsRejectBadSizes(t *testing.T) {
	bad := []func() error{
		func() error { p := QueuesParams{Threads: []int{100}}; return p.fill() },
		func() error { p := QueuesParams{NamespaceBytes: 1000}; return p.fill() },
		func() error { p := CacheParams{CacheBytes: 3 << 20}; return p.fill() },
		func() error { p := CacheParams{Lines: []int{3000}}; return p.fill() },
		func() error { p := CacheParams{CacheBytes: 1 << 20, Lines: []int{65536}}; return p.fill() },
		func() error { p := ArrayParams{ArrayBytes: 5 << 20}; return p.fill() },
		func() error { p := ArrayParams{Coarsening: []int{3}}; return p.fill() },
		func() error { p := ArrayParams{LineSize: 100}; return p.fill() },
	}
	for i, f := range bad {
		if f() == nil {
			t.Errorf("case %d: accepted", i)
		}
	}
	var p QueuesParams
	if err := p.fill(); err != nil || p.Queues != gpuengine.DefaultQueuePairs || len(p.Threads) != 6 || p.Runs != 3 {
		t.Errorf("defaults: %v %+v", err, p)
	}
}

func TestNoGPU(t *testing.T) {
	if cuda.Available() == nil {
		t.Skip("a GPU is present")
	}
	ctx := context.Background()
	if _, err := RunQueues(ctx, QueuesParams{}); !errors.Is(err, ErrNoGPU) {
		t.Errorf("RunQueues without a GPU: %v, want ErrNoGPU", err)
	}
	if _, err := RunCache(ctx, CacheParams{}); !errors.Is(err, ErrNoGPU) {
		t.Errorf("RunCache without a GPU: %v, want ErrNoGPU", err)
	}
	if _, err := RunArray(ctx, ArrayParams{}); !errors.Is(err, ErrNoGPU) {
		t.Errorf("RunArray without a GPU: %v, want ErrNoGPU", err)
	}
}
