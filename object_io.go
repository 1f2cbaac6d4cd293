package bam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/bam-go/bam/internal/cpuengine"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/engine"
	"github.com/bam-go/bam/internal/gpuengine"
)

// ErrEngineUnavailable is returned when Options.Engine names an engine this
// build or machine cannot run (EngineGPU before the GPU engine is wired in,
// or without a GPU).
var ErrEngineUnavailable = errors.New("bam: engine not available")

// DataStats counts an engine's work for one object or for the whole store:
// requests, bytes asked, line acquisitions, hits and misses, lines and bytes
// moved to and from storage. Amplification() is bytes moved per byte asked.
type DataStats = engine.Stats

// EngineDetail is everything the CPU engine counts: its totals, the line
// cache's counters, the host tier's, the NVMe Target's and the queues'.
type EngineDetail = cpuengine.Detail

// dataPath is the store's engine, started on the first data access so that
// catalog-only uses (ls, stat, create) cost no cache memory.
type dataPath struct {
	mu  sync.Mutex
	eng engine.Engine
	cpu *cpuengine.Engine
}

// checkEngine fails early for an engine that cannot run here.
func checkEngine(o Options) error {
	if o.Engine == EngineGPU {
		if err := cuda.Available(); err != nil {
			return fmt.Errorf("%w: GPU engine: %w", ErrEngineUnavailable, err)
		}
	}
	return nil
}

// useGPU reports whether the store runs on the GPU engine: always for
// EngineGPU, for EngineAuto when a GPU and driver are present.
func useGPU(o Options) bool {
	switch o.Engine {
	case EngineGPU:
		return true
	case EngineAuto:
		return cuda.Available() == nil
	}
	return false
}

// engine returns the store's engine, starting it on first use.
func (s *Store) engine() (engine.Engine, error) {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if s.data.eng != nil {
		return s.data.eng, nil
	}
	if err := checkEngine(s.opts); err != nil {
		return nil, err
	}
	if useGPU(s.opts) {
		g, err := gpuengine.New(gpuengine.Config{
			LineSize:            int(s.lineSize),
			CacheBytes:          uint64(s.opts.CacheBytes),
			QueuePairs:          s.opts.gpuQueuePairs, // zero: the GPU engine's defaults
			QueueDepth:          s.opts.gpuQueueDepth,
			Logger:              s.log,
			ReadAheadQueuePairs: s.opts.ReadAheadQueuePairs,
			ReadAheadReadBytes:  s.opts.ReadAheadReadBytes,
		}, s.dataNamespaces())
		switch {
		case err == nil:
			// Replicated objects go to a small CPU engine beside the GPU
			// one (objects never share lines, so the two caches never
			// hold the same line).
			r := &layoutRouter{gpu: gpuengine.NewObjects(g, "gpu"), startCPU: func() (*cpuengine.Engine, error) {
				return s.startCPU(max(s.opts.CacheBytes/8, 4<<20))
			}}
			s.data.eng = r
			s.log.Info("started engine", "engine", "gpu", "sets", g.Sets(), "ways", g.Config().Ways, "line_size", s.lineSize)
			return r, nil
		case s.opts.Engine == EngineGPU:
			return nil, fmt.Errorf("%w: start GPU engine: %w", ErrEngineUnavailable, err)
		default:
			s.log.Warn("GPU engine unavailable; using the CPU engine", "err", err)
		}
	}
	e, err := s.startCPU(s.opts.CacheBytes)
	if err != nil {
		return nil, err
	}
	s.data.eng, s.data.cpu = e, e
	return e, nil
}

