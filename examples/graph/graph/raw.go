package graph

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/bam-go/bam"
)

// NamespacePaths lists the namespace files of a directory store.
func NamespacePaths(dir string, s *bam.Store) []string {
	out := make([]string, s.NamespaceCount())
	for i := range out {
		out[i] = filepath.Join(dir, bam.NamespaceFileName(i))
	}
	return out
}

// ReadObjectFiles reads the element bytes of object name into dst straight
// from the namespace files with parallel preads, bypassing the store's
// engine: what a program without bam does to load an array (the G1
// baselines). Runs of consecutive lines on one namespace are read with one
// call of up to 16 MiB.
func ReadObjectFiles(ctx context.Context, dir string, s *bam.Store, name string, dst []byte) error {
	o, err := s.Object(name)
	if err != nil {
		return err
	}
	info := o.Info()
	lineBytes := uint64(info.ElemsPerLine * info.ElemSize)
	total := info.Length * uint64(info.ElemSize)
	if uint64(len(dst)) != total {
		return fmt.Errorf("graph: read %q: buffer of %d bytes, object has %d", name, len(dst), total)
	}
	if lineBytes != uint64(info.LineSize) {
		return fmt.Errorf("graph: read %q: lines are padded (%d element bytes per %d-byte line); read through the engine", name, lineBytes, info.LineSize)
	}
	files := make([]*os.File, s.NamespaceCount())
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, p := range NamespacePaths(dir, s) {
		if files[i], err = os.Open(p); err != nil {
			return fmt.Errorf("graph: read %q: %w", name, err)
		}
	}
	const run = 16 << 20
	linesPerRun := max(1, run/lineBytes)
	lines := info.Lines
	return parallelChunksErr(ctx, runtime.GOMAXPROCS(0), int((lines+linesPerRun-1)/linesPerRun), 1, func(ctx context.Context, c, _ int) error {
		first := uint64(c) * linesPerRun
		last := min(lines, first+linesPerRun)
		for l := first; l < last; {
			a, err := o.LineAddr(l, 0)
			if err != nil {
				return err
			}
			// extend while the next line follows on the same namespace
			k := l + 1
			for ; k < last; k++ {
				b, err := o.LineAddr(k, 0)
				if err != nil {
					return err
				}
				if b.Namespace != a.Namespace || b.Offset != a.Offset+(k-l)*uint64(info.LineSize) {
					break
				}
			}
			lo := l * lineBytes
			hi := min(total, k*lineBytes)
			if _, err := files[a.Namespace].ReadAt(dst[lo:hi], int64(a.Offset)); err != nil {
				return fmt.Errorf("graph: read %q lines %d..%d: %w", name, l, k, err)
			}
			l = k
		}
		return nil
	})
}
