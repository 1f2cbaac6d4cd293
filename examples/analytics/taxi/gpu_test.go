package taxi

import (
	"context"
	"testing"

	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/internal/gpuengine"
)

// TestGPUQueries runs every query on the GPU engine (columns on storage
// through a small cache, and columns in device memory) and checks it
// against the row-by-row oracle, for the store's line size and for 512-byte
// engine lines over 4 KiB store lines.
func TestGPUQueries(t *testing.T) {
	cudatest.Device(t)
	ctx := context.Background()
	s := newStore(t, 4096)
	rows := uint64(5*GenChunk + 777)
	tb, err := Generate(ctx, s, "trips", GenOptions{Rows: rows, Seed: 11, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tb.LoadDirect(ctx, allCols(), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []int{4096, 512} {
		g, err := OpenGPU(tb, GPUConfig{Engine: gpuengine.Config{LineSize: line, CacheBytes: 1 << 20}, GroupSlots: 1 << 14})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.LoadResident(b, allCols()); err != nil {
			t.Fatal(err)
		}
		for _, q := range allQueries(0.5, 20, 30) {
			if err := g.Invalidate(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := g.Run(ctx, q)
			if err != nil {
				t.Fatalf("line %d %s: %v", line, q.ID, err)
			}
			checkResult(t, q, b, r)
			// A cold run reads at least every line of the scanned column.
			if r.BytesRead < bytesNeeded(q, rows, 0) {
				t.Errorf("line %d %s: read %d bytes, need at least %d", line, q.ID, r.BytesRead, bytesNeeded(q, rows, 0))
			}
			m, err := g.RunResident(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, q, b, m)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func allCols() []Col {
	cols := make([]Col, NumCols)
	for c := range NumCols {
		cols[c] = c
	}
	return cols
}