// startCPU starts a CPU engine with a cache of cacheBytes.
func (s *Store) startCPU(cacheBytes int64) (*cpuengine.Engine, error) {
	e, err := cpuengine.New(cpuengine.Config{
		Namespaces:    s.dataNamespaces(),
		LineSize:      int(s.lineSize),
		CacheBytes:    cacheBytes,
		QueuePairs:    s.opts.QueuePairs,
		QueueDepth:    s.opts.QueueDepth,
		Parallelism:   s.opts.Workers,
		HostTierBytes: s.opts.HostTierBytes,
		Logger:        s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("bam: start CPU engine: %w", err)
	}
	s.log.Info("started engine", "engine", e.Name(), "sets", e.Config().Sets, "ways", e.Config().Ways,
		"line_size", s.lineSize, "host_tier_bytes", s.opts.HostTierBytes)
	return e, nil
}

// closeEngine flushes and stops the engine, if it was started. Store.Close
// calls it before closing the namespaces.
func (s *Store) closeEngine(ctx context.Context) error {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	if s.data.eng == nil {
		return nil
	}
	var err error
	if !s.opts.ReadOnly {
		err = s.data.eng.Flush(ctx)
	}
	err = errors.Join(err, s.data.eng.Close())
	s.data.eng, s.data.cpu = nil, nil
	return err
}

// evictObject drops every cached line of the object called name (writing
// dirty ones back while the object still owns its lines). DeleteObject calls
// it before the catalog forgets the object, so that no line of it is
// written after its space is reused.
func (s *Store) evictObject(ctx context.Context, name string) error {
	s.data.mu.Lock()
	e := s.data.eng
	s.data.mu.Unlock()
	if e == nil {
		return nil
	}
	o, err := s.Object(name)
	if err != nil {
		return nil // DeleteObject reports it
	}
	return engineErr(e.Evict(ctx, engineObject(o)))
}

// Flush makes every write made through the store's engine before the call
// durable: dirty lines are written back and every namespace is flushed
// (DESIGN.md §7). It is a no-op before the first data access.
func (s *Store) Flush(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.data.mu.Lock()
	e := s.data.eng
	s.data.mu.Unlock()
	if e == nil {
		return nil
	}
	if err := e.Flush(ctx); err != nil {
		return fmt.Errorf("bam: flush: %w", engineErr(err))
	}
	return nil
}

// DataStats returns the engine's totals since the store was opened (zero
// before the first data access).
func (s *Store) DataStats() DataStats {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	if s.data.eng == nil {
		return DataStats{}
	}
	return s.data.eng.Stats()
}

// EngineDetail returns the CPU engine's counters, and false when no engine
// has started.
func (s *Store) EngineDetail() (EngineDetail, bool) {
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	if s.data.cpu == nil {
		return EngineDetail{}, false
	}
	return s.data.cpu.Detail(), true
}

// engineObject describes o to an engine.
func engineObject(o *Object) *engine.Object {
	info := &o.info
	eo := &engine.Object{
		ID:       info.ID,
		Name:     info.Name,
		ElemSize: info.ElemSize,
		Length:   info.Length,
		LineSize: info.LineSize,
		LBASize:  int(o.lbaSize),
		Layout:   engine.Layout(info.Layout),
		Extents:  make([]engine.Extent, o.n),
	}
	for _, e := range info.Extents {
		if e.Namespace >= 0 && e.Namespace < len(eo.Extents) {
			eo.Extents[e.Namespace] = engine.Extent{StartLBA: e.StartLBA, Lines: e.Lines}
		}
	}
	return eo
}

// engineErr adds the store's sentinel to an engine error.
func engineErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrOutOfRange):
		return fmt.Errorf("%w: %w", ErrOutOfRange, err)
	case errors.Is(err, engine.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, engine.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// Data reads and writes one object's contents through the store's engine.
// Byte offsets address the object's element bytes: byte off is byte
// off%ElemSize of element off/ElemSize (line padding is never visible), so
// for element sizes that divide the line size the bytes are exactly the
// flat array. A Data is safe for concurrent use; it is valid until the
// store closes or the object is deleted.
type Data struct {
	s   *Store
	obj *Object
	eo  *engine.Object
}

var (
	_ io.ReaderAt = (*Data)(nil)
	_ io.WriterAt = (*Data)(nil)
)

// Data returns access to the contents of o, an object of this store.
func (s *Store) Data(o *Object) (*Data, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if o == nil {
		return nil, invalidf("nil object")
	}
	if uint64(o.info.LineSize) != s.lineSize || o.n != uint64(len(s.ns)) {
		return nil, &ObjectError{Op: "open", Name: o.Name(), Err: invalidf("object handle belongs to another store")}
	}
	return &Data{s: s, obj: o, eo: engineObject(o)}, nil
}

// Object returns the object's catalog handle.
func (d *Data) Object() *Object { return d.obj }

// Size is the number of element bytes: Len() * ElemSize().
func (d *Data) Size() int64 { return int64(d.eo.Bytes()) }

func (d *Data) engine(write bool) (engine.Engine, error) {
	if write && d.s.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	return d.s.engine()
}

func (d *Data) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &ObjectError{Op: op, Name: d.obj.Name(), Err: engineErr(err)}
}

