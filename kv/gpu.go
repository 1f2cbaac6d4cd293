package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/nvme"
)

// GPUOptions configure NewGPU. Zero fields take the GPU engine's defaults.
type GPUOptions struct {
	Device     int           // CUDA device ordinal
	CacheBytes uint64        // GPU line cache (default 256 MiB)
	Ways       int           // associativity (default 8)
	QueuePairs int           // NVMe queue pairs of the host-proxied Target (default gpuengine.DefaultQueuePairs, 64)
	QueueDepth int           // entries per queue (default: the GPU engine's for the line size, 256 for 4 KiB lines)
	Timeout    time.Duration // bound of every device wait (default 5s)
	Workers    int           // host threads serving the queues
	Logger     *slog.Logger
}

// GPUTable runs batch lookups of a table on a GPU: a GPU engine with its
// own line cache in device memory reads the table's bucket lines from the
// store's namespace files through host-proxied NVMe queues, and the
// bam_kv_get kernel probes them (kernels/kv.cu).
//
// Writes still go through the Table. A lookup first makes the object on
// storage current: if the table has changes since its last checkpoint, it
// checkpoints; if the lines on storage changed since the GPU cache was
// filled (a checkpoint or rehash), the GPU cache is emptied. So batches of
// GPU lookups see every write that returned before them, and mixing
// writes with GPU lookups costs a checkpoint per switch.
type GPUTable[K comparable, V any] struct {
	t   *Table[K, V]
	c   *core
	eng *gpuengine.Engine
	nss []nvme.Namespace
	fn  *cuda.Function

	mu    sync.Mutex // serialises lookups (the engine serialises launches anyway)
	arr   *gpuengine.Array
	objID uint64
	gen   uint64
}

// NewGPU starts a GPU engine over the store's namespace files for t.
func NewGPU[K comparable, V any](t *Table[K, V], opts GPUOptions) (*GPUTable[K, V], error) {
	c := t.c
	info, err := c.s.Info()
	if err != nil {
		return nil, c.errorf("start GPU lookups for", err)
	}
	g := &GPUTable[K, V]{t: t, c: c, gen: ^uint64(0)}
	fail := func(err error) (*GPUTable[K, V], error) {
		g.Close()
		return nil, c.errorf("start GPU lookups for", err)
	}
	for _, ns := range info.Namespaces {
		f, err := nvme.OpenFileNamespace(ns.Path, nvme.FileOptions{LBASize: ns.LBASize, ReadOnly: true})
		if err != nil {
			return fail(err)
		}
		g.nss = append(g.nss, f)
	}
	if g.eng, err = gpuengine.New(gpuengine.Config{Device: opts.Device, LineSize: c.geo.line, CacheBytes: opts.CacheBytes,
		Ways: opts.Ways, QueuePairs: opts.QueuePairs, QueueDepth: opts.QueueDepth, Timeout: opts.Timeout,
		TargetWorkers: opts.Workers, Logger: opts.Logger}, g.nss); err != nil {
		return fail(err)
	}
	mod, err := g.eng.Module("kv")
	if err != nil {
		return fail(err)
	}
	if g.fn, err = mod.Function("bam_kv_get"); err != nil {
		return fail(err)
	}
	return g, nil
}

// Engine returns the GPU engine (statistics, cache invalidation for cold
// measurements).
func (g *GPUTable[K, V]) Engine() *gpuengine.Engine { return g.eng }

