package gpuengine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/bam-go/bam/internal/engine"
)

// Objects serves the store's objects (engine.Engine) on a GPU engine. Each
// object is bound twice, lazily: as an array of its own elements when the
// device library serves their size (1, 2, 4, 8 or 16 bytes), and as a raw
// byte array over its lines, which serves every other request (byte ranges
// that are not whole elements, other element sizes) at one byte per thread.
type Objects struct {
	e    *Engine
	name string

	mu    sync.Mutex
	objs  map[uint64]*boundObject
	total counters
}

type counters struct {
	requests, elements, bytesAsked atomic.Uint64
}

type boundObject struct {
	o     engine.Object
	typed *Array // nil when the element size is not served
	raw   *Array // ElemSize 1 over Lines*LineSize bytes (padding included)
	wide  *Array // ElemSize 8 over the same bytes, for aligned ranges; nil if LineSize < 8 elements
	c     counters
}

var _ engine.Engine = (*Objects)(nil)

// NewObjects wraps e for the store. name is reported by Name.
func NewObjects(e *Engine, name string) *Objects {
	return &Objects{e: e, name: name, objs: map[uint64]*boundObject{}}
}

// Engine returns the GPU engine.
func (s *Objects) Engine() *Engine { return s.e }

// Name says which engine this is.
func (s *Objects) Name() string { return s.name }

func (s *Objects) bind(o *engine.Object) (*boundObject, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.LineSize != s.e.cfg.LineSize {
		return nil, fmt.Errorf("gpuengine: object %q has %d-byte lines, the engine %d", o.Name, o.LineSize, s.e.cfg.LineSize)
	}
	if o.Layout != engine.Striped {
		return nil, fmt.Errorf("%w: object %q: the GPU engine serves striped objects only", ErrUnsupported, o.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.objs[o.ID]; ok {
		return b, nil
	}
	// Line j is on namespace j mod N: every namespace is a stripe member,
	// even one that holds no line of a short object.
	lbasPerLine := uint64(o.LineSize / o.LBASize)
	stripe := make([]StripeMember, 0, len(o.Extents))
	for ns, ext := range o.Extents {
		stripe = append(stripe, StripeMember{Namespace: ns, StartLine: ext.StartLBA / lbasPerLine})
	}
	b := &boundObject{o: *o}
	var err error
	rawLen := o.Lines() * uint64(o.LineSize)
	if b.raw, err = s.e.Bind(ArraySpec{Name: o.Name, ElemSize: 1, Len: rawLen, Stripe: stripe}); err != nil {
		return nil, err
	}
	if b.wide, err = s.e.Bind(ArraySpec{Name: o.Name, ElemSize: 8, Len: rawLen / 8, Stripe: stripe}); err != nil {
		b.raw.Unbind()
		return nil, err
	}
	switch o.ElemSize {
	case 1, 2, 4, 8, 16:
		if b.typed, err = s.e.Bind(ArraySpec{Name: o.Name, ElemSize: uint64(o.ElemSize), Len: o.Length, Stripe: stripe}); err != nil {
			b.raw.Unbind()
			b.wide.Unbind()
			return nil, err
		}
	}
	s.objs[o.ID] = b
	return b, nil
}

// contiguous reports whether the object's element bytes equal its raw line
// bytes (no padding at line ends).
func (b *boundObject) contiguous() bool { return uint64(b.o.LineSize)%uint64(b.o.ElemSize) == 0 }

// rawOffset maps element byte off to its raw byte offset.
func (b *boundObject) rawOffset(off uint64) uint64 {
	if b.contiguous() {
		return off
	}
	es := uint64(b.o.ElemSize)
	line, inLine := b.o.ElementLine(off / es)
	return line*uint64(b.o.LineSize) + uint64(inLine) + off%es
}

func (s *Objects) account(b *boundObject, elements, bytes uint64) {
	for _, c := range []*counters{&s.total, &b.c} {
		c.requests.Add(1)
		c.elements.Add(elements)
		c.bytesAsked.Add(bytes)
	}
}

func checkRange(o *engine.Object, off uint64, n int) error {
	if off+uint64(n) > o.Bytes() || off+uint64(n) < off {
		return fmt.Errorf("%w: object %q: bytes [%d, %d) of %d", engine.ErrOutOfRange, o.Name, off, off+uint64(n), o.Bytes())
	}
	return nil
}

// rawRuns splits element bytes [off, off+n) into runs contiguous in raw
// space: one run when there is no padding, else at most one per line.
func (b *boundObject) rawRuns(off, n uint64, fn func(raw, pos, n uint64) error) error {
	if b.contiguous() {
		return fn(off, 0, n)
	}
	lb := b.o.LineBytes()
	pos := uint64(0)
	for pos < n {
		cur := off + pos
		inLine := cur % lb
		run := min(lb-inLine, n-pos)
		if err := fn(b.rawOffset(cur), pos, run); err != nil {
			return err
		}
		pos += run
	}
	return nil
}

// ReadAt reads element bytes [off, off+len(p)).
func (s *Objects) ReadAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	if err := checkRange(o, off, len(p)); err != nil {
		return err
	}
	b, err := s.bind(o)
	if err != nil {
		return err
	}
	s.account(b, 0, uint64(len(p)))
	return b.rawRuns(off, uint64(len(p)), func(raw, pos, n uint64) error {
		return b.rawRange(ctx, raw, p[pos:pos+n], (*Array).ReadRange)
	})
}

// rangeOp is ReadRange or WriteRange of an Array.
type rangeOp func(a *Array, ctx context.Context, start uint64, p []byte) error

// rawRange moves raw bytes [raw, raw+len(p)): the 8-byte-aligned middle
// through the wide view (one thread per 8 bytes), the edges byte by byte.
func (b *boundObject) rawRange(ctx context.Context, raw uint64, p []byte, op rangeOp) error {
	n := uint64(len(p))
	head := min((8-raw%8)%8, n)
	mid := (n - head) / 8 * 8
	if head > 0 {
		if err := op(b.raw, ctx, raw, p[:head]); err != nil {
			return err
		}
	}
	if mid > 0 {
		if err := op(b.wide, ctx, (raw+head)/8, p[head:head+mid]); err != nil {
			return err
		}
	}
	if tail := n - head - mid; tail > 0 {
		return op(b.raw, ctx, raw+head+mid, p[head+mid:])
	}
	return nil
}

// WriteAt writes element bytes [off, off+len(p)).
func (s *Objects) WriteAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	if err := checkRange(o, off, len(p)); err != nil {
		return err
	}
	b, err := s.bind(o)
	if err != nil {
		return err
	}
	s.account(b, 0, uint64(len(p)))
	return b.rawRuns(off, uint64(len(p)), func(raw, pos, n uint64) error {
		return b.rawRange(ctx, raw, p[pos:pos+n], (*Array).WriteRange)
	})
}

