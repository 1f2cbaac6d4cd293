package gpubench

import (
	"context"
	"fmt"
	"math/bits"
	"runtime"
	"strings"
	"time"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
)

// CacheParams sizes C1 (cold-cache reads against the path ceiling) and C4
// (ablations). Zero fields take the defaults in their comments.
type CacheParams struct {
	Config
	// CacheBytes is the cache size, a power of two; the array is 4x it
	// (default 1GiB, so a 4 GiB array: a cold pass then lasts about 85 ms
	// on an H200, where through 256 MiB its start and end, and sets four
	// times as crowded, cost 4 KiB lines about 2 % of their rate).
	CacheBytes uint64
	// Lines are the line sizes of C1 (default 512, 4096, 8192, 65536).
	Lines []int
	// Queues and Depth shape the queue pairs (default
	// gpuengine.DefaultQueuePairs and the engine's depth for the line
	// size, see gpuengine.Config.QueueDepth).
	Queues, Depth int
	// Workers is the Target's host threads (default min(GOMAXPROCS, Queues)).
	Workers int
	// ReadAheadQueues is the read-ahead queue pairs of the cache
	// (gpuengine.Config.ReadAheadQueuePairs; default
	// DefaultReadAheadQueues, negative none), used by the seq_read_ahead
	// order's Reads and by the range order's Reads of consecutive lines.
	ReadAheadQueues int
	// Lookups is the number of lookups of each C4 lookup run (default 16Mi).
	Lookups int
	// CeilingBytes and CeilingTime size the ceiling measurements (default
	// 256MiB and 250ms).
	CeilingBytes uint64
	CeilingTime  time.Duration
	// NoAblations skips C4.
	NoAblations bool
	// Ahead is how many lines each warp of the range and random orders
	// fills at once (bam::array::prefetch): 0 takes the device library's
	// bam::fill_ahead, the engine's passes' own, and 1 fills none ahead of
	// the reads.
	Ahead int
}

func (p *CacheParams) fill() error {
	p.Config.fill()
	if p.CacheBytes == 0 {
		p.CacheBytes = 1 << 30
	}
	if p.CacheBytes&(p.CacheBytes-1) != 0 || p.CacheBytes < 1<<20 {
		return fmt.Errorf("gpubench: cache of %d bytes: want a power of two of at least 1 MiB", p.CacheBytes)
	}
	if len(p.Lines) == 0 {
		p.Lines = []int{512, 4096, 8192, 65536}
	}
	for _, l := range p.Lines {
		if l < 512 || l > 65536 || l&(l-1) != 0 || uint64(l)*8*64 > p.CacheBytes {
			return fmt.Errorf("gpubench: line size %d: want a power of two from 512 to 64 KiB, with at least 64 sets of 8 ways in the cache", l)
		}
	}
	if p.Queues == 0 {
		p.Queues = gpuengine.DefaultQueuePairs
	}
	if p.ReadAheadQueues == 0 {
		p.ReadAheadQueues = DefaultReadAheadQueues
	}
	if p.Workers == 0 {
		p.Workers = min(runtime.GOMAXPROCS(0), p.Queues)
	}
	if p.Lookups == 0 {
		p.Lookups = 16 << 20
	}
	if p.CeilingBytes == 0 {
		p.CeilingBytes = 256 << 20
	}
	if p.CeilingTime == 0 {
		p.CeilingTime = 250 * time.Millisecond
	}
	return nil
}

// arig is an engine with one u64 array bound over a pattern namespace.
type arig struct {
	*rig
	arr    *gpuengine.Array
	n      uint64 // elements
	sum    uint64 // sum of all elements
	out    *cuda.DeviceMem
	next   *cuda.DeviceMem // the work counter of balanced passes (bam::for_range's next)
	line   int
	nsSeed uint64
}

func newARig(cfg gpuengine.Config, ns *nvme.MemoryNamespace, n, sum, seed uint64) (*arig, error) {
	r, err := newRig(cfg, []nvme.Namespace{ns})
	if err != nil {
		return nil, err
	}
	// Staging mirrors, where the configuration allocates them, serve only
	// the figures that ask for them (SetStagingMirror).
	if err := r.e.SetStagingMirror(false); err != nil {
		r.close()
		return nil, err
	}
	a := &arig{rig: r, n: n, sum: sum, line: r.e.Config().LineSize, nsSeed: seed}
	if a.arr, err = r.e.Bind(gpuengine.ArraySpec{Name: "bench", ElemSize: 8, Len: n, Stripe: []gpuengine.StripeMember{{Namespace: 0}}}); err != nil {
		r.close()
		return nil, err
	}
	if a.out, err = r.alloc(8); err != nil {
		r.close()
		return nil, err
	}
	if a.next, err = r.alloc(8); err != nil {
		a.out.Free()
		r.close()
		return nil, err
	}
	return a, nil
}

