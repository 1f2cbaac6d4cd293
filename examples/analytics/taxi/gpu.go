package taxi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/nvme"
)

// Kernel family and names in kernels/analytics.cu.
const (
	kernelFamily    = "analytics"
	kernelSelectBaM = "bam_taxi_select_bam"
	kernelSelectMem = "bam_taxi_select_mem"
	kernelGroupBaM  = "bam_taxi_group_bam"
	kernelGroupMem  = "bam_taxi_group_mem"
)

// GPUConfig configures OpenGPU.
type GPUConfig struct {
	// Engine configures the GPU engine (line size, cache size, queues).
	// A line size other than the store's needs a one-namespace store (or
	// a replicated table) and must divide the columns' extents.
	Engine gpuengine.Config
	// GroupSlots is the capacity of the grouping hash table (a power of
	// two). Default 1<<20.
	GroupSlots uint64
	// FileMap is how the Target's workers read the store's namespace
	// files (nvme.MapMode; default nvme.MapAuto: copies from a mapping).
	FileMap nvme.MapMode
	// ScanLineSize is the line size of a second cache for the columns
	// some query reads whole (trip_distance and the group-by queries'
	// columns): fewer, larger commands for the scans, while the columns
	// Q1–Q5 read only at matching rows keep Engine.LineSize, which wastes
	// least on them. Default: the store's line size; equal to
	// Engine.LineSize, one cache serves all columns. The columns' extents
	// must start at multiples of it.
	ScanLineSize int
	// ScanQueuePairs is the number of queue pairs of the scanned columns'
	// cache, when it is a cache of its own. Default DefaultScanQueuePairs;
	// Engine.QueuePairs, the amounts' cache's, then defaults to
	// DefaultAmountQueuePairs.
	ScanQueuePairs int
	// MatchBatch is how many amount reads of Q1–Q5 (matching rows times
	// the query's amount columns) a warp gathers before it makes them, 1
	// to 32: it makes them when it finishes a chunk of 512 rows with at
	// least that many, so the reads go on during the scan, and at its end.
	// The warp's lanes share the reads out, so up to 32 are in flight at
	// once. Default DefaultMatchBatch.
	MatchBatch int
}

// Defaults of GPUConfig. The queue pairs apply when the scanned columns
// have a cache of their own: the scan ran fastest with few queue pairs of
// large lines, the scattered reads of the amounts with many. Measured on
// A1's 500 M rows (H200 host, 16 KiB scan lines, 512-byte amount lines),
// 32 scan and 128 amount queue pairs took Q0 0.050 s, Q1 0.066 s and Q5
// 0.099 s; 16 and 128 took 0.047, 0.070 and 0.095 s; 64 or 256 amount
// queue pairs were slower on Q5 (0.101–0.120 s), and so was the engine's
// default of 64 for both caches (Q5 0.135 s with 1 KiB amount lines).
const (
	DefaultMatchBatch       = 8
	DefaultScanQueuePairs   = 32
	DefaultAmountQueuePairs = 128
)

// Scanned reports whether some query reads column c whole (see
// GPUConfig.ScanLineSize).
func Scanned(c Col) bool { return !slices.Contains(amountCols, c) }

// GPU runs queries over one table on a GPU engine whose namespaces are the
// store's namespace files.
type GPU struct {
	t      *Table
	e      *gpuengine.Engine
	nss    []nvme.Namespace
	mod    *cuda.Module
	fns    map[string]*cuda.Function
	arrays [NumCols]*gpuengine.Array
	cap    uint64
	table  *cuda.DeviceMem // keys, counts, non-nulls, sums
	out    *cuda.DeviceMem // selective: 2 doubles, the count, the chunk counter; grouped: overflow flag
	res    [NumCols]*cuda.DeviceMem

	fileMap    nvme.MapMode
	matchBatch int
}

