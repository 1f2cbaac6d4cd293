package pciebench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
)

// BenchmarkID is the id of this benchmark in BENCHMARKS.md.
const BenchmarkID = "pcie"

// CeilingSource names the baseline of every figure with one.
const CeilingSource = "DESIGN.md §8 measured ceiling"

// Ceilings measured on the benchmark host (one H200, PCIe Gen5 x16), GB/s.
const (
	CeilingH2D      = 55.4
	CeilingZeroCopy = 49.7
	CeilingHBMCopy  = 3970
)

// Figure names.
const (
	FigH2D      = "h2d_pinned_copy_GBps"
	FigD2H      = "d2h_pinned_copy_GBps"
	FigZeroCopy = "zero_copy_read_GBps"
	FigHBMCopy  = "hbm_copy_rw_GBps" // read + write bytes per second
	FigHBMRead  = "hbm_read_GBps"
)

// Config is what to measure.
type Config struct {
	Device int    // CUDA ordinal
	Bytes  uint64 // per transfer; a multiple of 16; default 256 MiB
	Runs   int    // timed runs per figure; default 10
	Warmup int    // untimed runs first; default 2
	Block  int    // threads per block of the read kernel; default 512
	// WaitLimit bounds each wait for one timed operation; default 60 s.
	WaitLimit time.Duration
}

func (c *Config) defaults() error {
	if c.Bytes == 0 {
		c.Bytes = 256 << 20
	}
	if c.Bytes%16 != 0 || c.Bytes < 1<<20 {
		return fmt.Errorf("pciebench: transfer size %d must be a multiple of 16 and at least 1 MiB", c.Bytes)
	}
	if c.Runs <= 0 {
		c.Runs = 10
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	} else if c.Warmup == 0 {
		c.Warmup = 2
	}
	if c.Block <= 0 {
		c.Block = 512
	}
	if c.Block%32 != 0 || c.Block > 1024 {
		return fmt.Errorf("pciebench: block of %d threads must be a multiple of 32, at most 1024", c.Block)
	}
	if c.WaitLimit <= 0 {
		c.WaitLimit = 60 * time.Second
	}
	return nil
}

// ErrNoGPU is returned (wrapped, with the reason) when there is no GPU to
// measure.
var ErrNoGPU = errors.New("pciebench: no GPU")

// run holds the GPU resources of one Run.
type run struct {
	cfg        Config
	c          *cuda.Context
	s          *cuda.Stream
	start, end *cuda.Event
	readSum    *cuda.Function
	grid       uint32
	sum        *cuda.DeviceMem
	want       uint64 // checksum of the host pattern
}

