package taxi

import (
	"context"
	"errors"
	"testing"

	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/internal/gpuengine"
)

// TestGPUQueries runs every query on the GPU engine (columns on storage
// through a small cache, and columns in device memory) and checks it
// against the row-by-row oracle, for the store's line size, for 512-byte
// engine lines over 4 KiB store lines with the scanned columns in a cache
// of the store's line size (the default), and with all columns in one
// cache of 512-byte lines; with match batches of 8 (the default), 1, 5 and
// 32 (reads left over at a warp's end, notes full in mid-chunk at the low
// thresholds, rounds of reads split across the warp's lanes).
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
	for _, tc := range []struct{ line, scan, caches, batch int }{{4096, 0, 1, 0}, {512, 0, 2, 1}, {512, 512, 1, 5}, {4096, 0, 1, 32}} {
		line := tc.line
		g, err := OpenGPU(tb, GPUConfig{Engine: gpuengine.Config{LineSize: line, CacheBytes: 1 << 20}, GroupSlots: 1 << 14,
			ScanLineSize: tc.scan, MatchBatch: tc.batch})
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
			st, err := g.Engine().Stats()
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Caches) != tc.caches {
				t.Fatalf("line %d scan %d: %d caches, want %d", line, tc.scan, len(st.Caches), tc.caches)
			}
			m, err := g.RunResident(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, q, b, m)
		}
		if tc.caches == 2 {
			// Q1-Q5 read their amounts through the small lines, every
			// query its scanned columns through the large ones.
			st, err := g.Engine().Stats()
			if err != nil {
				t.Fatal(err)
			}
			for _, cs := range st.Caches {
				if cs.Fills == 0 {
					t.Errorf("line %d: the cache of %d-byte lines filled nothing: %+v", line, cs.LineSize, st.Caches)
				}
			}
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

// TestOpenGPUBadConfig: configurations OpenGPU refuses before it needs a
// GPU.
func TestOpenGPUBadConfig(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 4096)
	tb, err := Generate(ctx, s, "trips", GenOptions{Rows: 1000, Seed: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []GPUConfig{{MatchBatch: 33}, {MatchBatch: -1}, {GroupSlots: 3}} {
		g, err := OpenGPU(tb, cfg)
		if !errors.Is(err, ErrInvalid) {
			if g != nil {
				g.Close()
			}
			t.Errorf("%+v: got %v, want ErrInvalid", cfg, err)
		}
	}
}
