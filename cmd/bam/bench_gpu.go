package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/gpubench"
)

// The GPU data-path benchmarks: gpu-queues (Q1, Q2, L1), gpu-cache (C1, C4)
// and gpu-array (C2, C3). Each needs a GPU and fails with "no GPU" without
// one.

func init() {
	registerBench(&benchmark{
		name:    "gpu-queues",
		summary: "Q1/Q2/L1: GPU threads reading through the device queues (IOPS vs a single-lock queue, GB/s vs the path ceiling, latency vs a GPU-host round trip)",
		run:     runBenchGPUQueues,
	})
	registerBench(&benchmark{
		name:    "gpu-cache",
		summary: "C1/C4: cold-cache reads of an array 4x the GPU cache vs the path ceiling, and ablations",
		run:     runBenchGPUCache,
	})
	registerBench(&benchmark{
		name:    "gpu-array",
		summary: "C2/C3: all-hit random and sequential 8-byte reads through bam::array vs a plain device array",
		run:     runBenchGPUArray,
	})
}

// gpuFlags are the flags every GPU benchmark takes.
type gpuFlags struct {
	json    *bool
	out     *string
	device  *int
	runs    *int
	warmup  *int
	timeout *time.Duration
	quiet   *bool
	copiers *int
	mirror  *int
	mstream *int
	linked  *bool
	port    *bool
}

func addGPUFlags(fs *flag.FlagSet) gpuFlags {
	return gpuFlags{
		json:    fs.Bool("json", false, "print the results as a JSON array"),
		out:     fs.String("out", "bench/results", "directory for the result files (empty: do not write)"),
		device:  fs.Int("device", 0, "CUDA device ordinal"),
		runs:    fs.Int("runs", 3, "timed runs per figure (the median is reported)"),
		warmup:  fs.Int("warmup", 1, "untimed runs before the timed ones"),
		timeout: fs.Duration("timeout", 5*time.Second, "bound of every device wait"),
		quiet:   fs.Bool("quiet", false, "no progress lines on stderr"),
		copiers: fs.Int("copier-warps", 0, "warps of the fill copier (0: the engine's default; negative: none)"),
		mirror:  fs.Int("mirror-run-kib", 0, "KiB the Target joins into one copy into a staging mirror (0: the engine's default)"),
		mstream: fs.Int("mirror-streams", 0, "streams copying into staging mirrors (0: the engine's default)"),
		linked:  fs.Bool("linked-jit", false, "JIT each kernel module function by function through the driver's linker (for comparison only: linked so, the scatter pass deadlocked under load)"),
		port:    fs.Bool("portable-ptx", false, "load the compute_80 kernels on every GPU (by default H100 and H200 get the sm_90 build, whose queues read completion windows with bulk copies)"),
	}
}

func (g gpuFlags) config(e *env) gpubench.Config {
	c := gpubench.Config{Device: *g.device, Runs: *g.runs, Warmup: *g.warmup, Timeout: *g.timeout, CopierWarps: *g.copiers, MirrorRun: *g.mirror << 10, MirrorStreams: *g.mstream,
		LinkedJIT: *g.linked, PortablePTX: *g.port}
	if *g.warmup == 0 {
		c.Warmup = -1
	}
	if !*g.quiet {
		c.Log = e.stderr
	}
	return c
}

func runBenchGPUQueues(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench gpu-queues")
	g := addGPUFlags(fs)
	thr := fs.String("threads", "", "GPU thread counts of the Q1 sweep, comma-separated, K/M suffixes (default 1K,4K,16K,64K,256K,1M)")
	queues := fs.Int("queues", 0, "queue pairs of the thread sweep (default 64)")
	sweep := fs.String("queue-sweep", "", "further queue counts at --sweep-threads (default 16,128; \"none\" skips)")
	sweepThreads := fs.String("sweep-threads", "", "thread count of the queue sweep (default 64K)")
	depth := fs.Int("depth", 0, "entries per queue (default 256)")
	commands := fs.String("commands", "", "commands aimed at per run (default 1M)")
	budget := fs.Duration("budget", 0, "time box of one run (default 250ms)")
	nsSize := fs.String("ns-size", "", "memory namespace size (default 1GiB)")
	workers := fs.Int("workers", 0, "Target host threads (default min(GOMAXPROCS, queues))")
	no512 := fs.Bool("no-512", false, "skip the 512-byte thread sweep")
	qd1 := fs.Int("qd1", 0, "commands of the queue-depth-1 latency run (default 2000)")
	loadThreads := fs.String("load-threads", "", "threads of the latency-under-load run (default 64K)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	p := gpubench.QueuesParams{Config: g.config(e), Queues: *queues, Depth: *depth, Budget: *budget, Workers: *workers,
		NoSmallLines: *no512, QD1Samples: *qd1}
	if p.Threads, err = parseCounts(*thr, "--threads"); err != nil {
		return err
	}
	if *sweep == "none" {
		p.QueueSweep = []int{}
	} else if p.QueueSweep, err = parseCounts(*sweep, "--queue-sweep"); err != nil {
		return err
	}
	if p.SweepThreads, err = parseCount(*sweepThreads, "--sweep-threads"); err != nil {
		return err
	}
	if p.Commands, err = parseCount(*commands, "--commands"); err != nil {
		return err
	}
	if p.LoadThreads, err = parseCount(*loadThreads, "--load-threads"); err != nil {
		return err
	}
	if *nsSize != "" {
		if p.NamespaceBytes, err = parseSize(*nsSize); err != nil {
			return usageErrorf("--ns-size: %v", err)
		}
	}
	res, err := gpubench.RunQueues(ctx, p)
	if err != nil {
		return err
	}
	return reportGPU(e, g, res)
}

