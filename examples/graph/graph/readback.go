package graph

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/hugepages"
)

// Bringing a per-vertex result (2^25 ids: 128 MiB) from device memory into
// a Go slice costs three things, measured on the H200 host: the copy over
// the link into pinned memory (2.4 ms), the cores' copy from there into the
// slice (2.6-3 ms), and, for a fresh slice, its page faults (15-18 ms, one
// core's worth however many cores touch the pages). Reading straight into
// pageable memory goes through the driver's own staging (10 ms). So the
// result slice is made and its pages touched while the kernels run
// (allocAhead), and the two copies overlap, a piece at a time
// (readBacker): the whole then costs about one pass over the link (3 ms
// for 2^25 ids).

// ahead is a slice being made on another goroutine.
type ahead[T cuda.Plain] struct {
	done chan struct{}
	s    []T
}

// allocAhead makes a slice of n elements on another goroutine and touches
// every page of it with aheadWorkers goroutines, so that its page faults
// happen while the caller's kernels run rather than in the copy that fills
// it.
func allocAhead[T cuda.Plain](n uint64) *ahead[T] {
	a := &ahead[T]{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.s = make([]T, n)
		b := cuda.AsBytes(a.s)
		// Huge pages: a 2 MiB page is one fault where 4 KiB pages take
		// 512, so the touching takes the Target's cores for less time.
		hugepages.Advise(b)
		_ = parallelRange(context.Background(), aheadWorkers, len(b), 4<<20, func(lo, hi int) {
			for i := lo; i < hi; i += 4096 {
				b[i] = 0
			}
		})
	}()
	return a
}

// aheadWorkers is the number of goroutines that touch a new result slice's
// pages. One is too few: in a fresh process, while a CC's kernels and the
// Target's workers run, one goroutine touched 128 MiB in 60-73 ms, longer
// than the kernels; the kernel zeroes each new page, so more cores
// fault faster. Eight leave the other cores to the Target. They still take
// those cores from it while they touch: a BFS's heads, read at the same
// time, came in 7.1-7.8 ms untouched and 9.9-12.5 ms with eight
// goroutines touching 4 KiB pages (but the faults then fell in the read
// back, and the BFS took longer: 0.063-0.067 s against 0.058-0.065 s),
// 7.5-8.2 ms with them touching huge pages.
const aheadWorkers = 8

// get waits for the slice.
func (a *ahead[T]) get(ctx context.Context) ([]T, error) {
	select {
	case <-a.done:
		return a.s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readBackPieces is the number of pieces a read back is cut into: enough
// that the first piece's wait is short, few enough that each copy is long.
const readBackPieces = 16

// readBackChunk is the host's unit of copying out of the pinned buffer; a
// piece is a multiple of it.
const readBackChunk = 1 << 20

// readBacker copies results out of device memory through a pinned buffer:
// the copy engine brings the pieces in on a stream of its own, one event
// after each, while the host's cores copy every piece that has landed
// into the destination.
type readBacker struct {
	stream *cuda.Stream
	events [readBackPieces]*cuda.Event
}

func newReadBacker(c *cuda.Context) (_ *readBacker, err error) {
	b := &readBacker{}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()
	if b.stream, err = c.NewStream(); err != nil {
		return nil, fmt.Errorf("graph: read-back stream: %w", err)
	}
	for i := range b.events {
		if b.events[i], err = c.NewSyncEvent(); err != nil {
			return nil, fmt.Errorf("graph: read-back event: %w", err)
		}
	}
	return b, nil
}

// read copies len(dst) bytes at the start of m into dst through buf. The
// kernels that wrote m must have finished.
func (b *readBacker) read(ctx context.Context, m *cuda.DeviceMem, buf *cuda.HostMem, dst []byte) (err error) {
	n := uint64(len(dst))
	if n == 0 {
		return nil
	}
	if n > m.Size() || n > buf.Size() {
		return fmt.Errorf("graph: read back %d bytes from %d of device memory through %d pinned", n, m.Size(), buf.Size())
	}
	piece := (n + readBackPieces - 1) / readBackPieces
	piece = (piece + readBackChunk - 1) / readBackChunk * readBackChunk
	// Whatever happens, the copies are over before buf is used again.
	defer func() { err = errors.Join(err, b.stream.Synchronize()) }()
	for i, lo := 0, uint64(0); lo < n; i, lo = i+1, lo+piece {
		if err := b.stream.CopyDtoH(buf, lo, m.Ptr().Add(lo), min(piece, n-lo)); err != nil {
			return err
		}
		if err := b.events[i].Record(b.stream); err != nil {
			return err
		}
	}
	src := buf.Bytes()[:n]
	return parallelChunksErr(ctx, runtime.GOMAXPROCS(0), int(n), readBackChunk, func(ctx context.Context, lo, hi int) error {
		if err := b.events[uint64(lo)/piece].Wait(ctx); err != nil {
			return err
		}
		copy(dst[lo:hi], src[lo:hi])
		return nil
	})
}

func (b *readBacker) close() error {
	var errs []error
	for _, e := range b.events {
		if e != nil {
			errs = append(errs, e.Destroy())
		}
	}
	if b.stream != nil {
		errs = append(errs, b.stream.Destroy())
	}
	return errors.Join(errs...)
}
