package gpubench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/nvme"
)

// Modes of bam_bench_queue_read (kernels/bench.cu).
const (
	modeLocked  = 1
	modeCopy    = 2
	modeVerify  = 4
	modeLatency = 8
	modeDirect  = 16
	modeCopier  = 32 // with modeCopy: the fill copier's warps copy (the default route)
	modeMirror  = 64 // with modeCopy: ask for the staging mirror when the queue is busy
	// modeWarpCopy (with modeCopy) runs bam_bench_queue_read_warp instead:
	// the warp's lanes copy all of the warp's lines together.
	modeWarpCopy = 128
	// modeWarpLine (with modeCopy) runs bam_bench_queue_read_line instead:
	// a warp's first lanes each keep one Read in flight (how many: bits
	// 16-23, see warpLines), and all 32 lanes copy each line, as the
	// cache's fills do.
	modeWarpLine = 256
)

// warpLines returns the mode of the route where each warp keeps n Reads in
// flight (1-32) and copies their lines with all its lanes.
func warpLines(n int) uint64 { return modeCopy | modeWarpLine | uint64(n)<<16 }

// fits reports whether mode can run on queues of depth entries: routes
// whose lanes keep their slots until their warp's copy need more entries
// than a warp keeps (the SQ holds depth-1 commands), or a warp would wait
// for a slot it holds itself.
func fits(mode uint64, depth int) bool {
	switch {
	case mode&modeWarpCopy != 0:
		return depth > 32
	case mode&modeWarpLine != 0:
		return depth > int(mode>>16&0xff)
	}
	return true
}

// warpLineReads is how many Reads a warp of Q2's warp_lines route keeps in
// flight. Measured on the H200 host at 64 queue pairs of 256 entries
// (bench/results/logs/q2-warp-lines-H200-20261125.txt), 64 Ki threads: 1,
// 2, 4, 5, 6 and 8 Reads a warp moved 41.6-41.9, 46.4-46.6, 48.4-49.2,
// 49.3-49.5, 48.5-49.7 and 47.1-48.4 GB/s, against 44.3-46.3 for all 32
// lanes reading (warp_copy). Past about 10 K commands outstanding (of the
// queues' 16 K entries) the rate falls again: 256 Ki threads, whose
// resident warps fill the queues, moved 45-47.9 GB/s at 4-8 a warp.
const warpLineReads = 5

// latWords is the size in u64 of the record bam_bench_queue_read keeps per
// command in modeLatency (lat_words in kernels/bench.cu); the latRecord
// indices name its words.
const latWords = 6

const (
	latIONs       = iota // %globaltimer ns, reserve to completion
	latIOCycles          // %clock64, the same span
	latMissNs            // ns until the data is in device memory
	latMissCycles        // cycles, the same span
	latReserved          // cycles from the start to the end of reserve
	latIssued            // cycles from the start to the end of issue (doorbell rung)
)

// QueuesParams sizes the queue benchmarks (Q1, Q2, L1). Zero fields take
// the defaults in their comments.
type QueuesParams struct {
	Config
	// Threads are the GPU thread counts of Q1 (default 1Ki 4Ki 16Ki 64Ki
	// 256Ki 1Mi); Q2 uses those >= 64Ki.
	Threads []int
	// Queues is the number of queue pairs of the thread sweep (default
	// gpuengine.DefaultQueuePairs).
	Queues int
	// QueueSweep are further queue counts measured at SweepThreads
	// (default 16 and 128).
	QueueSweep []int
	// SweepThreads is the thread count of the queue sweep (default 64Ki).
	SweepThreads int
	// Depth is the entries per queue (default gpuengine.DefaultQueueDepth).
	Depth int
	// Commands is about how many commands one run issues (default 1Mi);
	// each thread issues ceil(Commands / threads).
	Commands int
	// Budget is the time box of one run: threads stop issuing once it has
	// passed since the first thread started (default 250ms).
	Budget time.Duration
	// NamespaceBytes is the size of the memory namespace read (default 1GiB).
	NamespaceBytes uint64
	// Workers is the Target's host threads (default: the engine's,
	// min(GOMAXPROCS, queues)).
	Workers int
	// SmallLines adds the thread sweep at 512-byte reads (default true
	// unless NoSmallLines).
	NoSmallLines bool
	// QD1Samples is the number of commands of the queue-depth-1 latency
	// run (default 2000); RoundTrips the round trips of its baseline
	// (default 2000).
	QD1Samples, RoundTrips int
	// LoadThreads and LoadCommands shape the latency-under-load run
	// (default 64Ki threads, 2 commands each).
	LoadThreads, LoadCommands int
	// CeilingBytes is the transfer of the H2D ceiling (default 256MiB);
	// CeilingTime the duration of one host-copy ceiling run (default
	// 250ms).
	CeilingBytes uint64
	CeilingTime  time.Duration
}

