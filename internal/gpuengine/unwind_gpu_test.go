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
	ptx, _, err := cuda.CompilePTX(cuda.Source{Name: "unwind.cu", Code: missesAfterFailureSrc, Headers: kernels.HeaderSources()})
	if errors.Is(err, cuda.ErrNoNVRTC) {
		t.Skip("no NVRTC")
	}
	if err != nil {
		t.Fatal(err)
	}
	timeout := 200 * time.Millisecond
	if cudatest.Sanitizer() != "" {
		timeout = time.Second
	}
	const lines = 16 // a lane
	per := uint64(4096 / 8)
	n := 32 * lines * per
	r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 1, QueueDepth: 256, Timeout: timeout}, 1, n, 17)
	ctx := ctxT(t)
	mod, err := r.e.Context().LoadPTX(ptx)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	fn, err := mod.Function("misses_after_failure")
	if err != nil {
		t.Fatal(err)
	}
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
