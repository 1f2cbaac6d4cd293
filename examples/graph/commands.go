package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/examples/graph/graph"
	"github.com/dustin/go-humanize"
)

func init() {
	commands = append(commands,
		&command{"gen", "STORE NAME [--kind kron|urand] [--scale N] [--edge-factor 16] [--seed S] [--directed] [--json]",
			"generate a Kronecker (Graph500/GAP) or uniform random graph into a store", cmdGen},
		&command{"import", "STORE NAME FILE --format snap|mtx|bel|raw32|raw64 [--symmetrize] [--json]",
			"import a graph file (for bel, FILE is the prefix of FILE.col/.dst/.val)", cmdImport},
		&command{"bfs", "STORE NAME [--source V] [--engine auto|cpu|gpu] [--cache SIZE] [--validate] [--out DIR] [--json]",
			"breadth-first search: per-vertex depths (.npy) and a summary", cmdBFS},
		&command{"cc", "STORE NAME [--engine auto|cpu|gpu] [--cache SIZE] [--validate] [--out DIR] [--json]",
			"connected components: per-vertex labels (.npy) and a summary", cmdCC},
		&command{"bench", "[--store DIR] [--scale 25] [--kinds kron,urand] [--cache-fractions 0.125,0.25,0.5] [--runs 3] [--out bench/results] [--json]",
			"benchmark G1: BFS and CC with edges on storage against GPU memory, zero-copy host memory and the CPU", cmdBench},
		&command{"demo", "[--dir DIR] [--scale 20] [--engine auto|cpu|gpu]",
			"generate a Kronecker graph, run BFS and CC (GPU when present, else CPU) and print a table", cmdDemo},
	)
}

// buildFlags are the cleaning options shared by gen and import.
type buildFlags struct {
	keepLoops, keepDups, overwrite, jsonOut bool
}

func (b *buildFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&b.keepLoops, "keep-self-loops", false, "keep edges (v, v)")
	fs.BoolVar(&b.keepDups, "keep-duplicates", false, "keep repeated edges")
	fs.BoolVar(&b.overwrite, "overwrite", false, "replace a graph of the same name")
	fs.BoolVar(&b.jsonOut, "json", false, "print JSON")
}

// openStore opens the store at dir, creating it (with sparse namespace
// files of size bytes) when create is set and it does not exist.
func openStore(ctx context.Context, dir string, create bool, size int64, cache int64) (*bam.Store, error) {
	opts := bam.Options{Engine: bam.EngineCPU, CacheBytes: cache}
	s, err := bam.Open(ctx, dir, opts)
	if err == nil || !create || !errors.Is(err, bam.ErrNotFound) {
		return s, err
	}
	return bam.Create(ctx, dir, bam.CreateOptions{Options: opts, NamespaceSize: size})
}

func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, usagef("size %q: %v", s, err)
	}
	return int64(n), nil
}

func printInfo(info graph.Info, jsonOut bool, took time.Duration) error {
	if jsonOut {
		return printJSON(struct {
			graph.Info
			Seconds float64 `json:"time_s"`
		}{info, took.Seconds()})
	}
	dir := "undirected"
	if info.Directed {
		dir = "directed"
	}
	fmt.Fprintf(stdout, "%s: %d vertices, %d edges stored (%s, %d-bit ids, %s of edges) in %.1fs\n",
		info.Name, info.N, info.M, dir, info.IDBits, humanize.IBytes(info.EdgeBytes()), took.Seconds())
	return nil
}