// Run measures and returns the result (device = GPU name). It fails with
// ErrNoGPU when no GPU is usable, and with a verification error if any
// transfer delivered wrong data.
func Run(ctx context.Context, cfg Config) (res *bench.Result, err error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := cuda.Available(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	c, err := cuda.Primary(cfg.Device)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoGPU, err)
	}
	// Everything below is released before the context, in reverse order.
	var cleanups []func() error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			if cerr := cleanups[i](); cerr != nil && err == nil {
				err = fmt.Errorf("pciebench: release: %w", cerr)
			}
		}
		if cerr := c.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	props, err := c.Device().Props()
	if err != nil {
		return nil, err
	}
	if !props.CanMapHostMemory || !props.UnifiedAddressing {
		return nil, fmt.Errorf("pciebench: device %d cannot map host memory", cfg.Device)
	}
	ptx, err := kernels.PTX(kernels.FamilyMembench)
	if err != nil {
		return nil, err
	}
	mod, err := c.LoadPTX(ptx)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, mod.Unload)
	r := &run{cfg: cfg, c: c}
	if r.readSum, err = mod.Function(kernels.ReadSumU64); err != nil {
		return nil, err
	}
	perSM, err := r.readSum.MaxActiveBlocksPerSM(cfg.Block, 0)
	if err != nil {
		return nil, err
	}
	r.grid = uint32(max(perSM, 1) * props.Multiprocessors)

	n := cfg.Bytes
	host, err := c.AllocPinned(n)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, host.Free)
	back, err := c.AllocPinned(n)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, back.Free)
	dev, err := c.Alloc(n)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, dev.Free)
	dev2, err := c.Alloc(n)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, dev2.Free)
	if r.sum, err = c.Alloc(8); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, r.sum.Free)
	if r.s, err = c.NewStream(); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, r.s.Destroy)
	if r.start, err = c.NewEvent(); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, r.start.Destroy)
	if r.end, err = c.NewEvent(); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, r.end.Destroy)

	r.want = FillPattern(host.Bytes(), 0x5eed)

	res = bench.NewResult(BenchmarkID, props.Name)
	res.Params["device_ordinal"] = cfg.Device
	res.Params["pci_bus_id"] = props.PCIBusID
	res.Params["compute_capability"] = fmt.Sprintf("%d.%d", props.ComputeMajor, props.ComputeMinor)
	res.Params["multiprocessors"] = props.Multiprocessors
	if v, err := cuda.DriverVersion(); err == nil {
		res.Params["cuda_driver_version"] = v
	}
	res.Params["transfer_bytes"] = n
	res.Params["runs"] = cfg.Runs
	res.Params["warmup_runs"] = cfg.Warmup
	res.Params["read_kernel_grid"] = r.grid
	res.Params["read_kernel_block"] = cfg.Block
	res.Params["statistic"] = "median"
	samples := map[string][]float64{}
	res.Params["samples_GBps"] = samples

	// Host → device, verified by copying back.
	h2d, err := r.measure(ctx, nil, func() error { return r.s.CopyHtoD(dev.Ptr(), host, 0, n) }, nil)
	if err != nil {
		return nil, fmt.Errorf("pciebench: host-to-device copy: %w", err)
	}
	clear(back.Bytes())
	if err := r.wait(ctx, func() error { return r.s.CopyDtoH(back, 0, dev.Ptr(), n) }); err != nil {
		return nil, err
	}
	if !bytes.Equal(back.Bytes(), host.Bytes()) {
		return nil, errors.New("pciebench: host-to-device copy delivered wrong data")
	}
	// Device → host, verified after the timed runs.
	clear(back.Bytes())
	d2h, err := r.measure(ctx, nil, func() error { return r.s.CopyDtoH(back, 0, dev.Ptr(), n) }, nil)
	if err != nil {
		return nil, fmt.Errorf("pciebench: device-to-host copy: %w", err)
	}
	if !bytes.Equal(back.Bytes(), host.Bytes()) {
		return nil, errors.New("pciebench: device-to-host copy delivered wrong data")
	}
	// Zero-copy reads of the pinned buffer by the GPU, checksum verified
	// after every run.
	hostDev, err := host.DevicePtr()
	if err != nil {
		return nil, err
	}
	zc, err := r.measureReadSum(ctx, hostDev)
	if err != nil {
		return nil, fmt.Errorf("pciebench: zero-copy read: %w", err)
	}
	// Device memory: copy (read + write), verified by the read kernel's
	// checksum of the copy; then the read kernel alone.
	hbmCopy, err := r.measure(ctx, nil, func() error { return r.s.CopyDtoD(dev2.Ptr(), dev.Ptr(), n) }, nil)
	if err != nil {
		return nil, fmt.Errorf("pciebench: device-to-device copy: %w", err)
	}
	hbmRead, err := r.measureReadSum(ctx, dev2.Ptr())
	if err != nil {
		return nil, fmt.Errorf("pciebench: device read: %w", err)
	}

	gbps := func(name string, ds []time.Duration, bytesMoved uint64) float64 {
		v := make([]float64, len(ds))
		for i, d := range ds {
			v[i] = float64(bytesMoved) / d.Seconds() / 1e9
		}
		samples[name] = v
		return Median(v)
	}
	res.Add(FigH2D, gbps(FigH2D, h2d, n), "GB/s", CeilingSource, CeilingH2D, false, "")
	res.Report(FigD2H, gbps(FigD2H, d2h, n), "GB/s", "")
	res.Add(FigZeroCopy, gbps(FigZeroCopy, zc, n), "GB/s", CeilingSource, CeilingZeroCopy, false, "")
	res.Add(FigHBMCopy, gbps(FigHBMCopy, hbmCopy, 2*n), "GB/s", CeilingSource, CeilingHBMCopy, false, "")
	res.Report(FigHBMRead, gbps(FigHBMRead, hbmRead, n), "GB/s", "")
	return res, nil
}

