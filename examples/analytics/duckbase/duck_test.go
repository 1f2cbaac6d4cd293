package duckbase

import (
	"context"
	"testing"

	"github.com/bam-go/bam/examples/analytics/taxi"
)

// TestDuckDBAgrees runs every query in DuckDB and checks it against the
// host scan of package taxi on the same generated rows.
func TestDuckDBAgrees(t *testing.T) {
	ctx := context.Background()
	b := taxi.NewBatch(3*taxi.GenChunk + 99)
	taxi.GenerateBatch(b, 5, 0)
	var cols []taxi.Col
	for c := range taxi.NumCols {
		cols = append(cols, c)
	}
	d, err := Load(ctx, b, cols, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, id := range taxi.AllQueries {
		for _, dist := range []float64{0.5, 20, 30} {
			q := taxi.Query{ID: id, Threshold: dist}
			want, err := taxi.RunMemory(ctx, q, b, 2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.Run(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if err := taxi.SameAnswer(want, got); err != nil {
				t.Errorf("%s (D=%g): %v", id, dist, err)
			}
			if got.BytesNeeded != want.BytesNeeded {
				t.Errorf("%s: bytes needed %d, want %d", id, got.BytesNeeded, want.BytesNeeded)
			}
			if !q.Selective() {
				break
			}
		}
	}
}

func TestLoadRefusesNaN(t *testing.T) {
	b := taxi.NewBatch(10)
	b.F32(taxi.TripDistance)[3] = taxi.NullF32
	if _, err := Load(context.Background(), b, []taxi.Col{taxi.TripDistance}, 1); err == nil {
		t.Error("Load accepted a NaN distance")
	}
}
