package cpuengine

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/bam-go/bam/internal/engine"
)

// window is how many consecutive requests of a batch are grouped by line
// before their lines are acquired: the CPU analogue of a warp's
// __match_any_sync over its lanes. Each distinct line of a window is
// acquired once with the number of requests for it and released once.
const window = 256

// Work split: a goroutine of a batch call gets at least this many elements
// (Gather, Scatter) or lines (ReadAt, WriteAt).
const (
	minElemsPerTask = 8192
	minLinesPerTask = 32
)

// ReadAt implements engine.Engine.
func (e *Engine) ReadAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	return e.rangeIO(ctx, o, p, off, false)
}

// WriteAt implements engine.Engine. A partial line is read from storage
// before it is modified (read-modify-write in the cache).
func (e *Engine) WriteAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	return e.rangeIO(ctx, o, p, off, true)
}

// Gather implements engine.Engine.
func (e *Engine) Gather(ctx context.Context, o *engine.Object, idx []uint64, dst []byte) error {
	return e.batch(ctx, o, idx, dst, false)
}

// Scatter implements engine.Engine.
func (e *Engine) Scatter(ctx context.Context, o *engine.Object, idx []uint64, src []byte) error {
	return e.batch(ctx, o, idx, src, true)
}

func (e *Engine) begin(ctx context.Context, o *engine.Object) (*objState, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return e.reg.get(o)
}

func (e *Engine) batch(ctx context.Context, o *engine.Object, idx []uint64, buf []byte, write bool) error {
	st, err := e.begin(ctx, o)
	if err != nil {
		return err
	}
	es := uint64(st.desc.ElemSize)
	if uint64(len(buf)) != uint64(len(idx))*es {
		return fmt.Errorf("%w: %d indices of %d-byte elements need a %d-byte buffer, got %d",
			engine.ErrInvalid, len(idx), es, uint64(len(idx))*es, len(buf))
	}
	n := st.desc.Length
	for k, i := range idx {
		if i >= n {
			return fmt.Errorf("%w: index %d (position %d) of %q with %d elements", engine.ErrOutOfRange, i, k, st.desc.Name, n)
		}
	}
	for _, c := range []*counters{&e.total, &st.st} {
		c.requests.Add(1)
		c.elements.Add(uint64(len(idx)))
		c.asked.Add(uint64(len(buf)))
	}
	return e.parallel(ctx, len(idx), minElemsPerTask, func(ctx context.Context, lo, hi int) error {
		return e.batchRange(ctx, st, idx[lo:hi], buf[uint64(lo)*es:uint64(hi)*es], write)
	})
}

// grouper groups the requests of one window by line.
type grouper struct {
	slot  [2 * window]int16 // open-addressing table: group+1, 0 = empty
	line  [window]uint64    // line of each group
	head  [window]int16     // first request of each group
	count [window]uint32
	used  [window]int16 // table slot of each group, to clear it
	next  [window]int16 // next request of the same group, -1 ends
	tail  [window]int16
	n     int
	slow  slowReads // reads Peek could not serve (optimistic reads)
}

func (g *grouper) group(st *objState, idx []uint64) {
	for k := range g.n {
		g.slot[g.used[k]] = 0
	}
	g.n = 0
	per := st.perLine
	for m, i := range idx {
		line := i / per
		h := int(line*0x9E3779B97F4A7C15>>55) & (2*window - 1)
		for {
			s := g.slot[h]
			if s == 0 {
				gi := g.n
				g.n++
				g.slot[h] = int16(gi + 1)
				g.used[gi] = int16(h)
				g.line[gi] = line
				g.head[gi], g.tail[gi] = int16(m), int16(m)
				g.count[gi] = 1
				break
			}
			if gi := int(s - 1); g.line[gi] == line {
				g.next[g.tail[gi]] = int16(m)
				g.tail[gi] = int16(m)
				g.count[gi]++
				break
			}
			h = (h + 1) & (2*window - 1)
		}
		g.next[m] = -1
	}
}

