// Package gpu runs your own CUDA kernels over arrays in a store.
//
// A kernel written for plain device pointers becomes a kernel over data on
// storage by changing `const T*` to `bam::array<T>` (kernels/include/bam/
// array.cuh): reads and writes go through the store's GPU cache, misses are
// NVMe commands built by the GPU threads themselves.
//
//	const src = `
//	#include "bam/array.cuh"
//	extern "C" __global__ void scale(bam::array<float> a, unsigned long long n, float k) {
//		for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
//			a.write(i, a[i] * k);
//	}`
//	m, err := gpu.Compile(store, "scale.cu", src)
//	...
//	err = m.Launch(ctx, "scale", gpu.Grid(n, 256), arr, n, float32(2))
//
// A grid-stride loop like scale's keeps few lines in flight when the cache
// is cold: the threads of one grid step share its lines. A pass over
// consecutive elements reads fastest through bam::for_range, which gives
// each warp whole lines; pass it an 8-byte Buffer written with zeros before
// each launch and its warps take lines as they finish, and an ahead of 3
// has each warp fill three lines at once before reading them:
//
//	extern "C" __global__ void BAM_ARRAY_BOUNDS scale(bam::array<float> a, unsigned long long n, float k,
//	                                                  unsigned long long *next) {
//		bam::for_range(a, 0, n, [&](bam::u64 i) { a.write(i, a[i] * k); }, next, bam::fill_ahead);
//	}
//
// A loop that keeps one element per thread can read ahead instead: every
// lane calls prefetch_steps at the top of each step (its warp's first
// element base, step k), and each warp fills the lines of its next 16 steps
// once every 16 steps, the warps that share a line taking turns (blocks of
// whole warps):
//
//	unsigned long long k = 0;
//	for (unsigned long long base = blockIdx.x * blockDim.x + threadIdx.x - threadIdx.x % 32; base < n;
//	     base += gridDim.x * blockDim.x, k++) {
//		a.prefetch_steps(k, base, gridDim.x * blockDim.x, 16);
//		if (base + threadIdx.x % 32 < n) s += a[base + threadIdx.x % 32];
//	}
//
// bam::read_ahead<T> (bam/read_ahead.cuh) is the same schedule whose warps
// issue their Reads and go on, completing them at later steps, on queue
// pairs of their own (bam.Options.ReadAheadQueuePairs, 64 by default;
// without them it waits as prefetch_steps does): on an H200 host, 45.8
// GB/s against prefetch_steps' 42.2 in one run, with 64 pairs.
// Constructed without a step count (bam::read_ahead<T> ra(a)), it asks
// for the steps that measured best for the array's line size
// (bam::read_ahead_steps).
//
// Compile needs NVRTC (libnvrtc, shipped with the CUDA toolkit); LoadPTX
// takes PTX built elsewhere against the same headers (kernels.Headers).
// Launch arguments are arrays (anything with an Object() *bam.Object
// method, such as *array.Array[T]), Buffers, and Go integers and floats,
// passed by value with the C type of their Go type (int is a 64-bit long
// long). A kernel's failures — an NVMe error, a timeout, an index out of
// range — come back from Launch as errors; no kernel waits forever.
//
// The package owns compiling and launching user kernels and device
// buffers; it must not touch the cache or queues, which belong to the
// store's GPU engine.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/internal/hook"
	"github.com/bam-go/bam/kernels"
)

// Errors a launch can match with errors.Is, besides the NVMe status
// sentinels of package nvme (nvme.ErrUnrecoveredRead, ...) and
// vq.ErrTimeout for a wait that ran past its bound.
var (
	// ErrNoCompiler: Compile needs NVRTC, which is not installed.
	ErrNoCompiler = cuda.ErrNoNVRTC
	// ErrOutOfRange: a kernel accessed an element past an array's end.
	ErrOutOfRange = gpuengine.ErrOutOfRange
	// ErrCacheTooSmall: every way of a cache set stayed referenced.
	ErrCacheTooSmall = gpucache.ErrCacheTooSmall
	// ErrArgs: the arguments do not match the kernel's parameters in
	// number, size or placement; a Go int, for one, is 8 bytes, a C int 4.
	// Checked as far as the driver describes kernel parameters.
	ErrArgs = cuda.ErrArgs
	// ErrStragglers: storage is still running commands that an earlier
	// launch gave up on (a stalled namespace), so no kernel may run yet;
	// retry later. It matches vq.ErrTimeout too.
	ErrStragglers = gpuengine.ErrStragglers
)

// Module is a loaded set of user kernels bound to a store's GPU engine.
type Module struct {
	store *bam.Store
	eng   *gpuengine.Engine
	mod   *cuda.Module

	mu  sync.Mutex
	fns map[string]*cuda.Function
}

