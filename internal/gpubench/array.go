package gpubench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/kernels"
)

// ArrayParams sizes C2 (all-hit random lookups through bam::array against a
// plain device array) and C3 (all-hit sequential reads with array_ref
// against a plain device array). Zero fields take the defaults in their
// comments.
type ArrayParams struct {
	Config
	// LineSize is the cache line size (default 4096).
	LineSize int
	// ArrayBytes is the array, a power of two larger than the L2 cache
	// (default 1GiB); the cache is twice as large so that every line
	// stays resident. C3's passes read distinct data in every wave of
	// resident warps only when the array holds Reps x the resident warps'
	// chunks: 8 x 8448 warps x 8 KiB = 553 MB at coarsening 32 on an
	// H200 (with 256 MiB the plain baseline read 5.4 TB/s at coarsening
	// 32, past HBM's 4.8: warps one pass apart shared chunks through L2).
	// At most 8 GiB: C3's kernels count elements in 32 bits.
	ArrayBytes uint64
	// Lookups is the number of random lookups per C2 run (default 64Mi).
	Lookups int
	// Seeds is the number of random index sets rotated between C2 runs
	// (default 3).
	Seeds int
	// Coarsening are the elements per thread of C3 (default 1 2 4 8 16 32).
	Coarsening []int
	// Reps is the passes over the array per C3 run (default 8).
	Reps int
}

func (p *ArrayParams) fill() error {
	p.Config.fill()
	if p.LineSize == 0 {
		p.LineSize = 4096
	}
	if p.LineSize < 512 || p.LineSize > 65536 || p.LineSize&(p.LineSize-1) != 0 {
		return fmt.Errorf("gpubench: line size %d: want a power of two from 512 to 64 KiB", p.LineSize)
	}
	if p.ArrayBytes == 0 {
		p.ArrayBytes = 1 << 30
	}
	if p.ArrayBytes&(p.ArrayBytes-1) != 0 || p.ArrayBytes < 64*uint64(p.LineSize) || p.ArrayBytes < 1<<20 || p.ArrayBytes > maxSeqElems*8 {
		return fmt.Errorf("gpubench: array of %d bytes: want a power of two, at least 1 MiB and 64 lines, at most 8 GiB", p.ArrayBytes)
	}
	if p.Lookups == 0 {
		p.Lookups = 64 << 20
	}
	if p.Seeds <= 0 {
		p.Seeds = 3
	}
	if len(p.Coarsening) == 0 {
		p.Coarsening = []int{1, 2, 4, 8, 16, 32}
	}
	for _, c := range p.Coarsening {
		if c < 1 || c&(c-1) != 0 || uint64(32*c) > p.ArrayBytes/8 {
			return fmt.Errorf("gpubench: coarsening %d: want a power of two with 32 x it elements in the array", c)
		}
	}
	if p.Reps <= 0 {
		p.Reps = 8
	}
	return nil
}

