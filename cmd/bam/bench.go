package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// benchmark is one `bam bench NAME` target. Each registers itself from an
// init function in its own file.
type benchmark struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

var benchmarks = map[string]*benchmark{}

func registerBench(b *benchmark) { benchmarks[b.name] = b }

func init() {
	register(&command{
		name:    "bench",
		usage:   "{" + "NAME" + "} [--json] [flags]",
		summary: "measure the machine and the library (bam bench help lists them)",
		run:     runBench,
	})
}

func runBench(ctx context.Context, e *env, args []string) error {
	names := make([]string, 0, len(benchmarks))
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 || args[0] == "help" {
		fmt.Fprintln(e.stdout, "Benchmarks:")
		for _, n := range names {
			fmt.Fprintf(e.stdout, "  %-8s %s\n", n, benchmarks[n].summary)
		}
		if len(args) == 0 {
			return usageErrorf("name a benchmark: %s", strings.Join(names, ", "))
		}
		return nil
	}
	b, ok := benchmarks[args[0]]
	if !ok {
		return usageErrorf("unknown benchmark %q (have %s)", args[0], strings.Join(names, ", "))
	}
	return b.run(ctx, e, args[1:])
}