func runBenchGPUCache(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench gpu-cache")
	g := addGPUFlags(fs)
	cache := fs.String("cache", "", "GPU cache size, a power of two; the array is 4x it (default 1GiB)")
	lines := fs.String("lines", "", "line sizes, comma-separated (default 512,4096,8192,65536)")
	queues := fs.Int("queues", 0, "queue pairs (default 64)")
	depth := fs.Int("depth", 0, "entries per queue (default: the engine's for each line size, 256 cut to keep staging within 64 MiB)")
	workers := fs.Int("workers", 0, "Target host threads (default min(GOMAXPROCS, queues))")
	raQueues := fs.Int("read-ahead-queues", 0, "read-ahead queue pairs of the cache, for bam::read_ahead and Reads of consecutive lines (default 64, the engine's; negative for none)")
	lookups := fs.String("lookups", "", "lookups per C4 lookup run (default 16M)")
	noAbl := fs.Bool("no-ablations", false, "skip C4")
	ahead := fs.Int("ahead", 0, "lines each warp fills at once in the range and random orders (default: the device library's bam::fill_ahead; 1 for none ahead of the reads)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	if *ahead < 0 || *ahead > 32 {
		return usageErrorf("--ahead %d: want 0 to 32", *ahead)
	}
	p := gpubench.CacheParams{Config: g.config(e), Queues: *queues, Depth: *depth, Workers: *workers, NoAblations: *noAbl, Ahead: *ahead, ReadAheadQueues: *raQueues}
	if *cache != "" {
		if p.CacheBytes, err = parseSize(*cache); err != nil {
			return usageErrorf("--cache: %v", err)
		}
	}
	if p.Lines, err = parseCounts(*lines, "--lines"); err != nil {
		return err
	}
	if p.Lookups, err = parseCount(*lookups, "--lookups"); err != nil {
		return err
	}
	res, err := gpubench.RunCache(ctx, p)
	if err != nil {
		return err
	}
	return reportGPU(e, g, res)
}

func runBenchGPUArray(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench gpu-array")
	g := addGPUFlags(fs)
	line := fs.Int("line", 0, "cache line size (default 4096)")
	array := fs.String("array", "", "array size, a power of two larger than L2; the cache is twice it (default 1GiB)")
	lookups := fs.String("lookups", "", "random lookups per C2 run (default 64M)")
	coarsen := fs.String("coarsen", "", "C3 elements per thread, comma-separated (default 1,2,4,8,16,32)")
	reps := fs.Int("reps", 0, "passes over the array per C3 run (default 8)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	p := gpubench.ArrayParams{Config: g.config(e), LineSize: *line, Reps: *reps}
	if *array != "" {
		if p.ArrayBytes, err = parseSize(*array); err != nil {
			return usageErrorf("--array: %v", err)
		}
	}
	if p.Lookups, err = parseCount(*lookups, "--lookups"); err != nil {
		return err
	}
	if p.Coarsening, err = parseCounts(*coarsen, "--coarsen"); err != nil {
		return err
	}
	res, err := gpubench.RunArray(ctx, p)
	if err != nil {
		return err
	}
	return reportGPU(e, g, res)
}

// reportGPU writes each result into --out and prints them: a JSON array
// with --json, else one table per result.
func reportGPU(e *env, g gpuFlags, res []*bench.Result) error {
	var paths []string
	if *g.out != "" {
		for _, r := range res {
			p, err := r.WriteFile(*g.out)
			if err != nil {
				return err
			}
			paths = append(paths, p)
		}
	}
	if *g.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		for _, r := range res {
			if err := printGPUResult(e.stdout, r); err != nil {
				return err
			}
		}
	}
	for _, p := range paths {
		fmt.Fprintf(e.stderr, "wrote %s\n", p)
	}
	return nil
}

func printGPUResult(w io.Writer, r *bench.Result) error {
	fmt.Fprintf(w, "%s on %s (%s, %d cores)\n", r.Benchmark, r.Device, r.Host.CPU, r.Host.Cores)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  figure\tvalue\tbaseline\tratio\tgoal")
	for _, f := range r.Figures {
		base, ratio := "-", "-"
		if f.BaselineValue != 0 {
			base = fmt.Sprintf("%.4g", f.BaselineValue)
			ratio = fmt.Sprintf("%.3g", f.Ratio)
		}
		goal := f.Goal
		if goal == "" {
			goal = "-"
		}
		fmt.Fprintf(tw, "  %s\t%.4g %s\t%s\t%s\t%s\n", f.Name, f.Value, f.Unit, base, ratio, goal)
	}
	return tw.Flush()
}

// parseCount reads a count such as "65536", "64K" or "1M" (K = 1024,
// M = 1024*1024); "" is 0 (the default).
func parseCount(s, flagName string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"k", 1 << 10}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 || v > (1<<31)/mult {
		return 0, usageErrorf("%s: bad count %q", flagName, s)
	}
	return v * mult, nil
}

// parseCounts reads a comma-separated list of counts; "" is nil.
func parseCounts(s, flagName string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := parseCount(f, flagName)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
