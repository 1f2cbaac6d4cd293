package gpubench

// GPU runs of every benchmark at a tiny size: they check that each run
// verifies its data and yields positive, finite figures, not how fast the
// path is. They skip without a GPU (internal/cuda/cudatest). The GPU test
// script's sanitizer runs select them (^Test(GPU|BenchGPU)), with
// -test.short.

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// tinyConfig bounds every device wait by 5 s, or by a minute under
// -test.short, the GPU test script's sanitizer runs: memcheck slows the
// scattered lookups' kernel past 5 s a wait.
func tinyConfig(t *testing.T) Config {
	cudatest.Device(t)
	bound := 5 * time.Second
	if testing.Short() {
		bound = time.Minute
	}
	return Config{Device: cudatest.Ordinal(), Runs: 2, Warmup: 1, Timeout: bound, Log: logWriter{t}}
}

func gpuCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkResults asserts the ids, the device and that every figure (and
// every baseline given) is positive and finite, with the ratio the
// convention of bench.Result.Add.
func checkResults(t *testing.T, res []*bench.Result, ids ...string) {
	t.Helper()
	if len(res) != len(ids) {
		t.Fatalf("%d results, want %d (%v)", len(res), len(ids), ids)
	}
	for i, r := range res {
		if r.Benchmark != ids[i] {
			t.Errorf("result %d is %q, want %q", i, r.Benchmark, ids[i])
		}
		if r.Device == "" || r.Device == "cpu" {
			t.Errorf("%s: device %q", r.Benchmark, r.Device)
		}
		if len(r.Figures) == 0 {
			t.Errorf("%s: no figures", r.Benchmark)
		}
		for _, f := range r.Figures {
			t.Logf("%s %s = %.4g %s (baseline %.4g, ratio %.3g, goal %q)", r.Benchmark, f.Name, f.Value, f.Unit, f.BaselineValue, f.Ratio, f.Goal)
			if !(f.Value > 0) || math.IsInf(f.Value, 0) {
				t.Errorf("%s %s: value %v", r.Benchmark, f.Name, f.Value)
			}
			if f.Baseline != "" && (!(f.BaselineValue > 0) || !(f.Ratio > 0) || math.IsInf(f.Ratio, 0)) {
				t.Errorf("%s %s: baseline %q = %v, ratio %v", r.Benchmark, f.Name, f.Baseline, f.BaselineValue, f.Ratio)
			}
		}
	}
}

func TestBenchGPUQueuesTiny(t *testing.T) {
	c := tinyConfig(t)
	res, err := RunQueues(gpuCtx(t), QueuesParams{
		Config: c, Threads: []int{1024, 65536}, Queues: 8, QueueSweep: []int{2}, SweepThreads: 4096,
		Depth: 256, Commands: 65536, Budget: 100 * time.Millisecond, NamespaceBytes: 16 << 20,
		QD1Samples: 200, RoundTrips: 200, LoadThreads: 4096, LoadCommands: 2,
		CeilingBytes: 16 << 20, CeilingTime: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, "Q1", "Q2", "L1")
	names := map[string]bool{}
	for _, f := range res[0].Figures {
		names[f.Name] = true
	}
	for _, want := range []string{"read_iops_4k_1024_threads", "read_iops_4k_65536_threads", "read_iops_512_65536_threads", "read_iops_4k_4096_threads_2_queues"} {
		if !names[want] {
			t.Errorf("Q1 lacks %s", want)
		}
	}
	// Every Q2 route ran its verified reads (the warp copy's tickets are
	// taken a warp at a time; taken a lane at a time they deadlocked).
	q2 := map[string]float64{}
	for _, f := range res[1].Figures {
		q2[f.Name] = f.Value
	}
	for _, route := range []string{"", "_warp_copy", "_warp_lines", "_lane_copy"} {
		if v, ok := q2["read_GBps_4k_65536_threads"+route]; !ok || v <= 0 {
			t.Errorf("Q2 read_GBps_4k_65536_threads%s = %v (present %v), want > 0", route, v, ok)
		}
	}
}

func TestBenchGPUCacheTiny(t *testing.T) {
	c := tinyConfig(t)
	lookups := 1 << 20
	if testing.Short() {
		lookups = 1 << 16
	}
	res, err := RunCache(gpuCtx(t), CacheParams{
		Config: c, CacheBytes: 32 << 20, Lines: []int{512, 4096, 65536}, Queues: 8, Depth: 256,
		Lookups: lookups, CeilingBytes: 16 << 20, CeilingTime: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, "C1", "C4")
	// Every line size and order, by both routes from 4 KiB up (RunCache
	// skips the copy engine for smaller lines and for the range order),
	// and the scattered lookups over 4 KiB lines.
	have := map[string]bool{}
	for _, f := range res[0].Figures {
		have[f.Name] = true
	}
	var want []string
	for _, line := range []string{"512", "4k", "64k"} {
		for _, order := range []string{"seq", "range", "random"} {
			name := "cold_" + order + "_read_" + line + "_lines_GBps"
			want = append(want, name)
			if line != "512" && order != "range" {
				want = append(want, name+"_copy_engine")
			}
		}
	}
	want = append(want, "cold_scattered_lookups_4k_lines_Mlookups", "cold_scattered_lookups_4k_lines_GBps")
	for _, name := range want {
		if !have[name] {
			t.Errorf("C1 lacks figure %s", name)
		}
	}
	c4 := map[string]bool{}
	for _, f := range res[1].Figures {
		c4[f.Name] = true
	}
	for _, name := range []string{"balanced_cold_range_read_GBps", "fill_ahead_cold_range_read_GBps", "read_ahead_cold_seq_read_GBps"} {
		if !c4[name] {
			t.Errorf("C4 lacks figure %s", name)
		}
	}
}

func TestBenchGPUArrayTiny(t *testing.T) {
	c := tinyConfig(t)
	res, err := RunArray(gpuCtx(t), ArrayParams{
		Config: c, ArrayBytes: 4 << 20, Lookups: 1 << 20, Seeds: 2, Coarsening: []int{1, 32}, Reps: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, res, "C2", "C3")
	for _, r := range res {
		if m, ok := r.Params["misses_during_timed_runs"].(uint64); !ok || m != 0 {
			t.Errorf("%s: %v misses during the all-hit runs, want 0", r.Benchmark, r.Params["misses_during_timed_runs"])
		}
	}
}
