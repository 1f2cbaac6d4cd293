package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/npy"
)

func init() {
	register(&command{
		name:    "export",
		usage:   "STORE NAME FILE [--format npy|raw] [--json]",
		summary: "export an array to a .npy file or raw binary",
		run:     runExport,
	})
}

func runExport(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "export")
	format := fs.String("format", "", "npy or raw (default: npy when FILE ends in .npy, else raw)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usageErrorf("give STORE, NAME and FILE")
	}
	store, name, path := pos[0], pos[1], pos[2]
	if *format == "" {
		*format = "raw"
		if strings.EqualFold(filepath.Ext(path), ".npy") {
			*format = "npy"
		}
	}
	if *format != "npy" && *format != "raw" {
		return usageErrorf("--format %q: want npy or raw", *format)
	}
	s, err := openStoreArg(ctx, store)
	if err != nil {
		return err
	}
	defer s.Close()
	obj, err := s.Object(name)
	if err != nil {
		return err
	}
	d, err := s.Data(obj)
	if err != nil {
		return err
	}
	res := &transferResult{Store: store, Name: name, File: path, Format: *format, ElemType: obj.ElemType(),
		Length: obj.Len(), Bytes: d.Size()}
	start := time.Now()
	if err := exportTo(ctx, e, d, path, *format, res); err != nil {
		return err
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / res.Seconds / 1e6
	}
	res.Stats = d.Stats()
	return res.print(e, "exported", *asJSON)
}

// exportTo writes the array to a temporary file beside path and renames it
// into place once complete.
func exportTo(ctx context.Context, e *env, d *bam.Data, path, format string, res *transferResult) (err error) {
	obj := d.Object()
	var hdr *npy.Header
	if format == "npy" {
		dt, ok := npy.DtypeByName(obj.ElemType())
		if !ok || dt.Size != obj.ElemSize() {
			return fmt.Errorf("array %q holds %s (%d bytes), which has no NumPy dtype; export it as raw", obj.Name(), obj.ElemType(), obj.ElemSize())
		}
		h := npy.Header{Dtype: dt, Shape: []int64{int64(obj.Len())}}
		if sh, ok := obj.Meta("npy.shape"); ok {
			if shape, ok := parseShape(sh, obj.Len()); ok {
				h.Shape = shape
			}
		}
		hdr = &h
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var w io.Writer = tmp
	var nw *npy.Writer
	if hdr != nil {
		if nw, err = npy.NewWriter(tmp, *hdr); err != nil {
			return err
		}
		w = nw
	}
	bar := newProgress(e, res.Bytes, "exporting "+obj.Name())
	buf := make([]byte, copyChunk)
	for off := int64(0); off < res.Bytes; {
		n := min(int64(len(buf)), res.Bytes-off)
		if err := d.ReadAtContext(ctx, buf[:n], uint64(off)); err != nil {
			return err
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		off += n
		if bar != nil {
			bar.Add64(n)
		}
	}
	if bar != nil {
		bar.Finish()
	}
	if nw != nil {
		if err := nw.Close(); err != nil {
			return err
		}
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// parseShape parses "3,4" and checks that it holds n elements.
func parseShape(s string, n uint64) ([]int64, bool) {
	var shape []int64
	prod := uint64(1)
	for _, p := range strings.Split(s, ",") {
		if p == "" {
			continue
		}
		d, err := strconv.ParseInt(p, 10, 64)
		if err != nil || d < 0 {
			return nil, false
		}
		shape = append(shape, d)
		prod *= uint64(d)
	}
	return shape, prod == n
}