// RunArray measures C2 and C3 on one engine whose cache holds the whole
// array after a warm-up read; the plain baselines read a device copy of the
// same data. Both report 8-byte lookups per second.
func RunArray(ctx context.Context, p ArrayParams) ([]*bench.Result, error) {
	if err := p.fill(); err != nil {
		return nil, err
	}
	if err := checkGPU(p.Device); err != nil {
		return nil, err
	}
	t0 := time.Now()
	n := p.ArrayBytes / 8
	ns, sum, err := patternNamespace(p.ArrayBytes, patternSeedArr)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	a, err := newARig(gpuengine.Config{
		Device: p.Device, LineSize: p.LineSize, CacheBytes: 2 * p.ArrayBytes, Ways: 8, QueuePairs: 16, QueueDepth: 256,
		Timeout: p.Timeout, FillCopierWarps: p.CopierWarps, MirrorRun: p.MirrorRun, MirrorStreams: p.MirrorStreams,
		LinkedJIT: p.LinkedJIT, PortablePTX: p.PortablePTX,
	}, ns, n, sum, patternSeedArr)
	if err != nil {
		return nil, err
	}
	defer a.close()
	dev := a.deviceName()
	plain, err := a.alloc(p.ArrayBytes)
	if err != nil {
		return nil, err
	}
	defer plain.Free()
	if err := plain.Write(0, ns.Bytes()); err != nil {
		return nil, err
	}

	// Warm the cache: every line, checked.
	seqCfg, err := a.fullGrid(kSumSeq)
	if err != nil {
		return nil, err
	}
	if _, err := a.sumRun(ctx, kSumSeq, seqCfg, sum, a.arr.Arg(), cuda.U64(n), cuda.U64(1)); err != nil {
		return nil, fmt.Errorf("gpubench: warm-up read: %w", err)
	}
	before, err := a.e.Stats()
	if err != nil {
		return nil, err
	}

	// C2.
	c2 := bench.NewResult("C2", dev)
	lk := uint64(p.Lookups)
	seeds := make([]uint64, p.Seeds)
	want := make([]uint64, p.Seeds)
	for i := range seeds {
		seeds[i] = 0x1000 + uint64(i)*0x9e3779b9
		s := seeds[i]
		want[i] = parallelSum(lk, func(k uint64) uint64 { return kernels.Pattern64(patternSeedArr, kernels.Mix64(s+k)&(n-1)) })
	}
	lkCfg, err := a.fullGrid(kLookupArray)
	if err != nil {
		return nil, err
	}
	plCfg, err := a.fullGrid(kLookupPlain)
	if err != nil {
		return nil, err
	}
	rotating := func(name string, cfg cuda.LaunchConfig, args func(seed uint64) []cuda.Arg) (float64, []float64, error) {
		run := 0
		ds, err := p.repeat(ctx, func(bool) (time.Duration, error) {
			k := run % len(seeds)
			run++
			return a.sumRun(ctx, name, cfg, want[k], args(seeds[k])...)
		})
		if err != nil {
			return 0, nil, err
		}
		r := rates(ds, float64(lk))
		return median(r), r, nil
	}
	bamRate, bamS, err := rotating(kLookupArray, lkCfg, func(s uint64) []cuda.Arg {
		return []cuda.Arg{a.arr.Arg(), cuda.U64(n - 1), cuda.U64(lk), cuda.U64(s), cuda.U64(1)}
	})
	if err != nil {
		return nil, err
	}
	plainRate, plainS, err := rotating(kLookupPlain, plCfg, func(s uint64) []cuda.Arg {
		return []cuda.Arg{cuda.Ptr(plain.Ptr()), cuda.U64(n - 1), cuda.U64(lk), cuda.U64(s)}
	})
	if err != nil {
		return nil, err
	}
	c2.Add("hit_random_lookup_8B_Glookups", bamRate/1e9, "Glookups/s", "plain device-array random gather of the same data, same run", plainRate/1e9, false, ">= 0.4")
	c2.Params["samples_Glookups"] = map[string][]float64{"bam_array": scale(bamS, 1e-9), "plain": scale(plainS, 1e-9)}
	p.logf("C2 all-hit random 8B lookups: bam::array %.2f G/s, plain %.2f G/s", bamRate/1e9, plainRate/1e9)

	// C3.
	c3 := bench.NewResult("C3", dev)
	c3samples := map[string][]float64{}
	best, bestPlain, bestC := 0.0, 0.0, 0
	bestS, bestSPlain, bestSC := 0.0, 0.0, 0
	for _, c := range p.Coarsening {
		cu := uint64(c)
		cfg := threads(n / cu)
		reps := uint64(p.Reps)
		amount := float64(reps * n)
		ds, err := p.repeat(ctx, func(bool) (time.Duration, error) {
			return a.sumRun(ctx, kSeqRef, cfg, reps*sum, a.arr.Arg(), cuda.U64(n), cuda.U64(cu), cuda.U64(reps))
		})
		if err != nil {
			return nil, fmt.Errorf("C3 coarsening %d: %w", c, err)
		}
		dsp, err := p.repeat(ctx, func(bool) (time.Duration, error) {
			return a.sumRun(ctx, kSeqSpan, cfg, reps*sum, a.arr.Arg(), cuda.U64(n), cuda.U64(cu), cuda.U64(reps))
		})
		if err != nil {
			return nil, fmt.Errorf("C3 spans coarsening %d: %w", c, err)
		}
		dp, err := p.repeat(ctx, func(bool) (time.Duration, error) {
			return a.sumRun(ctx, kSeqPlain, cfg, reps*sum, cuda.Ptr(plain.Ptr()), cuda.U64(n), cuda.U64(cu), cuda.U64(reps))
		})
		if err != nil {
			return nil, fmt.Errorf("C3 plain coarsening %d: %w", c, err)
		}
		v, sv, pv := median(rates(ds, amount)), median(rates(dsp, amount)), median(rates(dp, amount))
		name := fmt.Sprintf("hit_seq_read_ref_coarsen_%d_Glookups", c)
		sname := fmt.Sprintf("hit_seq_read_ref_span_coarsen_%d_Glookups", c)
		c3samples[name] = scale(rates(ds, amount), 1e-9)
		c3samples[sname] = scale(rates(dsp, amount), 1e-9)
		c3samples[name+"_plain"] = scale(rates(dp, amount), 1e-9)
		c3.Add(name, v/1e9, "Glookups/s", "plain device-array sequential read, same mapping, same run", pv/1e9, false, "")
		c3.Add(sname, sv/1e9, "Glookups/s", "plain device-array sequential read, same mapping, same run", pv/1e9, false, "")
		if pv > 0 && (bestC == 0 || v/pv > best/bestPlain) {
			best, bestPlain, bestC = v, pv, c
		}
		if pv > 0 && (bestSC == 0 || sv/pv > bestS/bestSPlain) {
			bestS, bestSPlain, bestSC = sv, pv, c
		}
		p.logf("C3 all-hit seq 8B reads, array_ref, coarsening %2d: %.2f G/s, spans %.2f G/s, plain %.2f G/s", c, v/1e9, sv/1e9, pv/1e9)
	}
	c3.Add("hit_seq_read_ref_best_Glookups", best/1e9, "Glookups/s", fmt.Sprintf("plain device-array sequential read (coarsening %d), same run", bestC), bestPlain/1e9, false, ">= 0.5")
	c3.Add("hit_seq_read_ref_span_best_Glookups", bestS/1e9, "Glookups/s", fmt.Sprintf("plain device-array sequential read (coarsening %d), same run", bestSC), bestSPlain/1e9, false, ">= 0.5")
	c3.Params["best_coarsening"] = bestC
	c3.Params["span_best_coarsening"] = bestSC
	c3.Params["samples_Glookups"] = c3samples

	after, err := a.e.Stats()
	if err != nil {
		return nil, err
	}
	misses := after.Misses - before.Misses
	if misses != 0 {
		p.logf("warning: %d misses during the all-hit runs", misses)
	}
	for _, r := range []*bench.Result{c2, c3} {
		r.Params["line_size"] = p.LineSize
		r.Params["array_bytes"] = p.ArrayBytes
		r.Params["cache_bytes"] = 2 * p.ArrayBytes
		r.Params["ways"] = 8
		r.Params["runs"] = p.Runs
		r.Params["warmup_runs"] = p.Warmup
		r.Params["jit"] = jitName(p.LinkedJIT)
		r.Params["kernel_build"] = a.e.KernelBuild()
		r.Params["statistic"] = "median"
		r.Params["misses_during_timed_runs"] = misses
		r.Params["elapsed_s"] = time.Since(t0).Seconds()
	}
	c2.Params["lookups_per_run"] = lk
	c2.Params["index_sets"] = p.Seeds
	c2.Params["index"] = "lookup i of a run reads element mix64(seed + i) mod n; seed rotates among index_sets sets"
	c3.Params["coarsening"] = slices.Clone(p.Coarsening)
	c3.Params["passes_per_run"] = p.Reps
	c3.Params["mapping"] = "n/c threads, W = n/(32c) warps; in pass r warp w reads chunk k = (w + r*(W/passes)) mod W, lane l the elements k*32*c + 32j + l, j < c: every pass reads the whole array, and no warp re-reads its previous pass's chunk from L1/L2"
	c3.Params["span"] = "the _span_ figures read each held line's elements through array_ref::span (one span per line, plain loads), the others through array_ref::operator[] per element"
	return []*bench.Result{c2, c3}, nil
}

func scale(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x * f
	}
	return out
}