func (p *QueuesParams) fill() error {
	p.Config.fill()
	if len(p.Threads) == 0 {
		p.Threads = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}
	}
	for _, t := range p.Threads {
		if t < 32 || t%32 != 0 {
			return fmt.Errorf("gpubench: %d threads: want a positive multiple of 32", t)
		}
	}
	if p.Queues == 0 {
		p.Queues = gpuengine.DefaultQueuePairs
	}
	if p.QueueSweep == nil {
		p.QueueSweep = []int{16, 128}
	}
	if p.SweepThreads == 0 {
		p.SweepThreads = 64 << 10
	}
	if p.Depth == 0 {
		p.Depth = gpuengine.DefaultQueueDepth
	}
	if p.Commands == 0 {
		p.Commands = 1 << 20
	}
	if p.Budget == 0 {
		p.Budget = 250 * time.Millisecond
	}
	if p.NamespaceBytes == 0 {
		p.NamespaceBytes = 1 << 30
	}
	if p.NamespaceBytes < 1<<20 || p.NamespaceBytes%(64<<10) != 0 {
		return fmt.Errorf("gpubench: namespace of %d bytes: want a multiple of 64 KiB, at least 1 MiB", p.NamespaceBytes)
	}
	if p.QD1Samples == 0 {
		p.QD1Samples = 2000
	}
	if p.RoundTrips == 0 {
		p.RoundTrips = 2000
	}
	if p.LoadThreads == 0 {
		p.LoadThreads = 64 << 10
	}
	if p.LoadCommands == 0 {
		p.LoadCommands = 2
	}
	if p.CeilingBytes == 0 {
		p.CeilingBytes = 256 << 20
	}
	if p.CeilingTime == 0 {
		p.CeilingTime = 250 * time.Millisecond
	}
	return nil
}

// qrig is an engine whose queues the queue kernels drive directly.
type qrig struct {
	*rig
	p         *QueuesParams
	ns        *nvme.MemoryNamespace
	lineSize  int
	queues    int
	counters  *cuda.DeviceMem
	dst       *cuda.DeviceMem // copy destination (mode copy), larger than L2
	dstLines  uint64
	dstDrop   func() error // unregisters dst from the Target's DMA space
	seed      uint64       // rotated per run
	offloaded float64      // see iops
}

func newQRig(p *QueuesParams, ns *nvme.MemoryNamespace, lineSize, queues int) (*qrig, error) {
	r, err := newRig(gpuengine.Config{
		Device: p.Device, LineSize: lineSize, CacheBytes: uint64(lineSize) * 64, Ways: 8,
		QueuePairs: queues, QueueDepth: p.Depth, Timeout: p.Timeout, TargetWorkers: p.Workers, FillCopierWarps: p.CopierWarps,
		StagingMirror: true, MirrorRun: p.MirrorRun, MirrorStreams: p.MirrorStreams, LinkedJIT: p.LinkedJIT, PortablePTX: p.PortablePTX,
		// The queue benchmarks drive the queue pairs alone: no read-ahead
		// pairs for the Target to serve beside them.
		ReadAheadQueuePairs: -1,
	}, []nvme.Namespace{ns})
	if err != nil {
		return nil, err
	}
	q := &qrig{rig: r, p: p, ns: ns, lineSize: lineSize, queues: queues, seed: 1}
	if q.counters, err = r.alloc(8 * 8); err != nil {
		q.close()
		return nil, err
	}
	const dstBytes = 256 << 20
	q.dstLines = dstBytes / uint64(lineSize)
	if q.dst, err = r.alloc(dstBytes); err != nil {
		q.close()
		return nil, err
	}
	// dst is also the destination of the copy-engine route (mode direct).
	if q.dstDrop, err = r.e.RegisterDeviceMemory(q.dst); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *qrig) close() error {
	if q.counters != nil {
		q.counters.Free()
	}
	if q.dstDrop != nil {
		q.dstDrop()
	}
	if q.dst != nil {
		q.dst.Free()
	}
	return q.rig.close()
}

// qrun is the outcome of one launch of bam_bench_queue_read.
type qrun struct {
	elapsed                     time.Duration
	completed, failed, mismatch uint64
	offloaded                   uint64 // copies done by the fill copier
}

// launch runs bam_bench_queue_read with threads threads of iters commands;
// lat (nil: none) receives latencies of the first latN commands.
func (q *qrig) launch(ctx context.Context, nthreads, iters int, mode uint64, budget time.Duration, lat *cuda.DeviceMem, latN uint64) (qrun, error) {
	name := kQueueRead
	switch {
	case mode&modeWarpCopy != 0:
		name = kQueueReadWarp
	case mode&modeWarpLine != 0:
		name = kQueueReadLine
	}
	fn, err := q.fn(name)
	if err != nil {
		return qrun{}, err
	}
	if err := q.counters.Memset8(0); err != nil {
		return qrun{}, err
	}
	descs, n := q.e.QueueDescs()
	var latPtr cuda.DevicePtr
	if lat != nil {
		latPtr = lat.Ptr()
	}
	lines := q.p.NamespaceBytes / uint64(q.lineSize)
	lineShift := uint64(log2(q.lineSize))
	lbaShift := uint64(log2(q.lineSize / lbaSize))
	q.seed++
	d, err := q.e.LaunchTimed(ctx, fn, threads(uint64(nthreads)),
		cuda.Ptr(descs), cuda.U64(uint64(n)), cuda.U64(mode), cuda.U64(uint64(iters)), cuda.U64(uint64(budget.Nanoseconds())),
		cuda.U64(uint64(q.p.Timeout.Nanoseconds())), cuda.U64(1), cuda.U64(lines), cuda.U64(lineShift), cuda.U64(lbaShift),
		cuda.U64(q.seed*0x9e3779b97f4a7c15), cuda.U64(patternSeedQ), cuda.Ptr(q.dst.Ptr()), cuda.U64(q.dstLines),
		cuda.Ptr(q.counters.Ptr()), cuda.Ptr(latPtr), cuda.U64(latN), cuda.Ptr(q.e.FillCopierRing()))
	if err != nil {
		return qrun{}, err
	}
	c, err := readU64s(q.counters, 6)
	if err != nil {
		return qrun{}, err
	}
	r := qrun{elapsed: d, completed: c[0], failed: c[1], mismatch: c[2], offloaded: c[5]}
	if r.failed != 0 || r.mismatch != 0 {
		return r, fmt.Errorf("%w: %d-byte reads, %d threads, mode %d: %d commands failed (first: %s), %d checks mismatched (of %d completed)",
			ErrVerify, q.lineSize, nthreads, mode, r.failed, describeFailure(c[4]), r.mismatch, r.completed)
	}
	if r.completed == 0 {
		return r, fmt.Errorf("%w: %d-byte reads, %d threads: no command completed", ErrVerify, q.lineSize, nthreads)
	}
	return r, nil
}

