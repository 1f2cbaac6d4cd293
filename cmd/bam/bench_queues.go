package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/bam-go/bam/vq/vqbench"
)

func init() {
	registerBench(&benchmark{
		name:    "queues",
		summary: "4 KiB read IOPS through vq queue pairs vs a single-lock queue (CPU, memory Target)",
		run:     runBenchQueues,
	})
}

func runBenchQueues(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench queues")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	out := fs.String("out", "bench/results", "directory for the result file (empty: do not write)")
	duration := fs.Duration("duration", 0, "measuring time per point and queue kind (default 1s)")
	queues := fs.Int("queues", 0, "queue pairs (default 1)")
	depth := fs.Int("depth", 0, "entries per queue, a power of two (default 256)")
	subs := fs.String("submitters", "", "comma-separated submitter counts (default 1,4,16,64,256,1024)")
	repeats := fs.Int("repeats", 0, "runs per point, median kept (default 1)")
	workers := fs.Int("workers", 0, "Target worker goroutines (default min(GOMAXPROCS, 4))")
	spin := fs.Int("spin", 0, "waiter spins before yielding (0: vq default, -1: none)")
	yield := fs.Int("yield", 0, "waiter yields before parking (0: vq default, -1: none)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	p := vqbench.Params{Duration: *duration, Queues: *queues, Depth: *depth, Repeats: *repeats, Workers: *workers,
		Spin: *spin, Yield: *yield}
	if *subs != "" {
		for _, s := range strings.Split(*subs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return usageErrorf("--submitters: bad count %q", s)
			}
			p.Submitters = append(p.Submitters, n)
		}
	}
	res, err := vqbench.Run(ctx, p)
	if err != nil {
		return err
	}
	return reportResult(e, res, fmt.Sprintf("%s on %s (%d cores), queues=%v depth=%v", res.Benchmark, res.Host.CPU, res.Host.Cores, res.Params["queues"], res.Params["depth"]), *jsonOut, *out)
}
