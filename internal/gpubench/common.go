package gpubench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/internal/pciebench"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
)

// Family is the kernel family of the benchmark kernels (kernels/bench.cu).
const Family = "bench"

// Kernel names in the bench family.
const (
	kQueueRead     = "bam_bench_queue_read"
	kQueueReadWarp = "bam_bench_queue_read_warp"
	kQueueReadLine = "bam_bench_queue_read_line"
	kRoundTrip     = "bam_bench_roundtrip"
	kSumSeq        = "bam_bench_sum_seq"
	kSumSeqAhead   = "bam_bench_sum_seq_ahead"
	kSumSeqRA      = "bam_bench_sum_seq_read_ahead"
	kSumLinesPerm  = "bam_bench_sum_lines_perm"
	kSumRange      = "bam_bench_sum_range"
	kLookupArray   = "bam_bench_lookup_array"
	kLookupPlain   = "bam_bench_lookup_plain"
	kLookupSkewed  = "bam_bench_lookup_skewed"
	kSeqRef        = "bam_bench_seq_ref"
	kSeqSpan       = "bam_bench_seq_span"
	kSeqArray      = "bam_bench_seq_array"
	kSeqPlain      = "bam_bench_seq_plain"
	kAtomicStride  = "bam_bench_atomic_stride"
	block          = 256 // threads per block of every launch
	lbaSize        = 512 // namespaces use 512-byte LBAs so every line size fits
	patternSeedQ   = 0x51
	patternSeedArr = 0xa7

	// maxSeqElems is the most elements the sequential kernels
	// (bam_bench_seq_*) take: they count in 32 bits (kernels/bench.cu,
	// seq_index).
	maxSeqElems = 1 << 30
)

var (
	// ErrNoGPU is returned (wrapped, with the reason) when no GPU is usable.
	ErrNoGPU = errors.New("gpubench: no GPU")
	// ErrVerify is returned when a kernel's result disagrees with its host
	// reference: the run produced wrong data and measured nothing.
	ErrVerify = errors.New("gpubench: verification failed")
)

// Config is what every benchmark shares.
type Config struct {
	Device  int           // CUDA device ordinal
	Runs    int           // timed runs per figure (the median is reported); default 3
	Warmup  int           // untimed runs first; default 1 (negative: none)
	Timeout time.Duration // bound of every device wait; default 5s
	Log     io.Writer     // progress lines, one per point; nil: none
	// CopierWarps is the engines' gpuengine.Config.FillCopierWarps (0: the
	// engine's default; negative: no fill copier).
	CopierWarps int
	// MirrorRun is the engines' gpuengine.Config.MirrorRun (0: the
	// engine's default).
	MirrorRun int
	// MirrorStreams is gpuengine.Config.MirrorStreams (0: the default).
	MirrorStreams int
	// LinkedJIT is gpuengine.Config.LinkedJIT.
	LinkedJIT bool
	// PortablePTX is gpuengine.Config.PortablePTX.
	PortablePTX bool
}

// jitName is how results name the JIT's mode (Config.LinkedJIT).
func jitName(linked bool) string {
	if linked {
		return "linked, function by function (cuLink*)"
	}
	return "whole program (cuModuleLoadDataEx)"
}

func (c *Config) fill() {
	if c.Runs <= 0 {
		c.Runs = 3
	}
	if c.Warmup == 0 {
		c.Warmup = 1
	} else if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
}

func (c *Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// checkGPU fails with ErrNoGPU when the driver or the device is missing.
func checkGPU(ordinal int) error {
	if err := cuda.Available(); err != nil {
		return fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	if ordinal < 0 || ordinal >= n {
		return fmt.Errorf("%w: device %d of %d", ErrNoGPU, ordinal, n)
	}
	return nil
}

// rig is one engine with the bench kernels loaded.
type rig struct {
	e   *gpuengine.Engine
	mod *cuda.Module
	fns map[string]*cuda.Function
	sms int
}

func newRig(cfg gpuengine.Config, nss []nvme.Namespace) (*rig, error) {
	e, err := gpuengine.New(cfg, nss)
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			return nil, fmt.Errorf("%w: %w", ErrNoGPU, err)
		}
		return nil, err
	}
	r := &rig{e: e, fns: map[string]*cuda.Function{}}
	if r.mod, err = e.Module(Family); err != nil {
		e.Close()
		return nil, fmt.Errorf("gpubench: load bench kernels: %w", err)
	}
	props, err := e.Context().Device().Props()
	if err != nil {
		r.close()
		return nil, err
	}
	r.sms = props.Multiprocessors
	return r, nil
}

func (r *rig) close() error {
	var errs []error
	if r.mod != nil {
		errs = append(errs, r.mod.Unload())
	}
	errs = append(errs, r.e.Close())
	return errors.Join(errs...)
}