// abandon logs err, closes a and returns err: logged first, since closing
// frees device memory, which waits for the device, and so for any kernel
// the failure left running.
func (c *Config) abandon(a *arig, err error) error {
	c.logf("failed: %v", err)
	a.close()
	return err
}

func (a *arig) close() error {
	a.out.Free()
	a.next.Free()
	a.arr.Unbind()
	return a.rig.close()
}

// sumRun launches a summing kernel (its last argument the output word),
// checks the sum against want and returns the device time.
func (a *arig) sumRun(ctx context.Context, name string, cfg cuda.LaunchConfig, want uint64, args ...cuda.Arg) (time.Duration, error) {
	fn, err := a.fn(name)
	if err != nil {
		return 0, err
	}
	if err := a.out.Memset8(0); err != nil {
		return 0, err
	}
	d, err := a.e.LaunchTimed(ctx, fn, cfg, append(args, cuda.Ptr(a.out.Ptr()))...)
	if err != nil {
		return 0, err
	}
	got, err := readU64s(a.out, 1)
	if err != nil {
		return 0, err
	}
	if got[0] != want {
		return 0, fmt.Errorf("%w: %s: sum %#x, want %#x", ErrVerify, name, got[0], want)
	}
	return d, nil
}

// DefaultReadAheadQueues is CacheParams.ReadAheadQueues' default: the
// engine's (gpuengine.DefaultReadAheadQueuePairs), which serve the range
// order's Reads of consecutive lines as well as seq_read_ahead's (64; 32
// moved seq_read_ahead over 64 KiB lines 8-20 % slower on the H200 host,
// bench/results/logs/c1-range-runs-H200-20261125.txt).
const DefaultReadAheadQueues = gpuengine.DefaultReadAheadQueuePairs

// seqReadAheadSteps is how many grid steps the seq_read_ahead order's
// warps ask for at a time: 0, bam::read_ahead_steps' default for the line
// size (16 steps at 4 KiB lines, 24 at 8 and 16 KiB, 32 at 32 KiB and
// more).
const seqReadAheadSteps = 0

// gatherSchedule is how the warps of coldGather's range and random orders
// share the lines out.
type gatherSchedule struct {
	// Ahead is CacheParams.Ahead.
	Ahead int
	// Fixed gives each warp a fixed share, grid-stride, instead of having
	// warps take lines from a counter as they finish.
	Fixed bool
}

// coldGather reads the whole array from a cold cache, sequentially: one
// element per thread, grid-stride (order "seq"), or a line per warp with
// bam::for_range ("range"); or one warp per line in a random line order
// ("random"), the last two scheduled by sch; or "seq" with each warp
// filling its next sch.Ahead grid steps' lines ahead ("seq_ahead",
// waiting for them) or issuing them and going on ("seq_read_ahead"); and
// returns the median bytes
// of lines filled per second, the samples and the fills per line of the
// array.
func (a *arig) coldGather(ctx context.Context, c *Config, order string, coalesce bool, sch gatherSchedule) (float64, []float64, float64, error) {
	per := uint64(a.line / 8)
	lines := a.n / per
	next := cuda.Ptr(a.next.Ptr())
	if sch.Fixed {
		next = cuda.Ptr(0)
	}
	var name string
	var args []cuda.Arg
	switch order {
	case "seq":
		name = kSumSeq
		args = []cuda.Arg{a.arr.Arg(), cuda.U64(a.n), cuda.U64(b2u(coalesce))}
	case "seq_ahead":
		name = kSumSeqAhead
		args = []cuda.Arg{a.arr.Arg(), cuda.U64(a.n), cuda.U64(uint64(sch.Ahead))}
	case "seq_read_ahead":
		name = kSumSeqRA
		args = []cuda.Arg{a.arr.Arg(), cuda.U64(a.n), cuda.U64(uint64(sch.Ahead))}
	case "range":
		name = kSumRange
		args = []cuda.Arg{a.arr.Arg(), cuda.U64(a.n), cuda.U64(uint64(sch.Ahead)), next}
	case "random":
		name = kSumLinesPerm
		args = []cuda.Arg{a.arr.Arg(), cuda.U64(uint64(bits.TrailingZeros64(lines))), cuda.U64(per), cuda.U64(0), cuda.U64(uint64(sch.Ahead)), next}
	default:
		return 0, nil, 0, fmt.Errorf("gpubench: unknown order %q", order)
	}
	cfg, err := a.fullGrid(name)
	if err != nil {
		return 0, nil, 0, err
	}
	var v []float64
	var fills uint64
	seed := uint64(0)
	_, err = c.repeat(ctx, func(timed bool) (time.Duration, error) {
		if err := a.e.Invalidate(ctx); err != nil {
			return 0, err
		}
		if order == "random" {
			seed++
			args[3] = cuda.U64(seed)
		}
		if err := a.next.Memset8(0); err != nil {
			return 0, err
		}
		before, err := a.e.Stats()
		if err != nil {
			return 0, err
		}
		d, err := a.sumRun(ctx, name, cfg, a.sum, args...)
		if err != nil {
			return 0, err
		}
		after, err := a.e.Stats()
		if err != nil {
			return 0, err
		}
		f := after.Fills - before.Fills
		if f < lines {
			return 0, fmt.Errorf("%w: cold read of %d lines filled only %d", ErrVerify, lines, f)
		}
		if timed {
			fills += f
			v = append(v, float64(f)*float64(a.line)/d.Seconds())
		}
		return d, nil
	})
	if err != nil {
		return 0, nil, 0, err
	}
	return median(v), v, float64(fills) / float64(len(v)) / float64(lines), nil
}