func (e *Engine) batchRange(ctx context.Context, st *objState, idx []uint64, buf []byte, write bool) error {
	g := grouperPool.Get().(*grouper)
	defer grouperPool.Put(g)
	es := uint64(st.desc.ElemSize)
	per := st.perLine
	var acquires uint64
	defer func() {
		e.total.acquires.Add(acquires)
		st.st.acquires.Add(acquires)
	}()
	out := buf
	if !write && optimisticReads {
		// Hits first, the whole batch at once and without references
		// (gpucache.PeekMany: copy, then check the line did not change);
		// only the rest is grouped and acquired, then scattered back.
		var hits uint64
		idx, buf, hits = e.peekReads(st, idx, buf, &g.slow)
		acquires += hits
		e.cache.AddPeekHits(hits)
		if len(idx) == 0 {
			return nil
		}
		defer g.slow.scatter(out, es)
	}
	for w := 0; w < len(idx); w += window {
		if w > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		part := idx[w:min(w+window, len(idx))]
		wbuf := buf[uint64(w)*es : uint64(w+len(part))*es]
		g.group(st, part)
		for gi := range g.n {
			tag := st.tag(g.line[gi])
			h, err := e.cache.Acquire(ctx, tag, g.count[gi])
			if err != nil {
				return fmt.Errorf("cpuengine: %q line %d: %w", st.desc.Name, g.line[gi], err)
			}
			acquires++
			moveElems(h.Line(), g, gi, part, wbuf, es, per, write)
			if write {
				h.ReleaseDirty()
			} else {
				h.Release()
			}
		}
	}
	return nil
}

// moveElems copies the elements of group gi between line and buf (buf
// holds the window's elements in request order).
func moveElems(line []byte, g *grouper, gi int, part []uint64, buf []byte, es, per uint64, write bool) {
	if es == 8 {
		// The common 8-byte element: word moves instead of memmove calls.
		for m := g.head[gi]; m >= 0; m = g.next[m] {
			lp := (*uint64)(unsafe.Pointer(&line[(part[m]%per)*8]))
			bp := (*uint64)(unsafe.Pointer(&buf[uint64(m)*8]))
			if write {
				*lp = *bp
			} else {
				*bp = *lp
			}
		}
		return
	}
	for m := g.head[gi]; m >= 0; m = g.next[m] {
		off := (part[m] % per) * es
		b := buf[uint64(m)*es:][:es]
		if write {
			copy(line[off:off+es], b)
		} else {
			copy(b, line[off:off+es])
		}
	}
}

var grouperPool = sync.Pool{New: func() any { return new(grouper) }}

func (e *Engine) rangeIO(ctx context.Context, o *engine.Object, p []byte, off uint64, write bool) error {
	st, err := e.begin(ctx, o)
	if err != nil {
		return err
	}
	if off > st.bytes || uint64(len(p)) > st.bytes-off {
		return fmt.Errorf("%w: bytes [%d, %d) of %q with %d bytes", engine.ErrOutOfRange, off, off+uint64(len(p)), st.desc.Name, st.bytes)
	}
	for _, c := range []*counters{&e.total, &st.st} {
		c.requests.Add(1)
		c.asked.Add(uint64(len(p)))
	}
	if len(p) == 0 {
		return nil
	}
	lb := st.lineBytes
	first := off / lb
	lines := (off+uint64(len(p))-1)/lb - first + 1
	end := off + uint64(len(p))
	return e.parallel(ctx, int(lines), minLinesPerTask, func(ctx context.Context, lo, hi int) error {
		for l := first + uint64(lo); l < first+uint64(hi); l++ {
			if l > first+uint64(lo) {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			s, t := max(off, l*lb), min(end, (l+1)*lb)
			h, err := e.cache.Acquire(ctx, st.tag(l), 1)
			if err != nil {
				return fmt.Errorf("cpuengine: %q line %d: %w", st.desc.Name, l, err)
			}
			e.total.acquires.Add(1)
			st.st.acquires.Add(1)
			line := h.Line()[s-l*lb : t-l*lb]
			if write {
				copy(line, p[s-off:t-off])
				h.ReleaseDirty()
			} else {
				copy(p[s-off:t-off], line)
				h.Release()
			}
		}
		return nil
	})
}

// parallel runs f over [0, n) split into at most e.par contiguous tasks of
// at least minPer items, and returns the first error. The first failure
// cancels the other tasks.
func (e *Engine) parallel(ctx context.Context, n, minPer int, f func(ctx context.Context, lo, hi int) error) error {
	tasks := min(e.par, (n+minPer-1)/minPer)
	if tasks <= 1 {
		return f(ctx, 0, n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	step := (n + tasks - 1) / tasks
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Go(func() {
			if err := f(ctx, lo, hi); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