// ReadAtContext fills p with the element bytes at off. A range past the
// end fails with ErrOutOfRange and reads nothing.
func (d *Data) ReadAtContext(ctx context.Context, p []byte, off uint64) error {
	e, err := d.engine(false)
	if err != nil {
		return d.wrap("read", err)
	}
	return d.wrap("read", e.ReadAt(ctx, d.eo, p, off))
}

// WriteAtContext stores p as the element bytes at off. A range past the end
// fails with ErrOutOfRange and writes nothing. The write is durable after
// Flush.
func (d *Data) WriteAtContext(ctx context.Context, p []byte, off uint64) error {
	e, err := d.engine(true)
	if err != nil {
		return d.wrap("write", err)
	}
	return d.wrap("write", e.WriteAt(ctx, d.eo, p, off))
}

// ReadAt implements io.ReaderAt over the element bytes: at the end of the
// object it returns the bytes that exist and io.EOF.
func (d *Data) ReadAt(p []byte, off int64) (int, error) {
	size := d.Size()
	if off < 0 {
		return 0, d.wrap("read", invalidf("negative offset %d", off))
	}
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), size-off))
	if err := d.ReadAtContext(context.Background(), p[:n], uint64(off)); err != nil {
		return 0, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt over the element bytes. Bytes past the end
// of the object are not written: it returns the count written and an error
// wrapping ErrOutOfRange.
func (d *Data) WriteAt(p []byte, off int64) (int, error) {
	size := d.Size()
	if off < 0 {
		return 0, d.wrap("write", invalidf("negative offset %d", off))
	}
	n := 0
	if off < size {
		n = int(min(int64(len(p)), size-off))
	}
	if n > 0 {
		if err := d.WriteAtContext(context.Background(), p[:n], uint64(off)); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, d.wrap("write", fmt.Errorf("%w: write of %d bytes at %d past the end (%d bytes)", ErrOutOfRange, len(p), off, size))
	}
	return n, nil
}

// Gather copies element idx[k] into dst[k*ElemSize:(k+1)*ElemSize]. Any
// index out of range fails the whole call with ErrOutOfRange before
// anything is read.
func (d *Data) Gather(ctx context.Context, idx []uint64, dst []byte) error {
	e, err := d.engine(false)
	if err != nil {
		return d.wrap("gather", err)
	}
	return d.wrap("gather", e.Gather(ctx, d.eo, idx, dst))
}

// Scatter stores src[k*ElemSize:(k+1)*ElemSize] as element idx[k]. When an
// index repeats, which of its values is stored is unspecified. Any index out
// of range fails the whole call before anything is written; a call stopped
// by its context may have stored some elements.
func (d *Data) Scatter(ctx context.Context, idx []uint64, src []byte) error {
	e, err := d.engine(true)
	if err != nil {
		return d.wrap("scatter", err)
	}
	return d.wrap("scatter", e.Scatter(ctx, d.eo, idx, src))
}

// Flush makes every write to the store made before the call durable (it
// flushes the whole store: the cache is shared by all objects).
func (d *Data) Flush(ctx context.Context) error { return d.s.Flush(ctx) }

// Stats returns the engine's counters for this object since the store
// was opened. Lines written back are counted against the object that owns
// them, whoever evicted them.
func (d *Data) Stats() DataStats {
	d.s.data.mu.Lock()
	e := d.s.data.eng
	d.s.data.mu.Unlock()
	if e == nil {
		return DataStats{}
	}
	return e.ObjectStats(d.eo)
}
