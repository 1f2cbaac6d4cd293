package gpuinfo

import (
	"fmt"
	"io"
	"strings"

	"github.com/bam-go/bam/internal/cuda"
)

// WriteText writes the report for a terminal.
func (i *Info) WriteText(w io.Writer) error {
	var b strings.Builder
	if !i.GPUEngine() && len(i.GPUs) == 0 {
		fmt.Fprintln(&b, i.noGPUHeadline())
	}
	if i.Driver.Found {
		fmt.Fprintf(&b, "Driver: %s", orUnknown(i.Driver.Version))
		if i.Driver.CUDAVersion != "" {
			fmt.Fprintf(&b, ", CUDA %s", i.Driver.CUDAVersion)
		}
		fmt.Fprintln(&b)
	}
	for _, g := range i.GPUs {
		fmt.Fprintf(&b, "GPU %d: %s", g.Index, g.Name)
		var tags []string
		if g.ComputeCapability != "" {
			tags = append(tags, "compute capability "+g.ComputeCapability)
		}
		if g.Multiprocessors > 0 {
			tags = append(tags, fmt.Sprintf("%d SMs", g.Multiprocessors))
		}
		if len(tags) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(tags, ", "))
		}
		fmt.Fprintln(&b)
		row := func(k, v string) { fmt.Fprintf(&b, "  %-10s %s\n", k, v) }
		if g.PCIBusID != "" {
			row("bus id", g.PCIBusID)
		}
		if g.UUID != "" {
			row("uuid", g.UUID)
		}
		row("memory", totalFree(g.MemoryTotal, g.MemoryFree))
		if g.BAR1Total > 0 {
			row("BAR1", totalFree(g.BAR1Total, g.BAR1Free))
		}
		if g.PCIeGen > 0 || g.PCIeWidth > 0 {
			link := fmt.Sprintf("Gen%d x%d", g.PCIeGen, g.PCIeWidth)
			if g.PCIeGenMax > 0 || g.PCIeWidthMax > 0 {
				link += fmt.Sprintf(" (max Gen%d x%d)", g.PCIeGenMax, g.PCIeWidthMax)
			}
			row("PCIe link", link)
		}
	}
	fmt.Fprintln(&b, "Engines:")
	for _, e := range i.Engines {
		state := "available"
		if !e.Available {
			state = "unavailable"
		}
		if e.Reason != "" {
			state += ": " + e.Reason
		}
		fmt.Fprintf(&b, "  %-4s %s\n", e.Name, state)
	}
	if len(i.Notes) > 0 {
		fmt.Fprintln(&b, "Notes:")
		for _, n := range i.Notes {
			fmt.Fprintf(&b, "  %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func totalFree(total, free uint64) string {
	if free == 0 {
		return cuda.FormatBytes(total) + " total"
	}
	return fmt.Sprintf("%s total, %s free", cuda.FormatBytes(total), cuda.FormatBytes(free))
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}
