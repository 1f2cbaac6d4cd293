package taxi

import (
	"context"
	"fmt"
	"os"

	"github.com/bam-go/bam"
	"golang.org/x/sync/errgroup"
)

// directChunk is the most bytes one pread of LoadDirect moves.
const directChunk = 16 << 20

// LoadDirect reads the given columns of the whole table into memory
// straight from the store's namespace files, as a program without bam
// would (pread, in parallel); the other columns of the batch stay empty.
// The baselines use it so that loading them costs neither cache nor
// engine time.
func (t *Table) LoadDirect(ctx context.Context, cols []Col, workers int) (*Batch, error) {
	info, err := t.s.Info()
	if err != nil {
		return nil, err
	}
	files := make([]*os.File, len(info.Namespaces))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, ns := range info.Namespaces {
		if files[i], err = os.Open(ns.Path); err != nil {
			return nil, fmt.Errorf("taxi: load %q: %w", t.Name, err)
		}
	}
	b := &Batch{N: int(t.Rows)}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, workers))
	for _, c := range cols {
		o := t.cols[c].Object()
		sz := uint64(o.ElemSize())
		buf := make([]byte, t.Rows*sz)
		b.Raw[c] = buf
		if o.ElemsPerLine()*int(sz) != o.LineSize() {
			return nil, fmt.Errorf("taxi: load %q: column %s has padded lines", t.Name, Schema[c].Name)
		}
		lineSize := uint64(o.LineSize())
		linesPer := uint64(directChunk) / lineSize
		for first := uint64(0); first < o.Lines(); first += linesPer {
			first, last := first, min(o.Lines(), first+linesPer)
			g.Go(func() error {
				if err := gctx.Err(); err != nil {
					return err
				}
				return readLines(files, o, first, last, buf)
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("taxi: load %q: %w", t.Name, err)
	}
	return b, nil
}

// readLines reads object lines [first, last) into buf (the object's
// element bytes), merging lines that are adjacent on one namespace.
func readLines(files []*os.File, o *bam.Object, first, last uint64, buf []byte) error {
	lineSize := uint64(o.LineSize())
	for l := first; l < last; {
		a, err := o.LineAddr(l, 0)
		if err != nil {
			return err
		}
		n := uint64(1)
		for l+n < last {
			b, err := o.LineAddr(l+n, 0)
			if err != nil || b.Namespace != a.Namespace || b.Offset != a.Offset+n*lineSize {
				break
			}
			n++
		}
		lo := l * lineSize
		hi := min(uint64(len(buf)), (l+n)*lineSize)
		if _, err := files[a.Namespace].ReadAt(buf[lo:hi], int64(a.Offset)); err != nil {
			return fmt.Errorf("read %s lines [%d, %d): %w", o.Name(), l, l+n, err)
		}
		l += n
	}
	return nil
}