// OpenGPU starts a GPU engine over the table's store and binds its
// columns.
func OpenGPU(t *Table, cfg GPUConfig) (_ *GPU, err error) {
	info, err := t.s.Info()
	if err != nil {
		return nil, err
	}
	if cfg.Engine.LineSize == 0 {
		cfg.Engine.LineSize = info.LineSize
	}
	if cfg.GroupSlots == 0 {
		cfg.GroupSlots = 1 << 20
	}
	if cfg.ScanLineSize == 0 {
		cfg.ScanLineSize = info.LineSize
	}
	if cfg.ScanLineSize != cfg.Engine.LineSize {
		if cfg.Engine.QueuePairs == 0 {
			cfg.Engine.QueuePairs = DefaultAmountQueuePairs
		}
		if cfg.ScanQueuePairs == 0 {
			cfg.ScanQueuePairs = DefaultScanQueuePairs
		}
		// Sized like the default cache (Engine.CacheBytes, or the
		// engine's default when that is 0).
		cfg.Engine.MoreCaches = append(slices.Clip(cfg.Engine.MoreCaches), gpuengine.CacheConfig{LineSize: cfg.ScanLineSize, CacheBytes: cfg.Engine.CacheBytes,
			QueuePairs: cfg.ScanQueuePairs})
	}
	if cfg.MatchBatch == 0 {
		cfg.MatchBatch = DefaultMatchBatch
	}
	if cfg.MatchBatch < 1 || cfg.MatchBatch > 32 {
		return nil, fmt.Errorf("%w: match batch %d is not within 1 to 32", ErrInvalid, cfg.MatchBatch)
	}
	if cfg.GroupSlots&(cfg.GroupSlots-1) != 0 {
		return nil, fmt.Errorf("%w: group slots %d is not a power of two", ErrInvalid, cfg.GroupSlots)
	}
	g := &GPU{t: t, fns: map[string]*cuda.Function{}, cap: cfg.GroupSlots, fileMap: cfg.FileMap, matchBatch: cfg.MatchBatch}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	for _, ns := range info.Namespaces {
		f, err := nvme.OpenFileNamespace(ns.Path, nvme.FileOptions{LBASize: ns.LBASize, ReadOnly: true, Map: cfg.FileMap})
		if err != nil {
			return nil, fmt.Errorf("taxi: gpu: %w", err)
		}
		g.nss = append(g.nss, f)
	}
	if g.e, err = gpuengine.New(cfg.Engine, g.nss); err != nil {
		return nil, fmt.Errorf("taxi: gpu: %w", err)
	}
	if g.mod, err = g.e.Module(kernelFamily); err != nil {
		return nil, fmt.Errorf("taxi: gpu: %w", err)
	}
	for _, n := range []string{kernelSelectBaM, kernelSelectMem, kernelGroupBaM, kernelGroupMem} {
		if g.fns[n], err = g.mod.Function(n); err != nil {
			return nil, fmt.Errorf("taxi: gpu: %w", err)
		}
	}
	for c := range NumCols {
		line := g.e.Config().LineSize
		if Scanned(c) {
			line = cfg.ScanLineSize
		}
		spec, err := arraySpec(t.cols[c].Object(), info, line)
		if err != nil {
			return nil, fmt.Errorf("taxi: gpu: %w", err)
		}
		spec.LineSize = line
		if g.arrays[c], err = g.e.Bind(spec); err != nil {
			return nil, fmt.Errorf("taxi: gpu: %w", err)
		}
	}
	ctx := g.e.Context()
	if g.table, err = ctx.Alloc(32 * g.cap); err != nil {
		return nil, err
	}
	if g.out, err = ctx.Alloc(32); err != nil {
		return nil, err
	}
	return g, nil
}

// arraySpec places object o for an engine with lines of lineSize bytes.
func arraySpec(o *bam.Object, info bam.StoreInfo, lineSize int) (gpuengine.ArraySpec, error) {
	oi := o.Info()
	spec := gpuengine.ArraySpec{Name: oi.Name, ElemSize: uint64(oi.ElemSize), Len: oi.Length}
	if oi.ElemsPerLine*oi.ElemSize != oi.LineSize {
		return spec, fmt.Errorf("%w: %s has padded lines", ErrInvalid, oi.Name)
	}
	members := oi.Extents
	if oi.Layout == bam.LayoutReplicated {
		members = members[:1]
	}
	if lineSize != oi.LineSize && len(members) > 1 {
		return spec, fmt.Errorf("%w: engine line size %d differs from the store's %d on a store striped over %d namespaces",
			ErrInvalid, lineSize, oi.LineSize, len(members))
	}
	for _, e := range members {
		off := e.StartLBA * uint64(info.LBASize)
		if off%uint64(lineSize) != 0 {
			return spec, fmt.Errorf("%w: %s starts at byte %d, not a multiple of the engine line size %d", ErrInvalid, oi.Name, off, lineSize)
		}
		spec.Stripe = append(spec.Stripe, gpuengine.StripeMember{Namespace: e.Namespace, StartLine: off / uint64(lineSize)})
	}
	return spec, nil
}