func cmdGen(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	kind := fs.String("kind", "kron", "generator: kron (Graph500/GAP Kronecker) or urand")
	scale := fs.Int("scale", 20, "2^scale vertices")
	ef := fs.Int("edge-factor", 16, "edges drawn per vertex")
	seed := fs.Uint64("seed", 1, "random seed")
	directed := fs.Bool("directed", false, "keep the edges directed as drawn (default: symmetrise)")
	size := fs.String("store-size", "", "namespace size when the store is created (default: from the graph)")
	var b buildFlags
	b.register(fs)
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	sz, err := parseSize(*size)
	if err != nil {
		return err
	}
	if sz == 0 {
		sz = storeSizeFor(*scale, *ef)
	}
	s, err := openStore(ctx, pos[0], true, sz, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	t0 := time.Now()
	prog := newProgress()
	info, err := graph.GenerateInto(ctx, s, pos[1],
		graph.GenOptions{Kind: graph.Kind(*kind), Scale: *scale, EdgeFactor: *ef, Seed: *seed, Progress: prog},
		graph.BuildOptions{Symmetrize: !*directed, KeepSelfLoops: b.keepLoops, KeepDuplicates: b.keepDups, Progress: prog}, b.overwrite)
	if err != nil {
		return err
	}
	return printInfo(info, b.jsonOut, time.Since(t0))
}

// storeSizeFor sizes namespace files (sparse) for a generated graph:
// symmetrised edges at up to 8 bytes, offsets, and room for more graphs.
func storeSizeFor(scale, ef int) int64 {
	n := int64(1) << min(scale, 40)
	need := 2*int64(ef)*n*8 + 8*n
	return max(4*need, 1<<30)
}

func cmdImport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	format := fs.String("format", "", "input format: snap, mtx, bel, raw32 or raw64 (default: from the extension)")
	sym := fs.Bool("symmetrize", false, "add the reverse of every edge")
	size := fs.String("store-size", "", "namespace size when the store is created (default: 16x the file)")
	var b buildFlags
	b.register(fs)
	pos, err := parse(fs, args, 3)
	if err != nil {
		return err
	}
	f := graph.Format(*format)
	if f == "" {
		f = formatOf(pos[2])
	}
	sz, err := parseSize(*size)
	if err != nil {
		return err
	}
	if sz == 0 {
		sz = 1 << 30
		if st, err := os.Stat(pos[2]); err == nil {
			sz = max(sz, 16*st.Size())
		} else if st, err := os.Stat(pos[2] + ".dst"); err == nil {
			sz = max(sz, 4*st.Size())
		}
	}
	s, err := openStore(ctx, pos[0], true, sz, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	t0 := time.Now()
	info, err := graph.ImportFile(ctx, s, pos[1], pos[2], f,
		graph.BuildOptions{Symmetrize: *sym, KeepSelfLoops: b.keepLoops, KeepDuplicates: b.keepDups, Progress: newProgress()}, b.overwrite)
	if err != nil {
		return err
	}
	return printInfo(info, b.jsonOut, time.Since(t0))
}

func formatOf(path string) graph.Format {
	switch {
	case strings.HasSuffix(path, ".mtx"):
		return graph.FormatMTX
	case strings.HasSuffix(path, ".bel"):
		return graph.FormatBEL
	case strings.HasSuffix(path, ".bin32"):
		return graph.FormatRaw32
	case strings.HasSuffix(path, ".bin64"), strings.HasSuffix(path, ".bin"):
		return graph.FormatRaw64
	}
	return graph.FormatSNAP
}

// algoFlags are the flags of bfs and cc.
type algoFlags struct {
	engine, cache, out          string
	validate, jsonOut           bool
	workers, gpuLine, gpuQueues int
}

func (a *algoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.engine, "engine", "auto", "auto (GPU when present), cpu or gpu")
	fs.StringVar(&a.cache, "cache", "", "cache size (default: the store's for the CPU engine, 1/4 of the edges for the GPU)")
	fs.StringVar(&a.out, "out", ".", "directory for the per-vertex .npy result (empty: none)")
	fs.BoolVar(&a.validate, "validate", false, "check the result (BFS edge by edge, CC against a union-find)")
	fs.BoolVar(&a.jsonOut, "json", false, "print the summary as JSON")
	fs.IntVar(&a.workers, "workers", 0, "CPU goroutines (default GOMAXPROCS)")
	fs.IntVar(&a.gpuLine, "gpu-line", 0, "GPU cache line size for the edges (default: the store's; other sizes need a one-namespace store)")
	fs.IntVar(&a.gpuQueues, "queues", 0, "NVMe queue pairs of the GPU engine (default: the engine's)")
}

