package graph

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

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

// readyAhead is an ahead holding s already.
func readyAhead[T cuda.Plain](s []T) *ahead[T] {
	a := &ahead[T]{done: make(chan struct{}), s: s}
	close(a.done)
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
func (b *readBacker) read(ctx context.Context, m *cuda.DeviceMem, buf *cuda.HostMem, dst []byte) error {
	p, err := b.start(ctx, m, buf, uint64(len(dst)), func(context.Context) ([]byte, error) { return dst, nil }, 0, false)
	if err != nil {
		return err
	}
	return p.wait()
}

// A trickled read back's pieces. The device's copies to the host share a
// copy engine, which serves them in order, so each piece queued ahead of
// a kernel's small read of its counters delays it: a 128 MiB read back
// queued whole held a BFS level's reads, and the level, for its 2.4 ms
// (H200). Two pieces of 1 MiB hold them for some 40 µs; with one, the
// copy engine idled while the host queued the next, and 128 MiB took
// 5.6-6 ms. Once the read is waited for, the rest is queued at once.
const (
	trickleBytes = 1 << 20
	trickleAhead = 2
)

// pendingRead is a read back under way: the copy engine bringing the
// pieces into the pinned buffer (the feeder queues them and tells when
// each lands), goroutines of the host copying them out as they land.
type pendingRead struct {
	b      *readBacker
	n      uint64
	piece  uint64
	src    []byte
	landed []chan struct{}
	fed    chan error // the feeder's end
	ready  chan struct{}
	out    []byte        // set before ready is closed, nil when dst failed
	next   atomic.Uint64 // the next chunk to copy out
	rush   atomic.Bool   // set by wait: queue the rest at once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

// start copies the first n bytes of m into buf and on into the slice dst
// returns (called once, it may wait for the slice to be made), and
// returns at once: the copy engine brings the pieces in while workers
// goroutines copy each one out as it lands; wait adds one a core. With
// trickle, trickleAhead pieces of trickleBytes are queued at a time, so
// that the read leaves the copy engine to other copies (a read back while
// kernels still run); else all of them at once. The kernels that wrote m
// must have finished, but later ones may write it meanwhile: a byte they
// change may come back old or new. wait ends it; until then buf and b are
// the read's.
func (b *readBacker) start(ctx context.Context, m *cuda.DeviceMem, buf *cuda.HostMem, n uint64, dst func(context.Context) ([]byte, error), workers int, trickle bool) (*pendingRead, error) {
	if n > m.Size() || n > buf.Size() {
		return nil, fmt.Errorf("graph: read back %d bytes from %d of device memory through %d pinned", n, m.Size(), buf.Size())
	}
	piece := uint64(trickleBytes)
	ahead := trickleAhead
	if !trickle {
		piece = (n + readBackPieces - 1) / readBackPieces
		piece = max(readBackChunk, (piece+readBackChunk-1)/readBackChunk*readBackChunk)
		ahead = readBackPieces
	}
	pieces := int((n + piece - 1) / piece)
	queue := func(i int) error {
		lo := uint64(i) * piece
		if err := b.stream.CopyDtoH(buf, lo, m.Ptr().Add(lo), min(piece, n-lo)); err != nil {
			return err
		}
		return b.events[i%readBackPieces].Record(b.stream)
	}
	queued := 0
	for ; queued < min(ahead, pieces); queued++ {
		if err := queue(queued); err != nil {
			// Whatever happens, the copies are over before buf is used again.
			return nil, errors.Join(err, b.stream.Synchronize())
		}
	}
	p := &pendingRead{b: b, n: n, piece: piece, src: buf.Bytes()[:n], landed: make([]chan struct{}, pieces),
		fed: make(chan error, 1), ready: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(ctx)
	for i := range p.landed {
		p.landed[i] = make(chan struct{})
	}
	go func() {
		// The feeder waits for the pieces in order, tells the workers
		// and queues the next (the events are a ring: piece i+readBackPieces
		// is queued once piece i has landed).
		for i := 0; i < pieces; i++ {
			if err := b.events[i%readBackPieces].Wait(p.ctx); err != nil {
				p.fail(err)
				p.fed <- err
				return
			}
			close(p.landed[i])
			limit := ahead
			if p.rush.Load() {
				limit = readBackPieces
			}
			for ; queued < pieces && queued-(i+1) < limit; queued++ {
				if err := queue(queued); err != nil {
					p.fail(err)
					p.fed <- err
					return
				}
			}
		}
		p.fed <- nil
	}()
	go func() {
		defer close(p.ready)
		out, err := dst(p.ctx)
		if err == nil && uint64(len(out)) != n {
			err = fmt.Errorf("graph: read back %d bytes into %d", n, len(out))
		}
		if err != nil {
			p.fail(err)
			return
		}
		p.out = out
	}()
	p.spawn(workers)
	return p, nil
}

// fail records the read's first error and stops it.
func (p *pendingRead) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.cancel()
}

// spawn starts k more goroutines copying pieces out.
func (p *pendingRead) spawn(k int) {
	chunks := (p.n + readBackChunk - 1) / readBackChunk
	for range k {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			select {
			case <-p.ready:
			case <-p.ctx.Done():
				return
			}
			if p.out == nil {
				return
			}
			for {
				c := p.next.Add(1) - 1
				if c >= chunks {
					return
				}
				lo := c * readBackChunk
				hi := min(p.n, lo+readBackChunk)
				select {
				case <-p.landed[lo/p.piece]:
				case <-p.ctx.Done():
					p.fail(p.ctx.Err())
					return
				}
				copy(p.out[lo:hi], p.src[lo:hi])
			}
		}()
	}
}

// wait copies what is left with a goroutine a core, waits for the read
// back to end, the copies included, and returns its error.
func (p *pendingRead) wait() error {
	p.rush.Store(true)
	p.spawn(runtime.GOMAXPROCS(0))
	p.wg.Wait()
	<-p.ready
	ferr := <-p.fed
	p.cancel()
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err == nil {
		err = ferr
	}
	return errors.Join(err, p.b.stream.Synchronize())
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