// Engine returns the GPU engine.
func (g *GPU) Engine() *gpuengine.Engine { return g.e }

// Close frees the device memory and stops the engine.
func (g *GPU) Close() error {
	var errs []error
	g.FreeResident()
	for _, m := range []*cuda.DeviceMem{g.table, g.out} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	if g.mod != nil {
		errs = append(errs, g.mod.Unload())
	}
	if g.e != nil {
		errs = append(errs, g.e.Close())
	}
	for _, ns := range g.nss {
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}

// Invalidate empties the GPU cache (a cold start).
func (g *GPU) Invalidate(ctx context.Context) error { return g.e.Invalidate(ctx) }

// LoadResident copies the given columns into device memory, for the
// in-memory baseline (RunResident). b holds them (LoadDirect).
func (g *GPU) LoadResident(b *Batch, cols []Col) error {
	for _, c := range cols {
		if g.res[c] != nil {
			continue
		}
		if len(b.Raw[c]) == 0 {
			return fmt.Errorf("%w: batch lacks column %s", ErrInvalid, Schema[c].Name)
		}
		m, err := g.e.Context().Alloc(uint64(len(b.Raw[c])))
		if err != nil {
			return err
		}
		if err := m.Write(0, b.Raw[c]); err != nil {
			m.Free()
			return err
		}
		g.res[c] = m
	}
	return nil
}

// FreeResident frees the columns LoadResident copied.
func (g *GPU) FreeResident() {
	for c, m := range g.res {
		if m != nil {
			m.Free()
			g.res[c] = nil
		}
	}
}

// Run runs q with the columns on storage, read through the GPU cache.
// BytesRead is the lines the cache filled times the line size.
func (g *GPU) Run(ctx context.Context, q Query) (*Result, error) { return g.run(ctx, q, false) }

// RunResident runs q over columns in device memory (LoadResident first).
func (g *GPU) RunResident(ctx context.Context, q Query) (*Result, error) { return g.run(ctx, q, true) }

func (g *GPU) colArg(c Col, resident bool) (cuda.Arg, error) {
	if resident {
		if g.res[c] == nil {
			return cuda.Arg{}, fmt.Errorf("%w: column %s is not resident", ErrInvalid, Schema[c].Name)
		}
		return cuda.Ptr(g.res[c].Ptr()), nil
	}
	return g.arrays[c].Arg(), nil
}

func (g *GPU) run(ctx context.Context, q Query, resident bool) (*Result, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	engine := "gpu"
	if resident {
		engine = "gpu-memory"
	}
	r := &Result{Query: q.ID, Text: q.String(), Threshold: q.Threshold, Engine: engine}
	before, err := g.e.Stats()
	if err != nil {
		return nil, err
	}
	n := g.t.Rows
	// Blocks of 256 threads = 8 warps, a warp per 512 rows, at most 132 x 32
	// blocks. The grouping kernels' warps stride over the table; the
	// selective ones take 512-row chunks from a counter, so blocks that start
	// after the first resident ones find little or no work left.
	warps := max(1, (n+rows512-1)/rows512)
	lc := cuda.Linear(warps*32, 256, 132*32)
	// Columns a query does not read: a null pointer for the in-memory
	// kernels, an empty array argument for those that read through the
	// cache (the parameter is the whole bam::array<T>).
	nul := gpuengine.NoArrayArg()
	if resident {
		nul = cuda.Ptr(0)
	}
	arg := func(c Col) cuda.Arg {
		a, e := g.colArg(c, resident)
		if e != nil && err == nil {
			err = e
		}
		return a
	}
	var start time.Time
	if q.Selective() {
		amounts := q.Amounts()
		args := []cuda.Arg{arg(TripDistance)}
		for k := range 5 {
			if k < len(amounts) {
				args = append(args, arg(amounts[k]))
			} else {
				args = append(args, nul)
			}
		}
		if err != nil {
			return nil, err
		}
		if err := g.out.Memset8(0); err != nil {
			return nil, err
		}
		args = append(args, cuda.U32(uint32(len(amounts))), cuda.F32(threshold32(q.Threshold)), cuda.U64(n),
			cuda.U32(uint32(g.matchBatch)), cuda.Ptr(g.out.Ptr()), cuda.Ptr(g.out.Ptr().Add(16)),
			cuda.Ptr(g.out.Ptr().Add(24)))
		fn := g.fns[kernelSelectBaM]
		if resident {
			fn = g.fns[kernelSelectMem]
		}
		start = time.Now()
		if err := g.e.Launch(ctx, fn, lc, args...); err != nil {
			return nil, fmt.Errorf("taxi: %s: %w", q.ID, err)
		}
		var b [24]byte
		if err := g.out.Read(0, b[:]); err != nil {
			return nil, err
		}
		r.SumDistance = math.Float64frombits(binary.LittleEndian.Uint64(b[0:]))
		r.SumAmount = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
		r.Count = binary.LittleEndian.Uint64(b[16:])
		r.Seconds = time.Since(start).Seconds()
		r.finishSelective(q)
	} else {
		mask, avg := q.groupMask()
		cols := [5]cuda.Arg{nul, nul, nul, nul, nul}
		for _, c := range q.Columns() {
			k := map[Col]int{CabType: 0, PassengerCount: 1, PickupTime: 2, TripDistance: 3, TotalAmount: 4}[c]
			cols[k] = arg(c)
		}
		if err != nil {
			return nil, err
		}
		capb := 8 * g.cap
		tp := g.table.Ptr()
		ectx := g.e.Context()
		if err := ectx.MemsetD8(tp, 0xFF, capb); err != nil {
			return nil, err
		}
		if err := ectx.MemsetD8(tp.Add(capb), 0, 3*capb); err != nil {
			return nil, err
		}
		if err := g.out.Memset8(0); err != nil {
			return nil, err
		}
		avgFlag := uint32(0)
		if avg {
			avgFlag = 1
		}
		args := append(cols[:], cuda.U32(uint32(mask)), cuda.U32(avgFlag), cuda.U64(n),
			cuda.Ptr(tp), cuda.Ptr(tp.Add(capb)), cuda.Ptr(tp.Add(2*capb)), cuda.Ptr(tp.Add(3*capb)),
			cuda.U64(g.cap), cuda.Ptr(g.out.Ptr()))
		fn := g.fns[kernelGroupBaM]
		if resident {
			fn = g.fns[kernelGroupMem]
		}
		start = time.Now()
		if err := g.e.Launch(ctx, fn, lc, args...); err != nil {
			return nil, fmt.Errorf("taxi: %s: %w", q.ID, err)
		}
		raw := make([]byte, 4*capb)
		if err := g.table.Read(0, raw); err != nil {
			return nil, err
		}
		var ov [4]byte
		if err := g.out.Read(0, ov[:]); err != nil {
			return nil, err
		}
		r.Seconds = time.Since(start).Seconds()
		if binary.LittleEndian.Uint32(ov[:]) != 0 {
			return nil, fmt.Errorf("taxi: %s: more groups than the %d slots of the group table", q.ID, g.cap)
		}
		m := map[uint64]Agg{}
		le := binary.LittleEndian
		for i := uint64(0); i < g.cap; i++ {
			k := le.Uint64(raw[8*i:])
			if k == EmptyKey {
				continue
			}
			m[k] = Agg{Count: le.Uint64(raw[capb+8*i:]), NonNull: le.Uint64(raw[2*capb+8*i:]),
				Sum: math.Float64frombits(le.Uint64(raw[3*capb+8*i:]))}
		}
		r.Groups = groupsFromMap(q, m)
	}
	r.BytesNeeded = bytesNeeded(q, n, r.Count)
	if resident {
		r.BytesRead = r.BytesNeeded
	} else {
		after, err := g.e.Stats()
		if err != nil {
			return nil, err
		}
		r.BytesRead = after.FilledBytes - before.FilledBytes
	}
	return r, nil
}

const rows512 = 512
