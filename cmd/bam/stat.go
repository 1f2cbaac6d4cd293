package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/bam-go/bam"
)

func init() {
	register(&command{
		name:    "stat",
		usage:   "STORE [NAME] [--json]",
		summary: "describe a store, or one object: type, length, layout, extents",
		run:     runStat,
	})
}

// statSection adds a named section to `bam stat` output, such as cache or
// engine statistics. Files of other commands append to statSections from
// their init functions; this file need not change.
type statSection func(s *bam.Store, object string) (name string, value any, ok bool)

var statSections []statSection

func runStat(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "stat")
	asJSON := fs.Bool("json", false, "print as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErrorf("give STORE and optionally an object NAME")
	}
	s, err := openStoreArg(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	name := ""
	if len(pos) == 2 {
		name = pos[1]
	}
	extra := map[string]any{}
	for _, sec := range statSections {
		if k, v, ok := sec(s, name); ok {
			extra[k] = v
		}
	}

	if name != "" {
		o, err := s.Object(name)
		if err != nil {
			return err
		}
		info := o.Info()
		if *asJSON {
			return encodeJSONIndent(e.stdout, struct {
				bam.ObjectInfo
				Bytes    uint64         `json:"bytes"`
				Sections map[string]any `json:"sections,omitempty"`
			}{info, info.Bytes(), extra})
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "name:\t%s\n", info.Name)
		fmt.Fprintf(tw, "id:\t%d\n", info.ID)
		fmt.Fprintf(tw, "kind:\t%s\n", info.Kind)
		fmt.Fprintf(tw, "type:\t%s (%d bytes)\n", info.ElemType, info.ElemSize)
		fmt.Fprintf(tw, "length:\t%d elements\n", info.Length)
		fmt.Fprintf(tw, "lines:\t%d of %s, %d elements each\n", info.Lines, formatBytes(uint64(info.LineSize)), info.ElemsPerLine)
		fmt.Fprintf(tw, "layout:\t%s\n", info.Layout)
		fmt.Fprintf(tw, "size:\t%s\n", formatBytes(info.Bytes()))
		fmt.Fprintf(tw, "created:\t%s\n", info.Created.Local().Format("2006-01-02 15:04:05 MST"))
		for k, v := range info.Meta {
			fmt.Fprintf(tw, "meta %s:\t%s\n", k, v)
		}
		tw.Flush()
		fmt.Fprintln(e.stdout, "extents:")
		tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NAMESPACE\tSTART LBA\tLINES")
		for _, x := range info.Extents {
			fmt.Fprintf(tw, "  %d\t%d\t%d\n", x.Namespace, x.StartLBA, x.Lines)
		}
		tw.Flush()
		printSections(e.stdout, extra)
		return nil
	}

	info, err := s.Info()
	if err != nil {
		return err
	}
	if *asJSON {
		return encodeJSONIndent(e.stdout, struct {
			bam.StoreInfo
			Sections map[string]any `json:"sections,omitempty"`
		}{info, extra})
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "volume:\t%s\n", info.VolumeUUID)
	fmt.Fprintf(tw, "format:\tversion %d\n", info.FormatVersion)
	fmt.Fprintf(tw, "created:\t%s\n", info.Created.Local().Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(tw, "line size:\t%s\n", formatBytes(uint64(info.LineSize)))
	fmt.Fprintf(tw, "LBA size:\t%d\n", info.LBASize)
	fmt.Fprintf(tw, "objects:\t%d\n", info.Objects)
	fmt.Fprintf(tw, "catalog:\tgeneration %d, %s of %s slot\n", info.CatalogGeneration,
		formatBytes(uint64(info.CatalogBytes)), formatBytes(info.CatalogSlotBytes))
	tw.Flush()
	fmt.Fprintln(e.stdout, "namespaces:")
	tw = tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  INDEX\tPATH\tDATA\tUSED\tLARGEST FREE")
	for _, n := range info.Namespaces {
		ls := uint64(info.LineSize)
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", n.Index, n.Path, formatBytes(n.DataLines*ls),
			formatBytes(n.UsedLines*ls), formatBytes(n.LargestFree*ls))
	}
	tw.Flush()
	printSections(e.stdout, extra)
	return nil
}

func printSections(w io.Writer, extra map[string]any) {
	for k, v := range extra {
		fmt.Fprintf(w, "%s: %+v\n", k, v)
	}
}

func encodeJSONIndent(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