func (r *rig) fn(name string) (*cuda.Function, error) {
	if f, ok := r.fns[name]; ok {
		return f, nil
	}
	f, err := r.mod.Function(name)
	if err != nil {
		return nil, err
	}
	r.fns[name] = f
	return f, nil
}

// fullGrid is a grid-stride launch that fills the device (resident blocks
// per multiprocessor times multiprocessors).
func (r *rig) fullGrid(name string) (cuda.LaunchConfig, error) {
	f, err := r.fn(name)
	if err != nil {
		return cuda.LaunchConfig{}, err
	}
	per, err := f.MaxActiveBlocksPerSM(block, 0)
	if err != nil {
		return cuda.LaunchConfig{}, err
	}
	return cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(max(per, 1) * r.sms)}, Block: cuda.Dim3{X: block}}, nil
}

// threads is a launch of exactly n threads: blocks of the largest power of
// two up to block that divides n.
func threads(n uint64) cuda.LaunchConfig {
	b := uint64(block)
	for b > 1 && n%b != 0 {
		b /= 2
	}
	return cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(max(n/b, 1))}, Block: cuda.Dim3{X: uint32(b)}}
}

// word32 returns the uint32 at byte off of pinned (non-Go) memory b, for
// atomic access.
func word32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

func (r *rig) alloc(n uint64) (*cuda.DeviceMem, error) {
	m, err := r.e.Context().Alloc(n)
	if err != nil {
		return nil, err
	}
	if err := m.Memset8(0); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

func readU64s(m *cuda.DeviceMem, n int) ([]uint64, error) {
	b := make([]byte, 8*n)
	if err := m.Read(0, b); err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out, nil
}

func (r *rig) deviceName() string {
	name, err := r.e.Context().Device().Name()
	if err != nil || name == "" {
		return "unknown GPU"
	}
	return name
}

// patternNamespace returns a memory namespace of bytes (a multiple of
// 512) whose 64-bit word w is kernels.Pattern64(seed, w), and the sum of
// its words mod 2^64.
func patternNamespace(bytes uint64, seed uint64) (*nvme.MemoryNamespace, uint64, error) {
	if bytes == 0 || bytes%lbaSize != 0 {
		return nil, 0, fmt.Errorf("gpubench: namespace of %d bytes is not a whole number of %d-byte blocks", bytes, lbaSize)
	}
	ns, err := nvme.NewMemoryNamespace(lbaSize, bytes/lbaSize)
	if err != nil {
		return nil, 0, err
	}
	return ns, pciebench.FillPattern(ns.Bytes(), seed), nil
}

// parallelSum returns the sum over i in [0, n) of f(i), mod 2^64.
func parallelSum(n uint64, f func(i uint64) uint64) uint64 {
	workers := uint64(runtime.GOMAXPROCS(0))
	chunk := (n + workers - 1) / workers
	var total atomic.Uint64
	var wg sync.WaitGroup
	for w := uint64(0); w < workers; w++ {
		lo, hi := min(w*chunk, n), min((w+1)*chunk, n)
		wg.Go(func() {
			var s uint64
			for i := lo; i < hi; i++ {
				s += f(i)
			}
			total.Add(s)
		})
	}
	wg.Wait()
	return total.Load()
}

// repeat runs op Warmup times untimed, then Runs times, and returns the
// timed durations.
func (c *Config) repeat(ctx context.Context, op func(timed bool) (time.Duration, error)) ([]time.Duration, error) {
	for range c.Warmup {
		if _, err := op(false); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, c.Runs)
	for range c.Runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := op(true)
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, fmt.Errorf("gpubench: non-positive elapsed time %v", d)
		}
		out = append(out, d)
	}
	return out, nil
}

func median(v []float64) float64 { return pciebench.Median(v) }

// rates turns durations into per-second rates of amount units each.
func rates(ds []time.Duration, amount float64) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = amount / d.Seconds()
	}
	return out
}

// percentile returns the q-quantile (0 < q <= 1) of sorted s, nearest rank.
func percentile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

type dist struct{ P50, P99, Max float64 }

func distOf(v []float64) dist {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return dist{P50: percentile(s, 0.5), P99: percentile(s, 0.99), Max: percentile(s, 1)}
}

// ceilings are the path ceilings measured in the same run (bytes/s).
type ceilings struct {
	H2D      float64         // pinned host -> device copy
	HostCopy map[int]float64 // host copies of one line size into pinned memory, by line size
	Workers  int             // host threads of the host copy = the Target's
}

// path is the ceiling of moving lines of lineSize from a namespace to the
// GPU: the lower of the two.
func (c ceilings) path(lineSize int) float64 { return min(c.H2D, c.HostCopy[lineSize]) }