// coldLookups reads count random elements of the whole array (each lane of
// a warp a different line, almost always) from a cold cache and returns the
// median lookups per second and bytes of lines filled per second.
func (a *arig) coldLookups(ctx context.Context, c *Config, count uint64) (float64, float64, error) {
	const seed = 0xc01d
	mask := a.n - 1
	want := parallelSum(count, func(i uint64) uint64 { return kernels.Pattern64(patternSeedArr, kernels.Mix64(seed+i)&mask) })
	cfg, err := a.fullGrid(kLookupArray)
	if err != nil {
		return 0, 0, err
	}
	var lk, gb []float64
	_, err = c.repeat(ctx, func(timed bool) (time.Duration, error) {
		if err := a.e.Invalidate(ctx); err != nil {
			return 0, err
		}
		before, err := a.e.Stats()
		if err != nil {
			return 0, err
		}
		d, err := a.sumRun(ctx, kLookupArray, cfg, want, a.arr.Arg(), cuda.U64(mask), cuda.U64(count), cuda.U64(seed), cuda.U64(1))
		if err != nil {
			return 0, err
		}
		after, err := a.e.Stats()
		if err != nil {
			return 0, err
		}
		if timed {
			lk = append(lk, float64(count)/d.Seconds())
			gb = append(gb, float64(after.Fills-before.Fills)*float64(a.line)/d.Seconds())
		}
		return d, nil
	})
	if err != nil {
		return 0, 0, err
	}
	return median(lk), median(gb), nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func (p *CacheParams) engineConfig(line int) gpuengine.Config {
	return gpuengine.Config{
		Device: p.Device, LineSize: line, CacheBytes: p.CacheBytes, Ways: 8, QueuePairs: p.Queues,
		QueueDepth: p.Depth, Timeout: p.Timeout, TargetWorkers: p.Workers, FillCopierWarps: p.CopierWarps,
		ReadAheadQueuePairs: p.ReadAheadQueues, StagingMirror: true, MirrorRun: p.MirrorRun, MirrorStreams: p.MirrorStreams,
		LinkedJIT: p.LinkedJIT, PortablePTX: p.PortablePTX,
	}
}

// RunCache measures C1 (cold-cache reads of an array 4x the cache, per line
// size and order, against the path ceiling) and C4 (ablations).
func RunCache(ctx context.Context, p CacheParams) ([]*bench.Result, error) {
	if err := p.fill(); err != nil {
		return nil, err
	}
	if err := checkGPU(p.Device); err != nil {
		return nil, err
	}
	t0 := time.Now()
	arrayBytes := 4 * p.CacheBytes
	n := arrayBytes / 8
	ns, sum, err := patternNamespace(arrayBytes, patternSeedArr)
	if err != nil {
		return nil, err
	}
	defer ns.Close()

	var c1 *bench.Result
	var h2d, zc float64 // zc: GPU zero-copy reads of pinned memory
	hostCopy := map[int]float64{}
	samples := map[string][]float64{}
	amp := map[string]float64{}
	failed := map[string]string{} // figures of the experimental route that ended in an error
	depths := map[string]int{}
	for _, line := range p.Lines {
		a, err := newARig(p.engineConfig(line), ns, n, sum, patternSeedArr)
		if err != nil {
			return nil, err
		}
		depths[kib(line)] = a.e.Config().QueueDepth
		if c1 == nil {
			c1 = bench.NewResult("C1", a.deviceName())
			c1.Params["kernel_build"] = a.e.KernelBuild()
			c1.Params["mirror_run_bytes"] = a.e.Config().MirrorRun
			c1.Params["staging_mirror"] = "allocated (gpuengine Config.StagingMirror) but used only by the figures suffixed _mirror"

			if h2d, err = measureH2D(ctx, a.e.Context(), p.CeilingBytes, 2, max(p.Runs, 5)); err != nil {
				return nil, p.abandon(a, fmt.Errorf("gpubench: H2D ceiling: %w", err))
			}
			if zc, err = measureZeroCopy(ctx, p.Device, p.CeilingBytes, max(p.Runs, 5)); err != nil {
				return nil, p.abandon(a, fmt.Errorf("gpubench: zero-copy ceiling: %w", err))
			}
		}
		hc, err := measureHostCopy(ctx, a.e.Context(), ns, patternSeedArr, line, p.Workers, p.CeilingTime, p.Runs)
		if err != nil {
			return nil, p.abandon(a, fmt.Errorf("gpubench: host copy ceiling: %w", err))
		}
		hostCopy[line] = hc
		ceil := ceilings{H2D: h2d, HostCopy: hostCopy}
		for _, order := range []string{"seq", "seq_read_ahead", "range", "random"} {
			type variant struct {
				route  gpuengine.FillRoute
				mirror bool
			}
			routes := []variant{{gpuengine.RouteAuto, false}, {gpuengine.RouteAuto, true}, {gpuengine.RouteCopyEngine, false}}
			if order == "seq_read_ahead" && line < 4096 {
				continue
			}
			if line < 4096 || order == "range" || order == "seq_read_ahead" {
				// The copy engine moved 0.1 GB/s of 512-byte lines:
				// minutes per run; the range order measures the work
				// assignment, on the default route.
				routes = routes[:1]
			}
			for _, rv := range routes {
				route := rv.route
				if err := a.arr.SetFillRoute(route); err != nil {
					return nil, p.abandon(a, err)
				}
				if err := a.e.SetStagingMirror(rv.mirror); err != nil {
					return nil, p.abandon(a, err)
				}
				sch := gatherSchedule{Ahead: p.Ahead}
				if order == "seq_read_ahead" {
					sch.Ahead = seqReadAheadSteps
				}
				v, s, fpl, err := a.coldGather(ctx, &p.Config, order, true, sch)
				if err != nil && route == gpuengine.RouteCopyEngine {
					failed[fmt.Sprintf("cold_%s_read_%s_lines_copy_engine", order, kib(line))] = err.Error()
					p.logf("C1 cold %s %s lines, %s route: failed: %v", order, kib(line), route, err)
					continue
				}
				if err != nil {
					return nil, p.abandon(a, fmt.Errorf("C1 %s %d-byte lines, %s route: %w", order, line, route, err))
				}
				name := fmt.Sprintf("cold_%s_read_%s_lines_GBps", order, kib(line))
				goal := ""
				switch {
				case route != gpuengine.RouteAuto:
					name += "_" + strings.ReplaceAll(route.String(), "-", "_")
				case rv.mirror:
					name += "_mirror"
				case line >= 4096:
					goal = ">= 0.9"
				}
				gb := make([]float64, len(s))
				for i, x := range s {
					gb[i] = x / 1e9
				}
				samples[name] = gb
				amp[name] = fpl
				c1.Add(name, v/1e9, "GB/s",
					fmt.Sprintf("path ceiling: min(pinned H2D copy, host %s copy into pinned memory x%d threads), same run", kib(line), p.Workers),
					ceil.path(line)/1e9, false, goal)
				p.logf("C1 cold %-6s %5s lines, %-11s route%s: %6.2f GB/s of lines (ceiling %.2f GB/s, %.2f fills per line)", order, kib(line), route, map[bool]string{true: " (mirror)"}[rv.mirror], v/1e9, ceil.path(line)/1e9, fpl)
				if goal != "" {
					// The same figure against the route's own medium.
					c1.Add(name+"_vs_zero_copy", v/1e9, "GB/s", zeroCopyCeilingName(kib(line), p.Workers),
						min(zc, ceil.HostCopy[line])/1e9, false, "")
				}
			}
			if err := a.e.SetStagingMirror(false); err != nil {
				return nil, p.abandon(a, err)
			}
		}
		if line == 4096 {
			for _, v := range []struct {
				suffix    string
				route     gpuengine.FillRoute
				copyBelow uint64
			}{
				{"", gpuengine.RouteAuto, gpuengine.DefaultCopyBelow},
				{"_lane_copy", gpuengine.RouteAuto, 0},
				{"_copy_engine", gpuengine.RouteCopyEngine, gpuengine.DefaultCopyBelow},
			} {
				if err := a.arr.SetFillRoute(v.route); err != nil {
					return nil, p.abandon(a, err)
				}
				if err := a.arr.SetCopyBelow(v.copyBelow); err != nil {
					return nil, p.abandon(a, err)
				}
				count := uint64(p.Lookups)
				if v.route == gpuengine.RouteCopyEngine {
					count /= 16 // about 0.2 M fills/s: keep a run short
				}
				lk, gb, err := a.coldLookups(ctx, &p.Config, count)
				if err != nil && v.route == gpuengine.RouteCopyEngine {
					// The experimental route's failure is a result, not
					// a reason to drop every other figure of the run.
					failed["cold_scattered_lookups_4k_lines"+v.suffix] = err.Error()
					p.logf("C1 cold scattered 8-byte lookups, 4k lines, %s route: failed: %v", v.route, err)
					continue
				}
				if err != nil {
					return nil, p.abandon(a, fmt.Errorf("C1 scattered lookups, %s route%s: %w", v.route, v.suffix, err))
				}
				c1.Report("cold_scattered_lookups_4k_lines_Mlookups"+v.suffix, lk/1e6, "M lookups/s", "")
				c1.Add("cold_scattered_lookups_4k_lines_GBps"+v.suffix, gb/1e9, "GB/s",
					fmt.Sprintf("path ceiling: min(pinned H2D copy, host 4k copy into pinned memory x%d threads), same run", p.Workers),
					ceil.path(line)/1e9, false, "")
				p.logf("C1 cold scattered 8-byte lookups, 4k lines, %-11s route%s: %.2f M lookups/s, %.2f GB/s of lines filled", v.route, v.suffix, lk/1e6, gb/1e9)
			}
			if err := a.arr.SetCopyBelow(gpuengine.DefaultCopyBelow); err != nil {
				return nil, p.abandon(a, err)
			}
		}
		if err := a.arr.SetFillRoute(gpuengine.RouteAuto); err != nil {
			return nil, p.abandon(a, err)
		}
		if err := a.close(); err != nil {
			return nil, err
		}
	}
	c1.Params["cache_bytes"] = p.CacheBytes
	c1.Params["array_bytes"] = arrayBytes
	c1.Params["ways"] = 8
	c1.Params["queues"] = p.Queues
	c1.Params["read_ahead_queues"] = max(p.ReadAheadQueues, 0)
	c1.Params["queue_depths"] = depths
	c1.Params["target_workers"] = p.Workers
	c1.Params["namespace"] = "memory"
	c1.Params["line_sizes"] = p.Lines
	c1.Params["runs"] = p.Runs
	c1.Params["jit"] = jitName(p.LinkedJIT)
	c1.Params["ahead"] = p.Ahead // 0: bam::fill_ahead
	c1.Params["statistic"] = "median"
	c1.Params["h2d_ceiling_GBps"] = h2d / 1e9
	c1.Params["zero_copy_ceiling_GBps"] = zc / 1e9
	hcg := map[string]float64{}
	for l, v := range hostCopy {
		hcg[kib(l)] = v / 1e9
	}
	c1.Params["host_copy_ceiling_GBps"] = hcg
	c1.Params["samples_GBps"] = samples
	c1.Params["fills_per_line"] = amp
	if len(failed) > 0 {
		c1.Params["failed"] = failed
	}
	c1.Params["orders"] = "seq: thread i reads element i (grid-stride); seq_read_ahead: the same pass with bam::read_ahead, each warp issuing the Reads of its lines S+1 to 2S grid steps ahead every S steps and completing them at later steps, S = 16 at 4 KiB lines, 24 at 8 and 16 KiB, 32 at 32 KiB and more (bam::read_ahead_steps; 4 KiB and larger lines); range: the same elements in order, warps taking them a line at a time from a counter as they finish (bam::for_range with a work counter, as the engine's ReadRange, Sum and Gather do); random: one warp per line, the positions of a pseudo-random permutation of the lines taken the same way, every element read; range and random keep at most half of the cache's lines in flight, and each warp fills its next lines ahead of its reads (ahead, bam::array::prefetch) as far as that allows, consecutive lines (the range order's) with one Read of up to ReadAheadReadBytes (8 KiB) on the read-ahead pairs"
	c1.Params["figure"] = "bytes of lines filled from storage per second of kernel time (cold cache: invalidated before every run); the sum of all elements is checked every run"
	c1.Params["routes"] = "unsuffixed: auto, the default route, today the bounce route: staging slots the requesting warp group copies into the line, or a fill copier warp for groups of fewer than 16 lanes; _lane_copy: the same with the fill copier off (small groups copy alone); _copy_engine: the Target copies into the line with cuMemcpyHtoDAsync and a stream synchronisation before it completes the command"
	c1.Params["elapsed_s"] = time.Since(t0).Seconds()
	out := []*bench.Result{c1}
	if !p.NoAblations {
		c4, err := runC4(ctx, &p, ns, n, sum)
		if err != nil {
			return nil, err
		}
		out = append(out, c4)
	}
	return out, nil
}

// runC4: coalescing on and off (all-hit and cold), clock against round
// robin under a skewed workload, padded against packed hot atomics. Since
// reads that hit take no reference, "on" for the all-hit figures is
// bam::array's read (lanes that hit read alone, without references; only
// misses are grouped) and "off" is every lane taking and dropping
// references on its line by itself.
func runC4(ctx context.Context, p *CacheParams, ns *nvme.MemoryNamespace, n, sum uint64) (_ *bench.Result, err error) {
	t0 := time.Now()
	a, err := newARig(p.engineConfig(4096), ns, n, sum, patternSeedArr)
	if err != nil {
		return nil, err
	}
	defer a.close()
	// Logged before the rig closes: closing frees device memory, which
	// waits for the device, and so for any kernel the failure left running.
	defer func() {
		if err != nil {
			p.logf("C4 failed: %v", err)
		}
	}()
	res := bench.NewResult("C4", a.deviceName())
	res.Params["kernel_build"] = a.e.KernelBuild()
	res.Params["line_size"] = 4096
	res.Params["cache_bytes"] = p.CacheBytes
	res.Params["array_bytes"] = n * 8
	res.Params["runs"] = p.Runs
	res.Params["jit"] = jitName(p.LinkedJIT)
	res.Params["statistic"] = "median"
	res.Params["fill_route"] = "auto (bounce): staging slots copied into the line by the requesting warp group, by a fill copier warp for groups of fewer than 16 lanes"

	// 1. Coalescing, cold sequential read of the whole array.
	on, _, _, err := a.coldGather(ctx, &p.Config, "seq", true, gatherSchedule{})
	if err != nil {
		return nil, err
	}
	off, _, _, err := a.coldGather(ctx, &p.Config, "seq", false, gatherSchedule{})
	if err != nil {
		return nil, err
	}
	res.Add("coalescing_cold_seq_read_GBps", on/1e9, "GB/s", "same without warp coalescing", off/1e9, false, "")
	p.logf("C4 cold seq read: coalesced %.2f GB/s, per lane %.2f GB/s", on/1e9, off/1e9)

	// 1b. The range pass's schedule: chunks taken by warps as they finish
	// against fixed shares, and lines filled ahead of the reads against
	// none.
	var sched [3]float64
	for i, sch := range []gatherSchedule{{Ahead: p.Ahead}, {Ahead: p.Ahead, Fixed: true}, {Ahead: 1}} {
		if sched[i], _, _, err = a.coldGather(ctx, &p.Config, "range", true, sch); err != nil {
			return nil, err
		}
	}
	res.Add("balanced_cold_range_read_GBps", sched[0]/1e9, "GB/s", "same with each warp's share fixed in advance (grid-stride)", sched[1]/1e9, false, "")
	res.Add("fill_ahead_cold_range_read_GBps", sched[0]/1e9, "GB/s", "same with no line filled ahead of its reads", sched[2]/1e9, false, "")
	p.logf("C4 cold range read: chunks taken %.2f GB/s, fixed shares %.2f GB/s, none filled ahead %.2f GB/s", sched[0]/1e9, sched[1]/1e9, sched[2]/1e9)

	// 1c. An opt-in read-ahead for the one-element-per-thread pass: each
	// warp fills the lines of its next grid steps (bam::array::prefetch).
	const seqAhead = 16
	ra, _, _, err := a.coldGather(ctx, &p.Config, "seq_ahead", true, gatherSchedule{Ahead: seqAhead})
	if err != nil {
		return nil, err
	}
	res.Add("read_ahead_cold_seq_read_GBps", ra/1e9, "GB/s", fmt.Sprintf("same pass (one element per thread, grid-stride) without its warps filling their next %d grid steps' lines", seqAhead), on/1e9, false, "")
	p.logf("C4 cold seq read: %d grid steps read ahead %.2f GB/s, none %.2f GB/s", seqAhead, ra/1e9, on/1e9)

	// 2. Coalescing, all-hit: half the cache's worth of elements, warmed.
	hot := min(p.CacheBytes/2/8, maxSeqElems)
	hotSum := parallelSum(hot, func(i uint64) uint64 { return kernels.Pattern64(patternSeedArr, i) })
	seqCfg := threads(hot)
	if _, err := a.sumRun(ctx, kSeqArray, seqCfg, hotSum, a.arr.Arg(), cuda.U64(hot), cuda.U64(1), cuda.U64(1), cuda.U64(1)); err != nil {
		return nil, err
	}
	const reps = 4
	rate := func(name string, cfg cuda.LaunchConfig, want uint64, amount float64, args ...cuda.Arg) (float64, error) {
		ds, err := p.repeat(ctx, func(bool) (time.Duration, error) { return a.sumRun(ctx, name, cfg, want, args...) })
		if err != nil {
			return 0, err
		}
		return median(rates(ds, amount)), nil
	}
	before, err := a.e.Stats()
	if err != nil {
		return nil, err
	}
	var hitOn, hitOff float64
	if hitOn, err = rate(kSeqArray, seqCfg, reps*hotSum, float64(reps*hot), a.arr.Arg(), cuda.U64(hot), cuda.U64(1), cuda.U64(reps), cuda.U64(1)); err != nil {
		return nil, err
	}
	if hitOff, err = rate(kSeqArray, seqCfg, reps*hotSum, float64(reps*hot), a.arr.Arg(), cuda.U64(hot), cuda.U64(1), cuda.U64(reps), cuda.U64(0)); err != nil {
		return nil, err
	}
	res.Add("coalescing_hit_seq_read_Glookups", hitOn/1e9, "Glookups/s", "same with every lane taking references alone", hitOff/1e9, false, "")
	p.logf("C4 all-hit seq 8B reads: coalesced %.2f G/s, per lane %.2f G/s", hitOn/1e9, hitOff/1e9)

	lk := uint64(p.Lookups)
	lkSeed := uint64(0x10c)
	lkSum := parallelSum(lk, func(i uint64) uint64 {
		return kernels.Pattern64(patternSeedArr, kernels.Mix64(lkSeed+i)&(hot-1))
	})
	lkCfg, err := a.fullGrid(kLookupArray)
	if err != nil {
		return nil, err
	}
	var rndOn, rndOff float64
	if rndOn, err = rate(kLookupArray, lkCfg, lkSum, float64(lk), a.arr.Arg(), cuda.U64(hot-1), cuda.U64(lk), cuda.U64(lkSeed), cuda.U64(1)); err != nil {
		return nil, err
	}
	if rndOff, err = rate(kLookupArray, lkCfg, lkSum, float64(lk), a.arr.Arg(), cuda.U64(hot-1), cuda.U64(lk), cuda.U64(lkSeed), cuda.U64(0)); err != nil {
		return nil, err
	}
	after, err := a.e.Stats()
	if err != nil {
		return nil, err
	}
	res.Add("coalescing_hit_random_lookup_Glookups", rndOn/1e9, "Glookups/s", "same with every lane taking references alone", rndOff/1e9, false, "")
	res.Params["all_hit_misses"] = after.Misses - before.Misses
	p.logf("C4 all-hit random 8B lookups: coalesced %.2f G/s, per lane %.2f G/s (misses during all-hit runs: %d)", rndOn/1e9, rndOff/1e9, after.Misses-before.Misses)

	// 3. Victim choice: 90% of lookups on a hot half-cache, the rest over
	// the array (4x the cache), cold cache each run.
	const hotPer256 = 230
	skSeed := uint64(0x5c)
	skSum := parallelSum(lk, func(i uint64) uint64 {
		h := kernels.Mix64(skSeed + i)
		j := (h >> 8) & (n - 1)
		if h&0xff < hotPer256 {
			j = (h >> 8) & (hot - 1)
		}
		return kernels.Pattern64(patternSeedArr, j)
	})
	skCfg, err := a.fullGrid(kLookupSkewed)
	if err != nil {
		return nil, err
	}
	policy := func(rr bool) (float64, float64, error) {
		if err := a.arr.SetRoundRobin(rr); err != nil {
			return 0, 0, err
		}
		var misses []float64
		ds, err := p.repeat(ctx, func(timed bool) (time.Duration, error) {
			if err := a.e.Invalidate(ctx); err != nil {
				return 0, err
			}
			b, err := a.e.Stats()
			if err != nil {
				return 0, err
			}
			d, err := a.sumRun(ctx, kLookupSkewed, skCfg, skSum, a.arr.Arg(), cuda.U64(n-1), cuda.U64(hot-1), cuda.U64(hotPer256), cuda.U64(lk), cuda.U64(skSeed))
			if err != nil {
				return 0, err
			}
			e, err := a.e.Stats()
			if err != nil {
				return 0, err
			}
			if timed {
				misses = append(misses, float64(e.Misses-b.Misses)/float64(lk))
			}
			return d, nil
		})
		if err != nil {
			return 0, 0, err
		}
		return median(rates(ds, float64(lk))), median(misses), nil
	}
	clockRate, clockMiss, err := policy(false)
	if err != nil {
		return nil, err
	}
	rrRate, rrMiss, err := policy(true)
	if err != nil {
		return nil, err
	}
	if err := a.arr.SetRoundRobin(false); err != nil {
		return nil, err
	}
	res.Add("victim_clock_skewed_lookup_Mlookups", clockRate/1e6, "Mlookups/s", "same with round-robin victims", rrRate/1e6, false, "")
	res.Add("victim_clock_misses_per_lookup", clockMiss, "misses/lookup", "same with round-robin victims", rrMiss, true, "")
	res.Params["skewed_workload"] = fmt.Sprintf("%d lookups, %d/256 of them uniform over the first %d elements (half the cache), the rest uniform over the array; cold cache each run", lk, hotPer256, hot)
	p.logf("C4 skewed lookups: clock %.1f M/s (%.3f misses/lookup), round robin %.1f M/s (%.3f)", clockRate/1e6, clockMiss, rrRate/1e6, rrMiss)

	// 4. Padding of hot atomics: 16 counters (as 16 queue tickets) hit by
	// every thread, packed in 8 bytes, 32 bytes or one 128-byte sector each.
	atom := map[int]float64{}
	const nwords, aiters, athreads = 16, 64, 256 << 10
	words, err := a.alloc(nwords * 16 * 8)
	if err != nil {
		return nil, err
	}
	defer words.Free()
	fn, err := a.fn(kAtomicStride)
	if err != nil {
		return nil, err
	}
	for _, stride := range []int{1, 4, 16} {
		ds, err := p.repeat(ctx, func(bool) (time.Duration, error) {
			if err := words.Memset8(0); err != nil {
				return 0, err
			}
			d, err := a.e.LaunchTimed(ctx, fn, threads(athreads), cuda.Ptr(words.Ptr()), cuda.U64(nwords), cuda.U64(uint64(stride)), cuda.U64(aiters))
			if err != nil {
				return 0, err
			}
			w, err := readU64s(words, nwords*16)
			if err != nil {
				return 0, err
			}
			var total uint64
			for _, x := range w {
				total += x
			}
			if total != athreads*aiters {
				return 0, fmt.Errorf("%w: atomic counters sum to %d, want %d", ErrVerify, total, athreads*aiters)
			}
			return d, nil
		})
		if err != nil {
			return nil, err
		}
		atom[stride*8] = median(rates(ds, athreads*aiters))
	}
	res.Add("padding_hot_atomics_128B_Gops", atom[128]/1e9, "Gatomics/s", "16 hot counters packed 8 bytes apart", atom[8]/1e9, false, "")
	res.Add("padding_hot_atomics_32B_Gops", atom[32]/1e9, "Gatomics/s", "16 hot counters packed 8 bytes apart", atom[8]/1e9, false, "")
	res.Params["padding"] = fmt.Sprintf("micro-ablation: %d threads each adding 1, %d times, to counter (thread mod %d) at 8/32/128-byte spacing; the engine's own layouts are fixed by internal/layout (vq words 128 B apart, cache way records 32 B)", athreads, aiters, nwords)
	p.logf("C4 hot atomics: 128B-padded %.2f G/s, 32B %.2f G/s, packed %.2f G/s", atom[128]/1e9, atom[32]/1e9, atom[8]/1e9)
	res.Params["elapsed_s"] = time.Since(t0).Seconds()
	return res, nil
}
