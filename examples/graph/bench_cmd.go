package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/bam-go/bam/examples/graph/graph"
)

func cmdBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	store := fs.String("store", "bench-graph-store", "store directory (graphs are generated into it once and reused)")
	scale := fs.Int("scale", 25, "Kronecker and uniform random scale (G1: >= 25)")
	kinds := fs.String("kinds", "kron,urand", "generators")
	fracs := fs.String("cache-fractions", "0.125,0.25,0.5", "GPU cache sizes as fractions of the edges array")
	runs := fs.Int("runs", 3, "timed runs per configuration (median reported)")
	sources := fs.Int("sources", 4, "BFS sources per run set")
	out := fs.String("out", "bench/results", "directory for the result JSON")
	jsonOut := fs.Bool("json", false, "print the result JSON")
	gpuLine := fs.Int("gpu-line", 0, "GPU cache line size for the edges (default: the store's; other sizes need a one-namespace store)")
	queues := fs.Int("queues", 0, "NVMe queue pairs of the GPU engine (default: the engine's)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	o := graph.G1Options{Store: *store, Scale: *scale, Runs: *runs, Sources: *sources, GPULine: *gpuLine, QueuePairs: *queues, Progress: newProgress(), Log: stderr}
	for _, k := range strings.Split(*kinds, ",") {
		o.Kinds = append(o.Kinds, graph.Kind(strings.TrimSpace(k)))
	}
	for _, f := range strings.Split(*fracs, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			return usagef("cache fraction %q: want a number in (0, 1]", f)
		}
		o.CacheFractions = append(o.CacheFractions, v)
	}
	res, err := graph.RunG1(ctx, o)
	if err != nil {
		return err
	}
	if len(o.Kinds) == 1 {
		// Runs of one kind each keep their own file (G1-kron-..., G1-urand-...).
		res.Variant = string(o.Kinds[0])
	}
	path, err := res.WriteFile(*out)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(res)
	}
	for _, f := range res.Figures {
		fmt.Fprintf(stdout, "%-58s %12.4g %-6s", f.Name, f.Value, f.Unit)
		if f.Baseline != "" {
			fmt.Fprintf(stdout, " vs %-28s %12.4g  ratio %6.2f %s", f.Baseline, f.BaselineValue, f.Ratio, f.Goal)
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, "wrote", path)
	return nil
}