// Compile compiles CUDA C++ source with NVRTC against the bam device
// headers (#include "bam/array.cuh") and loads it. options are extra NVRTC
// options such as "-DWIDTH=8". The source is compiled as the engine's own
// kernels were: for compute_90 on an H100 or H200 when NVRTC is version 12
// or later (the queues then read completion windows with bulk copies;
// kernels.NVRTCOptions), else for compute_80. An option naming an
// architecture (--gpu-architecture, -arch) takes its place. A compile
// error carries the compiler's log.
func Compile(store *bam.Store, name, source string, options ...string) (*Module, error) {
	eng, err := hook.StoreGPU(store)
	if err != nil {
		return nil, err
	}
	options = compileOptions(eng.KernelBuild(), options)
	ptx, _, err := cuda.CompilePTX(cuda.Source{Name: name, Code: source, Headers: kernels.HeaderSources(), Options: options})
	if err != nil {
		return nil, fmt.Errorf("gpu: compile %s: %w", name, err)
	}
	return load(store, eng, ptx)
}

// compileOptions puts the build's options (kernels.NVRTCOptions) before
// the caller's, unless the caller names an architecture.
func compileOptions(build string, options []string) []string {
	if cuda.NamesArch(options) {
		return options
	}
	major, _, err := cuda.NVRTCVersion()
	if err != nil {
		return options // CompilePTX reports the missing NVRTC
	}
	return append(kernels.NVRTCOptions(build, major), options...)
}

// LoadPTX loads PTX text (for compute_80 or older virtual architectures).
// A JIT error carries the JIT's log.
func LoadPTX(store *bam.Store, ptx []byte) (*Module, error) {
	eng, err := hook.StoreGPU(store)
	if err != nil {
		return nil, err
	}
	return load(store, eng, ptx)
}

func load(store *bam.Store, eng *gpuengine.Engine, ptx []byte) (*Module, error) {
	mod, err := eng.Context().LoadPTX(ptx)
	if err != nil {
		return nil, fmt.Errorf("gpu: load module: %w", err)
	}
	return &Module{store: store, eng: eng, mod: mod, fns: map[string]*cuda.Function{}}, nil
}

// Close unloads the module.
func (m *Module) Close() error { return m.mod.Unload() }

// Dims is a launch shape: Grid blocks of Block threads.
type Dims struct{ Grid, Block uint32 }

// Grid returns the shape that covers n threads in blocks of block threads,
// capped at 65535 blocks (kernels should use grid-stride loops).
func Grid(n uint64, block uint32) Dims {
	if block == 0 {
		block = 256
	}
	g := (n + uint64(block) - 1) / uint64(block)
	return Dims{Grid: uint32(max(1, min(g, 65535))), Block: block}
}

// objecter is what an array argument offers: its catalog object.
type objecter interface{ Object() *bam.Object }

// Launch runs kernel with the given shape and arguments and waits for it.
// Arrays (array.Array[T]) become the kernel's bam::array<T> parameters,
// *Buffer a pointer, and numbers their own size (int as 8 bytes); a
// mismatch with the kernel's parameters is ErrArgs.
func (m *Module) Launch(ctx context.Context, kernel string, dims Dims, args ...any) error {
	fn, err := m.function(kernel)
	if err != nil {
		return err
	}
	cargs := make([]cuda.Arg, 0, len(args))
	for i, a := range args {
		c, err := m.arg(a)
		if err != nil {
			return fmt.Errorf("gpu: %s argument %d: %w", kernel, i, err)
		}
		cargs = append(cargs, c)
	}
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: dims.Grid}, Block: cuda.Dim3{X: dims.Block}}
	return m.eng.Launch(ctx, fn, cfg, cargs...)
}

func (m *Module) function(name string) (*cuda.Function, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.fns[name]; ok {
		return f, nil
	}
	f, err := m.mod.Function(name)
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	m.fns[name] = f
	return f, nil
}

func (m *Module) arg(a any) (cuda.Arg, error) {
	switch v := a.(type) {
	case objecter:
		arr, err := hook.DeviceArray(m.store, v.Object())
		if err != nil {
			return cuda.Arg{}, err
		}
		return arr.Arg(), nil
	case *Buffer:
		return cuda.Ptr(v.mem.Ptr()), nil
	case uint32:
		return cuda.U32(v), nil
	case int32:
		return cuda.I32(v), nil
	case uint64:
		return cuda.U64(v), nil
	case int64:
		return cuda.I64(v), nil
	case int:
		return cuda.I64(int64(v)), nil
	case float32:
		return cuda.F32(v), nil
	case float64:
		return cuda.F64(v), nil
	}
	return cuda.Arg{}, fmt.Errorf("unsupported argument type %T (arrays, *gpu.Buffer, sized integers and floats)", a)
}

// Buffer is device memory for kernel inputs and outputs.
type Buffer struct {
	mem *cuda.DeviceMem
}

// NewBuffer allocates n bytes of device memory, zeroed.
func NewBuffer(store *bam.Store, n int) (*Buffer, error) {
	eng, err := hook.StoreGPU(store)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, errors.New("gpu: buffer size must be positive")
	}
	mem, err := eng.Context().Alloc(uint64(n))
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	if err := mem.Memset8(0); err != nil {
		mem.Free()
		return nil, err
	}
	return &Buffer{mem: mem}, nil
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return int(b.mem.Size()) }

// Write copies p to the start of the buffer.
func (b *Buffer) Write(p []byte) error { return b.mem.Write(0, p) }

// Read copies the start of the buffer into p.
func (b *Buffer) Read(p []byte) error { return b.mem.Read(0, p) }

// Free releases the buffer.
func (b *Buffer) Free() error { return b.mem.Free() }
