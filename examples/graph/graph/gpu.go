package graph

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/nvme"
)

// KernelFamily is the kernel family of kernels/graph.cu.
const KernelFamily = "graph"

// Placement is where the GPU kernels read the edges from.
type Placement string

// Placements.
const (
	// OnStorage reads edges through bam::array: the GPU cache, filled by
	// NVMe commands GPU threads submit to the store's namespaces.
	OnStorage Placement = "storage"
	// InDevice keeps the edges in GPU memory (G1 baseline a).
	InDevice Placement = "device"
	// ZeroCopy keeps the edges in pinned host memory mapped into the GPU,
	// read over PCIe by the kernels (EMOGI; G1 baseline b).
	ZeroCopy Placement = "pinned"
)

// GPUOptions configure a GPU runner.
type GPUOptions struct {
	Device     int
	CacheBytes uint64        // GPU cache for OnStorage (default 1/4 of the edges, at least 8 MiB)
	QueuePairs int           // default gpuengine's
	Timeout    time.Duration // per device wait (default gpuengine's)
	// MaxBlocks caps the grid of the traversal kernels (blocks of 256
	// threads). Default 132*8.
	MaxBlocks uint32
	// LineSize is the GPU cache line size (default the store's). Short
	// neighbour lists read far fewer unused bytes through short lines. A
	// size other than the store's needs a store on one namespace whose LBA
	// size divides it.
	LineSize int
}

// DefaultCCLineSize is the GPU line size CC reads edges on storage through
// when GPUOptions.LineSize is left unset (CCOptions). It was chosen when
// CC's first pass read every line of the edges: scale-25 graphs on
// storage, H200 host, cache 1/4 of the edges, CC on a uniform graph took
// 0.129-0.133 s through 4 KiB lines, 0.112-0.117 through 8 KiB, 0.109
// through 16 KiB and 0.105-0.109 through 32-64 KiB; on a Kronecker graph
// 0.098-0.100, 0.087-0.089, 0.092-0.093 and 0.097-0.104 s
// (logs/g1-cc-lines-H200-20261124.txt). With the heads array read in bulk
// the line matters little: 0.026-0.029 s through 4, 16 and 64 KiB lines on
// both graphs, 16 KiB no slower than the others (part 7 of
// logs/g1-heads-H200-20261124.txt). BFS reads scattered lists, which the
// store's 4 KiB lines serve with fewer unused bytes.
const DefaultCCLineSize = 16 << 10

// CCOptions returns opt for a CC run: with LineSize unset, lines of
// DefaultCCLineSize where the store and the graph's edges allow them (one
// namespace, edges aligned to them: graphs saved since EdgeAlign), else
// opt unchanged.
func CCOptions(s *bam.Store, name string, opt GPUOptions) GPUOptions {
	if opt.LineSize != 0 || DefaultCCLineSize <= s.LineSize() {
		return opt
	}
	o, err := s.Object(edgesName(name))
	if err != nil {
		return opt
	}
	if _, err := stripeSpec(o, s, DefaultCCLineSize); err != nil {
		return opt
	}
	opt.LineSize = DefaultCCLineSize
	return opt
}

// GPU runs BFS and CC on the GPU over one stored graph.
type GPU[V VertexID] struct {
	Info      Info
	Offsets   []uint64
	Placement Placement
	// LoadTime is the time it took to put the edges in place: reading the
	// namespace files into GPU or pinned memory (zero for OnStorage).
	LoadTime time.Duration

	eng    *gpuengine.Engine
	cctx   *cuda.Context
	mod    *cuda.Module
	nss    []nvme.Namespace
	arr    *gpuengine.Array
	dEdges *cuda.DeviceMem
	hEdges *cuda.HostMem
	// The heads array (Info.Heads > 0), placed as the edges: on storage
	// as saved (packed or full, hx), in GPU or pinned memory full
	// (expandHeads). dHeadsBase holds, for packed heads on storage, every
	// block's hx.base one after the other (graph_heads_expand).
	heads      *gpuengine.Array
	dHeads     *cuda.DeviceMem
	hHeads     *cuda.HostMem
	hx         *headsIndex
	dHeadsBase *cuda.DeviceMem
	// headsStage is the bytes of a piece of CC's first round over heads
	// on storage (headsStageBytes; tests make it smaller).
	headsStage uint64
	dOff       *cuda.DeviceMem
	// dChunks holds, for each of the chunks of a cache line's worth of
	// edges, the first vertex whose list starts in it or later; one more
	// entry closes the last chunk (chunkFirst).
	dChunks    *cuda.DeviceMem
	chunks     uint64
	chunkEdges uint64 // edges a chunk
	blocks     uint32
	// smallBlocks is bfs_small_levels' grid, and small its state and
	// per-level records, made on first use.
	smallBlocks uint32
	small       *cuda.DeviceMem
	vs          string // "u32" or "u64"
	// back holds two pinned buffers of one per-vertex array each, made on
	// first use: results come back through them (rb).
	back [2]*cuda.HostMem
	rb   *readBacker
	// lateCap is how many vertices BFS's early read back patches in at
	// most (lateCapFor; tests make it smaller).
	lateCap uint64
	// plain runs the kernels that read no array through the cache
	// (launch).
	plain *cuda.Stream
}

// pinned returns pinned buffer i of at least n bytes, made (outside any
// timing) on first use.
func (r *GPU[V]) pinned(i int, n uint64) (*cuda.HostMem, error) {
	if b := r.back[i]; b != nil && b.Size() >= n {
		return b, nil
	}
	if r.back[i] != nil {
		if err := r.back[i].Free(); err != nil {
			return nil, err
		}
		r.back[i] = nil
	}
	b, err := r.cctx.AllocPinned(max(n, 1))
	if err != nil {
		return nil, fmt.Errorf("graph: pinned buffer for results: %w", err)
	}
	r.back[i] = b
	return b, nil
}

