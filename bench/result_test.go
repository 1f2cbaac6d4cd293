package bench

import "testing"

func TestFileName(t *testing.T) {
	for _, tc := range []struct {
		id, variant, device, want string
	}{
		{"C1", "", "NVIDIA H200", "C1-NVIDIA-H200-20261122.json"},
		{"G1", "kron", "NVIDIA H200", "G1-kron-NVIDIA-H200-20261122.json"},
		{"H1", "", "cpu/2 cores", "H1-cpu-2-cores-20261122.json"},
	} {
		r := &Result{Benchmark: tc.id, Variant: tc.variant, Device: tc.device, Date: "2026-11-22T04:08:58Z"}
		if got := r.FileName(); got != tc.want {
			t.Errorf("FileName(%q, %q, %q) = %q, want %q", tc.id, tc.variant, tc.device, got, tc.want)
		}
	}
}
