// Package arraybench measures Array[T] on the CPU engine (benchmark H1 of
// BENCHMARKS.md) and returns a *bench.Result: all-hit random Gather against
// gathering from a plain slice, random Gather over an array 8× the cache
// (hit ratio, lookups and lines per second), a sequential scan against
// reading an mmap'ed file, random Gather over a throttled namespace with and
// without the host-memory tier, and the Target's own 4 KiB IOPS.
//
// It owns only measurement: every result is checked against the values
// written before it is timed. It must not change what it measures.
package arraybench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/internal/hugepages"
	"github.com/bam-go/bam/nvme"
)

// BenchmarkID is the id of the result.
const BenchmarkID = "H1"

// Params sizes the benchmark. Zero fields take the defaults named.
type Params struct {
	Duration   time.Duration // per figure; default 1s
	CacheBytes int64         // line cache; default 16 MiB
	LineSize   int           // default 4096
	Batch      int           // indices per Gather; default 4096
	// AllHitBytes is the array of the all-hit figure, cached whole (the
	// cache is made 2× larger). Default 256 MiB: larger than the host's
	// last-level cache, so neither side gathers from on-chip memory.
	AllHitBytes int64
	TempDir     string // for the scan's files; default os.TempDir()
	Model       string // device model of the tier figure; default "samsung-980pro"
}

func (p *Params) defaults() {
	if p.Duration <= 0 {
		p.Duration = time.Second
	}
	if p.CacheBytes <= 0 {
		p.CacheBytes = 16 << 20
	}
	if p.LineSize <= 0 {
		p.LineSize = 4096
	}
	if p.Batch <= 0 {
		p.Batch = 4096
	}
	if p.AllHitBytes <= 0 {
		p.AllHitBytes = 256 << 20
	}
	if p.TempDir == "" {
		p.TempDir = os.TempDir()
	}
	if p.Model == "" {
		p.Model = nvme.Samsung980Pro.Name
	}
}

func val(i uint64) uint64 { return i*0x9E3779B97F4A7C15 + 1 }

// memStore creates a store of one memory namespace (optionally throttled)
// big enough for an array of n uint64 and fills the array.
func memStore(ctx context.Context, p Params, n uint64, opts bam.Options, model *nvme.DeviceModel) (*bam.Store, *array.Array[uint64], error) {
	blocks := (n*8+8<<20)/512 + 1
	mem, err := nvme.NewMemoryNamespace(512, blocks)
	if err != nil {
		return nil, nil, err
	}
	var ns nvme.Namespace = mem
	if model != nil {
		ns = nvme.NewThrottledNamespace(mem, *model)
	}
	s, err := bam.CreateOn(ctx, []nvme.Namespace{ns}, bam.CreateOptions{Options: opts, LineSize: p.LineSize, LBASize: 512, CatalogSize: 64 << 10})
	if err != nil {
		return nil, nil, err
	}
	a, err := array.Create[uint64](ctx, s, "a", n, &array.Options{NoZero: true})
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	// Fill the namespace directly (the array's extent is contiguous on one
	// namespace), then the cache starts cold.
	ext := a.Object().Info().Extents[0]
	data := mem.Bytes()[ext.StartLBA*512:]
	for i := range n {
		*(*uint64)(unsafe.Pointer(&data[i*8])) = val(i)
	}
	return s, a, nil
}

// randIdx returns k random indices below n.
func randIdx(rng *rand.Rand, k int, n uint64) []uint64 {
	idx := make([]uint64, k)
	for i := range idx {
		idx[i] = rng.Uint64N(n)
	}
	return idx
}

// timeLoop runs f until d has passed and returns f's calls per second
// times per (items per call).
func timeLoop(d time.Duration, per int, f func() error) (float64, error) {
	start := time.Now()
	calls := 0
	for time.Since(start) < d || calls == 0 {
		if err := f(); err != nil {
			return 0, err
		}
		calls++
	}
	return float64(calls*per) / time.Since(start).Seconds(), nil
}

// median returns the median of v (the mean of the middle two for an even
// count); v is reordered.
func median(v []float64) float64 {
	slices.Sort(v)
	m := len(v) / 2
	if len(v)%2 == 0 {
		return (v[m-1] + v[m]) / 2
	}
	return v[m]
}

func check(idx, got []uint64, what string) error {
	for k, i := range idx {
		if got[k] != val(i) {
			return fmt.Errorf("arraybench: %s: element %d = %#x, want %#x", what, i, got[k], val(i))
		}
	}
	return nil
}

