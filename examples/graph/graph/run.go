package graph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cuda"
)

// GPUAvailable reports whether a usable GPU and driver are present.
func GPUAvailable() bool { return cuda.Available() == nil }

// RunOptions configure RunBFS and RunCC.
type RunOptions struct {
	// Engine is "auto" (GPU when present), "cpu" or "gpu".
	Engine string
	// Dir is the store's directory (the GPU engine reads its namespace files).
	Dir string
	// Source of BFS; negative picks one with PickSource.
	Source   int64
	Seed     uint64
	Validate bool
	Workers  int
	GPU      GPUOptions
	// OutDir receives the per-vertex result as .npy ("" writes none).
	OutDir string
}

func (o RunOptions) engine() (string, error) {
	switch o.Engine {
	case "", "auto":
		if GPUAvailable() {
			return "gpu", nil
		}
		return "cpu", nil
	case "cpu", "gpu":
		return o.Engine, nil
	}
	return "", fmt.Errorf("graph: engine %q: want auto, cpu or gpu", o.Engine)
}

// PickSource returns a vertex with more than two neighbours drawn from seed
// (BaM's choice of BFS sources), or the vertex of largest degree when the
// draws find none.
func PickSource(off []uint64, seed uint64) uint64 {
	n := uint64(len(off) - 1)
	if n == 0 {
		return 0
	}
	r := rand.New(rand.NewPCG(seed, 17))
	for range 1000 {
		v := r.Uint64N(n)
		if off[v+1]-off[v] > 2 {
			return v
		}
	}
	best := uint64(0)
	for v := range n {
		if off[v+1]-off[v] > off[best+1]-off[best] {
			best = v
		}
	}
	return best
}

// RunBFS runs BFS over graph name on the chosen engine, optionally validates
// it and writes the depths, and returns the summary.
func RunBFS(ctx context.Context, s *bam.Store, name string, o RunOptions) (*Summary, error) {
	info, err := Stat(s, name)
	if err != nil {
		return nil, err
	}
	if info.IDBits == 64 {
		return runBFS[uint64](ctx, s, name, o)
	}
	return runBFS[uint32](ctx, s, name, o)
}

// RunCC is RunBFS for connected components.
func RunCC(ctx context.Context, s *bam.Store, name string, o RunOptions) (*Summary, error) {
	info, err := Stat(s, name)
	if err != nil {
		return nil, err
	}
	if info.IDBits == 64 {
		return runCC[uint64](ctx, s, name, o)
	}
	return runCC[uint32](ctx, s, name, o)
}

// onGPU runs an algorithm on the GPU with the edges on storage and fills
// the summary's cache and I/O figures from the engine's counters.
func onGPU[V VertexID](ctx context.Context, s *bam.Store, name string, o RunOptions, sum *Summary, run func(*GPU[V]) error) error {
	r, err := OpenGPU[V](ctx, o.Dir, s, name, OnStorage, o.GPU)
	if err != nil {
		return err
	}
	defer r.Close()
	before, err := r.CacheStats()
	if err != nil {
		return err
	}
	if err := run(r); err != nil {
		return err
	}
	after, err := r.CacheStats()
	if err != nil {
		return err
	}
	sum.Placement = string(OnStorage)
	sum.CacheMisses = after.Misses - before.Misses
	sum.BytesRead = after.FilledBytes - before.FilledBytes
	ec := r.eng.Config()
	sum.CacheBytes = ec.CacheBytes
	for _, c := range ec.MoreCaches {
		sum.CacheBytes += c.CacheBytes
	}
	if acq := after.Acquires - before.Acquires; acq > 0 {
		fills := after.Fills - before.Fills
		h := float64(acq-min(fills, acq)) / float64(acq)
		sum.HitRatio = &h
	}
	return nil
}

