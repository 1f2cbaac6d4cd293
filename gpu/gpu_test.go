package gpu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/gpu"
	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

const scaleSrc = `
#include "bam/array.cuh"
extern "C" __global__ void scale(bam::array<float> a, unsigned long long n, float k) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		a.write(i, a[i] * k);
}
extern "C" __global__ void sum(bam::array<float> a, unsigned long long n, double *out) {
	double s = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s += a[i];
	atomicAdd(out, s);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS scale_range(bam::array<float> a, unsigned long long lo, unsigned long long n, float k) {
	bam::for_range(a, lo, n, [&](bam::u64 i) { a.write(i, a[i] * k); });
}
extern "C" __global__ void BAM_ARRAY_BOUNDS sum_range(bam::array<float> a, unsigned long long lo, unsigned long long n, double *out) {
	double s = 0;
	bam::for_range(a, lo, n, [&](bam::u64 i) { s += a[i]; });
	atomicAdd(out, s);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS scale_range_taken(bam::array<float> a, unsigned long long lo, unsigned long long n, float k,
                                                              unsigned long long *next, unsigned long long ahead) {
	bam::for_range(a, lo, n, [&](bam::u64 i) { a.write(i, a[i] * k); }, next, (unsigned)ahead);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS sum_range_taken(bam::array<float> a, unsigned long long lo, unsigned long long n, double *out,
                                                            unsigned long long *next, unsigned long long ahead) {
	double s = 0;
	bam::for_range(a, lo, n, [&](bam::u64 i) { s += a[i]; }, next, (unsigned)ahead);
	atomicAdd(out, s);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS sum_stride_ahead(bam::array<float> a, unsigned long long n, double *out,
                                                             unsigned long long steps) {
	const unsigned long long grid = (unsigned long long)gridDim.x * blockDim.x;
	const unsigned lane = threadIdx.x & 31u;
	double s = 0;
	unsigned long long k = 0;
	for (unsigned long long base = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x - lane; base < n; base += grid, k++) {
		a.prefetch_steps(k, base, grid, (unsigned)steps);
		if (base + lane < n) s += a[base + lane];
	}
	atomicAdd(out, s);
}
extern "C" __global__ void past_end(bam::array<float> a) {
	float v = a[a.size() + threadIdx.x];
	(void)v;
}
`

