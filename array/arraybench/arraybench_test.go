package arraybench

import (
	"context"
	"testing"
	"time"
)

// TestRunSmall runs every figure briefly and checks that each is present
// and positive (the harness verifies every gathered value itself).
func TestRunSmall(t *testing.T) {
	r, err := Run(context.Background(), Params{Duration: 20 * time.Millisecond, CacheBytes: 1 << 20, AllHitBytes: 1 << 20, Batch: 512, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"all_hit_gather_8B_lookups_per_s": false, "gather_8x_cache_hit_ratio": false,
		"sequential_scan_bytes_per_s": false, "host_tier_gather_8x_cache_lookups_per_s": false, "target_iops_4k_memory": false}
	for _, f := range r.Figures {
		if _, ok := want[f.Name]; ok {
			want[f.Name] = true
		}
		if f.Value < 0 || (f.Value == 0 && f.Name != "gather_8x_cache_hit_ratio") {
			t.Errorf("%s = %v", f.Name, f.Value)
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("figure %s missing", name)
		}
	}
}
