package graph

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/gpucache"
)

// Catalog metadata keys on a graph's offsets array.
const (
	metaKind     = "graph.kind" // "csr"
	metaVertices = "graph.vertices"
	metaEdges    = "graph.edges"
	metaDirected = "graph.directed"
	metaIDBits   = "graph.id_bits"
	metaWeighted = "graph.weighted"
	metaHeads    = "graph.heads" // entries per vertex of the heads array; absent: no heads array
	// metaHeadsPacked is "true" where the heads array is packed
	// (HeadsPerVertex); absent: full.
	metaHeadsPacked = "graph.heads_packed"
)

// Array names of graph NAME.
func offsetsName(name string) string { return name + ".offsets" }
func edgesName(name string) string   { return name + ".edges" }
func weightsName(name string) string { return name + ".weights" }
func headsName(name string) string   { return name + ".heads" }

// Info describes a stored graph.
type Info struct {
	Name     string `json:"name"`
	N        uint64 `json:"vertices"`
	M        uint64 `json:"edges"` // directed edges stored (2x the undirected edges)
	Directed bool   `json:"directed"`
	Weighted bool   `json:"weighted"`
	IDBits   int    `json:"id_bits"` // 32 or 64
	// Heads is the number of entries per vertex of the heads array
	// (HeadsOf; HeadsPerVertex, or 2 for graphs saved before there were
	// more), 0 for graphs saved without one.
	Heads int `json:"heads_per_vertex,omitempty"`
	// HeadsPacked says the heads array's block b holds only the vertices
	// of more than 2b neighbours (HeadsPerVertex); graphs saved before
	// hold every vertex in every block.
	HeadsPacked bool              `json:"heads_packed,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
}

// EdgeBytes is the size of the edges array's elements.
func (i Info) EdgeBytes() uint64 { return i.M * uint64(i.IDBits/8) }

// SaveOptions configure Save.
type SaveOptions struct {
	// Overwrite replaces a graph of the same name.
	Overwrite bool
	// Meta is added to the graph's catalog metadata (generator, source file).
	Meta     map[string]string
	Progress Progress
	// fullHeads saves the heads array full, as graphs were saved before
	// it was packed (tests of those graphs).
	fullHeads bool
}

// Save writes g into the store as graph name and flushes it.
func Save[V VertexID](ctx context.Context, s *bam.Store, name string, g *CSR[V], opt SaveOptions) error {
	if err := checkOffsets(g.Offsets, g.N, uint64(len(g.Edges))); err != nil {
		return err
	}
	bits := 32
	var zero V
	if _, ok := any(zero).(uint64); ok {
		bits = 64
	}
	names := []string{offsetsName(name), edgesName(name), weightsName(name), headsName(name)}
	for _, n := range names {
		if _, err := s.Object(n); err == nil {
			if !opt.Overwrite {
				return fmt.Errorf("graph %q: array %q: %w (use overwrite)", name, n, bam.ErrExists)
			}
			if err := s.DeleteObject(ctx, n); err != nil {
				return fmt.Errorf("graph %q: replace: %w", name, err)
			}
		}
	}
	meta := map[string]string{
		metaKind:        "csr",
		metaVertices:    strconv.FormatUint(g.N, 10),
		metaEdges:       strconv.FormatUint(uint64(len(g.Edges)), 10),
		metaDirected:    strconv.FormatBool(g.Directed),
		metaIDBits:      strconv.Itoa(bits),
		metaWeighted:    strconv.FormatBool(g.Weights != nil),
		metaHeads:       strconv.Itoa(HeadsPerVertex),
		metaHeadsPacked: strconv.FormatBool(!opt.fullHeads),
	}
	for k, v := range opt.Meta {
		if _, ok := meta[k]; !ok {
			meta[k] = v
		}
	}
	prog := progressOr(opt.Progress)
	// Edges first, offsets (which carry the metadata) last: a graph whose
	// offsets exist is complete.
	// The edges start on a multiple of the largest GPU line, so a GPU
	// engine may cache them in lines of any size (GPUOptions.LineSize).
	if err := writeArray(ctx, s, edgesName(name), g.Edges, nil, max(EdgeAlign, s.LineSize()), prog); err != nil {
		return err
	}
	if g.Weights != nil {
		if err := writeArray(ctx, s, weightsName(name), g.Weights, nil, 0, prog); err != nil {
			return err
		}
	}
	// The heads are aligned as the edges: CC reads both through its lines.
	heads := HeadsOf(g)
	if opt.fullHeads {
		heads = expandHeads(newHeadsIndex(g.Offsets, HeadsPerVertex, true), g.Offsets, heads)
	}
	if err := writeArray(ctx, s, headsName(name), heads, nil, max(EdgeAlign, s.LineSize()), prog); err != nil {
		return err
	}
	if err := writeArray(ctx, s, offsetsName(name), g.Offsets, meta, 0, prog); err != nil {
		return err
	}
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("graph %q: flush: %w", name, err)
	}
	return nil
}

// writeChunk is the number of bytes written per WriteRange.
const writeChunk = 4 << 20

// EdgeAlign is the byte alignment of a graph's edges array in its store:
// the largest GPU cache line (gpucache.MaxLineSize).
const EdgeAlign = gpucache.MaxLineSize

// writeArray writes data as a new array name, its storage aligned to align
// bytes (0: the store's line size).
func writeArray[T any](ctx context.Context, s *bam.Store, name string, data []T, meta map[string]string, align int, prog Progress) error {
	a, err := array.Create[T](ctx, s, name, uint64(len(data)), &array.Options{NoZero: true, Meta: meta, Align: align})
	if err != nil {
		return fmt.Errorf("graph: create %q: %w", name, err)
	}
	var zero T
	per := max(1, writeChunk/int(sizeOf(zero)))
	bar := prog.Start("write "+name, int64(len(data)))
	defer bar.Done()
	return parallelChunksErr(ctx, 4, len(data), per, func(ctx context.Context, lo, hi int) error {
		if err := a.WriteRange(ctx, uint64(lo), data[lo:hi]); err != nil {
			return fmt.Errorf("graph: write %q: %w", name, err)
		}
		bar.Add(int64(hi - lo))
		return nil
	})
}

// Stat reads the description of graph name from the store's catalog.
func Stat(s *bam.Store, name string) (Info, error) {
	o, err := s.Object(offsetsName(name))
	if err != nil {
		return Info{}, fmt.Errorf("graph %q: %w", name, err)
	}
	info := Info{Name: name, Meta: o.Info().Meta}
	get := func(k string) (string, error) {
		v, ok := o.Meta(k)
		if !ok {
			return "", fmt.Errorf("%w: graph %q: offsets array has no %s metadata (not a graph?)", ErrFormat, name, k)
		}
		return v, nil
	}
	var errs []error
	parseU := func(k string) uint64 {
		v, err := get(k)
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: graph %q: %s=%q", ErrFormat, name, k, v))
		}
		return n
	}
	parseB := func(k string) bool {
		v, err := get(k)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: graph %q: %s=%q", ErrFormat, name, k, v))
		}
		return b
	}
	info.N = parseU(metaVertices)
	info.M = parseU(metaEdges)
	info.IDBits = int(parseU(metaIDBits))
	info.Directed = parseB(metaDirected)
	info.Weighted = parseB(metaWeighted)
	if v, ok := o.Meta(metaHeads); ok {
		h, err := strconv.Atoi(v)
		// Graphs saved before there were HeadsPerVertex hold one block.
		if err != nil || h != HeadsPerVertex && h != headsBlock {
			errs = append(errs, fmt.Errorf("%w: graph %q: %s=%q (want %d or %d)", ErrFormat, name, metaHeads, v, HeadsPerVertex, headsBlock))
		}
		info.Heads = h
		if v, ok := o.Meta(metaHeadsPacked); ok {
			p, err := strconv.ParseBool(v)
			if err != nil || p && h != HeadsPerVertex {
				errs = append(errs, fmt.Errorf("%w: graph %q: %s=%q with %d heads a vertex", ErrFormat, name, metaHeadsPacked, v, h))
			}
			info.HeadsPacked = p
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Info{}, err
	}
	if info.IDBits != 32 && info.IDBits != 64 {
		return Info{}, fmt.Errorf("%w: graph %q: id bits %d", ErrFormat, name, info.IDBits)
	}
	if o.Len() != info.N+1 {
		return Info{}, fmt.Errorf("%w: graph %q: offsets array has %d elements for %d vertices", ErrFormat, name, o.Len(), info.N)
	}
	return info, nil
}

// Graph is a graph whose offsets are in memory and whose edges are read
// through an EdgeSource: the store's engine, or memory.
type Graph[V VertexID] struct {
	Info
	Offsets []uint64
	Edges   EdgeSource[V]
	// Array is the edges array in the store (nil for in-memory graphs).
	Array *array.Array[V]
	// Heads reads the heads array (Info.Heads entries per vertex, packed
	// where Info.HeadsPacked says; nil when the graph has none) and
	// HeadsArray is it in the store.
	Heads      EdgeSource[V]
	HeadsArray *array.Array[V]
	// headsIx locates a vertex's heads in Heads (set by Load and
	// InMemory; headsIndex builds it otherwise).
	headsIx *headsIndex
}

// headsIndex returns the index of g's heads array.
func (g *Graph[V]) headsIndex() *headsIndex {
	if g.headsIx == nil || g.headsIx.per != uint64(g.Info.Heads) || g.headsIx.packed != g.HeadsPacked {
		g.headsIx = newHeadsIndex(g.Offsets, uint64(g.Info.Heads), g.HeadsPacked)
	}
	return g.headsIx
}

// Degree is the number of neighbours of v.
func (g *Graph[V]) Degree(v uint64) uint64 { return g.Offsets[v+1] - g.Offsets[v] }

// Load opens graph name: it reads the offsets into memory (checking them)
// and leaves the edges on storage, read through the store's engine.
func Load[V VertexID](ctx context.Context, s *bam.Store, name string) (*Graph[V], error) {
	info, err := Stat(s, name)
	if err != nil {
		return nil, err
	}
	var zero V
	if bits := int(sizeOf(zero)) * 8; bits != info.IDBits {
		return nil, fmt.Errorf("graph %q has %d-bit vertex ids, opened as %d-bit: %w", name, info.IDBits, bits, bam.ErrTypeMismatch)
	}
	off, err := array.Open[uint64](s, offsetsName(name))
	if err != nil {
		return nil, err
	}
	edges, err := array.Open[V](s, edgesName(name))
	if err != nil {
		return nil, err
	}
	if edges.Len() != info.M {
		return nil, fmt.Errorf("%w: graph %q: edges array has %d elements, metadata says %d", ErrFormat, name, edges.Len(), info.M)
	}
	g := &Graph[V]{Info: info, Offsets: make([]uint64, info.N+1), Array: edges, Edges: ArraySource[V]{edges}}
	if info.Heads > 0 {
		h, err := array.Open[V](s, headsName(name))
		if err != nil {
			return nil, fmt.Errorf("graph %q: heads: %w", name, err)
		}
		g.HeadsArray, g.Heads = h, ArraySource[V]{h}
	}
	if err := off.ReadRange(ctx, 0, g.Offsets); err != nil {
		return nil, fmt.Errorf("graph %q: read offsets: %w", name, err)
	}
	if err := checkOffsets(g.Offsets, info.N, info.M); err != nil {
		return nil, fmt.Errorf("graph %q: %w", name, err)
	}
	if g.HeadsArray != nil {
		if err := g.headsIndex().check(name, g.HeadsArray.Len()); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// LoadCSR reads the whole graph into memory.
func LoadCSR[V VertexID](ctx context.Context, s *bam.Store, name string) (*CSR[V], error) {
	g, err := Load[V](ctx, s, name)
	if err != nil {
		return nil, err
	}
	c := &CSR[V]{N: g.N, Offsets: g.Offsets, Edges: make([]V, g.M), Directed: g.Directed}
	if err := g.Array.ReadRange(ctx, 0, c.Edges); err != nil {
		return nil, err
	}
	if g.Weighted {
		w, err := array.Open[float32](s, weightsName(name))
		if err != nil {
			return nil, err
		}
		c.Weights = make([]float32, g.M)
		if err := w.ReadRange(ctx, 0, c.Weights); err != nil {
			return nil, err
		}
	}
	if err := c.Check(); err != nil {
		return nil, fmt.Errorf("graph %q: %w", name, err)
	}
	return c, nil
}

// InMemory returns g as a Graph whose edges, and heads (HeadsOf, made
// here), are read from memory (the CPU baseline of benchmark G1).
func InMemory[V VertexID](name string, g *CSR[V]) *Graph[V] {
	var zero V
	return &Graph[V]{
		Info: Info{Name: name, N: g.N, M: uint64(len(g.Edges)), Directed: g.Directed, Weighted: g.Weights != nil,
			IDBits: int(sizeOf(zero)) * 8, Heads: HeadsPerVertex, HeadsPacked: true},
		Offsets: g.Offsets,
		Edges:   SliceSource[V](g.Edges),
		Heads:   SliceSource[V](HeadsOf(g)),
		headsIx: newHeadsIndex(g.Offsets, HeadsPerVertex, true),
	}
}

// EdgeSource reads runs of the edges array.
type EdgeSource[V VertexID] interface {
	// Read returns edges [lo, hi), in buf (len(buf) >= hi-lo) or in memory
	// the source owns; the caller must not keep or modify the result.
	Read(ctx context.Context, lo, hi uint64, buf []V) ([]V, error)
}

// ArraySource reads edges through the store's engine.
type ArraySource[V VertexID] struct{ A *array.Array[V] }

// Read implements EdgeSource.
func (s ArraySource[V]) Read(ctx context.Context, lo, hi uint64, buf []V) ([]V, error) {
	b := buf[:hi-lo]
	if err := s.A.ReadRange(ctx, lo, b); err != nil {
		return nil, err
	}
	return b, nil
}

// SliceSource reads edges from memory.
type SliceSource[V VertexID] []V

// Read implements EdgeSource.
func (s SliceSource[V]) Read(_ context.Context, lo, hi uint64, _ []V) ([]V, error) {
	return s[lo:hi], nil
}