func runBFS[V VertexID](ctx context.Context, s *bam.Store, name string, o RunOptions) (*Summary, error) {
	eng, err := o.engine()
	if err != nil {
		return nil, err
	}
	g, err := Load[V](ctx, s, name)
	if err != nil {
		return nil, err
	}
	src := uint64(o.Source)
	if o.Source < 0 {
		src = PickSource(g.Offsets, o.Seed)
	}
	sum := &Summary{Algorithm: "bfs", Graph: name, Engine: eng, Vertices: g.N, Edges: g.M, Source: &src}
	var res *BFSResult
	if eng == "gpu" {
		err := onGPU(ctx, s, name, o, sum, func(r *GPU[V]) (err error) {
			res, err = r.BFS(ctx, src)
			return err
		})
		if err != nil {
			return nil, err
		}
	} else {
		before := g.Array.Stats()
		if res, err = BFS(ctx, g, src, AlgoOptions{Workers: o.Workers}); err != nil {
			return nil, err
		}
		cpuStats(sum, before, g.Array.Stats())
		sum.Placement = "storage"
		sum.CacheBytes = uint64(s.Options().CacheBytes)
	}
	sum.Levels, sum.Reached, sum.Seconds, sum.EdgesTouched = res.Levels, res.Reached, res.Elapsed.Seconds(), res.EdgesTouched
	sum.BottomUp, sum.LevelTrace = res.BottomUpLevels, res.Trace
	sum.ReadBackLevel, sum.LateDepths, sum.ReadBackSeconds = res.ReadBackLevel, res.LateDepths, res.ReadBack.Seconds()
	sum.Fill(info(g))
	if o.Validate {
		if err := ValidateBFS(ctx, g, src, res.Depth, o.Workers); err != nil {
			return sum, err
		}
		sum.Validated = true
	}
	if o.OutDir != "" {
		sum.Output = filepath.Join(o.OutDir, "bfs-"+safeName(name)+".npy")
		if err := WriteNPY(sum.Output, res.Depth); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

func runCC[V VertexID](ctx context.Context, s *bam.Store, name string, o RunOptions) (*Summary, error) {
	eng, err := o.engine()
	if err != nil {
		return nil, err
	}
	g, err := Load[V](ctx, s, name)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Algorithm: "cc", Graph: name, Engine: eng, Vertices: g.N, Edges: g.M}
	var res *CCResult
	if eng == "gpu" {
		o.GPU = CCOptions(s, name, o.GPU)
		err := onGPU(ctx, s, name, o, sum, func(r *GPU[V]) (err error) {
			res, err = r.CC(ctx)
			return err
		})
		if err != nil {
			return nil, err
		}
	} else {
		before := g.Array.Stats()
		if res, err = CC(ctx, g, AlgoOptions{Workers: o.Workers}); err != nil {
			return nil, err
		}
		cpuStats(sum, before, g.Array.Stats())
		sum.Placement = "storage"
		sum.CacheBytes = uint64(s.Options().CacheBytes)
	}
	sum.Components, sum.Largest, sum.Seconds, sum.EdgesTouched = res.Components, res.Largest, res.Elapsed.Seconds(), res.EdgesTouched
	sum.StageTrace = res.Trace
	sum.Fill(info(g))
	if o.Validate {
		if err := ValidateCC(ctx, g, res.Comp); err != nil {
			return sum, err
		}
		sum.Validated = true
	}
	if o.OutDir != "" {
		sum.Output = filepath.Join(o.OutDir, "cc-"+safeName(name)+".npy")
		if g.IDBits == 32 {
			c32 := make([]uint32, len(res.Comp))
			for i, c := range res.Comp {
				c32[i] = uint32(c)
			}
			err = WriteNPY(sum.Output, c32)
		} else {
			err = WriteNPY(sum.Output, res.Comp)
		}
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

func info[V VertexID](g *Graph[V]) int { return g.IDBits / 8 }

func cpuStats(sum *Summary, before, after bam.DataStats) {
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	if hits+misses > 0 {
		h := float64(hits) / float64(hits+misses)
		sum.HitRatio = &h
	}
	sum.CacheMisses = misses
	sum.BytesRead = after.BytesRead - before.BytesRead
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '/' || c == os.PathSeparator || c == ' ' {
			b[i] = '_'
		}
	}
	return string(b)
}

// GenerateInto generates a graph and saves it as name: 32-bit ids up to
// scale 32, 64-bit above. Undirected unless directed is set.
func GenerateInto(ctx context.Context, s *bam.Store, name string, o GenOptions, b BuildOptions, overwrite bool) (Info, error) {
	if o.Scale > 32 {
		return genInto[uint64](ctx, s, name, o, b, overwrite)
	}
	return genInto[uint32](ctx, s, name, o, b, overwrite)
}

func genInto[V VertexID](ctx context.Context, s *bam.Store, name string, o GenOptions, b BuildOptions, overwrite bool) (Info, error) {
	el, err := Generate[V](ctx, o)
	if err != nil {
		return Info{}, err
	}
	if b.Progress == nil {
		b.Progress = o.Progress
	}
	g, err := Build(ctx, el, b)
	if err != nil {
		return Info{}, err
	}
	el = nil
	ef := o.EdgeFactor
	if ef == 0 {
		ef = 16
	}
	meta := map[string]string{"graph.generator": string(o.Kind), "graph.scale": strconv.Itoa(o.Scale),
		"graph.edge_factor": strconv.Itoa(ef), "graph.seed": strconv.FormatUint(o.Seed, 10)}
	if err := Save(ctx, s, name, g, SaveOptions{Overwrite: overwrite, Meta: meta, Progress: b.Progress}); err != nil {
		return Info{}, err
	}
	return Stat(s, name)
}

// ImportFile reads a graph file in format f and saves it as name. For
// FormatBEL, path names the common prefix of path.col, path.dst and
// (optional) path.val. A file that declares itself symmetric is
// symmetrised.
func ImportFile(ctx context.Context, s *bam.Store, name, path string, f Format, b BuildOptions, overwrite bool) (Info, error) {
	var im *Imported
	var bel *CSR[uint64]
	open := func(p string) (*os.File, error) { return os.Open(p) }
	switch f {
	case FormatSNAP, FormatMTX, FormatRaw32, FormatRaw64:
		fh, err := open(path)
		if err != nil {
			return Info{}, err
		}
		defer fh.Close()
		switch f {
		case FormatSNAP:
			im, err = ReadSNAP(fh, 0)
		case FormatMTX:
			im, err = ReadMatrixMarket(fh)
		case FormatRaw32:
			im, err = ReadRawEdges(fh, 4, 0)
		default:
			im, err = ReadRawEdges(fh, 8, 0)
		}
		if err != nil {
			return Info{}, fmt.Errorf("import %s: %w", path, err)
		}
	case FormatBEL:
		col, err := open(path + ".col")
		if err != nil {
			return Info{}, err
		}
		defer col.Close()
		dst, err := open(path + ".dst")
		if err != nil {
			return Info{}, err
		}
		defer dst.Close()
		var val *os.File
		if v, err := open(path + ".val"); err == nil {
			val = v
			defer v.Close()
		}
		if val != nil {
			bel, err = ReadBEL(col, dst, val)
		} else {
			bel, err = ReadBEL(col, dst, nil)
		}
		if err != nil {
			return Info{}, fmt.Errorf("import %s: %w", path, err)
		}
	default:
		return Info{}, fmt.Errorf("graph: unknown format %q (want snap, mtx, bel, raw32 or raw64)", f)
	}
	meta := map[string]string{"graph.source": filepath.Base(path), "graph.format": string(f)}
	if bel != nil {
		// .bel is CSR already; rebuild only when asked to change it.
		if b.Symmetrize || !b.KeepSelfLoops || !b.KeepDuplicates {
			el := EdgeListOf(bel)
			bel = nil
			im = &Imported{Edges: el}
		} else {
			return saveCSR(ctx, s, name, bel, meta, b.Progress, overwrite)
		}
	}
	b.Symmetrize = b.Symmetrize || im.Undirected
	g, err := Build(ctx, im.Edges, b)
	if err != nil {
		return Info{}, err
	}
	return saveCSR(ctx, s, name, g, meta, b.Progress, overwrite)
}

func saveCSR(ctx context.Context, s *bam.Store, name string, g *CSR[uint64], meta map[string]string, p Progress, overwrite bool) (Info, error) {
	opt := SaveOptions{Overwrite: overwrite, Meta: meta, Progress: p}
	if !Wide(g.N) {
		n, err := NarrowCSR(g)
		if err != nil {
			return Info{}, err
		}
		if err := Save(ctx, s, name, n, opt); err != nil {
			return Info{}, err
		}
	} else if err := Save(ctx, s, name, g, opt); err != nil {
		return Info{}, err
	}
	return Stat(s, name)
}