func newStore(t *testing.T, e bam.Engine) *bam.Store {
	t.Helper()
	ctx := context.Background()
	s, err := bam.Create(ctx, filepath.Join(t.TempDir(), "s"), bam.CreateOptions{
		Options:       bam.Options{Engine: e, CacheBytes: 1 << 20},
		Namespaces:    2,
		NamespaceSize: 64 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// gpuStore skips the test without a GPU or NVRTC and returns a context
// bounded for the test and a GPU store with a 1 MiB cache.
func gpuStore(t *testing.T) (context.Context, *bam.Store) {
	t.Helper()
	cudatest.Device(t)
	if err := cuda.OpenNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, newStore(t, bam.EngineGPU)
}

func TestCPUStoreRefusesKernels(t *testing.T) {
	s := newStore(t, bam.EngineCPU)
	if _, err := gpu.Compile(s, "x.cu", scaleSrc); !errors.Is(err, bam.ErrEngineUnavailable) {
		t.Fatalf("Compile on a CPU store: %v, want ErrEngineUnavailable", err)
	}
	if _, err := gpu.NewBuffer(s, 8); !errors.Is(err, bam.ErrEngineUnavailable) {
		t.Fatalf("NewBuffer on a CPU store: %v, want ErrEngineUnavailable", err)
	}
}

// arrayWithKernels creates array name of n elements, value(i) at index i,
// written through the array API, and compiles src (named file); the module
// is closed when the test ends.
func arrayWithKernels[T any](ctx context.Context, t *testing.T, s *bam.Store, name string, n int, value func(i int) T, file, src string) (*array.Array[T], []T, *gpu.Module) {
	t.Helper()
	a, err := array.Create[T](ctx, s, name, uint64(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]T, n)
	for i := range vals {
		vals[i] = value(i)
	}
	if err := a.WriteRange(ctx, 0, vals); err != nil {
		t.Fatal(err)
	}
	m, err := gpu.Compile(s, file, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return a, vals, m
}

func TestGPUUserKernel(t *testing.T) {
	ctx, s := gpuStore(t)
	const n = 1 << 20 // 4 MiB of floats through a 1 MiB cache
	a, vals, m := arrayWithKernels(ctx, t, s, "x", n, func(i int) float32 { return float32(i%1000) + 0.5 }, "scale.cu", scaleSrc)
	if err := m.Launch(ctx, "scale", gpu.Grid(n, 256), a, uint64(n), float32(2)); err != nil {
		t.Fatal(err)
	}
	out, err := gpu.NewBuffer(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	if err := m.Launch(ctx, "sum", gpu.Grid(n, 256), a, uint64(n), out); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	if err := out.Read(b); err != nil {
		t.Fatal(err)
	}
	var want float64
	for _, v := range vals {
		want += 2 * float64(v)
	}
	if got := math.Float64frombits(binary.LittleEndian.Uint64(b)); math.Abs(got-want) > 1e-6*want {
		t.Fatalf("sum after scale = %v, want %v", got, want)
	}
	// The writes reached the store: read back through the array API.
	got := make([]float32, n)
	if err := a.ReadRange(ctx, 0, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != 2*vals[i] {
			t.Fatalf("element %d = %v, want %v", i, got[i], 2*vals[i])
		}
	}
	// A kernel's out-of-range access is an error, and the module still works.
	if err := m.Launch(ctx, "past_end", gpu.Dims{Grid: 1, Block: 32}, a); !errors.Is(err, gpu.ErrOutOfRange) {
		t.Fatalf("past_end: %v, want ErrOutOfRange", err)
	}
	if err := m.Launch(ctx, "sum", gpu.Grid(n, 256), a, uint64(n), out); err != nil {
		t.Fatalf("launch after a failed one: %v", err)
	}
	// A compile error carries the compiler's log.
	_, err = gpu.Compile(s, "bad.cu", `extern "C" __global__ void k() { undeclared(); }`)
	var ce *cuda.CompileError
	if !errors.As(err, &ce) || ce.Log == "" {
		t.Fatalf("bad source: %v, want a CompileError with a log", err)
	}
}

// setSrc asks the device library which set holds each tag.
const setSrc = `
#include "bam/cache.cuh"
typedef unsigned long long u64;
extern "C" __global__ void sets_of(const u64 *tags, u64 n, u64 sets, u64 *out) {
	for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
		out[i] = bam::cache::set_of(tags[i], sets);
}
`

// TestGPUSetIndexMatchesHost checks that the device places tags in the
// sets gpucache.SetIndex names, for power-of-two set counts and others.
func TestGPUSetIndexMatchesHost(t *testing.T) {
	ctx, s := gpuStore(t)
	m, err := gpu.Compile(s, "sets.cu", setSrc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const n = 4096
	tags := make([]uint64, n)
	raw := make([]byte, 8*n)
	for i := range tags {
		line := uint64(i) * 7919
		if i%4 == 3 {
			line = uint64(i) << 20 // lines far apart
		}
		tags[i], err = gpucache.MakeTag(uint8(i%5), line)
		if err != nil {
			t.Fatal(err)
		}
		binary.LittleEndian.PutUint64(raw[8*i:], tags[i])
	}
	in, err := gpu.NewBuffer(s, len(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	if err := in.Write(raw); err != nil {
		t.Fatal(err)
	}
	out, err := gpu.NewBuffer(s, len(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	for _, sets := range []uint32{1, 3, 32, 100, 4096} {
		if err := m.Launch(ctx, "sets_of", gpu.Grid(n, 256), in, uint64(n), uint64(sets), out); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(raw))
		if err := out.Read(got); err != nil {
			t.Fatal(err)
		}
		for i, tag := range tags {
			if d, h := binary.LittleEndian.Uint64(got[8*i:]), uint64(gpucache.SetIndex(tag, sets)); d != h {
				t.Fatalf("%d sets, tag %#x: device set %d, host set %d", sets, tag, d, h)
			}
		}
	}
}

// holdSrc has the first `first` threads of a block hold lines 0 to
// first-1, then the first `second` threads hold the lines after those as
// well, each until the whole block has read.
const holdSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void hold_lines(bam::array<unsigned> a, u64 first, u64 second, u64 *out) {
	bam::array_ref<unsigned> r1(a), r2(a);
	const u64 t = threadIdx.x, per = a.elems_per_line();
	u64 v = 0;
	if (t < first) v += r1[t * per];
	__syncthreads();
	if (t < second) v += r2[(first + t) * per];
	__syncthreads();
	r1.release();
	r2.release();
	atomicAdd(out, v);
}
`

// TestGPUHeldLinesOutnumberWays checks that a kernel holding more lines at
// once than the cache has ways fails with ErrCacheTooSmall within the
// engine's bound, rather than hanging or reporting storage as slow, and
// that the store serves the next launch.
func TestGPUHeldLinesOutnumberWays(t *testing.T) {
	ctx, s := gpuStore(t)
	const lines, perLine = 512, 1024 // 4 KiB lines of uint32; the 1 MiB cache has 32 sets of 8 ways
	a, vals, m := arrayWithKernels(ctx, t, s, "held", lines*perLine, func(i int) uint32 { return uint32(i % 977) }, "hold.cu", holdSrc)
	out, err := gpu.NewBuffer(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	launch := func(first, second uint64) (uint64, error) {
		if err := out.Write(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		err := m.Launch(ctx, "hold_lines", gpu.Dims{Grid: 1, Block: 256}, a, first, second, out)
		b := make([]byte, 8)
		if rerr := out.Read(b); rerr != nil {
			t.Fatal(rerr)
		}
		return binary.LittleEndian.Uint64(b), err
	}
	// 128 lines, then 256 more: 384 held lines for 256 ways. The first 128
	// (64 consecutive lines of each of the two namespaces) fit and leave
	// every set with held lines, so each access that finds no way is
	// refused as the cache being too small.
	start := time.Now()
	_, err = launch(128, 256)
	if !errors.Is(err, gpu.ErrCacheTooSmall) {
		t.Fatalf("384 lines held at once in a cache of 256 ways: %v, want ErrCacheTooSmall", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("ErrCacheTooSmall after %v", d)
	}
	// 64 and 64 lines fit (at most 3 consecutive lines of a namespace in
	// 64 share a set): the same kernel then reads every one.
	var want uint64
	for i := range 128 {
		want += uint64(vals[i*perLine])
	}
	got, err := launch(64, 64)
	if err != nil || got != want {
		t.Fatalf("after the failed launch, 128 lines: sum %d, %v; want %d", got, err, want)
	}
}

// divergentSrc reads and writes several arrays of one element type from
// divergent lanes, so that lanes of different arrays reach the shared
// out-of-line parts of the protocol at the same time and may run there
// converged.
const divergentSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
__device__ u64 tid() { return blockIdx.x * (u64)blockDim.x + threadIdx.x; }
__device__ u64 nthreads() { return (u64)gridDim.x * blockDim.x; }
extern "C" __global__ void select_sum(bam::array<unsigned> a, bam::array<unsigned> b, bam::array<unsigned> c,
                                      u64 n, unsigned t, u64 *out) {
	u64 s = 0, m = 0;
	for (u64 i = tid(); i < n; i += nthreads()) {
		const unsigned x = a[i];
		if (x >= t) {
			m++;
			s += b[i];
			if (x & 1) s += c[i];
		}
	}
	atomicAdd(&out[0], s);
	atomicAdd(&out[1], m);
}
// Each warp walks its own run of elements, its lanes side by side; lanes
// alternate between a and b in groups of eight.
extern "C" __global__ void ref_sum(bam::array<unsigned> a, bam::array<unsigned> b, u64 n, u64 *out) {
	bam::array_ref<unsigned> ra(a), rb(b);
	const u64 warps = nthreads() / 32, warp = tid() / 32, lane = threadIdx.x & 31;
	const u64 per = (n / warps + 31) / 32 * 32;
	u64 s = 0;
	for (u64 i = warp * per + lane; i < n && i < (warp + 1) * per; i += 32) {
		if (((i >> 3) ^ (i >> 9)) & 1) s += ra[i];
		else s += rb[i];
	}
	ra.release();
	rb.release();
	atomicAdd(out, s);
}
extern "C" __global__ void split_write(bam::array<unsigned> a, bam::array<unsigned> b, bam::array<unsigned> c, u64 n) {
	for (u64 i = tid(); i < n; i += nthreads()) {
		const unsigned x = a[i];
		if (x & 1) b.write(i, x);
		else c.write(i, x + 1);
	}
}
`

// TestGPUDivergentArrays checks reads, array_ref reads and writes of
// several arrays of the same type from divergent lanes against host
// arithmetic, through a cache a quarter of one array.
func TestGPUDivergentArrays(t *testing.T) {
	ctx, s := gpuStore(t)
	const n = 1 << 20 // 4 MiB per array through a 1 MiB cache
	vals := [3][]uint32{make([]uint32, n), make([]uint32, n), make([]uint32, n)}
	arrs := make([]*array.Array[uint32], 3)
	for k := range arrs {
		for i := range vals[k] {
			switch k {
			case 0:
				vals[k][i] = uint32(uint64(i)*2654435761>>7) % 1000
			case 1:
				vals[k][i] = uint32(i % 1013)
			default:
				vals[k][i] = uint32(i*7) % 991
			}
		}
		a, err := array.Create[uint32](ctx, s, string(rune('a'+k)), n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.WriteRange(ctx, 0, vals[k]); err != nil {
			t.Fatal(err)
		}
		arrs[k] = a
	}
	m, err := gpu.Compile(s, "divergent.cu", divergentSrc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := gpu.NewBuffer(s, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	read := func(kernel string, dims gpu.Dims, args ...any) [2]uint64 {
		t.Helper()
		if err := out.Write(make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
		if err := m.Launch(ctx, kernel, dims, append(args, out)...); err != nil {
			t.Fatalf("%s: %v", kernel, err)
		}
		b := make([]byte, 16)
		if err := out.Read(b); err != nil {
			t.Fatal(err)
		}
		return [2]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
	}
	a, b, c := vals[0], vals[1], vals[2]
	const threshold = 500
	var wantSum, wantCount uint64
	for i := range n {
		if a[i] >= threshold {
			wantCount++
			wantSum += uint64(b[i])
			if a[i]&1 == 1 {
				wantSum += uint64(c[i])
			}
		}
	}
	for run := range 3 {
		if got := read("select_sum", gpu.Grid(n, 256), arrs[0], arrs[1], arrs[2], uint64(n), uint32(threshold)); got != [2]uint64{wantSum, wantCount} {
			t.Fatalf("select_sum run %d: sum %d count %d, want %d %d", run, got[0], got[1], wantSum, wantCount)
		}
	}
	var wantRef uint64
	for i := range n {
		if ((i>>3)^(i>>9))&1 == 1 {
			wantRef += uint64(a[i])
		} else {
			wantRef += uint64(b[i])
		}
	}
	// 16 warps, each holding at most two lines of each array: 64 of the
	// cache's 256 ways. The warps walk runs of 64 lines in step, so their
	// lines are a multiple of the 32 sets apart; the set mapping spreads
	// them (under a plain modulo every warp's lines shared one set of 8
	// ways, and warps holding one line while waiting for another ran out
	// of ways until the timeout).
	if got := read("ref_sum", gpu.Dims{Grid: 2, Block: 256}, arrs[0], arrs[1], uint64(n)); got[0] != wantRef {
		t.Fatalf("ref_sum: %d, want %d", got[0], wantRef)
	}
	if err := m.Launch(ctx, "split_write", gpu.Grid(n, 256), arrs[0], arrs[1], arrs[2], uint64(n)); err != nil {
		t.Fatal(err)
	}
	for k := 1; k < 3; k++ {
		got := make([]uint32, n)
		if err := arrs[k].ReadRange(ctx, 0, got); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			want := vals[k][i]
			switch {
			case k == 1 && a[i]&1 == 1:
				want = a[i]
			case k == 2 && a[i]&1 == 0:
				want = a[i] + 1
			}
			if got[i] != want {
				t.Fatalf("after split_write, array %c element %d = %d, want %d", 'a'+k, i, got[i], want)
			}
		}
	}
}

// spanSrc walks runs of elements through array_ref::span. Each warp's
// lanes read elements 32 apart from start + warp*per_warp*32 + lane, a span
// per line; runs start mid-line so lanes cross lines. past_end makes one
// lane ask for a span past the array's end.
const spanSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
__device__ u64 tid() { return blockIdx.x * (u64)blockDim.x + threadIdx.x; }
extern "C" __global__ void walk_spans(bam::array<unsigned> a, u64 n, u64 per_warp, u64 start, u64 past_end, u64 *out) {
	bam::array_ref<unsigned> ref(a);
	const u64 warp = tid() / 32, lane = threadIdx.x & 31;
	const u64 first = start + warp * per_warp * 32 + lane;
	u64 s = 0;
	for (u64 j = 0; j < per_warp;) {
		const u64 i = first + 32 * j;
		const bam::line_span<unsigned> sp = ref.span(past_end && tid() == 77 ? n + 3 : i);
		if (sp.end <= sp.first || !sp.contains(i)) break;
		for (; j < per_warp && sp.contains(first + 32 * j); j++) s += sp[first + 32 * j];
	}
	ref.release();
	atomicAdd(out, s);
}
`

// TestGPUArrayRefSpans checks array_ref::span against host arithmetic
// through a cache a quarter of the array (misses, fills and evictions),
// with the array rewritten between rounds, and a span past the end failing
// the launch with ErrOutOfRange.
func TestGPUArrayRefSpans(t *testing.T) {
	ctx, s := gpuStore(t)
	const n = 1 << 20 // 4 MiB of uint32 through a 1 MiB cache
	a, vals, m := arrayWithKernels(ctx, t, s, "spans", n, func(i int) uint32 { return uint32(uint64(i)*40503>>3) % 7919 }, "spans.cu", spanSrc)
	out, err := gpu.NewBuffer(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	const warps, perWarp, start = 32, 1000, 700 // 1,024,000 elements from element 700
	launch := func(pastEnd uint64) (uint64, error) {
		t.Helper()
		if err := out.Write(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		err := m.Launch(ctx, "walk_spans", gpu.Dims{Grid: warps * 32 / 256, Block: 256}, a, uint64(n), uint64(perWarp), uint64(start), pastEnd, out)
		b := make([]byte, 8)
		if rerr := out.Read(b); rerr != nil {
			t.Fatal(rerr)
		}
		return binary.LittleEndian.Uint64(b), err
	}
	for round := range 2 {
		var want uint64
		for w := uint64(0); w < warps; w++ {
			for lane := uint64(0); lane < 32; lane++ {
				for j := uint64(0); j < perWarp; j++ {
					want += uint64(vals[start+w*perWarp*32+lane+32*j])
				}
			}
		}
		if got, err := launch(0); err != nil || got != want {
			t.Fatalf("round %d: walk_spans: sum %d, %v; want %d", round, got, err, want)
		}
		for i := range vals {
			vals[i] = vals[i]*3 + 1
		}
		if err := a.WriteRange(ctx, 0, vals); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := launch(1); !errors.Is(err, gpu.ErrOutOfRange) {
		t.Fatalf("a span past the end: %v, want ErrOutOfRange", err)
	}
	if _, err := launch(0); err != nil {
		t.Fatalf("walk_spans after the failed launch: %v", err)
	}
}

// TestGPUForRange runs bam::for_range passes from a user kernel over
// ranges that start and end inside lines, through a cache a quarter of the
// array, with grids of few warps (a line per chunk), of many (chunks down
// to 32 elements) and with blocks of partial warps; and with chunks taken
// from a work counter, lines filled ahead of the reads (the writes leave
// them dirty, so the warps filling ahead evict dirty lines).
func TestGPUForRange(t *testing.T) {
	ctx, s := gpuStore(t)
	const n = 1 << 20 // 4 MiB of floats through a 1 MiB cache
	a, vals, m := arrayWithKernels(ctx, t, s, "x", n, func(i int) float32 { return float32(i%997) + 0.25 }, "scale.cu", scaleSrc)
	out, err := gpu.NewBuffer(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	next, err := gpu.NewBuffer(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Free()
	zero := make([]byte, 8)
	want := slices.Clone(vals)
	for _, c := range []struct {
		lo, n uint64
		grid  gpu.Dims
		k     float32
		ahead uint64 // 0: fixed shares; else chunks taken from next, ahead lines filled at once
	}{
		{1000, n - 1000 - 77, gpu.Dims{Grid: 8, Block: 256}, 3, 0},    // 64 warps: a line per chunk
		{5, n - 5, gpu.Grid(n, 256), 0.5, 0},                          // a warp per 32 elements
		{123457, 1000, gpu.Dims{Grid: 132 * 4, Block: 256}, 2, 0},     // a short range: 32-element chunks
		{n - 40, 40, gpu.Dims{Grid: 1, Block: 32}, 5, 0},              // one warp, the array's end
		{77, 100000, gpu.Dims{Grid: 7, Block: 48}, 1.5, 0},            // partial warps: one position per thread
		{1000, n - 1000 - 77, gpu.Dims{Grid: 8, Block: 256}, 0.25, 4}, // 64 warps taking chunks, 2 lines ahead (half the cache's 256 lines)
		{3, n - 3, gpu.Dims{Grid: 2, Block: 256}, 2, 8},               // 16 warps, 8 lines ahead
		{5, n - 5, gpu.Grid(n, 256), 4, 2},                            // a warp per 32 elements: none ahead
		{77, 100000, gpu.Dims{Grid: 7, Block: 48}, 0.5, 2},            // partial warps taking positions
	} {
		scale, sum := "scale_range", "sum_range"
		var extra []any
		if c.ahead > 0 {
			scale, sum = "scale_range_taken", "sum_range_taken"
			extra = []any{next, c.ahead}
			if err := next.Write(zero); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Launch(ctx, scale, c.grid, append([]any{a, c.lo, c.n, c.k}, extra...)...); err != nil {
			t.Fatalf("%s(%d, %d): %v", scale, c.lo, c.n, err)
		}
		for i := c.lo; i < c.lo+c.n; i++ {
			want[i] *= c.k
		}
		var wantSum float64
		for _, v := range want[c.lo : c.lo+c.n] {
			wantSum += float64(v)
		}
		b := make([]byte, 8)
		if err := out.Write(b); err != nil {
			t.Fatal(err)
		}
		if c.ahead > 0 {
			if err := next.Write(zero); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.Launch(ctx, sum, c.grid, append([]any{a, c.lo, c.n, out}, extra...)...); err != nil {
			t.Fatalf("%s(%d, %d): %v", sum, c.lo, c.n, err)
		}
		if err := out.Read(b); err != nil {
			t.Fatal(err)
		}
		if got := math.Float64frombits(binary.LittleEndian.Uint64(b)); math.Abs(got-wantSum) > 1e-6*math.Abs(wantSum) {
			t.Fatalf("%s(%d, %d) = %v, want %v", sum, c.lo, c.n, got, wantSum)
		}
	}
	// A grid-stride pass reading ahead (prefetch_steps) over the dirty
	// lines the passes above left: its fills evict them.
	var wantSum float64
	for _, v := range want {
		wantSum += float64(v)
	}
	for _, c := range []struct {
		grid  gpu.Dims
		steps uint64
	}{
		{gpu.Dims{Grid: 132 * 4, Block: 256}, 16}, // every warp's next 16 steps: more lines than the cache's 256
		{gpu.Dims{Grid: 4, Block: 96}, 5},         // 12 warps, lines shared by several warps' steps
		{gpu.Dims{Grid: 3, Block: 64}, 40},        // more steps than lanes: 32
		{gpu.Dims{Grid: 2, Block: 256}, 0},        // none ahead
	} {
		b := make([]byte, 8)
		if err := out.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := m.Launch(ctx, "sum_stride_ahead", c.grid, a, uint64(n), out, c.steps); err != nil {
			t.Fatalf("sum_stride_ahead(%v, %d): %v", c.grid, c.steps, err)
		}
		if err := out.Read(b); err != nil {
			t.Fatal(err)
		}
		if got := math.Float64frombits(binary.LittleEndian.Uint64(b)); math.Abs(got-wantSum) > 1e-6*math.Abs(wantSum) {
			t.Fatalf("sum_stride_ahead(%v, %d) = %v, want %v", c.grid, c.steps, got, wantSum)
		}
	}
	got := make([]float32, n)
	if err := a.ReadRange(ctx, 0, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("element %d = %v, want %v (%v before the passes)", i, got[i], want[i], vals[i])
		}
	}
}

const readAheadSrc = `
#include "bam/read_ahead.cuh"
// sum_with adds a's elements [0, n) into *out in a grid-stride loop read ahead by ra.
__device__ void sum_with(bam::array<unsigned long long> a, unsigned long long n, unsigned long long *out,
                         bam::read_ahead<unsigned long long> &ra) {
	const unsigned long long grid = (unsigned long long)gridDim.x * blockDim.x;
	const unsigned lane = threadIdx.x & 31u;
	unsigned long long s = 0;
	unsigned long long k = 0;
	for (unsigned long long base = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x - lane; base < n; base += grid, k++) {
		ra.step(k, base, grid);
		if (base + lane < n) s += a[base + lane];
	}
	ra.finish();
	atomicAdd(out, s);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS sum_read_ahead(bam::array<unsigned long long> a, unsigned long long n,
                                                           unsigned long long *out, unsigned long long steps) {
	bam::read_ahead<unsigned long long> ra(a, (unsigned)steps);
	sum_with(a, n, out, ra);
}
// sum_read_ahead_default is sum_read_ahead with read_ahead's default steps;
// out[1] gets read_ahead_steps(a) - steps.
extern "C" __global__ void BAM_ARRAY_BOUNDS sum_read_ahead_default(bam::array<unsigned long long> a, unsigned long long n,
                                                                   unsigned long long *out, unsigned long long steps) {
	bam::read_ahead<unsigned long long> ra(a);
	sum_with(a, n, out, ra);
	if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(out + 1, (unsigned long long)bam::read_ahead_steps(a) - steps);
}
extern "C" __global__ void BAM_ARRAY_BOUNDS add_stride(bam::array<unsigned long long> a, unsigned long long n, unsigned long long d) {
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
		a.write(i, a[i] + d);
}
`

// TestGPUReadAhead runs grid-stride passes with bam::read_ahead through a
// cache a quarter of the array, its queues shallow enough that the
// read-ahead gets queue pairs of its own (a quarter of the cache's 1024
// lines over queues of 16 entries): grids whose steps read many lines,
// grids whose lines span several steps (a line is asked for only at the
// step that reads its first element), steps past the lanes, and passes
// over lines a writing pass left dirty, so that the read-ahead's claims
// write victims back. Every pass's sum is checked; so is the array read
// back at the end. A store without read-ahead queue pairs, or whose cache
// is too small for one, reads ahead waiting (prefetch_steps' schedule),
// checked too; so are Reads of one line and of eight (the default covers
// two: 8 KiB). The store stripes its lines over two namespaces, so runs
// of lines break where the namespace changes.
func TestGPUReadAhead(t *testing.T) {
	cudatest.Device(t)
	if err := cuda.OpenNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, c := range []struct {
		name       string
		cacheBytes int64
		depth      int
		raPairs    int
		readBytes  int
	}{
		{"own queues", 4 << 20, 16, 16, 0},
		{"own queues, one line a Read", 4 << 20, 16, 16, 4096},
		{"own queues, eight lines a Read", 4 << 20, 32, 4, 32768},
		{"waiting", 1 << 20, 256, 0, 0},
		{"waiting, cache too small for a queue", 1 << 20, 256, 4, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := bam.Create(ctx, filepath.Join(t.TempDir(), "s"), bam.CreateOptions{
				Options:       bam.Options{Engine: bam.EngineGPU, CacheBytes: c.cacheBytes, QueueDepth: c.depth, ReadAheadQueuePairs: c.raPairs, ReadAheadReadBytes: c.readBytes},
				Namespaces:    2,
				NamespaceSize: 64 << 20,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			n := int(4 * c.cacheBytes / 8)
			a, vals, m := arrayWithKernels(ctx, t, s, "x", n, func(i int) uint64 { return uint64(i)*0x9e3779b97f4a7c15 + 7 }, "ra.cu", readAheadSrc)
			out, err := gpu.NewBuffer(s, 16)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Free()
			want := slices.Clone(vals)
			for pass, p := range []struct {
				grid  gpu.Dims
				steps uint64
				add   uint64 // a writing pass before: every element + add
				def   bool   // read_ahead(a): steps is the default it should take
			}{
				{gpu.Dims{Grid: 132 * 4, Block: 256}, 16, 0, false}, // 264 lines a step
				{gpu.Dims{Grid: 132 * 4, Block: 256}, 16, 0, false},
				{gpu.Dims{Grid: 40, Block: 256}, 8, 3, false},      // 20 lines a step, after a writing pass
				{gpu.Dims{Grid: 3, Block: 64}, 40, 0, false},       // 6 warps: a line spans 2-3 steps; more steps than lanes
				{gpu.Dims{Grid: 1, Block: 32}, 5, 0, false},        // one warp: a line spans 16 steps
				{gpu.Dims{Grid: 132 * 4, Block: 256}, 1, 5, false}, // every step a turn
				{gpu.Dims{Grid: 17, Block: 96}, 32, 0, false},      // a stride that is no multiple of a line
				{gpu.Dims{Grid: 132 * 4, Block: 256}, 0, 0, false}, // none ahead
				{gpu.Dims{Grid: 132 * 4, Block: 256}, 16, 0, true}, // the default: 16 steps at 4 KiB lines
			} {
				if p.add != 0 {
					if err := m.Launch(ctx, "add_stride", gpu.Dims{Grid: 132 * 4, Block: 256}, a, uint64(n), p.add); err != nil {
						t.Fatalf("pass %d: add_stride: %v", pass, err)
					}
					for i := range want {
						want[i] += p.add
					}
				}
				var wantSum uint64
				for _, v := range want {
					wantSum += v
				}
				b := make([]byte, 16)
				if err := out.Write(b); err != nil {
					t.Fatal(err)
				}
				kernel := "sum_read_ahead"
				if p.def {
					kernel = "sum_read_ahead_default"
				}
				if err := m.Launch(ctx, kernel, p.grid, a, uint64(n), out, p.steps); err != nil {
					t.Fatalf("pass %d: %s(%v, %d steps): %v", pass, kernel, p.grid, p.steps, err)
				}
				if err := out.Read(b); err != nil {
					t.Fatal(err)
				}
				if got := binary.LittleEndian.Uint64(b); got != wantSum {
					t.Fatalf("pass %d: %s(%v, %d steps) = %#x, want %#x", pass, kernel, p.grid, p.steps, got, wantSum)
				}
				if d := binary.LittleEndian.Uint64(b[8:]); p.def && d != 0 {
					t.Fatalf("pass %d: read_ahead_steps = %d, want %d", pass, p.steps+d, p.steps)
				}
			}
			got := make([]uint64, n)
			if err := a.ReadRange(ctx, 0, got); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("element %d = %#x, want %#x", i, got[i], want[i])
				}
			}
		})
	}
}
