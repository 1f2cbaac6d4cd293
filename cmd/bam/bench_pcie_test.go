package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{"256MiB": 256 << 20, "1GiB": 1 << 30, "4096": 4096, "8 KiB": 8 << 10, "16B": 16}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1TB", "MiB", "99999999999999GiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

func TestBenchPCIeWithoutGPU(t *testing.T) {
	if cuda.Available() == nil {
		t.Skip("a GPU is present: run bam bench pcie instead")
	}
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb}
	code := runMain(context.Background(), e, []string{"bench", "pcie", "--json", "--out", t.TempDir()})
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "no GPU") {
		t.Errorf("stderr does not say there is no GPU: %s", errb.String())
	}
}
