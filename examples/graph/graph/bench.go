package graph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda"
)

// G1Options configure benchmark G1 (BENCHMARKS.md).
type G1Options struct {
	Store          string // store directory; graphs g1-<kind>-<scale> are generated once and reused
	Scale          int
	Kinds          []Kind
	CacheFractions []float64 // GPU cache sizes as fractions of the edges array
	Runs           int       // timed repetitions (median)
	Sources        int       // BFS sources per repetition
	// GPULine is the GPU cache line size for the edges on storage (0: the
	// store's). New bench stores get 512-byte LBAs so that any line from
	// 512 bytes works.
	GPULine int
	// QueuePairs is the GPU engine's number of queue pairs (0: the
	// engine's default).
	QueuePairs int
	Progress   Progress
	Log        io.Writer // progress lines (nil: none)
}

// RunG1 runs benchmark G1: BFS and CC with the edges on storage behind a
// cold GPU cache of each size, against (a) the same kernels with the edges
// in GPU memory, (b) zero-copy reads of pinned host memory (EMOGI), whose
// end-to-end time includes reading the edges from the store files, and (c)
// the multi-threaded CPU implementation over memory. Every result is
// checked against the CPU's before its time counts. Without a GPU it
// measures the CPU engine against (c) only.
func RunG1(ctx context.Context, o G1Options) (*bench.Result, error) {
	if o.Runs <= 0 {
		o.Runs = 3
	}
	if o.Sources <= 0 {
		o.Sources = 4
	}
	if len(o.Kinds) == 0 {
		o.Kinds = []Kind{Kronecker, Uniform}
	}
	if len(o.CacheFractions) == 0 {
		o.CacheFractions = []float64{0.125, 0.25, 0.5}
	}
	device := "cpu"
	gpu := GPUAvailable()
	if gpu {
		c, err := cuda.Primary(0)
		if err != nil {
			return nil, err
		}
		if nm, err := c.Device().Name(); err == nil {
			device = nm
		} else {
			device = "gpu"
		}
		c.Close()
	}
	res := bench.NewResult("G1", device)
	res.Params["scale"] = o.Scale
	res.Params["edge_factor"] = 16
	res.Params["kinds"] = o.Kinds
	res.Params["cache_fractions"] = o.CacheFractions
	res.Params["runs"] = o.Runs
	res.Params["sources"] = o.Sources
	s, err := bam.Open(ctx, o.Store, bam.Options{Engine: bam.EngineCPU})
	if errors.Is(err, bam.ErrNotFound) {
		n := int64(1) << o.Scale
		s, err = bam.Create(ctx, o.Store, bam.CreateOptions{Options: bam.Options{Engine: bam.EngineCPU},
			NamespaceSize: int64(len(o.Kinds)) * (2*16*n*8 + 8*n) * 2, LBASize: 512})
	}
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res.Params["gpu_line_size"] = s.LineSize()
	if o.QueuePairs != 0 {
		res.Params["gpu_queue_pairs"] = o.QueuePairs
	}
	if o.GPULine != 0 {
		res.Params["gpu_line_size"] = o.GPULine
	}
	for _, k := range o.Kinds {
		name := fmt.Sprintf("g1-%s-%d", k, o.Scale)
		if _, err := Stat(s, name); err != nil {
			o.logf("generating %s", name)
			if _, err := GenerateInto(ctx, s, name, GenOptions{Kind: k, Scale: o.Scale, Seed: 1, Progress: o.Progress},
				BuildOptions{Symmetrize: true, Progress: o.Progress}, true); err != nil {
				return nil, err
			}
		}
		if o.Scale > 32 {
			err = g1Graph[uint64](ctx, s, name, string(k), gpu, o, res)
		} else {
			err = g1Graph[uint32](ctx, s, name, string(k), gpu, o, res)
		}
		if err != nil {
			return nil, fmt.Errorf("G1 %s: %w", name, err)
		}
	}
	return res, nil
}