// verify reads lines with every word compared to the pattern, through both
// protocols, before anything is timed.
func (q *qrig) verify(ctx context.Context) error {
	for _, mode := range []uint64{modeVerify, modeVerify | modeCopy, modeVerify | modeCopy | modeCopier, modeCopy | modeWarpCopy, warpLines(1), warpLines(warpLineReads), modeDirect, modeVerify | modeLocked} {
		if !fits(mode, q.p.Depth) {
			continue // not run at this depth (RunQueues says why)
		}
		if mode&modeLocked != 0 {
			if err := q.e.ResetQueues(ctx); err != nil {
				return err
			}
		}
		// The single-lock baseline is verified with at most 16 threads a
		// queue (1024 in all): with more on one unfair spin lock, some
		// waiters starve past the device timeout, which says nothing
		// about the data it moves (seen on the H200 host with 8192
		// threads on 64 queues, and with 1024 threads on the tiny test's
		// 8 queues: 668 of 4096 commands never took their lock in 5 s).
		threads := 8192
		if mode&modeLocked != 0 {
			threads = min(1024, 16*q.queues)
		}
		r, err := q.launch(ctx, threads, 4, mode, time.Hour, nil, 0)
		if err != nil {
			return fmt.Errorf("verification run: %w", err)
		}
		if r.completed != uint64(threads)*4 {
			return fmt.Errorf("%w: verification run completed %d of %d commands", ErrVerify, r.completed, threads*4)
		}
		if mode&modeLocked != 0 {
			if err := q.e.ResetQueues(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// iops measures the median IOPS of nthreads threads in mode (the queues
// are reset around locked runs). q.offloaded receives the fraction of the
// last run's copies that the fill copier did.
func (q *qrig) iops(ctx context.Context, nthreads int, mode uint64) (float64, []float64, error) {
	iters := max(1, (q.p.Commands+nthreads-1)/nthreads)
	if mode&modeLocked != 0 {
		if err := q.e.ResetQueues(ctx); err != nil {
			return 0, nil, err
		}
		defer q.e.ResetQueues(ctx)
	}
	var v []float64
	_, err := q.p.repeat(ctx, func(timed bool) (time.Duration, error) {
		r, err := q.launch(ctx, nthreads, iters, mode, q.p.Budget, nil, 0)
		if err != nil {
			return 0, err
		}
		if timed {
			v = append(v, float64(r.completed)/r.elapsed.Seconds())
		}
		q.offloaded = float64(r.offloaded) / float64(r.completed)
		return r.elapsed, nil
	})
	if err != nil {
		return 0, nil, err
	}
	return median(v), v, nil
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

// RunQueues measures Q1 (IOPS of bam::queue against a single-lock queue),
// Q2 (bytes/s at 4 KiB against the path ceiling) and L1 (latency at queue
// depth 1 and under load against a GPU -> host -> GPU round trip).
func RunQueues(ctx context.Context, p QueuesParams) ([]*bench.Result, error) {
	if err := p.fill(); err != nil {
		return nil, err
	}
	if err := checkGPU(p.Device); err != nil {
		return nil, err
	}
	t0 := time.Now()
	ns, _, err := patternNamespace(p.NamespaceBytes, patternSeedQ)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	main, err := newQRig(&p, ns, 4096, p.Queues)
	if err != nil {
		return nil, err
	}
	defer main.close()
	dev := main.deviceName()
	workers := main.e.Config().TargetWorkers
	q1 := bench.NewResult("Q1", dev)
	q2 := bench.NewResult("Q2", dev)
	l1 := bench.NewResult("L1", dev)
	for _, r := range []*bench.Result{q1, q2, l1} {
		r.Params["namespace"] = "memory"
		r.Params["namespace_bytes"] = p.NamespaceBytes
		r.Params["queue_depth"] = p.Depth
		r.Params["target_workers"] = workers
		r.Params["mirror_run_bytes"] = main.e.Config().MirrorRun
		r.Params["gomaxprocs"] = runtime.GOMAXPROCS(0)
		r.Params["runs"] = p.Runs
		r.Params["jit"] = jitName(p.LinkedJIT)
		r.Params["kernel_build"] = main.e.KernelBuild()
		r.Params["warmup_runs"] = p.Warmup
		r.Params["statistic"] = "median"
		r.Params["device_ordinal"] = p.Device
	}

	p.logf("queues: verifying 4 KiB reads (bam::queue, copy, single-lock)")
	if err := main.verify(ctx); err != nil {
		return nil, err
	}

	// Ceilings of the path, in this run.
	h2d, err := measureH2D(ctx, main.e.Context(), p.CeilingBytes, 2, max(p.Runs, 5))
	if err != nil {
		return nil, fmt.Errorf("gpubench: H2D ceiling: %w", err)
	}
	hc, err := measureHostCopy(ctx, main.e.Context(), ns, patternSeedQ, 4096, workers, p.CeilingTime, p.Runs)
	if err != nil {
		return nil, fmt.Errorf("gpubench: host copy ceiling: %w", err)
	}
	zc, err := measureZeroCopy(ctx, p.Device, p.CeilingBytes, max(p.Runs, 5))
	if err != nil {
		return nil, fmt.Errorf("gpubench: zero-copy ceiling: %w", err)
	}
	ceil := ceilings{H2D: h2d, HostCopy: map[int]float64{4096: hc}, Workers: workers}
	p.logf("queues: ceilings: H2D %.1f GB/s, GPU zero-copy reads %.1f GB/s, host 4 KiB copy x%d %.1f GB/s", h2d/1e9, zc/1e9, workers, hc/1e9)

	// Q1: thread sweep, both protocols, 4 KiB then 512 B.
	q1.Params["threads"] = p.Threads
	q1.Params["queues"] = p.Queues
	q1.Params["commands_per_run"] = p.Commands
	q1.Params["time_box_ms"] = p.Budget.Milliseconds()
	q1.Params["baseline"] = "single-lock queue: one spin lock per queue pair around enqueue + doorbell and around dequeuing completions, CQ head peeked without it (kernels/bench.cu lockq), same queues, Target and kernel"
	if f, err := main.fn(kQueueRead); err == nil {
		if per, err := f.MaxActiveBlocksPerSM(block, 0); err == nil {
			q1.Params["resident_threads_max"] = per * block * main.sms
		}
	}
	q1.Params["data_check"] = "first word of every line read against the pattern; full-line verification runs before timing"
	samples := map[string][]float64{}
	q1.Params["samples_IOPS"] = samples
	sweep := func(q *qrig, lineSize int) (map[int]float64, error) {
		free := map[int]float64{}
		for _, t := range p.Threads {
			v, sv, err := q.iops(ctx, t, 0)
			if err != nil {
				return nil, err
			}
			l, sl, err := q.iops(ctx, t, modeLocked)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("read_iops_%s_%d_threads", kib(lineSize), t)
			samples[name] = sv
			samples[name+"_locked"] = sl
			goal := ""
			if t >= 64<<10 {
				goal = ">= 8"
			}
			q1.Add(name, v, "IOPS", "single-lock queue", l, false, goal)
			free[t] = v
			p.logf("Q1 %5s reads %8d threads %3d queues: %6.2f M IOPS, single-lock %6.2f M IOPS", kib(lineSize), t, q.queues, v/1e6, l/1e6)
		}
		return free, nil
	}
	free4k, err := sweep(main, 4096)
	if err != nil {
		return nil, err
	}

	// Q2: the same reads with the data copied into device memory.
	q2.Params["line_size"] = 4096
	q2.Params["queues"] = p.Queues
	q2.Params["h2d_ceiling_GBps"] = h2d / 1e9
	q2.Params["zero_copy_ceiling_GBps"] = zc / 1e9
	q2.Params["host_copy_ceiling_GBps"] = hc / 1e9
	q2.Params["host_copy_threads"] = workers
	q2.Params["routes"] = map[string]string{
		"copier (unsuffixed, the default)": "Target reads into pinned staging, the submitting GPU thread posts the copy to the fill copier ring and a warp of the copier kernel copies the line into device memory with 32 lanes",
		"copier_mirror":                    "as copier, but Reads issued while their queue has 32 or more commands outstanding ask for the staging mirror (gpuengine Config.StagingMirror, off by default): the Target joins a queue's consecutive Reads into runs of up to mirror_run_bytes, copies each run into a mirror of the staging slots in device memory with one cuMemcpyHtoDAsync, and completes them after the copy; the fill copier then copies the line from the mirror",
		"warp_copy":                        "Target reads into pinned staging; once every lane of a warp has its completion, the warp's lanes copy all of the warp's lines into device memory together, two at a time (the bounce route with the warp copying; kernels/bench.cu bam_bench_queue_read_warp)",
		"warp_lines":                       fmt.Sprintf("Target reads into pinned staging; the first %d lanes of each warp each keep a Read in flight and, once all of them have their completions, the warp's 32 lanes copy the lines into device memory one after another, as the cache's fills copy a line (kernels/bench.cu bam_bench_queue_read_line)", warpLineReads),
		"lane_copy":                        "Target reads into pinned staging, the submitting GPU thread copies the line into device memory alone (16-byte loads, 8 in flight)",
		"copy_engine":                      "the PRPs name a line in device memory; the Target copies the data in with cuMemcpyHtoDAsync on a stream of its own and completes the command after the copy",
	}
	q2mirrored := map[string]float64{}
	q2.Params["reads_completed_from_mirror"] = q2mirrored
	q2samples := map[string][]float64{}
	q2.Params["samples_GBps"] = q2samples
	q2offloaded := map[string]float64{}
	q2.Params["copies_by_fill_copier"] = q2offloaded
	pathCeil := ceil.path(4096)
	ceilName := fmt.Sprintf("path ceiling: min(pinned H2D copy, host 4 KiB copy into pinned memory x%d threads), same run", workers)
	best, bestRoute := 0.0, ""
	for _, route := range []struct {
		name string
		mode uint64
	}{{"copier", modeCopy | modeCopier}, {"copier_mirror", modeCopy | modeCopier | modeMirror}, {"warp_copy", modeCopy | modeWarpCopy}, {"warp_lines", warpLines(warpLineReads)}, {"lane_copy", modeCopy}, {"copy_engine", modeDirect}} {
		if !fits(route.mode, p.Depth) {
			// A warp keeps its lanes' slots until its copy: with a queue
			// of that many entries or fewer it would wait for its own.
			p.logf("Q2 %s route skipped: its warps keep more slots than queues of --depth %d hold", route.name, p.Depth)
			continue
		}
		for _, t := range p.Threads {
			if t < 64<<10 {
				continue
			}
			before := main.e.TargetStats()
			v, sv, err := main.iops(ctx, t, route.mode)
			if err != nil {
				return nil, err
			}
			after := main.e.TargetStats()
			gbps := v * 4096 / 1e9
			name := fmt.Sprintf("read_GBps_4k_%d_threads", t)
			if route.name != "copier" {
				name += "_" + route.name
			}
			s := make([]float64, len(sv))
			for i, x := range sv {
				s[i] = x * 4096 / 1e9
			}
			q2samples[name] = s
			q2offloaded[name] = main.offloaded
			if reads := after.Reads - before.Reads; reads > 0 {
				q2mirrored[name] = float64(after.Mirrored-before.Mirrored) / float64(reads)
			}
			q2.Add(name, gbps, "GB/s", ceilName, pathCeil/1e9, false, "")
			if gbps > best {
				best, bestRoute = gbps, route.name
			}
			p.logf("Q2 4k reads into device memory, %s route, %8d threads: %.2f GB/s (ceiling %.2f GB/s; %.0f%% of copies by the fill copier, %.0f%% of reads from the mirror)", route.name, t, gbps, pathCeil/1e9, 100*main.offloaded, 100*q2mirrored[name])
			if copies := after.MirrorCopies - before.MirrorCopies; copies > 0 {
				a, b := after.MirrorRuns, before.MirrorRuns
				runs := (a.Full - b.Full) + (a.Idle - b.Idle) + (a.Old - b.Old) + (a.Broken - b.Broken)
				p.logf("Q2 mirror runs: %d full, %d idle, %d old, %d broken, %d short, %d copies failed; %.1f KiB a copy; gathering %.1f us a run, copying %.1f us a copy",
					a.Full-b.Full, a.Idle-b.Idle, a.Old-b.Old, a.Broken-b.Broken, a.Short-b.Short, after.MirrorFailures-before.MirrorFailures,
					float64(after.Mirrored-before.Mirrored)*4/float64(copies),
					float64((a.Gathering-b.Gathering).Microseconds())/float64(max(runs, 1)),
					float64((a.Copying-b.Copying).Microseconds())/float64(copies))
			}
		}
	}
	q2.Params["best_route"] = bestRoute
	if st, err := main.e.Stats(); err == nil {
		q2.Params["copier_posts_waited_for_slot"] = st.CopierWaited
		q2.Params["copier_posts_withdrawn"] = st.CopierDropped
		p.logf("Q2 fill copier: %d posts waited for their slot, %d withdrawn untaken", st.CopierWaited, st.CopierDropped)
	}
	if best > 0 {
		q2.Add("read_GBps_4k_best", best, "GB/s", ceilName, pathCeil/1e9, false, ">= 0.9")
		q2.Add("read_GBps_4k_best_vs_zero_copy", best, "GB/s", zeroCopyCeilingName("4 KiB", workers), min(zc, hc)/1e9, false, "")
	}
	bestNoCopy := 0.0
	for t, v := range free4k {
		if t >= 64<<10 {
			bestNoCopy = max(bestNoCopy, v*4096/1e9)
		}
	}
	if bestNoCopy > 0 {
		q2.Add("read_GBps_4k_to_pinned_best", bestNoCopy, "GB/s", "host 4 KiB copy into pinned memory, same run", hc/1e9, false, "")
	}
	q2.Report("h2d_pinned_copy_GBps", h2d/1e9, "GB/s", "")
	q2.Report("zero_copy_read_GBps", zc/1e9, "GB/s", "")
	q2.Report("host_4k_copy_to_pinned_GBps", hc/1e9, "GB/s", "")

	// L1 on the main rig.
	if err := runL1(ctx, &p, main, l1); err != nil {
		return nil, err
	}

	// Q1 at 512 bytes and the queue sweep, each on its own engine.
	if !p.NoSmallLines {
		small, err := newQRig(&p, ns, 512, p.Queues)
		if err != nil {
			return nil, err
		}
		if err := small.verify(ctx); err == nil {
			_, err = sweep(small, 512)
		}
		cerr := small.close()
		if err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, cerr
		}
	}
	q1.Params["queue_sweep"] = p.QueueSweep
	q1.Params["queue_sweep_threads"] = p.SweepThreads
	for _, nq := range p.QueueSweep {
		if nq == p.Queues {
			continue
		}
		pp := p
		if pp.Workers == 0 {
			pp.Workers = workers // the same host threads serve every queue count
		}
		qr, err := newQRig(&pp, ns, 4096, nq)
		if err != nil {
			return nil, err
		}
		err = qr.verify(ctx)
		var v, l float64
		var sv, sl []float64
		if err == nil {
			v, sv, err = qr.iops(ctx, p.SweepThreads, 0)
		}
		if err == nil {
			l, sl, err = qr.iops(ctx, p.SweepThreads, modeLocked)
		}
		cerr := qr.close()
		if err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, cerr
		}
		name := fmt.Sprintf("read_iops_4k_%d_threads_%d_queues", p.SweepThreads, nq)
		samples[name] = sv
		samples[name+"_locked"] = sl
		q1.Add(name, v, "IOPS", "single-lock queue", l, false, "")
		p.logf("Q1 4k reads %8d threads %3d queues: %6.2f M IOPS, single-lock %6.2f M IOPS", p.SweepThreads, nq, v/1e6, l/1e6)
	}
	st := main.e.TargetStats()
	for _, r := range []*bench.Result{q1, q2, l1} {
		r.Params["target_commands"] = st.Commands
		r.Params["target_errors"] = st.Errors
		r.Params["elapsed_s"] = time.Since(t0).Seconds()
	}
	if st.Errors != 0 {
		return nil, fmt.Errorf("%w: the Target completed %d commands with errors", ErrVerify, st.Errors)
	}
	return []*bench.Result{q1, q2, l1}, nil
}

// runL1 measures one 4 KiB read at queue depth 1, many under load, and the
// GPU -> host -> GPU round trip through pinned memory.
func runL1(ctx context.Context, p *QueuesParams, q *qrig, res *bench.Result) error {
	// Round trip first: the Target is idle.
	rt, rtNs, err := roundTrip(ctx, p, q)
	if err != nil {
		return fmt.Errorf("gpubench: round trip: %w", err)
	}
	n := uint64(p.QD1Samples)
	lat, err := q.alloc(latWords * 8 * n)
	if err != nil {
		return err
	}
	defer lat.Free()
	// Warm-up at QD1, then the measured run: one thread, one queue pair.
	if _, err := q.launch(ctx, 1, 64, modeCopy|modeCopier, time.Hour, nil, 0); err != nil {
		return err
	}
	r, err := q.launch(ctx, 1, int(n), modeCopy|modeCopier|modeLatency, time.Hour, lat, n)
	if err != nil {
		return err
	}
	if r.completed != n {
		return fmt.Errorf("%w: QD1 run completed %d of %d commands", ErrVerify, r.completed, n)
	}
	raw, err := readU64s(lat, int(latWords*n))
	if err != nil {
		return err
	}
	// %globaltimer ticks coarsely; %clock64 finely but in cycles. Convert
	// cycles to nanoseconds with the ratio of their sums over the run.
	var sumNs, sumCyc float64
	for i := uint64(0); i < n; i++ {
		sumNs += float64(raw[latWords*i+latMissNs])
		sumCyc += float64(raw[latWords*i+latMissCycles])
	}
	if sumCyc == 0 || sumNs == 0 {
		return fmt.Errorf("%w: QD1 run recorded no time", ErrVerify)
	}
	nsPerCycle := sumNs / sumCyc
	io := make([]float64, n)
	miss := make([]float64, n)
	ioTimer := make([]float64, n)
	for i := uint64(0); i < n; i++ {
		io[i] = float64(raw[latWords*i+latIOCycles]) * nsPerCycle / 1e3
		miss[i] = float64(raw[latWords*i+latMissCycles]) * nsPerCycle / 1e3
		ioTimer[i] = float64(raw[latWords*i+latIONs]) / 1e3
	}
	dIO, dMiss, dTimer := distOf(io), distOf(miss), distOf(ioTimer)
	// Where a QD1 read's time goes: taking the slot, writing the command
	// and ringing the doorbell, and waiting for the completion (the
	// Target's work, both PCIe crossings and the harvest).
	reserve, issue, wait := make([]float64, n), make([]float64, n), make([]float64, n)
	for i := uint64(0); i < n; i++ {
		r, is, c := raw[latWords*i+latReserved], raw[latWords*i+latIssued], raw[latWords*i+latIOCycles]
		reserve[i] = float64(r) * nsPerCycle / 1e3
		issue[i] = float64(is-r) * nsPerCycle / 1e3
		wait[i] = float64(c-is) * nsPerCycle / 1e3
	}
	dReserve, dIssue, dWait := distOf(reserve), distOf(issue), distOf(wait)
	p.logf("L1 QD1 4k read stages p50: reserve %.2f us, issue %.2f us, wait %.2f us", dReserve.P50, dIssue.P50, dWait.P50)
	// The same with the thread copying the line alone.
	lr1, err := q.launch(ctx, 1, int(n), modeCopy|modeLatency, time.Hour, lat, n)
	if err != nil {
		return err
	}
	if lr1.completed != n {
		return fmt.Errorf("%w: QD1 lane-copy run completed %d of %d commands", ErrVerify, lr1.completed, n)
	}
	lraw1, err := readU64s(lat, int(latWords*n))
	if err != nil {
		return err
	}
	laneMiss := make([]float64, n)
	for i := uint64(0); i < n; i++ {
		laneMiss[i] = float64(lraw1[latWords*i+latMissCycles]) * nsPerCycle / 1e3
	}
	dLane := distOf(laneMiss)
	p.logf("L1 QD1 4k read into device memory by the thread alone: p50 %.2f us p99 %.2f us", dLane.P50, dLane.P99)
	// The same through the copy-engine route: the data is in device memory
	// when the command completes.
	if _, err := q.launch(ctx, 1, 64, modeDirect, time.Hour, nil, 0); err != nil {
		return err
	}
	dr, err := q.launch(ctx, 1, int(n), modeDirect|modeLatency, time.Hour, lat, n)
	if err != nil {
		return err
	}
	if dr.completed != n {
		return fmt.Errorf("%w: QD1 copy-engine run completed %d of %d commands", ErrVerify, dr.completed, n)
	}
	draw, err := readU64s(lat, int(latWords*n))
	if err != nil {
		return err
	}
	direct := make([]float64, n)
	for i := uint64(0); i < n; i++ {
		direct[i] = float64(draw[latWords*i+latMissCycles]) * nsPerCycle / 1e3
	}
	dDirect := distOf(direct)
	p.logf("L1 QD1 4k read into device memory by the copy engine: p50 %.2f us p99 %.2f us", dDirect.P50, dDirect.P99)
	p.logf("L1 QD1 4k read: p50 %.2f us p99 %.2f us (with copy to device: p50 %.2f us); round trip p50 %.2f us", dIO.P50, dIO.P99, dMiss.P50, rt.P50)

	// Under load.
	lt := uint64(p.LoadThreads)
	ln := lt * uint64(p.LoadCommands)
	llat, err := q.alloc(latWords * 8 * ln)
	if err != nil {
		return err
	}
	defer llat.Free()
	if _, err := q.launch(ctx, p.LoadThreads, p.LoadCommands, modeCopy|modeCopier, time.Hour, nil, 0); err != nil {
		return err
	}
	lr, err := q.launch(ctx, p.LoadThreads, p.LoadCommands, modeCopy|modeCopier|modeLatency, time.Hour, llat, ln)
	if err != nil {
		return err
	}
	if lr.completed != ln {
		return fmt.Errorf("%w: load run completed %d of %d commands", ErrVerify, lr.completed, ln)
	}
	lraw, err := readU64s(llat, int(latWords*ln))
	if err != nil {
		return err
	}
	lio := make([]float64, ln)
	lmiss := make([]float64, ln)
	for i := uint64(0); i < ln; i++ {
		lio[i] = float64(lraw[latWords*i+latIONs]) / 1e3
		lmiss[i] = float64(lraw[latWords*i+latMissNs]) / 1e3
	}
	dLoad, dLoadMiss := distOf(lio), distOf(lmiss)
	p.logf("L1 load %d threads x %d: p50 %.1f us p99 %.1f us max %.1f us", lt, p.LoadCommands, dLoad.P50, dLoad.P99, dLoad.Max)

	res.Params["qd1_samples"] = n
	res.Params["qd1_ns_per_cycle"] = nsPerCycle
	res.Params["qd1_globaltimer_p50_us"] = dTimer.P50
	res.Params["qd1_stages_p50_us"] = map[string]float64{"reserve": dReserve.P50, "issue": dIssue.P50, "wait": dWait.P50}
	res.Params["qd1_stages"] = "reserve: taking the ticket and its slot; issue: writing the SQE, marking it and ringing the doorbell (a system-scope release); wait: until the thread sees its completion (the Target's work, the PCIe crossings and the harvest)"
	res.Params["roundtrips"] = len(rtNs)
	res.Params["load_threads"] = lt
	res.Params["load_commands_per_thread"] = p.LoadCommands
	res.Params["load_queues"] = q.queues
	res.Params["load_iops"] = float64(lr.completed) / lr.elapsed.Seconds()
	res.Params["latency_span"] = "read: from before taking a queue slot to the completion seen by the thread; miss: until the line is in device memory, copied by a fill copier warp (the default; under load too), _lane_copy by the thread alone, _copy_engine by the Target before it completes the command"
	res.Params["load_timer"] = "%globaltimer"
	res.Params["qd1_timer"] = "%clock64 scaled by %globaltimer over the run"
	const rtName = "GPU->host->GPU round trip through pinned memory, same run"
	res.Add("qd1_read_4k_latency_p50_us", dIO.P50, "us", rtName+" (p50)", rt.P50, true, ">= 0.25")
	res.Add("qd1_read_4k_latency_p99_us", dIO.P99, "us", rtName+" (p99)", rt.P99, true, "")
	res.Report("qd1_read_4k_latency_max_us", dIO.Max, "us", "")
	res.Add("qd1_miss_4k_latency_p50_us", dMiss.P50, "us", rtName+" (p50)", rt.P50, true, "")
	res.Report("qd1_miss_4k_latency_p99_us", dMiss.P99, "us", "")
	res.Add("qd1_miss_4k_latency_p50_us_lane_copy", dLane.P50, "us", rtName+" (p50)", rt.P50, true, "")
	res.Report("qd1_miss_4k_latency_p99_us_lane_copy", dLane.P99, "us", "")
	res.Add("qd1_miss_4k_latency_p50_us_copy_engine", dDirect.P50, "us", rtName+" (p50)", rt.P50, true, "")
	res.Report("qd1_miss_4k_latency_p99_us_copy_engine", dDirect.P99, "us", "")
	res.Report("roundtrip_p50_us", rt.P50, "us", "")
	res.Report("roundtrip_p99_us", rt.P99, "us", "")
	res.Report("roundtrip_max_us", rt.Max, "us", "")
	res.Add("load_read_4k_latency_p50_us", dLoad.P50, "us", "QD1 read p50, same run", dIO.P50, true, "")
	res.Add("load_read_4k_latency_p99_us", dLoad.P99, "us", "load read p50, same run", dLoad.P50, true, ">= 0.1")
	res.Report("load_read_4k_latency_max_ms", dLoad.Max/1e3, "ms", "<= 10")
	res.Add("load_miss_4k_latency_p99_us", dLoadMiss.P99, "us", "load miss p50, same run", dLoadMiss.P50, true, "")
	res.Report("load_miss_4k_latency_max_ms", dLoadMiss.Max/1e3, "ms", "")
	return nil
}

// roundTrip runs bam_bench_roundtrip against a host goroutine spinning on
// the ping word; latencies in microseconds (cycles scaled by the
// globaltimer over the run).
func roundTrip(ctx context.Context, p *QueuesParams, q *qrig) (dist, []float64, error) {
	c := q.e.Context()
	words, err := c.AllocPinned(4096)
	if err != nil {
		return dist{}, nil, err
	}
	defer words.Free()
	b := words.Bytes()
	ping := word32(b, 0)
	pong := word32(b, 2048)
	devBase, err := words.DevicePtr()
	if err != nil {
		return dist{}, nil, err
	}
	n := uint64(p.RoundTrips)
	lat, err := q.alloc(2 * 8 * n)
	if err != nil {
		return dist{}, nil, err
	}
	defer lat.Free()
	fn, err := q.fn(kRoundTrip)
	if err != nil {
		return dist{}, nil, err
	}
	const stopWord = 0xffffffff
	var v []float64
	for run := 0; run < 2; run++ { // the first run warms up
		atomic.StoreUint32(ping, 0)
		atomic.StoreUint32(pong, 0)
		if err := q.counters.Memset8(0); err != nil {
			return dist{}, nil, err
		}
		done := make(chan struct{})
		deadline := time.Now().Add(time.Minute)
		go func() {
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			last := uint32(0)
			for spins := 0; ; spins++ {
				x := atomic.LoadUint32(ping)
				if x == stopWord {
					return
				}
				if x != last {
					atomic.StoreUint32(pong, x)
					last = x
				}
				if spins&4095 == 4095 && (time.Now().After(deadline) || ctx.Err() != nil) {
					return
				}
			}
		}()
		_, err := q.e.LaunchTimed(ctx, fn, threads(32), cuda.Ptr(devBase), cuda.Ptr(devBase.Add(2048)), cuda.U64(n),
			cuda.U64(uint64(time.Second.Nanoseconds())), cuda.Ptr(lat.Ptr()), cuda.Ptr(q.counters.Ptr()))
		atomic.StoreUint32(ping, stopWord)
		<-done
		if err != nil {
			return dist{}, nil, err
		}
		cnt, err := readU64s(q.counters, 2)
		if err != nil {
			return dist{}, nil, err
		}
		if cnt[0] != n || cnt[1] != 0 {
			return dist{}, nil, fmt.Errorf("%w: %d of %d round trips, %d timed out", ErrVerify, cnt[0], n, cnt[1])
		}
		if run == 0 {
			continue
		}
		raw, err := readU64s(lat, int(2*n))
		if err != nil {
			return dist{}, nil, err
		}
		var sumNs, sumCyc float64
		for i := uint64(0); i < n; i++ {
			sumNs += float64(raw[2*i])
			sumCyc += float64(raw[2*i+1])
		}
		if sumNs == 0 || sumCyc == 0 {
			return dist{}, nil, errors.New("gpubench: round trips recorded no time")
		}
		for i := uint64(0); i < n; i++ {
			v = append(v, float64(raw[2*i+1])*sumNs/sumCyc/1e3)
		}
	}
	return distOf(v), v, nil
}

// describeFailure decodes bam_bench_queue_read's first-failure counter.
func describeFailure(v uint64) string {
	switch v >> 32 {
	case 0:
		return "none recorded"
	case 1:
		return fmt.Sprintf("NVMe status word %#x", uint32(v))
	case 2:
		return "timed out taking a queue slot"
	case 3:
		return "timed out waiting for the completion"
	}
	return fmt.Sprintf("%#x", v)
}
