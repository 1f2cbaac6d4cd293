package kvbench

import (
	"context"
	"testing"
	"time"
)

// TestRunSmall runs K1 at a tiny size on the CPU: the harness loads both
// stores, checks results and reports every figure.
func TestRunSmall(t *testing.T) {
	res, err := Run(context.Background(), Params{Dir: t.TempDir(), CacheBytes: 1 << 20, Duration: 200 * time.Millisecond, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range res.Figures {
		names[f.Name] = true
		if f.Value <= 0 {
			t.Fatalf("figure %s = %v", f.Name, f.Value)
		}
	}
	for _, n := range []string{"pebble_get_uniform", "pebble_get_zipf", "cpu_batch_get_uniform", "cpu_batch_get_zipf"} {
		if !names[n] {
			t.Fatalf("missing figure %s in %+v", n, res.Figures)
		}
	}
}