// measureZeroCopy returns the rate at which GPU threads read pinned host
// memory mapped into the device (pciebench's zero-copy figure: n bytes,
// median of runs, checksum verified). GPU loads top out there, below the
// copy engines' H2D rate, whether the host serves them from DRAM or from
// its last-level cache and in whatever pattern the warps load (51.4
// against 55.4 GB/s on the H200 host: bench/experiments/slot_copy.cu), so
// the figure bounds every route whose GPU threads copy staging. The goals
// are stated against the copy ceiling; this is reported beside it.
func measureZeroCopy(ctx context.Context, device int, n uint64, runs int) (float64, error) {
	res, err := pciebench.Run(ctx, pciebench.Config{Device: device, Bytes: n, Runs: runs})
	if err != nil {
		return 0, err
	}
	for _, f := range res.Figures {
		if f.Name == pciebench.FigZeroCopy {
			return f.Value * 1e9, nil
		}
	}
	return 0, fmt.Errorf("gpubench: pciebench reported no %s", pciebench.FigZeroCopy)
}

// zeroCopyCeilingName names the baseline of the figures against the GPU's
// zero-copy read rate (see measureZeroCopy: the bound of the routes whose
// GPU threads copy staging, reported beside the goals' copy ceiling).
func zeroCopyCeilingName(line string, workers int) string {
	return fmt.Sprintf("min(GPU zero-copy reads of pinned host DRAM, host %s copy into pinned memory x%d threads), same run", line, workers)
}

// measureH2D times pinned host -> device copies of n bytes with events:
// warm-up, then the median of runs, verified by copying back.
func measureH2D(ctx context.Context, c *cuda.Context, n uint64, warmup, runs int) (float64, error) {
	host, err := c.AllocPinned(n)
	if err != nil {
		return 0, err
	}
	defer host.Free()
	pciebench.FillPattern(host.Bytes(), 0x2d)
	dev, err := c.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer dev.Free()
	s, err := c.NewStream()
	if err != nil {
		return 0, err
	}
	defer s.Destroy()
	start, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	var v []float64
	for i := range warmup + runs {
		if err := start.Record(s); err != nil {
			return 0, err
		}
		if err := s.CopyHtoD(dev.Ptr(), host, 0, n); err != nil {
			return 0, err
		}
		if err := end.Record(s); err != nil {
			return 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := end.Wait(wctx)
		cancel()
		if err != nil {
			return 0, err
		}
		d, err := cuda.Elapsed(start, end)
		if err != nil {
			return 0, err
		}
		if i >= warmup && d > 0 {
			v = append(v, float64(n)/d.Seconds())
		}
	}
	back := make([]byte, n)
	if err := dev.Read(0, back); err != nil {
		return 0, err
	}
	if !bytes.Equal(back, host.Bytes()) {
		return 0, fmt.Errorf("%w: host-to-device copy delivered wrong data", ErrVerify)
	}
	return median(v), nil
}

// measureHostCopy is the host side of the path: workers threads (the
// Target's count) each reading random lineSize blocks of ns with ReadAt
// (what the Target does for a Read) into their own slots of pinned memory,
// for dur; the median of runs rates in bytes/s. Each copy's first word is
// checked against the pattern.
func measureHostCopy(ctx context.Context, c *cuda.Context, ns *nvme.MemoryNamespace, seed uint64, lineSize, workers int, dur time.Duration, runs int) (float64, error) {
	const slots = 256
	pinned, err := c.AllocPinned(uint64(workers * slots * lineSize))
	if err != nil {
		return 0, err
	}
	defer pinned.Free()
	buf := pinned.Bytes()
	lines := ns.Blocks() * uint64(ns.LBASize()) / uint64(lineSize)
	var v []float64
	for run := range runs + 1 { // the first run warms up
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var total, bad atomic.Uint64
		var firstErr atomic.Pointer[error]
		var wg sync.WaitGroup
		start := time.Now()
		stop := start.Add(dur)
		for w := range workers {
			wg.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				rng := rand.New(rand.NewPCG(uint64(run), uint64(w)))
				mine := buf[w*slots*lineSize : (w+1)*slots*lineSize]
				var n uint64
				for {
					for k := 0; k < 64; k++ {
						line := rng.Uint64N(lines)
						dst := mine[(n%slots)*uint64(lineSize):][:lineSize]
						if _, err := ns.ReadAt(dst, int64(line)*int64(lineSize)); err != nil {
							firstErr.CompareAndSwap(nil, &err)
							return
						}
						if binary.LittleEndian.Uint64(dst) != kernels.Pattern64(seed, line*uint64(lineSize)/8) {
							bad.Add(1)
						}
						n++
					}
					if time.Now().After(stop) {
						break
					}
				}
				total.Add(n)
			})
		}
		wg.Wait()
		el := time.Since(start)
		if p := firstErr.Load(); p != nil {
			return 0, *p
		}
		if bad.Load() != 0 {
			return 0, fmt.Errorf("%w: host copy: %d blocks with wrong data", ErrVerify, bad.Load())
		}
		if run > 0 {
			v = append(v, float64(total.Load())*float64(lineSize)/el.Seconds())
		}
	}
	return median(v), nil
}

func kib(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprintf("%d", n)
}
