package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
)

func TestParseCounts(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{"", nil, false},
		{"1K,64Ki,1M", []int{1024, 65536, 1 << 20}, false},
		{"32, 4096", []int{32, 4096}, false},
		{"0", nil, true},
		{"-5", nil, true},
		{"12x", nil, true},
		{"4096M", nil, true},
	}
	for _, tc := range tests {
		got, err := parseCounts(tc.in, "--threads")
		if tc.bad {
			if err == nil {
				t.Errorf("parseCounts(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseCounts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseCounts(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestBenchGPUCommandsWithoutGPU(t *testing.T) {
	if cuda.Available() == nil {
		t.Skip("a GPU is present")
	}
	for _, name := range []string{"gpu-queues", "gpu-cache", "gpu-array"} {
		var out, errb bytes.Buffer
		code := runMain(context.Background(), &env{stdout: &out, stderr: &errb}, []string{"bench", name, "--out", t.TempDir()})
		if code != 1 || !strings.Contains(errb.String(), "no GPU") {
			t.Errorf("bam bench %s without a GPU: exit %d, stderr %q; want exit 1 and \"no GPU\"", name, code, errb.String())
		}
	}
}
