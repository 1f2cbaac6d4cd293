package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/bam-go/bam"
)

func init() {
	register(&command{
		name:    "ls",
		usage:   "STORE [--json]",
		summary: "list the objects of a store",
		run:     runLs,
	})
}

func runLs(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "ls")
	asJSON := fs.Bool("json", false, "print the objects as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("give one STORE")
	}
	s, err := openStoreArg(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	objs := s.Objects()
	if *asJSON {
		if objs == nil {
			objs = []bam.ObjectInfo{}
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(objs)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tTYPE\tLENGTH\tSIZE\tLAYOUT\tCREATED")
	for _, o := range objs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", o.Name, o.Kind, elemDesc(o), o.Length,
			formatBytes(o.Bytes()), o.Layout, o.Created.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

func elemDesc(o bam.ObjectInfo) string {
	if n, ok := bam.ScalarSize(o.ElemType); ok && n == o.ElemSize {
		return o.ElemType
	}
	return fmt.Sprintf("%s[%dB]", o.ElemType, o.ElemSize)
}

// openStoreArg opens STORE read-only: a directory, or a comma-separated
// list of the devices (or files) of a device store.
func openStoreArg(ctx context.Context, store string) (*bam.Store, error) {
	opts := bam.Options{ReadOnly: true}
	if fi, err := os.Stat(store); err == nil && fi.IsDir() {
		return bam.Open(ctx, store, opts)
	}
	if fi, err := os.Stat(store); err != nil && !strings.Contains(store, ",") {
		return nil, fmt.Errorf("store %s: %w", store, err)
	} else if err == nil && !fi.IsDir() || strings.Contains(store, ",") {
		opts.Devices = strings.Split(store, ",")
	}
	return bam.Open(ctx, "", opts)
}
