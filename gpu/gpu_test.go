package gpu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/gpu"
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

func TestCPUStoreRefusesKernels(t *testing.T) {
	s := newStore(t, bam.EngineCPU)
	if _, err := gpu.Compile(s, "x.cu", scaleSrc); !errors.Is(err, bam.ErrEngineUnavailable) {
		t.Fatalf("Compile on a CPU store: %v, want ErrEngineUnavailable", err)
	}
	if _, err := gpu.NewBuffer(s, 8); !errors.Is(err, bam.ErrEngineUnavailable) {
		t.Fatalf("NewBuffer on a CPU store: %v, want ErrEngineUnavailable", err)
	}
}

func TestGPUUserKernel(t *testing.T) {
	cudatest.Device(t)
	if err := cuda.OpenNVRTC(); err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := newStore(t, bam.EngineGPU)
	const n = 1 << 20 // 4 MiB of floats through a 1 MiB cache
	a, err := array.Create[float32](ctx, s, "x", n, nil)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%1000) + 0.5
	}
	if err := a.WriteRange(ctx, 0, vals); err != nil {
		t.Fatal(err)
	}
	m, err := gpu.Compile(s, "user.cu", scaleSrc)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
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