// OpenGPU prepares graph name of the directory store s (opened from dir)
// for kernels reading the edges from placement. The store stays open; the
// GPU engine reads the same namespace files.
func OpenGPU[V VertexID](ctx context.Context, dir string, s *bam.Store, name string, placement Placement, opt GPUOptions) (_ *GPU[V], err error) {
	if len(s.Options().Devices) > 0 {
		return nil, errors.New("graph: the GPU runner serves directory stores only")
	}
	g, err := Load[V](ctx, s, name)
	if err != nil {
		return nil, err
	}
	r := &GPU[V]{Info: g.Info, Offsets: g.Offsets, Placement: placement, blocks: opt.MaxBlocks, vs: "u32", headsStage: headsStageBytes}
	if g.IDBits == 64 {
		r.vs = "u64"
	}
	if r.blocks == 0 {
		r.blocks = 132 * 8
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	for _, p := range NamespacePaths(dir, s) {
		ns, err := nvme.OpenFileNamespace(p, nvme.FileOptions{LBASize: s.LBASize(), ReadOnly: true})
		if err != nil {
			return nil, err
		}
		r.nss = append(r.nss, ns)
	}
	cache := opt.CacheBytes
	if cache == 0 {
		cache = g.EdgeBytes() / 4
	}
	if placement != OnStorage {
		cache = 0
	}
	cache = max(cache, 8<<20)
	lineSize := opt.LineSize
	if lineSize == 0 {
		lineSize = s.LineSize()
	}
	var spec, headsSpec gpuengine.ArraySpec
	if placement == OnStorage {
		o, err := s.Object(edgesName(name))
		if err != nil {
			return nil, err
		}
		if spec, err = stripeSpec(o, s, lineSize); err != nil {
			return nil, err
		}
		if g.Info.Heads > 0 {
			o, err := s.Object(headsName(name))
			if err != nil {
				return nil, err
			}
			if headsSpec, err = stripeSpec(o, s, lineSize); err != nil {
				return nil, err
			}
		}
	}
	r.eng, err = gpuengine.New(gpuengine.Config{Device: opt.Device, LineSize: lineSize, CacheBytes: cache,
		QueuePairs: opt.QueuePairs, Timeout: opt.Timeout}, r.nss)
	if err != nil {
		return nil, err
	}
	r.cctx = r.eng.Context()
	sms, err := r.cctx.Device().Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	r.smallBlocks = uint32(smallBlocksPerSM * max(sms, 1))
	if r.rb, err = newReadBacker(r.cctx); err != nil {
		return nil, err
	}
	if r.plain, err = r.cctx.NewStream(); err != nil {
		return nil, fmt.Errorf("graph: kernel stream: %w", err)
	}
	if r.mod, err = r.eng.Module(KernelFamily); err != nil {
		return nil, err
	}
	if r.dOff, err = upload(r.cctx, cuda.AsBytes(g.Offsets)); err != nil {
		return nil, err
	}
	var zero V
	r.chunkEdges = max(1, uint64(lineSize)/uint64(sizeOf(zero)))
	first := chunkFirst(g.Offsets, r.chunkEdges)
	r.chunks = uint64(len(first) - 1)
	if r.dChunks, err = upload(r.cctx, cuda.AsBytes(first)); err != nil {
		return nil, err
	}
	if g.Info.Heads > 0 {
		r.hx = g.headsIndex()
		if r.hx.packed && placement == OnStorage {
			var base []uint64
			for _, b := range r.hx.base {
				base = append(base, b...)
			}
			if r.dHeadsBase, err = upload(r.cctx, cuda.AsBytes(base)); err != nil {
				return nil, err
			}
		}
	}
	switch placement {
	case OnStorage:
		if r.arr, err = r.eng.Bind(spec); err != nil {
			return nil, err
		}
		if g.Info.Heads > 0 {
			if r.heads, err = r.eng.Bind(headsSpec); err != nil {
				return nil, err
			}
		}
	case InDevice:
		t0 := time.Now()
		if r.dEdges, err = loadDevice(ctx, dir, s, edgesName(name), g.EdgeBytes(), r.cctx); err != nil {
			return nil, err
		}
		if g.Info.Heads > 0 {
			h, err := loadHeads[V](ctx, dir, s, name, r.hx, g.Offsets)
			if err != nil {
				return nil, err
			}
			if r.dHeads, err = upload(r.cctx, bytesOf(h)); err != nil {
				return nil, err
			}
		}
		r.LoadTime = time.Since(t0)
	case ZeroCopy:
		t0 := time.Now()
		if r.hEdges, err = loadPinned(ctx, dir, s, edgesName(name), g.EdgeBytes(), r.cctx); err != nil {
			return nil, err
		}
		if g.Info.Heads > 0 {
			h, err := loadHeads[V](ctx, dir, s, name, r.hx, g.Offsets)
			if err != nil {
				return nil, err
			}
			if r.hHeads, err = r.cctx.AllocHost(max(uint64(len(h))*uint64(sizeOf(zero)), 8), cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
				return nil, err
			}
			copy(r.hHeads.Bytes(), bytesOf(h))
		}
		r.LoadTime = time.Since(t0)
	default:
		return nil, fmt.Errorf("graph: unknown placement %q (want storage, device or pinned)", placement)
	}
	return r, nil
}

// loadDevice reads object name (nbytes) from the namespace files into new
// device memory.
func loadDevice(ctx context.Context, dir string, s *bam.Store, name string, nbytes uint64, c *cuda.Context) (*cuda.DeviceMem, error) {
	host := make([]byte, nbytes)
	if err := ReadObjectFiles(ctx, dir, s, name, host); err != nil {
		return nil, err
	}
	return upload(c, host)
}

// loadHeads reads the heads array of graph name (indexed by hx) from the
// namespace files and returns it full (expandHeads), for GPU or pinned
// memory.
func loadHeads[V VertexID](ctx context.Context, dir string, s *bam.Store, name string, hx *headsIndex, off []uint64) ([]V, error) {
	h := make([]V, hx.size())
	if err := ReadObjectFiles(ctx, dir, s, headsName(name), bytesOf(h)); err != nil {
		return nil, err
	}
	return expandHeads(hx, off, h), nil
}

// loadPinned reads object name (nbytes) from the namespace files into new
// pinned host memory mapped into the device.
func loadPinned(ctx context.Context, dir string, s *bam.Store, name string, nbytes uint64, c *cuda.Context) (*cuda.HostMem, error) {
	m, err := c.AllocHost(max(nbytes, 8), cuda.HostAllocPortable|cuda.HostAllocDeviceMap)
	if err != nil {
		return nil, err
	}
	if err := ReadObjectFiles(ctx, dir, s, name, m.Bytes()[:nbytes]); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// stripeSpec places an array object for a GPU engine with lines of
// lineSize bytes: line j on namespace j mod N at its extent's start plus
// j / N lines. A line size other than the store's is allowed on one
// namespace only (the store stripes by its own lines), and the object must
// start on a line boundary.
func stripeSpec(o *bam.Object, s *bam.Store, lineSize int) (gpuengine.ArraySpec, error) {
	info := o.Info()
	spec := gpuengine.ArraySpec{Name: info.Name, ElemSize: uint64(info.ElemSize), Len: info.Length}
	if lineSize <= 0 || lineSize&(lineSize-1) != 0 || lineSize < s.LBASize() {
		return spec, fmt.Errorf("graph: GPU line size %d: want a power of two of at least the store's %d-byte LBAs", lineSize, s.LBASize())
	}
	if info.ElemsPerLine*info.ElemSize != info.LineSize {
		return spec, fmt.Errorf("graph: %s has padded lines", info.Name)
	}
	if lineSize != info.LineSize && s.NamespaceCount() > 1 {
		return spec, fmt.Errorf("graph: GPU line size %d differs from the store's %d on a store striped over %d namespaces",
			lineSize, info.LineSize, s.NamespaceCount())
	}
	spec.Stripe = make([]gpuengine.StripeMember, s.NamespaceCount())
	for i := range spec.Stripe {
		spec.Stripe[i].Namespace = i
	}
	for _, e := range info.Extents {
		if e.Namespace < 0 || e.Namespace >= len(spec.Stripe) {
			continue
		}
		off := e.StartLBA * uint64(s.LBASize())
		if off%uint64(lineSize) != 0 {
			return spec, fmt.Errorf("graph: %s starts at byte %d, not a multiple of the GPU line size %d", info.Name, off, lineSize)
		}
		spec.Stripe[e.Namespace].StartLine = off / uint64(lineSize)
	}
	return spec, nil
}

func upload(c *cuda.Context, b []byte) (*cuda.DeviceMem, error) {
	m, err := c.Alloc(uint64(max(len(b), 8)))
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		if err := m.Write(0, b); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}

// edgesArg is the kernel argument for the edges and the kernel suffix.
func (r *GPU[V]) edgesArg() (cuda.Arg, string, error) {
	return r.placedArg(r.arr, r.dEdges, r.hEdges)
}

// headsStageBytes bounds the GPU memory CC's first round takes to stage
// the heads of a graph on storage: the heads are read through the cache a
// piece of at most this size at a time.
const headsStageBytes = 256 << 20

// headsBuffer allocates the GPU memory that placeHeads reads heads on
// storage into: the full array, and behind it room for a packed block on
// its way (graph_heads_expand). Heads in GPU or pinned memory are used in
// place: it returns nil for them.
func (r *GPU[V]) headsBuffer() (*cuda.DeviceMem, error) {
	if r.Placement != OnStorage || r.Info.Heads == 0 {
		return nil, nil
	}
	var zero V
	elems := r.Info.N * uint64(r.Info.Heads)
	if r.hx.packed {
		elems += r.hx.held[0] * r.hx.cols(0)
	}
	return r.cctx.Alloc(max(1, elems*uint64(sizeOf(zero))))
}

// placeHeads returns the heads array in GPU-addressable memory for BFS's
// bottom-up levels, and how many heads a vertex it holds so far: in place,
// all of them, for heads in GPU or pinned memory; for heads on storage,
// mem (headsBuffer's), into which the first block (headsBlock a vertex, 2N
// ids) is read through the cache in bulk; readHeadsRest reads the rest
// when they are wanted. phase, when not nil, is told when the block is
// read and expanded.
func (r *GPU[V]) placeHeads(ctx context.Context, mem *cuda.DeviceMem, phase func(string)) (p cuda.DevicePtr, in uint32, err error) {
	all := uint32(r.Info.Heads)
	switch r.Placement {
	case InDevice:
		return r.dHeads.Ptr(), all, nil
	case ZeroCopy:
		p, err := r.hHeads.DevicePtr()
		return p, all, err
	}
	if mem == nil {
		return 0, 0, fmt.Errorf("graph: heads on storage need a buffer in GPU memory")
	}
	var zero V
	if err := r.readHeadsBlock(ctx, mem.Ptr(), mem.Ptr().Add(r.Info.N*uint64(all)*uint64(sizeOf(zero))), 0, 0, r.Info.N, phase); err != nil {
		return 0, 0, err
	}
	return mem.Ptr(), min(all, headsBlock), nil
}

// readHeadsRest reads the heads placeHeads left on storage, the blocks
// after the first in heads of a vertex, into mem, where placeHeads put
// the first.
func (r *GPU[V]) readHeadsRest(ctx context.Context, mem *cuda.DeviceMem, in uint32, phase func(string)) error {
	all := uint64(r.Info.Heads)
	if mem == nil || uint64(in) >= all {
		return nil
	}
	var zero V
	stage := mem.Ptr().Add(r.Info.N * all * uint64(sizeOf(zero)))
	for b := uint64(in) / headsBlock; b < r.hx.blocks(); b++ {
		if err := r.readHeadsBlock(ctx, mem.Ptr().Add(headsAt(r.Info.N, 0, b*headsBlock)*uint64(sizeOf(zero))), stage, b, 0, r.Info.N, phase); err != nil {
			return err
		}
	}
	return nil
}

// readHeadsBlock reads block b of the heads on storage, the entries of
// vertices v0 up to v0+nv (v0 a multiple of headsTile), into GPU memory at
// out, full (headsAt's layout of the block): a full array's straight
// there, through the cache in bulk; a packed array's into stage first,
// then expanded (graph_heads_expand). phase, when not nil, is told when
// the block is read ("read heads") and expanded ("expand heads").
func (r *GPU[V]) readHeadsBlock(ctx context.Context, out, stage cuda.DevicePtr, b, v0, nv uint64, phase func(string)) error {
	from, to := r.hx.span(r.Offsets, b, v0, v0+nv)
	dst := out
	if r.hx.packed {
		dst = stage
	}
	if err := r.heads.ReadRangeTo(ctx, from, to-from, dst); err != nil {
		return err
	}
	if phase != nil {
		phase("read heads")
	}
	if !r.hx.packed {
		return nil
	}
	base := r.dHeadsBase.Ptr().Add(b * uint64(len(r.hx.base[0])) * 8)
	// A warp a tile, the grid uncapped: each warp's loads wait on the one
	// before, so the more warps the better the device hides them.
	if err := r.launch(ctx, "graph_heads_expand_"+r.vs, cuda.Linear((nv+headsTile-1)/headsTile*32, 256, 0), cuda.Ptr(stage), cuda.Ptr(out),
		cuda.Ptr(r.dOff.Ptr()), cuda.U64(v0), cuda.U64(nv), cuda.Ptr(base), cuda.U64(b*headsBlock), cuda.U32(uint32(r.hx.cols(b)))); err != nil {
		return err
	}
	if phase != nil {
		phase("expand heads")
	}
	return nil
}

// linkHeads runs CC's first round (graph_cc_link_heads) over the heads
// array's first block (headsAt): in place for heads in GPU or pinned memory; for heads on storage,
// a piece at a time, each read through the cache into GPU memory in bulk
// (a line per warp at a time, no line held while linking), then linked.
func (r *GPU[V]) linkHeads(ctx context.Context, comp, second cuda.DevicePtr) error {
	n, per := r.Info.N, uint64(headsBlock) // the first block of the heads: a graph with two heads a vertex
	fn := "graph_cc_link_heads_" + r.vs
	link := func(heads cuda.DevicePtr, v0, nv uint64) error {
		return r.launch(ctx, fn, r.threads(nv), cuda.Ptr(heads), cuda.U64(v0), cuda.U64(nv), cuda.U32(uint32(per)),
			cuda.Ptr(comp), cuda.Ptr(second))
	}
	if r.Placement != OnStorage {
		p, _, err := r.placeHeads(ctx, nil, nil) // in place
		if err != nil {
			return err
		}
		return link(p, 0, n)
	}
	if n == 0 {
		return nil
	}
	var zero V
	entry := per * uint64(sizeOf(zero))
	piece := max(headsTile, min(n, r.headsStage/entry)/headsTile*headsTile) // vertices a piece
	// A piece full, and behind it room for it packed.
	buf, err := r.cctx.Alloc(2 * piece * entry)
	if err != nil {
		return err
	}
	defer buf.Free()
	for v0 := uint64(0); v0 < n; v0 += piece {
		nv := min(piece, n-v0)
		if err := r.readHeadsBlock(ctx, buf.Ptr(), buf.Ptr().Add(piece*entry), 0, v0, nv, nil); err != nil {
			return err
		}
		if err := link(buf.Ptr(), v0, nv); err != nil {
			return err
		}
	}
	return nil
}

// placedArg is the kernel argument for an array placed as r.Placement
// says, and the kernel suffix.
func (r *GPU[V]) placedArg(a *gpuengine.Array, d *cuda.DeviceMem, h *cuda.HostMem) (cuda.Arg, string, error) {
	switch r.Placement {
	case OnStorage:
		return a.Arg(), "bam", nil
	case InDevice:
		return cuda.Ptr(d.Ptr()), "mem", nil
	default:
		p, err := h.DevicePtr()
		return cuda.Ptr(p), "mem", err
	}
}

// launch runs kernel name and waits for it. A kernel that reads an array
// through the cache (the _bam ones) runs through the engine (Launch: the
// queues woken, the fill copier beside it, its device errors read back).
// The others touch only GPU and pinned memory and wait on nothing, so they
// end on their own: they run on a stream of the runner's, since the
// engine's launch costs some 0.05-0.09 ms a kernel more than the stream's
// (an H200's, for a kernel of no work; 0.1-0.15 ms before its error
// record came back behind the kernel), and a BFS or CC runs a dozen of
// them.
func (r *GPU[V]) launch(ctx context.Context, name string, cfg cuda.LaunchConfig, args ...cuda.Arg) error {
	fn, err := r.mod.Function(name)
	if err != nil {
		return err
	}
	if strings.HasSuffix(name, "_bam") {
		return r.eng.Launch(ctx, fn, cfg, args...)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cfg.Stream = r.plain
	if err := fn.Launch(cfg, args...); err != nil {
		return fmt.Errorf("graph: %s: %w", name, err)
	}
	if err := r.plain.Synchronize(); err != nil {
		return fmt.Errorf("graph: %s: %w", name, err)
	}
	return nil
}

// warps is a launch of one warp per item, capped for grid-stride kernels.
func (r *GPU[V]) warps(n uint64) cuda.LaunchConfig { return cuda.Linear(n*32, 256, r.blocks) }

// threads is a launch of one thread per item.
func (r *GPU[V]) threads(n uint64) cuda.LaunchConfig { return cuda.Linear(n, 256, r.blocks*4) }

// ColdCache empties the GPU cache (a cold start for measurements).
func (r *GPU[V]) ColdCache(ctx context.Context) error {
	if r.Placement != OnStorage {
		return nil
	}
	return r.eng.Invalidate(ctx)
}

// bigList and bigSegment mirror kernels/graph.cu: top-down levels read
// lists of more than bigList edges in segments of bigSegment edges, dealt
// out to all warps (bfs_list_long, bfs_expand).
const (
	bigList    = 4096
	bigSegment = 1024
)

// chunkFirst returns, for each chunk c of chunk edges of the CSR offsets
// (edges c*chunk up to (c+1)*chunk), the first vertex whose list starts at
// c*chunk or later, and one more entry for the end of the edges: the
// vertices whose lists start in chunk c are first[c] up to first[c+1].
// Vertices after the last edge have empty lists and belong to no chunk.
func chunkFirst(offsets []uint64, chunk uint64) []uint64 {
	n := uint64(len(offsets) - 1)
	m := offsets[n]
	chunks := (m + chunk - 1) / chunk
	first := make([]uint64, chunks+1)
	v := uint64(0)
	for c := range first {
		bound := min(uint64(c)*chunk, m)
		for v < n && offsets[v] < bound {
			v++
		}
		first[c] = v
	}
	return first
}

// topDownLines estimates the chunks of edges (lines, for edges on storage)
// a top-down step reads for a frontier of nf vertices whose lists hold mf
// edges: a chunk per list and one per chunkEdges edges, at most all chunks.
// It is an upper bound but for lists that share a chunk, which a random
// frontier's rarely do.
func topDownLines(nf, mf, chunkEdges, chunks uint64) uint64 {
	return min(chunks, nf+mf/chunkEdges)
}

// The probe's counters (bfs_probe_* in kernels/graph.cu), 8 bytes each
// from the count buffer's fifth word.
const (
	probeLines = iota
	probeLinesAll
	probeLeft
	probeLeftAll
)

// headsProbe is what bfs_claim_heads measured checking the first in heads
// of every unreached vertex: found, the vertices it settled; left, those
// it left with more than in neighbours, whose lists' first lines number
// lines; leftAll and linesAll the same for the vertices with more
// neighbours than all the heads.
type headsProbe struct {
	found, lines, linesAll, left, leftAll uint64
}

// restSaves estimates the lines of edges that checking the heads past the
// first in (of all a vertex) saves the scan after it. A line only vertices
// of at most all neighbours marked is saved for sure: the rest of their
// heads is their whole list. A line the leftAll vertices marked (k of them
// on average) is saved if the rest settles all of its vertices; taking each
// head to settle a vertex alike and independently, with the rate the first
// in showed (found of found+left), the rest settles one with probability
// s = 1-(1-p)^((all-in)/in), and a line with s^k. That holds for a uniform
// random graph, where the large bottom-up level finds most vertices'
// parents among any few neighbours (the rest saves most lines); on a
// Kronecker graph the sure part decides.
func (p headsProbe) restSaves(in, all uint32) uint64 {
	if in == 0 || all <= in || p.linesAll > p.lines {
		return 0
	}
	saved := float64(p.lines - p.linesAll)
	if p.linesAll > 0 && p.found+p.left > 0 {
		rate := float64(p.found) / float64(p.found+p.left)
		s := 1 - math.Pow(1-rate, float64(all-in)/float64(in))
		saved += float64(p.linesAll) * math.Pow(s, float64(p.leftAll)/float64(p.linesAll))
	}
	return min(p.lines, uint64(saved))
}

// restPays reports whether reading the heads past the first in a vertex
// saves more than it costs: it costs their bytes (N(all-in) ids), and it
// saves saved lines of edges (restSaves). Heads in place (GPU or pinned
// memory) cost nothing.
func (r *GPU[V]) restPays(saved uint64, in uint32) bool {
	if r.Placement != OnStorage {
		return true
	}
	var zero V
	cost := (r.hx.size() - r.hx.start[in/headsBlock]) * uint64(sizeOf(zero))
	return saved*r.chunkEdges*uint64(sizeOf(zero)) > cost
}

// filledBytes is what the GPU cache has read from storage so far.
func (r *GPU[V]) filledBytes() (uint64, error) {
	st, err := r.eng.Stats()
	return st.FilledBytes, err
}

// stageClock times consecutive stages of a run and the bytes the cache
// read in each.
type stageClock struct {
	filled func() (uint64, error)
	at     time.Time
	bytes  uint64
	trace  []Stage
}

func newStageClock(filled func() (uint64, error)) (*stageClock, error) {
	b, err := filled()
	return &stageClock{filled: filled, at: time.Now(), bytes: b}, err
}

// done ends the stage called name.
func (c *stageClock) done(name string) error {
	b, err := c.filled()
	if err != nil {
		return err
	}
	now := time.Now()
	c.trace = append(c.trace, Stage{Name: name, Seconds: now.Sub(c.at).Seconds(), BytesRead: b - c.bytes})
	c.at, c.bytes = now, b
	return nil
}

// CacheStats returns the GPU engine's counters.
func (r *GPU[V]) CacheStats() (gpuengine.Stats, error) { return r.eng.Stats() }

// BFS runs a breadth-first search from src on the GPU; on undirected
// graphs, levels with large frontiers run bottom-up (nextBottomUp).
func (r *GPU[V]) BFS(ctx context.Context, src uint64) (*BFSResult, error) {
	return r.BFSInto(ctx, src, nil)
}

// BFSInto is BFS writing the depths into into, one element per vertex,
// instead of a new slice (nil: a new slice), so that repeated searches
// reuse one result buffer: making a 2^25-vertex slice from memory Go
// reuses costs a single-threaded clear of 128 MiB (14-16 ms), longer than
// a BFS whose edges are in GPU memory. Every element is overwritten; the
// result's Depth is into.
func (r *GPU[V]) BFSInto(ctx context.Context, src uint64, into []int32) (*BFSResult, error) {
	n := r.Info.N
	if src >= n {
		return nil, fmt.Errorf("graph: BFS source %d is not a vertex (graph has %d)", src, n)
	}
	if into != nil && uint64(len(into)) != n {
		return nil, fmt.Errorf("graph: BFS result buffer holds %d depths, the graph has %d vertices", len(into), n)
	}
	var zero V
	vsz := uint64(sizeOf(zero))
	edges, kind, err := r.edgesArg()
	if err != nil {
		return nil, err
	}
	depth, err := r.cctx.Alloc(4 * n)
	if err != nil {
		return nil, err
	}
	defer depth.Free()
	fa, err := r.cctx.Alloc(vsz * max(n, 1))
	if err != nil {
		return nil, err
	}
	defer fa.Free()
	fb, err := r.cctx.Alloc(vsz * max(n, 1))
	if err != nil {
		return nil, err
	}
	defer fb.Free()
	// Frontier vertices with long lists and the number of their first
	// segment (bfs_list_long): at most one per bigList edges. Segments
	// are aligned to bigSegment edges, so a list has at most one more than
	// its length asks for.
	m := r.Offsets[n]
	if m/bigSegment+m/bigList+1 >= 1<<32 {
		return nil, fmt.Errorf("graph: GPU BFS: %d edges are more than its long-list counter holds", m)
	}
	maxBig := m/bigList + 1
	big, err := r.cctx.Alloc(vsz * maxBig)
	if err != nil {
		return nil, err
	}
	defer big.Free()
	bigFirst, err := r.cctx.Alloc(8 * maxBig)
	if err != nil {
		return nil, err
	}
	defer bigFirst.Free()
	// The next frontier's length, big's counter (listed<<32 | segments),
	// bfs_expand's work counter, the level's scout count (the next
	// frontier's edges) and bfs_claim_heads's probe counters (probeLines...).
	count, err := r.cctx.Alloc(64)
	if err != nil {
		return nil, err
	}
	defer count.Free()

	// Two bitmaps of a bit per chunk of edges, for bfs_claim_heads to mark
	// the chunks a bottom-up step would read after the heads checked and
	// after all the heads.
	var marks *cuda.DeviceMem
	markWords := max(1, (r.chunks+31)/32)
	if per := uint64(r.Info.Heads); per > 0 && !r.Info.Directed {
		if marks, err = r.cctx.Alloc(2 * 4 * markWords); err != nil {
			return nil, err
		}
		defer marks.Free()
	}
	// GPU memory for heads on storage, which the first bottom-up level
	// reads.
	var headsMem *cuda.DeviceMem
	if !r.Info.Directed {
		if headsMem, err = r.headsBuffer(); err != nil {
			return nil, err
		}
		if headsMem != nil {
			defer headsMem.Free()
		}
	}
	back, err := r.pinned(0, 4*n)
	if err != nil {
		return nil, err
	}
	// The vertices reached after the early read back began, as (vertex,
	// depth) pairs behind their count (graph_bfs_late_depths).
	lateCap := r.lateCapFor(n)
	late, err := r.cctx.Alloc(16 + 16*lateCap)
	if err != nil {
		return nil, err
	}
	defer late.Free()
	start := time.Now()
	var depthAhead *ahead[int32]
	if into != nil {
		depthAhead = readyAhead(into)
	} else {
		depthAhead = allocAhead[int32](n)
	}
	depthBytes := func(ctx context.Context) ([]byte, error) {
		d, err := depthAhead.get(ctx)
		return cuda.AsBytes(d), err
	}
	var early *pendingRead
	defer func() {
		if early != nil {
			_ = early.wait() // an error return: the read back's own error is not the one to report
		}
	}()
	if err := r.cctx.MemsetD32(depth.Ptr(), 0xffffffff, n); err != nil {
		return nil, err
	}
	if err := depth.Write(4*src, make([]byte, 4)); err != nil {
		return nil, err
	}
	s := [1]V{V(src)}
	if err := fa.Write(0, cuda.AsBytes(s[:])); err != nil {
		return nil, err
	}
	fn := fmt.Sprintf("graph_bfs_expand_%s_%s", r.vs, kind)
	fnUp := fmt.Sprintf("graph_bfs_claim_parents_%s_%s", r.vs, kind)
	// The heads, for the bottom-up levels: placed at the first one.
	var heads cuda.DevicePtr
	var headsIn uint32 // heads a vertex in GPU memory so far
	fnLong := "graph_bfs_list_long_" + r.vs
	res := &BFSResult{Source: src}
	nf := uint64(1)
	reached := uint64(1)
	scout := r.Offsets[src+1] - r.Offsets[src]
	dir := newDirection(n, m)
	cb := make([]byte, 64)
	// tail starts the early read back once the BFS is in its tail: the
	// levels that remain find few vertices, so their depths are patched
	// in at the end while the copy of the others runs beside them.
	tail := func(prev uint64) error {
		if early != nil || !tailBegins(prev, nf, reached, n) {
			return nil
		}
		var err error
		early, err = r.rb.start(ctx, depth, back, 4*n, depthBytes, earlyWorkers(), true)
		res.ReadBackLevel = res.Levels
		return err
	}
	for level := uint32(0); nf > 0; level++ {
		levelStart := time.Now()
		prev := nf
		var trace BFSLevel
		mark := levelStart
		phase := func(name string) {
			now := time.Now()
			trace.Phases = append(trace.Phases, Stage{Name: name, Seconds: now.Sub(mark).Seconds()})
			mark = now
		}
		before, err := r.filledBytes()
		if err != nil {
			return nil, err
		}
		if err := count.Memset8(0); err != nil {
			return nil, err
		}
		// Direction-optimizing on undirected graphs, as the CPU's BFS,
		// except that where Beamer's rule turns to bottom-up, the heads are
		// checked first and the vertices they left are then found the way
		// that reads fewer lines (probe).
		mf := scout // the frontier's edges
		wasBottomUp := dir.bottomUp
		bottomUp := !r.Info.Directed && dir.next(nf, mf)
		scout = 0
		trace.BottomUp, trace.Frontier = bottomUp, nf
		phase("count")
		if !bottomUp && nf <= r.smallFrontierCap() && mf <= bigList {
			// Small top-down levels, as many as stay small, in one launch.
			run, err := r.smallLevels(ctx, edges, kind, fa, fb, nf, depth, level, &dir)
			if err != nil {
				return nil, err
			}
			phase("small levels")
			after, err := r.filledBytes()
			if err != nil {
				return nil, err
			}
			phase("count")
			// The first level gets the launch's host time less the
			// device time of the others.
			total := time.Since(levelStart).Seconds()
			for _, l := range run[1:] {
				total -= l.Seconds
			}
			for j, sl := range run {
				l := sl.BFSLevel
				l.Frontier, l.Fused = nf, true
				if j == 0 {
					l.Seconds, l.BytesRead, l.Phases = max(total, 0), after-before, trace.Phases
				}
				res.Trace = append(res.Trace, l)
				if l.Found > n-reached {
					return nil, fmt.Errorf("graph: GPU BFS level %d: frontier of %d vertices with %d of %d reached", level, l.Found, reached, n)
				}
				reached += l.Found
				prev = nf
				nf = l.Found
				res.Levels++
				fa, fb = fb, fa
			}
			scout = run[len(run)-1].scout
			level += uint32(len(run)) - 1
			if err := tail(prev); err != nil {
				return nil, err
			}
			continue
		}
		settled := uint32(0) // bfs_claim_parents: vertices of at most settled neighbours are done
		if bottomUp && r.Info.Heads > 0 {
			// The heads first. Where the probe decides, it decides on the
			// first block (the heads on storage are read a block at a
			// time), and the rest are read and checked only for a level
			// that then goes on bottom-up, and only where they save more
			// lines of edges than they cost (restPays): a level sent
			// top-down reads half the heads, and so does a graph whose
			// lists are longer than all the heads (uniform) or a level
			// that has few lines left to scan. Later bottom-up levels
			// check the heads in GPU memory.
			per := uint32(r.Info.Heads)
			if heads == 0 {
				if heads, headsIn, err = r.placeHeads(ctx, headsMem, phase); err != nil {
					return nil, fmt.Errorf("graph: GPU BFS level %d (heads): %w", level, err)
				}
			}
			rest := func() error {
				if headsIn == per {
					return nil
				}
				if err := r.readHeadsRest(ctx, headsMem, headsIn, phase); err != nil {
					return fmt.Errorf("graph: GPU BFS level %d (heads): %w", level, err)
				}
				headsIn = per
				return nil
			}
			claim := func(from, to uint32, probe bool) error {
				var lines, linesAll cuda.DevicePtr
				if probe {
					lines, linesAll = marks.Ptr(), marks.Ptr().Add(4*markWords)
				}
				if err := r.launch(ctx, "graph_bfs_claim_heads_"+r.vs, r.threads(n), cuda.Ptr(heads), cuda.Ptr(r.dOff.Ptr()),
					cuda.U64(n), cuda.U32(from), cuda.U32(to), cuda.Ptr(depth.Ptr()), cuda.U32(level), cuda.Ptr(fb.Ptr()), cuda.Ptr(count.Ptr()),
					cuda.Ptr(count.Ptr().Add(24)), cuda.U64(r.chunkEdges), cuda.Ptr(lines), cuda.Ptr(linesAll), cuda.U32(per),
					cuda.Ptr(count.Ptr().Add(32))); err != nil {
					return fmt.Errorf("graph: GPU BFS level %d (heads): %w", level, err)
				}
				phase("check heads")
				return nil
			}
			probe := !wasBottomUp && marks != nil
			if !probe {
				if err := claim(0, headsIn, false); err != nil {
					return nil, err
				}
			} else {
				if err := marks.Memset8(0); err != nil {
					return nil, err
				}
				if err := claim(0, headsIn, true); err != nil {
					return nil, err
				}
				if err := count.Read(0, cb); err != nil {
					return nil, err
				}
				trace.HeadsFirst = true
				word := func(at int) uint64 { return *(*uint64)(unsafe.Pointer(&cb[at])) }
				probed := func(counter int) uint64 { return word(32 + 8*counter) }
				pr := headsProbe{found: word(0), lines: probed(probeLines), linesAll: probed(probeLinesAll),
					left: probed(probeLeft), leftAll: probed(probeLeftAll)}
				trace.ScanLines, trace.PastHeadsLines = pr.lines, pr.linesAll
				trace.TopDownLines = topDownLines(nf, mf, r.chunkEdges, r.chunks)
				if trace.ScanLines >= trace.TopDownLines {
					dir.topDown(mf)
					bottomUp, trace.BottomUp = false, false
				} else if headsIn < per {
					trace.RestSavedLines = pr.restSaves(headsIn, per)
				}
				if trace.BottomUp && headsIn < per && r.restPays(trace.RestSavedLines, headsIn) {
					from := headsIn
					if err := rest(); err != nil {
						return nil, err
					}
					if err := claim(from, per, false); err != nil {
						return nil, err
					}
					trace.HeadsRest = true
				}
			}
			settled = headsIn
		}
		if bottomUp {
			// A warp per chunk of a line's edges.
			if err := r.launch(ctx, fnUp, r.warps(r.chunks), cuda.Ptr(r.dOff.Ptr()), cuda.Ptr(r.dChunks.Ptr()), cuda.U64(r.chunks),
				cuda.U64(r.chunkEdges), edges, cuda.U32(settled), cuda.Ptr(depth.Ptr()), cuda.U32(level), cuda.Ptr(fb.Ptr()), cuda.Ptr(count.Ptr()),
				cuda.Ptr(count.Ptr().Add(24))); err != nil {
				return nil, fmt.Errorf("graph: GPU BFS level %d (bottom-up): %w", level, err)
			}
			if err := count.Read(0, cb); err != nil {
				return nil, err
			}
			phase("scan")
			res.BottomUpLevels++
		} else {
			// The long lists first, then the level in one kernel: the
			// short lists a warp each, then the long ones in segments.
			if err := r.launch(ctx, fnLong, r.threads(nf), cuda.Ptr(r.dOff.Ptr()), cuda.Ptr(fa.Ptr()), cuda.U64(nf),
				cuda.Ptr(big.Ptr()), cuda.Ptr(bigFirst.Ptr()), cuda.Ptr(count.Ptr().Add(8))); err != nil {
				return nil, fmt.Errorf("graph: GPU BFS level %d (long lists): %w", level, err)
			}
			if err := count.Read(0, cb); err != nil {
				return nil, err
			}
			bc := *(*uint64)(unsafe.Pointer(&cb[8]))
			nBig, nSegs := bc>>32, bc&(1<<32-1)
			if nBig > min(nf, maxBig) {
				return nil, fmt.Errorf("graph: GPU BFS level %d: %d long lists in a frontier of %d", level, nBig, nf)
			}
			trace.LongLists = nBig
			phase("classify")
			if err := r.launch(ctx, fn, r.warps(nf+nSegs), cuda.Ptr(r.dOff.Ptr()), edges, cuda.Ptr(fa.Ptr()), cuda.U64(nf),
				cuda.Ptr(depth.Ptr()), cuda.U32(level), cuda.Ptr(fb.Ptr()), cuda.Ptr(count.Ptr()), cuda.Ptr(big.Ptr()),
				cuda.Ptr(bigFirst.Ptr()), cuda.U64(nBig), cuda.U64(nSegs), cuda.Ptr(count.Ptr().Add(16)),
				cuda.Ptr(count.Ptr().Add(24))); err != nil {
				return nil, fmt.Errorf("graph: GPU BFS level %d: %w", level, err)
			}
			if err := count.Read(0, cb); err != nil {
				return nil, err
			}
			phase("expand")
		}
		scout = *(*uint64)(unsafe.Pointer(&cb[24]))
		nf = *(*uint64)(unsafe.Pointer(&cb[0]))
		if nf > n-reached {
			return nil, fmt.Errorf("graph: GPU BFS level %d: frontier of %d vertices with %d of %d reached", level, nf, reached, n)
		}
		after, err := r.filledBytes()
		if err != nil {
			return nil, err
		}
		phase("count")
		trace.Found, trace.Seconds, trace.BytesRead = nf, time.Since(levelStart).Seconds(), after-before
		res.Trace = append(res.Trace, trace)
		reached += nf
		res.Levels++
		fa, fb = fb, fa
		if err := tail(prev); err != nil {
			return nil, err
		}
	}
	levelsEnd := time.Now()
	if res.Depth, err = depthAhead.get(ctx); err != nil {
		return nil, err
	}
	if err := r.finishReadBack(ctx, early, depth, back, late, lateCap, uint32(res.ReadBackLevel), res); err != nil {
		early = nil
		return nil, err
	}
	early = nil
	res.Elapsed = time.Since(start)
	res.ReadBack = time.Since(levelsEnd)
	res.Reached = reached // the levels' counts; the tests count the depths
	res.EdgesTouched = EdgesTouchedFromDepth(r.Offsets, res.Depth)
	return res, nil
}

// The early read back. A BFS's depths are read back (readBacker: the copy
// engine into pinned memory, the host's cores on into the result) while
// its last levels run, instead of after them: from the level on which its
// frontier shrinks to less than half the vertices reached, with at least a
// quarter of the graph's vertices reached (tailBegins). The copy may see a
// depth written after it began, or not; graph_bfs_late_depths then lists
// the vertices reached after it began and the host patches their depths
// in. On a Kronecker graph of scale 25 on storage (H200 host), whose last
// four levels take some 4 ms, the time after the last level fell from
// 3.1-3.5 ms to 1.3-1.65 ms, while those levels took 0.3-0.6 ms longer:
// their own small copies wait behind the read back's (readback.go) and
// they share the cores with it.
//
// earlyWorkers is the number of the host's goroutines that copy the
// depths out of pinned memory while the levels run: a quarter of the
// cores, leaving the others to the Target's reads; the rest is copied out
// at the end with all of them.
func earlyWorkers() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// tailBegins reports whether a BFS is in its tail after a level that took
// a frontier of prev vertices to one of next, with reached of n vertices
// reached so far.
func tailBegins(prev, next, reached, n uint64) bool {
	return next > 0 && next < prev && 2*next < reached && 4*reached >= n
}

// lateCapFor is how many vertices reached after the early read back began
// BFS patches in at most (r.lateCap when set): past a sixteenth of the
// vertices, the pairs (16 bytes each) cost as much as reading the depths
// (4 bytes each) again, which BFS then does. The pairs come back through
// the depths' pinned buffer, so there are never more than n/4.
func (r *GPU[V]) lateCapFor(n uint64) uint64 {
	if r.lateCap > 0 {
		return min(r.lateCap, n/4)
	}
	return min(n/16+1024, n/4)
}

// finishReadBack puts depth's final values into res.Depth: all of them
// when no early read back began (early nil) or more than lateCap vertices
// were reached after it; else, once early has ended, those reached after
// level after (graph_bfs_late_depths into late: their count, then the
// pairs). It ends early whatever happens.
func (r *GPU[V]) finishReadBack(ctx context.Context, early *pendingRead, depth *cuda.DeviceMem, back *cuda.HostMem, late *cuda.DeviceMem,
	lateCap uint64, after uint32, res *BFSResult) error {
	out := cuda.AsBytes(res.Depth)
	if early == nil {
		return r.rb.read(ctx, depth, back, out)
	}
	n := uint64(len(res.Depth))
	err := late.Memset8(0) // the pairs' count
	if err == nil {
		err = r.launch(ctx, "graph_bfs_late_depths", r.threads(n), cuda.Ptr(depth.Ptr()), cuda.U64(n), cuda.U32(after),
			cuda.Ptr(late.Ptr().Add(16)), cuda.U64(lateCap), cuda.Ptr(late.Ptr()))
	}
	if err := errors.Join(err, early.wait()); err != nil {
		return fmt.Errorf("graph: GPU BFS read back: %w", err)
	}
	var cb [8]byte
	if err := late.Read(0, cb[:]); err != nil {
		return err
	}
	k := binary.LittleEndian.Uint64(cb[:])
	if k > lateCap {
		res.ReadBackLevel, res.LateDepths = 0, 0
		return r.rb.read(ctx, depth, back, out)
	}
	// The pairs come through back, free again (lateCapFor: 16k <= 4n).
	if err := r.rb.stream.CopyDtoH(back, 0, late.Ptr().Add(16), 16*k); err != nil {
		return errors.Join(err, r.rb.stream.Synchronize())
	}
	if err := r.rb.stream.Synchronize(); err != nil {
		return err
	}
	pairs := unsafe.Slice((*uint64)(back.Ptr()), 2*k)
	// Scattered writes, each a cache miss: the cores share them.
	err = parallelChunksErr(ctx, runtime.GOMAXPROCS(0), int(k), 2048, func(_ context.Context, lo, hi int) error {
		for i := lo; i < hi; i++ {
			v, d := pairs[2*i], pairs[2*i+1]
			if v >= n || d <= uint64(after) || d >= 0xffffffff {
				return fmt.Errorf("graph: GPU BFS read back: vertex %d at depth %d among those reached after level %d", v, d, after)
			}
			res.Depth[v] = int32(d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.LateDepths = k
	return nil
}

// Small levels (bfs_small_levels in kernels/graph.cu, whose state layout
// these mirror): top-down levels of at most smallFrontierCap vertices and
// smallEdgeCap edges run in one launch, up to smallMaxLevels a launch.
const (
	smallMaxLevels   = 1024
	smallEdgeCap     = 1 << 16
	smallStateWords  = 16
	smallRecordWords = 3
	smallFailed      = 11
	smallLevelsRun   = 12
	smallUnchecked   = 13
)

// smallBlocksPerSM is bfs_small_levels' grid: blocks of 256 threads a
// multiprocessor, two of the four BAM_ARRAY_BOUNDS lets reside, so that
// the whole grid is resident beside the fill copier's warps (its levels
// meet at a grid barrier).
const smallBlocksPerSM = 2

// smallGrid is bfs_small_levels' launch: every block resident at once.
func (r *GPU[V]) smallGrid() cuda.LaunchConfig {
	return cuda.LaunchConfig{Grid: cuda.Dim3{X: r.smallBlocks, Y: 1, Z: 1}, Block: cuda.Dim3{X: 256, Y: 1, Z: 1}}
}

// smallFrontierCap is the largest frontier bfs_small_levels takes: four
// vertices a warp.
func (r *GPU[V]) smallFrontierCap() uint64 { return 4 * uint64(r.smallBlocks) * 8 }

// smallLevel is a level bfs_small_levels ran, with the edges of the
// frontier it found.
type smallLevel struct {
	BFSLevel
	scout uint64
}

// smallLevels runs top-down levels from level on, the frontier of nf
// vertices in fa, in one launch of bfs_small_levels, for as long as they
// stay small and Beamer's rule keeps them top-down; dir has decided the
// first level already and is brought up to date with the rest. It returns
// each level run with what it found and, but for the first, its time on
// the device's clock.
func (r *GPU[V]) smallLevels(ctx context.Context, edges cuda.Arg, kind string, fa, fb *cuda.DeviceMem, nf uint64, depth *cuda.DeviceMem, level uint32, dir *direction) ([]smallLevel, error) {
	if r.small == nil {
		var err error
		if r.small, err = r.cctx.Alloc(8 * (smallStateWords + smallRecordWords*smallMaxLevels)); err != nil {
			return nil, err
		}
	}
	state, record := r.small.Ptr(), r.small.Ptr().Add(8*smallStateWords)
	if err := r.small.Memset8(0); err != nil {
		return nil, err
	}
	undirected := uint32(1)
	if r.Info.Directed {
		undirected = 0
	}
	timeout := uint64(r.eng.Config().Timeout.Nanoseconds())
	err := r.launch(ctx, "graph_bfs_small_levels_"+r.vs+"_"+kind, r.smallGrid(), cuda.Ptr(r.dOff.Ptr()), edges, cuda.Ptr(fa.Ptr()),
		cuda.Ptr(fb.Ptr()), cuda.U64(nf), cuda.Ptr(depth.Ptr()), cuda.U32(level), cuda.U64(dir.unchecked), cuda.U32(undirected),
		cuda.U64(r.smallFrontierCap()), cuda.U64(smallEdgeCap), cuda.U32(smallMaxLevels), cuda.Ptr(state), cuda.Ptr(record), cuda.U64(timeout))
	if err != nil {
		return nil, fmt.Errorf("graph: GPU BFS level %d (small levels): %w", level, err)
	}
	st := make([]byte, 8*smallStateWords)
	if err := r.small.Read(0, st); err != nil {
		return nil, err
	}
	word := func(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	if word(st, smallFailed) != 0 {
		return nil, fmt.Errorf("graph: GPU BFS level %d (small levels): a grid barrier waited longer than %v", level, r.eng.Config().Timeout)
	}
	k := word(st, smallLevelsRun)
	if k == 0 || k > smallMaxLevels {
		return nil, fmt.Errorf("graph: GPU BFS level %d (small levels): the kernel ran %d levels", level, k)
	}
	rec := make([]byte, 8*smallRecordWords*k)
	if err := r.small.Read(8*smallStateWords, rec); err != nil {
		return nil, err
	}
	run := make([]smallLevel, k)
	for j := range run {
		found, edges, at := word(rec, 3*j), word(rec, 3*j+1), word(rec, 3*j+2)
		if j > 0 {
			// The host's rule must agree that this level went top-down
			// (directed graphs have no rule: they stay top-down).
			if prev := run[j-1]; !r.Info.Directed && dir.next(prev.Found, prev.scout) {
				return nil, fmt.Errorf("graph: GPU BFS level %d: the small-levels kernel ran top-down where the rule turns bottom-up", level+uint32(j))
			}
			run[j].Seconds = float64(at-word(rec, 3*(j-1)+2)) / 1e9
		}
		run[j].Found, run[j].scout = found, edges
	}
	if got := word(st, smallUnchecked); !r.Info.Directed && got != dir.unchecked {
		return nil, fmt.Errorf("graph: GPU BFS level %d: the small-levels kernel counts %d edges unchecked, the runner %d", level, got, dir.unchecked)
	}
	return run, nil
}

// CC computes connected components on the GPU (Afforest, as CC).
func (r *GPU[V]) CC(ctx context.Context) (*CCResult, error) {
	n := r.Info.N
	var zero V
	vsz := uint64(sizeOf(zero))
	edges, kind, err := r.edgesArg()
	if err != nil {
		return nil, err
	}
	// comp: the labels; snap: the second heads column, then the labels
	// after the first pass (for counting the list elements read); idx and
	// out: the vertices sampled to find the largest component, and their
	// labels.
	var comp, snap, idx, out *cuda.DeviceMem
	defer func() {
		for _, m := range []*cuda.DeviceMem{comp, snap, idx, out} {
			if m != nil {
				m.Free()
			}
		}
	}()
	if comp, err = r.cctx.Alloc(vsz * max(n, 1)); err != nil {
		return nil, err
	}
	if snap, err = r.cctx.Alloc(vsz * max(n, 1)); err != nil {
		return nil, err
	}
	sample := make([]uint64, ccSamples)
	if n > 0 {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range sample {
			sample[i] = rng.Uint64N(n)
		}
	}
	if idx, err = upload(r.cctx, cuda.AsBytes(sample)); err != nil {
		return nil, err
	}
	if out, err = r.cctx.Alloc(vsz * ccSamples); err != nil {
		return nil, err
	}
	back, err := r.pinned(1, vsz*n)
	if err != nil {
		return nil, err
	}
	clock, err := newStageClock(r.filledBytes)
	if err != nil {
		return nil, err
	}
	start := clock.at
	finalAhead := allocAhead[V](n)
	off := cuda.Ptr(r.dOff.Ptr())
	compArg := cuda.Ptr(comp.Ptr())
	compress := func() error {
		if err := r.launch(ctx, "graph_cc_compress_"+r.vs, r.threads(n), compArg, cuda.U64(n)); err != nil {
			return err
		}
		return clock.done("compress")
	}
	if err := r.launch(ctx, "graph_cc_init_"+r.vs, r.threads(n), compArg, cuda.U64(n)); err != nil {
		return nil, err
	}
	if r.Info.Heads >= ccSampleRounds {
		// Afforest's rounds: every vertex linked to its first neighbour,
		// compress, then to its second (kept in snap by the first round).
		if err := r.linkHeads(ctx, comp.Ptr(), snap.Ptr()); err != nil {
			return nil, fmt.Errorf("graph: GPU CC first pass: %w", err)
		}
		if err := clock.done("init, link heads"); err != nil {
			return nil, err
		}
		if err := compress(); err != nil {
			return nil, err
		}
		if err := r.launch(ctx, "graph_cc_link_column_"+r.vs, r.threads(n), cuda.Ptr(snap.Ptr()), cuda.U64(n), compArg); err != nil {
			return nil, fmt.Errorf("graph: GPU CC first pass: %w", err)
		}
		if err := clock.done("link second"); err != nil {
			return nil, err
		}
	} else {
		// A warp per chunk of edges, as many warps as a thread per vertex had.
		if err := r.launch(ctx, fmt.Sprintf("graph_cc_link_first_%s_%s", r.vs, kind), cuda.Linear(r.chunks*32, 256, 4*r.blocks), off,
			cuda.Ptr(r.dChunks.Ptr()), cuda.U64(r.chunks), edges, cuda.U32(ccSampleRounds), compArg); err != nil {
			return nil, fmt.Errorf("graph: GPU CC first pass: %w", err)
		}
		if err := clock.done("init, link first"); err != nil {
			return nil, err
		}
	}
	if err := compress(); err != nil {
		return nil, err
	}
	// The largest component after the first pass: the most frequent of
	// the sampled labels (as CC's mostFrequent, same samples).
	skip := ^uint64(0)
	if err := r.launch(ctx, "graph_cc_snapshot_"+r.vs, r.threads(n), compArg, cuda.U64(n), cuda.Ptr(snap.Ptr()),
		cuda.Ptr(idx.Ptr()), cuda.U64(ccSamples), cuda.Ptr(out.Ptr())); err != nil {
		return nil, err
	}
	if !r.Info.Directed && n > 0 {
		got := make([]V, ccSamples)
		if err := out.Read(0, cuda.AsBytes(got)); err != nil {
			return nil, err
		}
		counts := map[uint64]int{}
		best := 0
		for _, l := range got {
			c := uint64(l)
			if counts[c]++; counts[c] > best {
				skip, best = c, counts[c]
			}
		}
	}
	if err := clock.done("sample"); err != nil {
		return nil, err
	}
	// After the heads, which may be any of a list's neighbours, every
	// list of more than two is linked whole; after the first neighbours,
	// from the third on.
	from := uint32(ccSampleRounds)
	if r.Info.Heads >= ccSampleRounds {
		from = 0
	}
	if err := r.launch(ctx, fmt.Sprintf("graph_cc_link_rest_%s_%s", r.vs, kind), r.warps(n), off, edges, cuda.U64(n),
		cuda.U32(from), cuda.U32(ccSampleRounds), cuda.U64(skip), compArg); err != nil {
		return nil, fmt.Errorf("graph: GPU CC second pass: %w", err)
	}
	if err := clock.done("link rest"); err != nil {
		return nil, err
	}
	if err := compress(); err != nil {
		return nil, err
	}
	final, err := finalAhead.get(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.rb.read(ctx, comp, back, cuda.AsBytes(final)); err != nil {
		return nil, err
	}
	if err := clock.done("read back"); err != nil {
		return nil, err
	}
	elapsed := clock.at.Sub(start)
	res := &CCResult{Comp: make([]uint64, n), Elapsed: elapsed, Trace: clock.trace}
	for i, c := range final {
		res.Comp[i] = uint64(c)
	}
	// What the kernels read: the first neighbours of every vertex, the
	// rest of those outside the skipped component (by the labels after
	// the first pass, in snap).
	labels := final
	if err := r.rb.read(ctx, snap, back, cuda.AsBytes(labels)); err != nil {
		return nil, err
	}
	for v := uint64(0); v < n; v++ {
		d := r.Offsets[v+1] - r.Offsets[v]
		res.EdgesTouched += min(d, ccSampleRounds)
		if d > ccSampleRounds && (skip == ^uint64(0) || uint64(labels[v]) != skip) {
			res.EdgesTouched += d - ccSampleRounds
		}
	}
	res.Components, res.Largest = componentSizes(res.Comp)
	return res, nil
}

// Close frees the device memory and stops the engine.
func (r *GPU[V]) Close() error {
	var errs []error
	for _, m := range []*cuda.DeviceMem{r.dEdges, r.dHeads, r.dHeadsBase, r.dOff, r.dChunks, r.small} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	for _, m := range []*cuda.HostMem{r.hEdges, r.hHeads} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	for _, b := range r.back {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if r.rb != nil {
		errs = append(errs, r.rb.close())
	}
	if r.plain != nil {
		errs = append(errs, r.plain.Destroy())
	}
	for _, a := range []*gpuengine.Array{r.arr, r.heads} {
		if a != nil {
			a.Unbind()
		}
	}
	if r.mod != nil {
		errs = append(errs, r.mod.Unload())
	}
	if r.eng != nil {
		errs = append(errs, r.eng.Close())
	}
	for _, ns := range r.nss {
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}