// Run measures every figure and returns the result.
func Run(ctx context.Context, p Params) (*bench.Result, error) {
	p.defaults()
	r := bench.NewResult(BenchmarkID, "cpu")
	r.Params["line_size"] = p.LineSize
	r.Params["cache_bytes"] = p.CacheBytes
	r.Params["batch"] = p.Batch
	r.Params["all_hit_cache_bytes"] = 2 * p.AllHitBytes
	r.Params["duration_s"] = p.Duration.Seconds()
	r.Params["gomaxprocs"] = runtime.GOMAXPROCS(0)
	r.Params["element"] = "uint64"
	for _, f := range []func(context.Context, Params, *bench.Result) error{allHit, beyondCache, scan, tier, targetIOPS} {
		if err := f(ctx, p, r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// allHit: random Gather over an array of AllHitBytes in a cache twice its
// size, every line resident, against the same gather from a plain slice of
// the same values. Both run on one goroutine, in interleaved rounds.
func allHit(ctx context.Context, p Params, r *bench.Result) error {
	n := uint64(p.AllHitBytes / 8)
	s, a, err := memStore(ctx, p, n, bam.Options{CacheBytes: 2 * p.AllHitBytes, Workers: 1}, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	plain := make([]uint64, n)
	// The cache's line data is advised to use huge pages; so is the
	// baseline, so that both sides pay the same for address translation.
	hugepages.Advise(unsafe.Slice((*byte)(unsafe.Pointer(&plain[0])), n*8))
	if err := a.ReadRange(ctx, 0, plain); err != nil { // also warms the cache
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const sets = 64
	idxs := make([][]uint64, sets)
	for k := range idxs {
		idxs[k] = randIdx(rng, p.Batch, n)
	}
	dst := make([]uint64, p.Batch)
	if err := a.Gather(ctx, idxs[0], dst); err != nil {
		return err
	}
	if err := check(idxs[0], dst, "all-hit gather"); err != nil {
		return err
	}
	// The same slice as Go hands it out (no huge-page advice): what a
	// program that keeps its data in a slice gets by default.
	def := make([]uint64, n)
	copy(def, plain)
	var sink uint64
	k := 0
	gatherFrom := func(src []uint64) func() error {
		return func() error {
			k++
			for j, i := range idxs[k%sets] {
				dst[j] = src[i]
			}
			sink += dst[0]
			return nil
		}
	}
	loops := []func() error{
		func() error {
			k++
			return a.Gather(ctx, idxs[k%sets], dst)
		},
		gatherFrom(plain),
		gatherFrom(def),
	}
	// The three loops take turns, a slice of the measuring time each per
	// round, and each figure is the median of its rounds: a slow spell of
	// the host then falls on all three, not on one of them.
	const rounds = 5
	rates := make([][]float64, len(loops))
	ratios := make([]float64, 0, rounds)
	before := a.Stats()
	for range rounds {
		for l, f := range loops {
			rate, err := timeLoop(p.Duration/rounds, p.Batch, f)
			if err != nil {
				return err
			}
			rates[l] = append(rates[l], rate)
		}
		ratios = append(ratios, rates[0][len(rates[0])-1]/rates[1][len(rates[1])-1])
	}
	after := a.Stats()
	if miss := after.Misses - before.Misses; miss != 0 {
		return fmt.Errorf("arraybench: all-hit gather missed %d times", miss)
	}
	ours, base, baseDefault := median(rates[0]), median(rates[1]), median(rates[2])
	r.Params["all_hit_rounds"] = rounds
	r.Params["all_hit_round_ratios"] = ratios
	_ = sink
	r.Params["all_hit_array_bytes"] = n * 8
	r.Params["all_hit_pages"] = "the cache's line data and the goal's baseline slice are both advised to use transparent huge pages"
	r.Add("all_hit_gather_8B_lookups_per_s", ours, "lookups/s", "plain []uint64 gather, same indices, one goroutine, slice on huge pages", base, false, ">= 0.25")
	r.Add("all_hit_gather_vs_default_pages_8B_lookups_per_s", ours, "lookups/s", "plain []uint64 gather, same indices, one goroutine, slice as allocated (4 KiB pages here)", baseDefault, false, "")
	return nil
}

// beyondCache: random Gather over an array 8× the cache (memory namespace,
// so the miss path is the Target and queues).
func beyondCache(ctx context.Context, p Params, r *bench.Result) error {
	n := uint64(p.CacheBytes * 8 / 8)
	s, a, err := memStore(ctx, p, n, bam.Options{CacheBytes: p.CacheBytes}, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	idx := randIdx(rng, p.Batch, n)
	dst := make([]uint64, p.Batch)
	if err := a.Gather(ctx, idx, dst); err != nil {
		return err
	}
	if err := check(idx, dst, "gather 8x cache"); err != nil {
		return err
	}
	before := a.Stats()
	start := time.Now()
	rate, err := timeLoop(p.Duration, p.Batch, func() error {
		idx = randIdx(rng, p.Batch, n)
		return a.Gather(ctx, idx, dst)
	})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	st := a.Stats()
	st.Acquires -= before.Acquires
	st.Hits -= before.Hits
	st.Misses -= before.Misses
	st.LinesRead -= before.LinesRead
	st.BytesRead -= before.BytesRead
	st.BytesAsked -= before.BytesAsked
	r.Params["beyond_cache_array_bytes"] = n * 8
	r.Report("gather_8x_cache_lookups_per_s", rate, "lookups/s", "")
	r.Report("gather_8x_cache_hit_ratio", st.HitRatio(), "ratio", "")
	r.Report("gather_8x_cache_lines_read_per_s", float64(st.LinesRead)/secs, "lines/s", "")
	r.Report("gather_8x_cache_io_amplification", st.Amplification(), "bytes moved / bytes asked", "")
	return nil
}

// scan: sequential ReadRange over an array 4× the cache stored in a file
// namespace, against summing the same bytes from an mmap'ed file (both
// from the page cache).
func scan(ctx context.Context, p Params, r *bench.Result) error {
	n := uint64(p.CacheBytes * 4 / 8)
	dir, err := os.MkdirTemp(p.TempDir, "arraybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, filepath.Join(dir, "store"), bam.CreateOptions{Options: bam.Options{CacheBytes: p.CacheBytes},
		NamespaceSize: int64(n*8) + 8<<20, LineSize: p.LineSize, CatalogSize: 64 << 10})
	if err != nil {
		return err
	}
	defer s.Close()
	a, err := array.Create[uint64](ctx, s, "a", n, &array.Options{NoZero: true})
	if err != nil {
		return err
	}
	plain := make([]uint64, n)
	var want uint64
	for i := range plain {
		plain[i] = val(uint64(i))
		want += plain[i]
	}
	if err := a.WriteRange(ctx, 0, plain); err != nil {
		return err
	}
	if err := a.Flush(ctx); err != nil {
		return err
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&plain[0])), n*8)
	path := filepath.Join(dir, "plain.bin")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	plain = nil
	chunk := make([]uint64, 32<<10)
	ours, err := timeLoop(p.Duration, int(n*8), func() error {
		var sum uint64
		for i := uint64(0); i < n; i += uint64(len(chunk)) {
			c := chunk[:min(uint64(len(chunk)), n-i)]
			if err := a.ReadRange(ctx, i, c); err != nil {
				return err
			}
			for _, v := range c {
				sum += v
			}
		}
		if sum != want {
			return fmt.Errorf("arraybench: scan sum %#x, want %#x", sum, want)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, int(n*8), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	defer syscall.Munmap(m)
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&m[0])), n)
	base, err := timeLoop(p.Duration, int(n*8), func() error {
		var sum uint64
		for _, v := range words {
			sum += v
		}
		if sum != want {
			return fmt.Errorf("arraybench: mmap sum %#x, want %#x", sum, want)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.Params["scan_array_bytes"] = n * 8
	r.Add("sequential_scan_bytes_per_s", ours, "B/s", "sum over an mmap'ed file of the same bytes (page cache)", base, false, "")
	return nil
}

// tier: random Gather over an array 8× the cache on a namespace throttled
// to a named SSD class, with the host-memory tier (as large as the array)
// against without it. Both runs start cold; the figure is the steady rate
// over the second half of the run.
func tier(ctx context.Context, p Params, r *bench.Result) error {
	model, ok := nvme.DeviceModelByName(p.Model)
	if !ok {
		return fmt.Errorf("arraybench: unknown device model %q", p.Model)
	}
	cache := p.CacheBytes / 8
	n := uint64(cache * 8 / 8)
	rates := map[bool]float64{}
	for _, on := range []bool{false, true} {
		opts := bam.Options{CacheBytes: cache, QueueDepth: 64}
		if on {
			opts.HostTierBytes = int64(n*8) * 2
		}
		s, a, err := memStore(ctx, p, n, opts, &model)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(5, 6))
		batch := min(p.Batch, 1024)
		dst := make([]uint64, batch)
		run := func(d time.Duration) (float64, error) {
			return timeLoop(d, batch, func() error {
				idx := randIdx(rng, batch, n)
				if err := a.Gather(ctx, idx, dst); err != nil {
					return err
				}
				return check(idx, dst, "tier gather")
			})
		}
		if _, err := run(p.Duration); err != nil { // warm the tier
			s.Close()
			return err
		}
		rates[on], err = run(p.Duration)
		s.Close()
		if err != nil {
			return err
		}
	}
	r.Params["tier_model"] = model.Name
	r.Params["tier_array_bytes"] = n * 8
	r.Params["tier_cache_bytes"] = cache
	r.Add("host_tier_gather_8x_cache_lookups_per_s", rates[true], "lookups/s", "same gather without the host tier ("+model.Name+" model)", rates[false], false, "")
	return nil
}

// targetIOPS: the memory-backed Target's own 4 KiB read rate.
func targetIOPS(ctx context.Context, p Params, r *bench.Result) error {
	iops, err := nvme.MeasureTargetIOPS(ctx, nvme.IOPSOptions{Submitters: 1, QueueDepth: 32, Duration: p.Duration, Kick: true})
	if err != nil {
		return err
	}
	r.Report("target_iops_4k_memory", iops, "IOPS", "")
	return nil
}