func (o *G1Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "G1: "+format+"\n", a...)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// timings collects per-traversal times for BFS (one per source and run)
// and CC (one per run).
type timings struct{ bfs, cc []time.Duration }

func (t timings) medians() (bfs, cc float64) { return median(t.bfs).Seconds(), median(t.cc).Seconds() }

func g1Graph[V VertexID](ctx context.Context, s *bam.Store, name, kind string, gpu bool, o G1Options, res *bench.Result) error {
	g, err := Load[V](ctx, s, name)
	if err != nil {
		return err
	}
	edges := make([]V, g.M)
	if err := ReadObjectFiles(ctx, o.Store, s, edgesName(name), bytesOf(edges)); err != nil {
		return err
	}
	mem := InMemory(name, &CSR[V]{N: g.N, Offsets: g.Offsets, Edges: edges, Directed: g.Directed})
	var srcs []uint64
	for i := range o.Sources {
		srcs = append(srcs, PickSource(g.Offsets, uint64(i+1)))
	}
	// (c) the CPU over memory, and the references.
	o.logf("%s: CPU baseline", name)
	ref := map[uint64][]int32{}
	var cpu timings
	var cpuNoHeads, cpuBFSNoHeads []time.Duration
	memNoHeads := *mem
	memNoHeads.Heads, memNoHeads.Info.Heads = nil, 0
	var refCC []uint64
	// Every BFS of the benchmark, on any engine, writes into a result
	// buffer of an earlier run once there is one (BFSInto): a new slice
	// made from memory Go reuses is cleared on one core first, up to 16 ms
	// at scale 25, and which runs got reused memory depended on the
	// collector's timing.
	var spare, spareNoHeads []int32
	for range o.Runs {
		for _, src := range srcs {
			r, err := BFSInto(ctx, mem, src, spare, AlgoOptions{})
			if err != nil {
				return err
			}
			if ref[src] == nil {
				if err := ValidateBFS(ctx, mem, src, r.Depth, 0); err != nil {
					return err
				}
				ref[src], spare = r.Depth, nil
			} else {
				spare = r.Depth
			}
			cpu.bfs = append(cpu.bfs, r.Elapsed)
			// Bottom-up levels without the heads, as without a heads
			// array: the baseline is the faster of the two.
			r, err = BFSInto(ctx, &memNoHeads, src, spareNoHeads, AlgoOptions{})
			if err != nil {
				return err
			}
			if !slices.Equal(r.Depth, ref[src]) {
				return fmt.Errorf("%w: CPU BFS depths without heads differ from those with", ErrInvalidResult)
			}
			spareNoHeads = r.Depth
			cpuBFSNoHeads = append(cpuBFSNoHeads, r.Elapsed)
		}
		c, err := CC(ctx, mem, AlgoOptions{})
		if err != nil {
			return err
		}
		if refCC == nil {
			if err := ValidateCC(ctx, mem, c.Comp); err != nil {
				return err
			}
			refCC = c.Comp
		}
		cpu.cc = append(cpu.cc, c.Elapsed)
		// CC's first pass over the edges, as without a heads array: the
		// baseline is the faster of the two.
		c, err = CC(ctx, &memNoHeads, AlgoOptions{})
		if err != nil {
			return err
		}
		if !slices.Equal(c.Comp, refCC) {
			return fmt.Errorf("%w: CPU components without heads differ from those with", ErrInvalidResult)
		}
		cpuNoHeads = append(cpuNoHeads, c.Elapsed)
	}
	cpuBFS, cpuCC := cpu.medians()
	cpuCCNoHeads := median(cpuNoHeads).Seconds()
	cpuBFSNoHeadsS := median(cpuBFSNoHeads).Seconds()
	res.Report(fmt.Sprintf("bfs_%s_cpu_memory_heads_s", kind), cpuBFS, "s", "")
	res.Report(fmt.Sprintf("bfs_%s_cpu_memory_no_heads_s", kind), cpuBFSNoHeadsS, "s", "")
	cpuBFS = min(cpuBFS, cpuBFSNoHeadsS)
	res.Report(fmt.Sprintf("bfs_%s_cpu_memory_s", kind), cpuBFS, "s", "")
	res.Report(fmt.Sprintf("cc_%s_cpu_memory_heads_s", kind), cpuCC, "s", "")
	res.Report(fmt.Sprintf("cc_%s_cpu_memory_no_heads_s", kind), cpuCCNoHeads, "s", "")
	cpuCC = min(cpuCC, cpuCCNoHeads)
	res.Report(fmt.Sprintf("cc_%s_cpu_memory_s", kind), cpuCC, "s", "")
	check := func(src uint64, depth []int32) error {
		if !slices.Equal(depth, ref[src]) {
			return fmt.Errorf("%w: BFS depths from %d differ from the CPU's", ErrInvalidResult, src)
		}
		return nil
	}
	checkCC := func(comp []uint64) error {
		if !slices.Equal(comp, refCC) {
			return fmt.Errorf("%w: components differ from the CPU's", ErrInvalidResult)
		}
		return nil
	}
	if !gpu {
		// the CPU engine with the edges on storage
		o.logf("%s: CPU engine", name)
		var t timings
		before := g.Array.Stats()
		var touched uint64
		var spare []int32
		for range o.Runs {
			for _, src := range srcs {
				r, err := BFSInto(ctx, g, src, spare, AlgoOptions{})
				if err != nil {
					return err
				}
				if err := check(src, r.Depth); err != nil {
					return err
				}
				spare = r.Depth
				t.bfs = append(t.bfs, r.Elapsed)
				touched += r.EdgesTouched
			}
			c, err := CC(ctx, g, AlgoOptions{})
			if err != nil {
				return err
			}
			if err := checkCC(c.Comp); err != nil {
				return err
			}
			t.cc = append(t.cc, c.Elapsed)
			touched += c.EdgesTouched
		}
		b, c := t.medians()
		res.Add(fmt.Sprintf("bfs_%s_cpu_engine_speedup_vs_memory", kind), b, "s", "CPU over memory", cpuBFS, true, "")
		res.Add(fmt.Sprintf("cc_%s_cpu_engine_speedup_vs_memory", kind), c, "s", "CPU over memory", cpuCC, true, "")
		st := g.Array.Stats()
		res.Report(fmt.Sprintf("%s_cpu_engine_io_amplification", kind), float64(st.BytesRead-before.BytesRead)/float64(max(1, touched)*uint64(g.IDBits/8)), "x", "")
		return nil
	}
	run := func(r *GPU[V], cold, bfs, cc bool) (timings, uint64, error) {
		var t timings
		var touched uint64
		var spare []int32
		for range o.Runs {
			for _, src := range srcs {
				if !bfs {
					break
				}
				if cold {
					if err := r.ColdCache(ctx); err != nil {
						return t, 0, err
					}
				}
				b, err := r.BFSInto(ctx, src, spare)
				if err != nil {
					return t, 0, err
				}
				if err := check(src, b.Depth); err != nil {
					return t, 0, err
				}
				spare = b.Depth
				t.bfs = append(t.bfs, b.Elapsed)
				touched += b.EdgesTouched
			}
			if !cc {
				continue
			}
			if cold {
				if err := r.ColdCache(ctx); err != nil {
					return t, 0, err
				}
			}
			c, err := r.CC(ctx)
			if err != nil {
				return t, 0, err
			}
			if err := checkCC(c.Comp); err != nil {
				return t, 0, err
			}
			t.cc = append(t.cc, c.Elapsed)
			touched += c.EdgesTouched
		}
		return t, touched, nil
	}
	// (a) GPU memory and (b) zero-copy pinned host memory.
	base := map[Placement]timings{}
	var load time.Duration
	for _, p := range []Placement{InDevice, ZeroCopy} {
		o.logf("%s: GPU, edges in %s memory", name, p)
		r, err := OpenGPU[V](ctx, o.Store, s, name, p, GPUOptions{LineSize: o.GPULine, QueuePairs: o.QueuePairs})
		if err != nil {
			return err
		}
		t, _, err := run(r, false, true, true)
		if p == ZeroCopy {
			load = r.LoadTime
		}
		r.Close()
		if err != nil {
			return err
		}
		base[p] = t
	}
	devBFS, devCC := base[InDevice].medians()
	zcBFS, zcCC := base[ZeroCopy].medians()
	res.Report(fmt.Sprintf("%s_zero_copy_load_s", kind), load.Seconds(), "s", "")
	for _, f := range o.CacheFractions {
		cache := uint64(f * float64(g.EdgeBytes()))
		o.logf("%s: GPU, edges on storage, cache %.3f of the edges (%d bytes)", name, f, cache)
		// CC reads through its own lines where they differ (CCOptions):
		// an engine of its own, with a cache of the same size.
		bfsOpt := GPUOptions{CacheBytes: cache, LineSize: o.GPULine, QueuePairs: o.QueuePairs}
		ccOpt := CCOptions(s, name, bfsOpt)
		res.Params[kind+"_cc_gpu_line_size"] = cmp.Or(ccOpt.LineSize, s.LineSize())
		passes := []struct {
			opt     GPUOptions
			bfs, cc bool
		}{{bfsOpt, true, ccOpt.LineSize == bfsOpt.LineSize}}
		if ccOpt.LineSize != bfsOpt.LineSize {
			passes = append(passes, struct {
				opt     GPUOptions
				bfs, cc bool
			}{ccOpt, false, true})
		}
		var t timings
		var touched, read uint64
		for _, ps := range passes {
			r, err := OpenGPU[V](ctx, o.Store, s, name, OnStorage, ps.opt)
			if err != nil {
				return err
			}
			before, err := r.CacheStats()
			if err != nil {
				r.Close()
				return err
			}
			pt, pTouched, err := run(r, true, ps.bfs, ps.cc)
			after, serr := r.CacheStats()
			r.Close()
			if err != nil {
				return err
			}
			if serr != nil {
				return serr
			}
			t.bfs = append(t.bfs, pt.bfs...)
			t.cc = append(t.cc, pt.cc...)
			touched += pTouched
			read += after.FilledBytes - before.FilledBytes
		}
		b, c := t.medians()
		tag := fmt.Sprintf("%s_cache%g", kind, f)
		for _, x := range []struct {
			algo               string
			ours, zc, dev, cpu float64
		}{{"bfs", b, zcBFS, devBFS, cpuBFS}, {"cc", c, zcCC, devCC, cpuCC}} {
			res.Add(fmt.Sprintf("%s_%s_e2e_speedup_vs_zero_copy", x.algo, tag), x.ours, "s", "zero-copy incl. load", x.zc+load.Seconds(), true, ">= 1.05")
			res.Add(fmt.Sprintf("%s_%s_kernel_speedup_vs_zero_copy", x.algo, tag), x.ours, "s", "zero-copy kernels", x.zc, true, "")
			res.Add(fmt.Sprintf("%s_%s_speedup_vs_gpu_memory", x.algo, tag), x.ours, "s", "edges in GPU memory", x.dev, true, "")
			res.Add(fmt.Sprintf("%s_%s_speedup_vs_cpu", x.algo, tag), x.ours, "s", "CPU over memory", x.cpu, true, ">= 10")
		}
		res.Report(fmt.Sprintf("%s_io_amplification", tag), float64(read)/float64(max(1, touched)*uint64(g.IDBits/8)), "x", "")
	}
	return nil
}
