package vqbench

import (
	"context"
	"testing"
	"time"
)

// TestRunSmall checks that a short run produces one figure per submitter
// count plus the Target comparison, with positive rates. It measures
// nothing worth reading.
func TestRunSmall(t *testing.T) {
	r, pts, err := RunPoints(context.Background(), Params{
		Duration: 50 * time.Millisecond, Queues: 2, Depth: 8, Submitters: []int{1, 16}, Blocks: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 2 || len(r.Figures) != 3 {
		t.Fatalf("points %d figures %d", len(pts), len(r.Figures))
	}
	for _, f := range r.Figures {
		if f.Value <= 0 || f.BaselineValue <= 0 || f.Ratio <= 0 {
			t.Errorf("figure %+v", f)
		}
	}
	if r.Benchmark != BenchmarkID || r.Device != "cpu" {
		t.Errorf("result %s on %s", r.Benchmark, r.Device)
	}
}

func TestBadParams(t *testing.T) {
	for _, p := range []Params{{Depth: 3}, {Depth: 1}, {Submitters: []int{0}}} {
		if _, err := Run(context.Background(), p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