// Close stops the engine and closes the namespace files it opened.
func (g *GPUTable[K, V]) Close() error {
	var errs []error
	if g.eng != nil {
		errs = append(errs, g.eng.Close())
	}
	for _, ns := range g.nss {
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}

// prepare makes the object on storage current and the engine's binding and
// cache match it. It returns with c.mu read-locked.
func (g *GPUTable[K, V]) prepare(ctx context.Context) error {
	c := g.c
	for range 8 {
		c.mu.RLock()
		if err := c.usable(false); err != nil {
			c.mu.RUnlock()
			return err
		}
		if len(c.dirty) == 0 {
			break
		}
		c.mu.RUnlock()
		if err := c.checkpoint(ctx); err != nil {
			return err
		}
	}
	if len(c.dirty) != 0 {
		c.mu.RUnlock()
		return fmt.Errorf("kv: table %q keeps changing; GPU lookups need a quiet moment to checkpoint", c.name)
	}
	if g.arr == nil || g.objID != c.obj.ID() {
		if g.arr != nil {
			g.arr.Unbind()
			g.arr = nil
		}
		spec := gpuengine.ArraySpec{Name: c.name, ElemSize: 16, Len: c.nb * uint64(c.geo.line) / 16}
		info := c.obj.Info()
		lpl := uint64(c.geo.line / c.s.LBASize())
		if info.Layout == bam.LayoutReplicated { // read namespace 0's copy
			spec.Stripe = []gpuengine.StripeMember{{Namespace: 0, StartLine: info.Extents[0].StartLBA / lpl}}
		} else {
			for _, e := range info.Extents {
				spec.Stripe = append(spec.Stripe, gpuengine.StripeMember{Namespace: e.Namespace, StartLine: e.StartLBA / lpl})
			}
		}
		arr, err := g.eng.Bind(spec)
		if err != nil {
			c.mu.RUnlock()
			return err
		}
		g.arr, g.objID = arr, c.obj.ID()
	}
	if g.gen != c.gen {
		if err := g.eng.Invalidate(ctx); err != nil {
			c.mu.RUnlock()
			return err
		}
		g.gen = c.gen
	}
	return nil
}

// GetMany is Table.GetMany on the GPU: keys go to the device, values and
// found flags come back.
func (g *GPUTable[K, V]) GetMany(ctx context.Context, keys []K, vals []V, found []bool) error {
	if len(vals) != len(keys) || len(found) != len(keys) {
		return g.c.errorf("get from", fmt.Errorf("%w: %d keys, %d values, %d found flags", ErrInvalid, len(keys), len(vals), len(found)))
	}
	if len(keys) == 0 {
		return nil
	}
	n := uint64(len(keys))
	// The buffers come and go between the engine's launches (Engine.Alloc),
	// never beside another caller's lookup kernel.
	vs := uint64(g.c.sch.vs)
	dk, err := g.eng.Upload(sliceBytes(keys))
	if err != nil {
		return g.c.errorf("get from", err)
	}
	defer g.eng.Free(dk)
	dv, err := g.eng.Alloc(max(n*vs, 1))
	if err != nil {
		return g.c.errorf("get from", err)
	}
	defer g.eng.Free(dv)
	df, err := g.eng.Alloc(n)
	if err != nil {
		return g.c.errorf("get from", err)
	}
	defer g.eng.Free(df)
	if err := g.GetManyDevice(ctx, uintptr(dk.Ptr()), len(keys), uintptr(dv.Ptr()), uintptr(df.Ptr())); err != nil {
		return err
	}
	if vs > 0 {
		if err := dv.Read(0, sliceBytes(vals)); err != nil {
			return err
		}
	}
	fb := make([]byte, n)
	if err := df.Read(0, fb); err != nil {
		return err
	}
	for i, b := range fb {
		found[i] = b != 0
	}
	return nil
}

// GetManyDevice looks up n keys already in device memory: keys holds n
// keys of the table's key size, packed; vals receives n values (zero for
// absent keys) and found n bytes (1 present, 0 absent). All three are
// device addresses of the engine's device.
func (g *GPUTable[K, V]) GetManyDevice(ctx context.Context, keys uintptr, n int, vals, found uintptr) error {
	if n <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.prepare(ctx); err != nil {
		return g.c.errorf("get from", err)
	}
	defer g.c.mu.RUnlock()
	c := g.c
	cfg := g.eng.Config()
	lc := lookupGrid(uint64(n), g.eng.Sets()*uint64(cfg.Ways))
	err := g.eng.Launch(ctx, g.fn, lc, g.arr.Arg(), cuda.Ptr(cuda.DevicePtr(keys)), cuda.U64(uint64(n)), cuda.U64(c.nb),
		cuda.U32(uint32(c.sch.ks)), cuda.U32(uint32(c.sch.vs)), cuda.U32(uint32(c.geo.slots)), cuda.U32(uint32(c.geo.keyOff)),
		cuda.U32(uint32(c.geo.valOff)), cuda.Ptr(cuda.DevicePtr(vals)), cuda.Ptr(cuda.DevicePtr(found)))
	if err != nil {
		return c.errorf("get from", err)
	}
	c.addStats(func(s *Stats) { s.Gets += uint64(n) })
	return nil
}

// lookupGrid is the launch of bam_kv_get over n keys through a cache of
// ways lines. Each lane of a warp holds at most one bucket line at a time
// beyond its group's, and a lookup waits for a way only while others hold
// them, so the lanes of the grid keep a quarter of the lines at most: whole
// warps, down to one warp of a cache of fewer than 128 lines (the kernel
// keeps a warp from holding more than half of any one set).
func lookupGrid(n, ways uint64) cuda.LaunchConfig {
	const block, maxBlocks = 256, 132 * 8
	lanes := min(max(ways/4, 32)&^31, block*maxBlocks)
	if lanes < block {
		return cuda.Linear(n, uint32(lanes), 1)
	}
	return cuda.Linear(n, block, uint32(lanes/block))
}
