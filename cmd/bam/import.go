package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/npy"
	"github.com/schollz/progressbar/v3"
)

func init() {
	register(&command{
		name:    "import",
		usage:   "STORE NAME FILE [--type T] [--layout striped|replicated] [--json]",
		summary: "import a .npy file or raw binary (--type) as an array",
		run:     runImport,
	})
}

// transferResult is what import and export report.
type transferResult struct {
	Store    string        `json:"store"`
	Name     string        `json:"name"`
	File     string        `json:"file"`
	Format   string        `json:"format"` // "npy" or "raw"
	ElemType string        `json:"elem_type"`
	Length   uint64        `json:"length"`
	Bytes    int64         `json:"bytes"`
	Seconds  float64       `json:"seconds"`
	MBps     float64       `json:"mb_per_s"`
	Stats    bam.DataStats `json:"stats"`
}

func (r *transferResult) print(e *env, verb string, asJSON bool) error {
	if asJSON {
		return encodeJSONIndent(e.stdout, r)
	}
	fmt.Fprintf(e.stdout, "%s %s: %d elements of %s (%s, %s) in %.2fs (%.1f MB/s); lines read %d, written %d\n",
		verb, r.Name, r.Length, r.ElemType, formatBytes(uint64(r.Bytes)), r.Format, r.Seconds, r.MBps,
		r.Stats.LinesRead, r.Stats.LinesWritten)
	return nil
}

// openStoreRW opens STORE (a directory, or comma-separated devices) for
// writing.
func openStoreRW(ctx context.Context, store string) (*bam.Store, error) {
	opts := bam.Options{CacheBytes: 64 << 20}
	if fi, err := os.Stat(store); err == nil && fi.IsDir() {
		return bam.Open(ctx, store, opts)
	} else if err != nil && !strings.Contains(store, ",") {
		return nil, fmt.Errorf("store %s: %w", store, err)
	}
	opts.Devices = strings.Split(store, ",")
	return bam.Open(ctx, "", opts)
}

// newProgress returns a byte progress bar on stderr when stdout is a
// terminal, and nil otherwise.
func newProgress(e *env, total int64, what string) *progressbar.ProgressBar {
	if !e.terminal {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(e.stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
}

const copyChunk = 4 << 20

func runImport(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "import")
	typ := fs.String("type", "", "element type of a raw file: int8..int64, uint8..uint64, float32, float64, complex64, complex128, bool")
	layout := fs.String("layout", "striped", "striped or replicated")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usageErrorf("give STORE, NAME and FILE")
	}
	var lay bam.Layout
	switch *layout {
	case "striped":
		lay = bam.LayoutStriped
	case "replicated":
		lay = bam.LayoutReplicated
	default:
		return usageErrorf("--layout %q: want striped or replicated", *layout)
	}
	store, name, path := pos[0], pos[1], pos[2]
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	src, res, meta, err := importSource(f, path, *typ)
	if err != nil {
		return err
	}
	res.Store, res.Name = store, name
	s, err := openStoreRW(ctx, store)
	if err != nil {
		return err
	}
	defer s.Close()
	start := time.Now()
	if err := importInto(ctx, e, s, name, lay, meta, src, res); err != nil {
		return err
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes) / res.Seconds / 1e6
	}
	if err := s.Close(); err != nil {
		return err
	}
	return res.print(e, "imported", *asJSON)
}

// importSource inspects the file: a .npy file (by its magic) gives its
// dtype and shape; anything else is raw data of --type.
func importSource(f *os.File, path, typ string) (io.Reader, *transferResult, map[string]string, error) {
	br := bufio.NewReaderSize(f, 1<<20)
	res := &transferResult{File: path}
	head, _ := br.Peek(len(npy.Magic))
	if string(head) == npy.Magic {
		r, err := npy.NewReader(br)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if typ != "" && typ != r.Dtype.Name {
			return nil, nil, nil, fmt.Errorf("%s: --type %s, but the file holds %s", path, typ, r.Dtype.Name)
		}
		n, _ := r.Elements()
		res.Format, res.ElemType, res.Length, res.Bytes = "npy", r.Dtype.Name, uint64(n), r.Remaining()
		shape := make([]string, len(r.Shape))
		for i, d := range r.Shape {
			shape[i] = fmt.Sprint(d)
		}
		return r, res, map[string]string{"npy.shape": strings.Join(shape, ","), "import.file": path}, nil
	}
	if typ == "" {
		return nil, nil, nil, usageErrorf("%s is not a .npy file: give --type for raw binary data", path)
	}
	size, ok := bam.ScalarSize(typ)
	if !ok {
		return nil, nil, nil, usageErrorf("--type %q: want one of bool, int8..int64, uint8..uint64, float32, float64, complex64, complex128", typ)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, nil, err
	}
	if fi.Size()%int64(size) != 0 {
		return nil, nil, nil, fmt.Errorf("%s: %d bytes is not a whole number of %d-byte %s elements", path, fi.Size(), size, typ)
	}
	res.Format, res.ElemType, res.Length, res.Bytes = "raw", typ, uint64(fi.Size()/int64(size)), fi.Size()
	return br, res, map[string]string{"import.file": path}, nil
}

// importInto writes src into a new array. It fills a temporary object and
// renames it to name only after a Flush, so a crash or error never leaves a
// half-imported array under name (at worst a temporary one, named
// NAME.importing-PID, which the error message names).
func importInto(ctx context.Context, e *env, s *bam.Store, name string, lay bam.Layout, meta map[string]string, src io.Reader, res *transferResult) (err error) {
	if _, err := s.Object(name); err == nil {
		return fmt.Errorf("array %q: %w", name, bam.ErrExists)
	}
	tmp := fmt.Sprintf("%s.importing-%d", name, os.Getpid())
	obj, err := s.CreateObject(ctx, bam.ObjectSpec{Name: tmp, Kind: bam.KindArray, ElemType: res.ElemType,
		Length: res.Length, Layout: lay, Meta: meta, NoZero: true})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if derr := s.DeleteObject(context.WithoutCancel(ctx), tmp); derr != nil {
				err = fmt.Errorf("%w (and removing the temporary array %s: %v)", err, tmp, derr)
			}
		}
	}()
	d, err := s.Data(obj)
	if err != nil {
		return err
	}
	bar := newProgress(e, res.Bytes, "importing "+name)
	buf := make([]byte, copyChunk)
	var off int64
	for off < res.Bytes {
		n, rerr := io.ReadFull(src, buf[:min(int64(len(buf)), res.Bytes-off)])
		if n > 0 {
			if err := d.WriteAtContext(ctx, buf[:n], uint64(off)); err != nil {
				return err
			}
			off += int64(n)
			if bar != nil {
				bar.Add64(int64(n))
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.ErrUnexpectedEOF) || errors.Is(rerr, io.EOF) {
				return fmt.Errorf("%s: %w: file ends after %d of %d bytes", res.File, io.ErrUnexpectedEOF, off, res.Bytes)
			}
			return fmt.Errorf("%s: %w", res.File, rerr)
		}
	}
	if bar != nil {
		bar.Finish()
	}
	if err := d.Flush(ctx); err != nil {
		return err
	}
	res.Stats = d.Stats()
	return s.RenameObject(ctx, tmp, name)
}
