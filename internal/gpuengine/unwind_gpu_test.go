package gpuengine

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
)

// missesAfterFailureSrc: lane 0 reads past the end of a (the launch's
// first failure); then every lane reads lines lines of its own, each a
// miss.
const missesAfterFailureSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void misses_after_failure(bam::array<u64> a, u64 n, u64 per, u64 lines, u64 *out) {
	const unsigned lane = threadIdx.x & 31;
	u64 s = 0;
	if (lane == 0) s = a[n];
	__syncwarp();
	for (u64 l = 0; l < lines; l++) s += a[(lane * lines + l) * per];
	out[lane] = s;
}
`

// TestGPUNoReadsAfterFailure: once a launch has recorded a failure, its
// misses start no more commands. Before, each went on to wait out the
// timeout: with a queue ticket lost to an earlier timeout, one miss after
// another, so that kernels with many misses a thread ran far past the
// launch's bound (three and four processes sharing a GPU: a cold pass
// still running 50 s after its 5 s timeout). Here every Read is dropped:
// were the 512 misses after the failure read, the launch would take 16
// timeouts.
func TestGPUNoReadsAfterFailure(t *testing.T) {
	cudatest.Device(t)
	ptx := compileTestKernel(t, missesAfterFailureSrc)
	timeout := 200 * time.Millisecond
	if cudatest.Sanitizer() != "" {
		timeout = time.Second
	}
	const lines = 16 // a lane
	per := uint64(4096 / 8)
	n := 32 * lines * per
	r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 1, QueueDepth: 256, Timeout: timeout}, 1, n, 17)
	ctx := ctxT(t)
	fn := loadTestKernel(t, r, ptx, "misses_after_failure")
	out, err := r.e.Alloc(32 * 8)
	if err != nil {
		t.Fatal(err)
	}
	defer r.e.Free(out)
	var reads atomic.Int64
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead {
			reads.Add(1)
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	})
	start := time.Now()
	err = r.e.Launch(ctx, fn, cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}},
		r.arr.Arg(), cuda.U64(n), cuda.U64(per), cuda.U64(lines), cuda.Ptr(out.Ptr()))
	took := time.Since(start)
	r.e.SetFaultHook(nil)
	t.Logf("launch: %v after %v, %d Reads", err, took, reads.Load())
	if !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("launch: %v, want ErrOutOfRange", err)
	}
	// At most a Read a lane, started before the failure was seen.
	if got := reads.Load(); got > 32 {
		t.Errorf("%d Reads after the launch's first failure, want none (at most one a lane)", got)
	}
	if took > 8*timeout {
		t.Errorf("launch took %v after its first failure, %v timeout", took, timeout)
	}
	idx := make([]uint64, 64)
	for i := range idx {
		idx[i] = uint64(i) * 97 % n
	}
	r.gatherRight(t, ctx, idx, "misses after a failure")
}

// timeoutAfterIndexErrorSrc: lane 0 reads element i, whose Read the test
// drops, so that it times out; lane 1 reads past the end of a after
// wait_ns, while lane 0 waits.
const timeoutAfterIndexErrorSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void timeout_after_index_error(bam::array<u64> a, u64 n, u64 i, u64 wait_ns, u64 *out) {
	const unsigned lane = threadIdx.x & 31;
	if (lane == 0) out[0] = a[i];
	if (lane == 1) {
		const u64 until = bam::detail::globaltimer() + wait_ns;
		while (bam::detail::globaltimer() < until) {
		}
		out[1] = a[n];
	}
}
`

// TestGPUResetAfterLaterTimeout: a launch whose first failure is an index
// out of range and whose later one is a timeout (a dropped Read, issued
// before the index error) must still reset the queues, or the dropped
// command's abandoned slot fails the next launch.
func TestGPUResetAfterLaterTimeout(t *testing.T) {
	cudatest.Device(t)
	ptx := compileTestKernel(t, timeoutAfterIndexErrorSrc)
	r, idx := newFaultRig(t)
	ctx := ctxT(t)
	fn := loadTestKernel(t, r, ptx, "timeout_after_index_error")
	out, err := r.e.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer r.e.Free(out)
	var fired atomic.Int64
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && fired.Add(1) == 1 {
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	})
	// The index error comes 50 ms into the dropped Read's 500 ms timeout.
	err = r.e.Launch(ctx, fn, cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}},
		r.arr.Arg(), cuda.U64(r.n), cuda.U64(idx[1]), cuda.U64(uint64(50*time.Millisecond)), cuda.Ptr(out.Ptr()))
	r.e.SetFaultHook(nil)
	var de *DeviceError
	if !errors.As(err, &de) || !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("launch with an index out of range and a dropped read: %v, want ErrOutOfRange first", err)
	}
	if fired.Load() < 1 || de.Count < 2 || !de.abandoned {
		t.Fatalf("want a dropped read timing out after the index error: %d reads, %d failures, abandoned %v (%v)", fired.Load(), de.Count, de.abandoned, err)
	}
	r.gatherRight(t, ctx, idx, "an index out of range, then a dropped read")
}

// compileTestKernel compiles a test kernel's CUDA source against the
// device library with NVRTC, or skips the test without NVRTC.
func compileTestKernel(t *testing.T, src string) []byte {
	t.Helper()
	ptx, _, err := cuda.CompilePTX(cuda.Source{Name: "test.cu", Code: src, Headers: kernels.HeaderSources()})
	if errors.Is(err, cuda.ErrNoNVRTC) {
		t.Skip("no NVRTC")
	}
	if err != nil {
		t.Fatal(err)
	}
	return ptx
}

// loadTestKernel loads ptx into r's context, unloaded when the test ends,
// and returns its function name.
func loadTestKernel(t *testing.T, r *rig, ptx []byte, name string) *cuda.Function {
	t.Helper()
	mod, err := r.e.Context().LoadPTX(ptx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Unload() })
	fn, err := mod.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return fn
}
