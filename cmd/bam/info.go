package main

import (
	"context"
	"encoding/json"

	"github.com/bam-go/bam/internal/gpuinfo"
)

func init() {
	register(&command{
		name:    "info",
		usage:   "[--json]",
		summary: "GPUs, driver, BAR1, PCIe link, engines available",
		run:     runInfo,
	})
}

// runInfo prints what the machine offers. A machine without a GPU or driver
// is a normal answer ("the CPU engine is available"), not an error.
func runInfo(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "info")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usageErrorf("unexpected arguments %q", rest)
	}
	info := gpuinfo.Collect()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	return info.WriteText(e.stdout)
}