func (s *Objects) checkIndices(o *engine.Object, idx []uint64, buf []byte) error {
	if uint64(len(buf)) != uint64(len(idx))*uint64(o.ElemSize) {
		return fmt.Errorf("%w: object %q: buffer of %d bytes for %d elements of %d bytes", engine.ErrInvalid, o.Name, len(buf), len(idx), o.ElemSize)
	}
	for _, i := range idx {
		if i >= o.Length {
			return fmt.Errorf("%w: object %q: element %d of %d", engine.ErrOutOfRange, o.Name, i, o.Length)
		}
	}
	return nil
}

// rawIndices expands element indices into the raw byte indices of their
// bytes, for element sizes the device library does not serve.
func (b *boundObject) rawIndices(idx []uint64) []uint64 {
	es := uint64(b.o.ElemSize)
	out := make([]uint64, 0, uint64(len(idx))*es)
	for _, i := range idx {
		r := b.rawOffset(i * es)
		for k := uint64(0); k < es; k++ {
			out = append(out, r+k)
		}
	}
	return out
}

// Gather reads elements idx[k] into dst.
func (s *Objects) Gather(ctx context.Context, o *engine.Object, idx []uint64, dst []byte) error {
	if err := s.checkIndices(o, idx, dst); err != nil {
		return err
	}
	b, err := s.bind(o)
	if err != nil {
		return err
	}
	s.account(b, uint64(len(idx)), uint64(len(dst)))
	if b.typed != nil {
		return b.typed.Gather(ctx, idx, dst)
	}
	return b.raw.Gather(ctx, b.rawIndices(idx), dst)
}

