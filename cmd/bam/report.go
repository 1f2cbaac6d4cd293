package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/bam-go/bam/bench"
)

// reportResult prints a benchmark result as JSON (asJSON) or as a header
// line and a table of its figures, then writes its JSON file into dir
// unless dir is empty.
func reportResult(e *env, res *bench.Result, header string, asJSON bool, dir string) error {
	if asJSON {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, string(b))
	} else {
		fmt.Fprintln(e.stdout, header)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tvalue\tunit\tbaseline\tratio\tgoal")
		for _, f := range res.Figures {
			fmt.Fprintf(tw, "%s\t%.4g\t%s\t%.4g\t%.3f\t%s\n", f.Name, f.Value, f.Unit, f.BaselineValue, f.Ratio, f.Goal)
		}
		tw.Flush()
	}
	if dir == "" {
		return nil
	}
	path, err := res.WriteFile(dir)
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintln(e.stdout, "wrote", path)
	}
	return nil
}
