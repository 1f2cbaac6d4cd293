package main

import (
	"context"
	"fmt"

	"github.com/bam-go/bam/array/arraybench"
)

func init() {
	registerBench(&benchmark{
		name:    "array",
		summary: "H1: Array[T] on the CPU engine: all-hit gather vs a slice, gather 8x the cache, scan vs mmap, host tier",
		run:     runBenchArray,
	})
}

func runBenchArray(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench array")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	out := fs.String("out", "bench/results", "directory for the result file (empty: do not write)")
	duration := fs.Duration("duration", 0, "measuring time per figure (default 1s)")
	cache := fs.String("cache", "", "line cache size (default 16MiB)")
	line := fs.String("line", "", "line size (default 4KiB)")
	batch := fs.Int("batch", 0, "indices per Gather (default 4096)")
	model := fs.String("model", "", "device model of the host-tier figure (default Samsung 980 PRO)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	p := arraybench.Params{Duration: *duration, Batch: *batch, Model: *model}
	if *cache != "" {
		if p.CacheBytes, err = parseSizeFlag(*cache, "--cache"); err != nil {
			return err
		}
	}
	if *line != "" {
		if p.LineSize, err = parseSizeInt(*line, "--line"); err != nil {
			return err
		}
	}
	res, err := arraybench.Run(ctx, p)
	if err != nil {
		return err
	}
	return reportResult(e, res, fmt.Sprintf("%s on %s (%d cores), cache %v, line %v", res.Benchmark, res.Host.CPU, res.Host.Cores, res.Params["cache_bytes"], res.Params["line_size"]), *jsonOut, *out)
}