// Scatter writes src's elements to idx.
func (s *Objects) Scatter(ctx context.Context, o *engine.Object, idx []uint64, src []byte) error {
	if err := s.checkIndices(o, idx, src); err != nil {
		return err
	}
	b, err := s.bind(o)
	if err != nil {
		return err
	}
	s.account(b, uint64(len(idx)), uint64(len(src)))
	if b.typed != nil {
		return b.typed.Scatter(ctx, idx, src)
	}
	// One thread per byte: a repeated index would interleave the bytes of
	// its values, so keep only its last occurrence (any one is allowed,
	// but it must be whole).
	idx, src = lastWrites(idx, src, o.ElemSize)
	return b.raw.Scatter(ctx, b.rawIndices(idx), src)
}

// lastWrites drops all but the last occurrence of each index.
func lastWrites(idx []uint64, src []byte, es int) ([]uint64, []byte) {
	last := make(map[uint64]int, len(idx))
	for k, i := range idx {
		last[i] = k
	}
	if len(last) == len(idx) {
		return idx, src
	}
	outIdx := make([]uint64, 0, len(last))
	outSrc := make([]byte, 0, len(last)*es)
	for k, i := range idx {
		if last[i] == k {
			outIdx = append(outIdx, i)
			outSrc = append(outSrc, src[k*es:(k+1)*es]...)
		}
	}
	return outIdx, outSrc
}

// Flush writes every dirty line back and flushes the namespaces.
func (s *Objects) Flush(ctx context.Context) error { return s.e.Flush(ctx) }

// Evict writes back and drops the whole cache (the device cache has no
// per-object index; dropping more than o's lines is correct, only slower)
// and forgets o.
func (s *Objects) Evict(ctx context.Context, o *engine.Object) error {
	if err := s.e.Invalidate(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	b, ok := s.objs[o.ID]
	delete(s.objs, o.ID)
	s.mu.Unlock()
	if ok {
		for _, a := range []*Array{b.typed, b.raw, b.wide} {
			if a != nil {
				a.Unbind()
			}
		}
	}
	return nil
}

// Stats returns the engine's totals. Hits are acquisitions that did not
// fill a line.
func (s *Objects) Stats() engine.Stats {
	st := engine.Stats{
		Requests:   s.total.requests.Load(),
		Elements:   s.total.elements.Load(),
		BytesAsked: s.total.bytesAsked.Load(),
	}
	if d, err := s.e.Stats(); err == nil {
		ls := uint64(d.LineSize)
		st.Acquires = d.Acquires
		st.Misses = d.Fills
		if d.Acquires > d.Fills {
			st.Hits = d.Acquires - d.Fills
		}
		st.LinesRead = d.Fills
		st.LinesWritten = d.WriteBacks
		st.BytesRead = d.Fills * ls
		st.BytesWritten = d.WriteBacks * ls
		st.Flushes = d.Target.Flushes
	}
	return st
}

// ObjectStats returns what was asked of one object (the device counts
// lines for the whole cache only).
func (s *Objects) ObjectStats(o *engine.Object) engine.Stats {
	s.mu.Lock()
	b, ok := s.objs[o.ID]
	s.mu.Unlock()
	if !ok {
		return engine.Stats{}
	}
	return engine.Stats{Requests: b.c.requests.Load(), Elements: b.c.elements.Load(), BytesAsked: b.c.bytesAsked.Load()}
}

// Close stops the GPU engine.
func (s *Objects) Close() error {
	return s.e.Close()
}

// Device returns the typed device view of o for user kernels (a
// bam::array<T> argument with sizeof(T) == o.ElemSize).
func (s *Objects) Device(o *engine.Object) (*Array, error) {
	b, err := s.bind(o)
	if err != nil {
		return nil, err
	}
	if b.typed == nil {
		return nil, fmt.Errorf("%w: object %q: %d-byte elements (bam::array<T> serves 1, 2, 4, 8 and 16 bytes)", ErrUnsupported, o.Name, o.ElemSize)
	}
	return b.typed, nil
}