func runAlgo(ctx context.Context, algo string, args []string) error {
	fs := flag.NewFlagSet(algo, flag.ContinueOnError)
	var a algoFlags
	a.register(fs)
	source := fs.Int64("source", -1, "BFS source vertex (default: a seeded pick with more than two neighbours)")
	seed := fs.Uint64("seed", 1, "seed of the source pick")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	cache, err := parseSize(a.cache)
	if err != nil {
		return err
	}
	s, err := openStore(ctx, pos[0], false, 0, cache)
	if err != nil {
		return err
	}
	defer s.Close()
	o := graph.RunOptions{Engine: a.engine, Dir: pos[0], Source: *source, Seed: *seed, Validate: a.validate,
		Workers: a.workers, OutDir: a.out, GPU: graph.GPUOptions{CacheBytes: uint64(cache), LineSize: a.gpuLine, QueuePairs: a.gpuQueues}}
	var sum *graph.Summary
	if algo == "bfs" {
		sum, err = graph.RunBFS(ctx, s, pos[1], o)
	} else {
		sum, err = graph.RunCC(ctx, s, pos[1], o)
	}
	if err != nil {
		return err
	}
	if a.jsonOut {
		return printJSON(sum)
	}
	printTable([]*graph.Summary{sum})
	return nil
}

func cmdBFS(ctx context.Context, args []string) error { return runAlgo(ctx, "bfs", args) }
func cmdCC(ctx context.Context, args []string) error  { return runAlgo(ctx, "cc", args) }

func printTable(sums []*graph.Summary) {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algo\tengine\tgraph\tvertices\tedges\ttime\tedges touched\tedges/s\tresult\thit ratio\tread\tI/O ampl.\tvalid\t")
	for _, s := range sums {
		result := fmt.Sprintf("%d levels, %d reached", s.Levels, s.Reached)
		if s.Algorithm == "cc" {
			result = fmt.Sprintf("%d comps, largest %d", s.Components, s.Largest)
		}
		hit := "-"
		if s.HitRatio != nil {
			hit = fmt.Sprintf("%.3f", *s.HitRatio)
		}
		valid := "-"
		if s.Validated {
			valid = "ok"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.3fs\t%d\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n",
			s.Algorithm, s.Engine, s.Graph, s.Vertices, s.Edges, s.Seconds, s.EdgesTouched,
			humanize.SIWithDigits(s.EdgesPerSec, 2, ""), result, hit, humanize.IBytes(s.BytesRead), s.Amplification, valid)
	}
	tw.Flush()
}

func cmdDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dir := fs.String("dir", "", "store directory (default: a temporary one, removed afterwards)")
	scale := fs.Int("scale", 20, "Kronecker scale")
	engine := fs.String("engine", "auto", "auto (GPU when present), cpu or gpu")
	jsonOut := fs.Bool("json", false, "print the summaries as JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	d := *dir
	if d == "" {
		tmp, err := os.MkdirTemp("", "bam-graph-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		d = tmp + "/store"
	}
	t0 := time.Now()
	s, err := openStore(ctx, d, true, storeSizeFor(*scale, 16), 0)
	if err != nil {
		return err
	}
	defer s.Close()
	name := fmt.Sprintf("kron%d", *scale)
	prog := newProgress()
	info, err := graph.GenerateInto(ctx, s, name, graph.GenOptions{Kind: graph.Kronecker, Scale: *scale, Seed: 1, Progress: prog},
		graph.BuildOptions{Symmetrize: true, Progress: prog}, true)
	if err != nil {
		return err
	}
	if !*jsonOut {
		if err := printInfo(info, false, time.Since(t0)); err != nil {
			return err
		}
	}
	// reopen: a cold cache a quarter of the edges, so the traversals read
	// storage
	cache := int64(max(info.EdgeBytes()/4, 1<<20))
	if err := s.Close(); err != nil {
		return err
	}
	if s, err = openStore(ctx, d, false, 0, cache); err != nil {
		return err
	}
	defer s.Close()
	o := graph.RunOptions{Engine: *engine, Dir: d, Source: -1, Seed: 1, Validate: true, GPU: graph.GPUOptions{CacheBytes: uint64(cache)}}
	bfs, err := graph.RunBFS(ctx, s, name, o)
	if err != nil {
		return err
	}
	cc, err := graph.RunCC(ctx, s, name, o)
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON([]*graph.Summary{bfs, cc})
	}
	printTable([]*graph.Summary{bfs, cc})
	fmt.Fprintf(stdout, "total %.1fs (store %s)\n", time.Since(t0).Seconds(), d)
	return nil
}