// wait enqueues op and waits for the stream, bounded by the wait limit.
func (r *run) wait(ctx context.Context, op func() error) error {
	if err := op(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.WaitLimit)
	defer cancel()
	return r.s.Wait(wctx)
}

// measure runs op Warmup times untimed, then Runs times between two events,
// enqueueing prep (if any) before the start event and calling check (if
// any) after each timed run.
func (r *run) measure(ctx context.Context, prep, op, check func() error) ([]time.Duration, error) {
	for range r.cfg.Warmup {
		if prep != nil {
			if err := prep(); err != nil {
				return nil, err
			}
		}
		if err := r.wait(ctx, op); err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(); err != nil {
				return nil, err
			}
		}
	}
	var out []time.Duration
	for range r.cfg.Runs {
		if prep != nil {
			if err := prep(); err != nil {
				return nil, err
			}
		}
		if err := r.start.Record(r.s); err != nil {
			return nil, err
		}
		if err := op(); err != nil {
			return nil, err
		}
		if err := r.end.Record(r.s); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, r.cfg.WaitLimit)
		err := r.end.Wait(wctx)
		cancel()
		if err != nil {
			return nil, err
		}
		d, err := cuda.Elapsed(r.start, r.end)
		if err != nil {
			return nil, err
		}
		if d <= 0 {
			return nil, fmt.Errorf("non-positive elapsed time %v", d)
		}
		if check != nil {
			if err := check(); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// measureReadSum times the read kernel over n bytes at src and checks its
// checksum after every run, warm-up included.
func (r *run) measureReadSum(ctx context.Context, src cuda.DevicePtr) ([]time.Duration, error) {
	n16 := r.cfg.Bytes / 16
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: r.grid}, Block: cuda.Dim3{X: uint32(r.cfg.Block)}, Stream: r.s}
	prep := func() error { return r.s.MemsetD8(r.sum.Ptr(), 0, 8) }
	op := func() error {
		return r.readSum.Launch(cfg, cuda.Ptr(src), cuda.U64(n16), cuda.Ptr(r.sum.Ptr()))
	}
	check := func() error {
		var b [8]byte
		if err := r.sum.Read(0, b[:]); err != nil {
			return err
		}
		if got := binary.LittleEndian.Uint64(b[:]); got != r.want {
			return fmt.Errorf("checksum %#x, want %#x: the kernel read wrong data", got, r.want)
		}
		return nil
	}
	return r.measure(ctx, prep, op, check)
}

// FillPattern fills b (length a multiple of 8) with kernels.Pattern64(seed,
// i) per 64-bit word, in parallel, and returns the sum of the words mod
// 2^64: the checksum bam_read_sum_u64 computes.
func FillPattern(b []byte, seed uint64) uint64 {
	if len(b) < 8 {
		return 0
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	workers := runtime.GOMAXPROCS(0)
	chunk := (len(words) + workers - 1) / workers
	sums := make([]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo := min(w*chunk, len(words))
		hi := min(lo+chunk, len(words))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s uint64
			for i := lo; i < hi; i++ {
				v := kernels.Pattern64(seed, uint64(i))
				words[i] = v
				s += v
			}
			sums[w] = s
		}()
	}
	wg.Wait()
	var total uint64
	for _, s := range sums {
		total += s
	}
	return total
}

// Median returns the median of v (the mean of the middle two for even
// lengths), 0 for none. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
