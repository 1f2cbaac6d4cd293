package gpuengine

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
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
	out := testOutput(t, r, 32*8)
	var reads atomic.Int64
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead {
			reads.Add(1)
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	})
	start := time.Now()
	err := r.e.Launch(ctx, fn, cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}},
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

// timeoutAfterIndexErrorSrc: block 0 reads element i, whose Read the test
// drops, so that it times out; block 1 reads past the end of a after
// wait_ns, while block 0 waits. (Two lanes of one warp would not do: the
// warp may run the waiting lane's branch to its end before the other's.)
const timeoutAfterIndexErrorSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void timeout_after_index_error(bam::array<u64> a, u64 n, u64 i, u64 wait_ns, u64 *out) {
	if (threadIdx.x != 0) return;
	if (blockIdx.x == 0) {
		out[0] = a[i];
		return;
	}
	const u64 until = bam::detail::globaltimer() + wait_ns;
	while (bam::detail::globaltimer() < until) {
	}
	out[1] = a[n];
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
	out := testOutput(t, r, 16)
	var fired atomic.Int64
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && fired.Add(1) == 1 {
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	})
	// The index error comes 50 ms into the dropped Read's 500 ms timeout.
	err := r.e.Launch(ctx, fn, cuda.LaunchConfig{Grid: cuda.Dim3{X: 2}, Block: cuda.Dim3{X: 32}},
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

// spinUntilAbortSrc: thread 0 waits, for at most cap_ns, for the launch's
// abort word, and writes 1 if it saw it.
const spinUntilAbortSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void spin_until_abort(bam::array<u64> a, u64 cap_ns, u64 *out) {
	if (blockIdx.x != 0 || threadIdx.x != 0) return;
	const u64 until = bam::detail::globaltimer() + cap_ns;
	while (!bam::detail::aborted(*a.desc) && bam::detail::globaltimer() < until) {
	}
	out[0] = bam::detail::aborted(*a.desc) ? 1 : 0;
}
`

// TestGPUOverrunAborted: a kernel still running at its launch's bound is
// stopped through its abort word, the call fails with a timeout that says
// so, and the engine stays usable. (Before, the host returned and left the
// kernel running, and the next call or Close waited for it.)
func TestGPUOverrunAborted(t *testing.T) {
	cudatest.Device(t)
	ptx := compileTestKernel(t, spinUntilAbortSrc)
	r := newRig(t, Config{CacheBytes: 1 << 20, Timeout: 200 * time.Millisecond}, 1, 1<<16, 19)
	ctx := ctxT(t)
	fn := loadTestKernel(t, r, ptx, "spin_until_abort")
	out := testOutput(t, r, 8)
	r.e.boundForTest = 300 * time.Millisecond
	start := time.Now()
	err := r.e.Launch(ctx, fn, cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}},
		r.arr.Arg(), cuda.U64(uint64(20*time.Second)), cuda.Ptr(out.Ptr()))
	took := time.Since(start)
	r.e.boundForTest = 0
	t.Logf("launch: %v after %v", err, took)
	if !errors.Is(err, ErrOverrun) || !errors.Is(err, vq.ErrTimeout) {
		t.Fatalf("kernel past its bound: %v, want ErrOverrun and vq.ErrTimeout", err)
	}
	if took > 5*time.Second {
		t.Errorf("launch returned after %v, bound 300ms", took)
	}
	b := make([]byte, 8)
	if err := out.Read(0, b); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint64(b) != 1 {
		t.Errorf("the kernel ended without seeing its abort word")
	}
	if r.e.stuck != nil {
		t.Fatalf("engine stuck: %v", r.e.stuck)
	}
	idx := []uint64{0, 1, 4095, 65535}
	r.gatherRight(t, ctx, idx, "a kernel stopped at its bound")
}

// testOutput allocates n zeroed bytes of device memory through r's engine
// for a test kernel's results, freed when the test ends.
func testOutput(t *testing.T, r *rig, n uint64) *cuda.DeviceMem {
	t.Helper()
	out, err := r.e.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.e.Free(out) })
	if err := out.Memset8(0); err != nil {
		t.Fatal(err)
	}
	return out
}
