package main

// Smoke tests of the GPU commands; they need a GPU (see
// internal/cuda/cudatest) and run in the GPU bundle because this file
// exists. They check that the commands work and verify their data, not how
// fast they are.

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

func TestGPUInfoListsDevice(t *testing.T) {
	cudatest.Device(t)
	var out, errb bytes.Buffer
	if code := runMain(context.Background(), &env{stdout: &out, stderr: &errb}, []string{"info"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	t.Logf("\n%s", out.String())
	if !strings.Contains(out.String(), "GPU 0:") || !strings.Contains(out.String(), "gpu  available") {
		t.Errorf("bam info does not list the GPU:\n%s", out.String())
	}
}

func TestGPUBenchPCIeSmoke(t *testing.T) {
	cudatest.Device(t)
	var out, errb bytes.Buffer
	args := []string{"bench", "pcie", "--json", "--size", "16MiB", "--runs", "3", "--out", t.TempDir()}
	if code := runMain(context.Background(), &env{stdout: &out, stderr: &errb}, args); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res bench.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out.String())
	}
	if res.Benchmark != "pcie" || res.Device == "" || res.Device == "cpu" {
		t.Errorf("benchmark %q device %q", res.Benchmark, res.Device)
	}
	names := map[string]bool{}
	for _, f := range res.Figures {
		names[f.Name] = true
		if f.Value <= 0 || f.Unit != "GB/s" {
			t.Errorf("figure %+v", f)
		}
		if f.BaselineValue > 0 && (f.Ratio <= 0 || !strings.Contains(f.Baseline, "DESIGN.md")) {
			t.Errorf("figure %s baseline %q ratio %v", f.Name, f.Baseline, f.Ratio)
		}
	}
	for _, want := range []string{"h2d_pinned_copy_GBps", "d2h_pinned_copy_GBps", "zero_copy_read_GBps", "hbm_copy_rw_GBps"} {
		if !names[want] {
			t.Errorf("missing figure %s", want)
		}
	}
}
