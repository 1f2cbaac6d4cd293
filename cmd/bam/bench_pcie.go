package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/bam-go/bam/internal/pciebench"
)

func init() {
	registerBench(&benchmark{
		name:    "pcie",
		summary: "pinned H2D/D2H copy, GPU zero-copy read and HBM copy bandwidth (the ceilings)",
		run:     runBenchPCIe,
	})
}

func runBenchPCIe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench pcie")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	device := fs.Int("device", 0, "CUDA device ordinal")
	size := fs.String("size", "256MiB", "bytes per transfer (KiB, MiB, GiB suffixes)")
	runs := fs.Int("runs", 10, "timed runs per figure (the median is reported)")
	out := fs.String("out", "bench/results", "directory for the result JSON")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	n, err := parseSize(*size)
	if err != nil {
		return usageErrorf("--size: %v", err)
	}
	res, err := pciebench.Run(ctx, pciebench.Config{Device: *device, Bytes: n, Runs: *runs})
	if err != nil {
		return err
	}
	path, err := res.WriteFile(*out)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "pcie on %s (device %d), %s per transfer, median of %d runs\n",
			res.Device, *device, *size, *runs)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tvalue\tceiling (DESIGN.md §8)\tratio")
		for _, f := range res.Figures {
			ceil, ratio := "-", "-"
			if f.BaselineValue > 0 {
				ceil = fmt.Sprintf("%.1f %s", f.BaselineValue, f.Unit)
				ratio = fmt.Sprintf("%.2f", f.Ratio)
			}
			fmt.Fprintf(tw, "%s\t%.1f %s\t%s\t%s\n", f.Name, f.Value, f.Unit, ceil, ratio)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "wrote %s\n", path)
	return nil
}

// parseSize reads a byte count such as "256MiB", "1GiB", "4096".
func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	num := strings.TrimSpace(s)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 256MiB)", s)
	}
	if v > (1<<63)/mult {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return v * mult, nil
}
