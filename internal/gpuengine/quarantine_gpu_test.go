package gpuengine

import (
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// holdingNamespace passes everything to its memory namespace, except that
// once armed, the first WriteAt at offset off blocks until release: a
// Write that storage is still executing long after the host gave up on it.
// It does not embed the memory namespace, so the Target runs its commands
// on executors rather than inline.
type holdingNamespace struct {
	m       *nvme.MemoryNamespace
	off     atomic.Int64 // armed offset; -1 when not armed
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newHoldingNamespace(m *nvme.MemoryNamespace) *holdingNamespace {
	h := &holdingNamespace{m: m, started: make(chan struct{}, 1), release: make(chan struct{})}
	h.off.Store(-1)
	return h
}

func (h *holdingNamespace) LBASize() int                             { return h.m.LBASize() }
func (h *holdingNamespace) Blocks() uint64                           { return h.m.Blocks() }
func (h *holdingNamespace) ReadAt(p []byte, off int64) (int, error)  { return h.m.ReadAt(p, off) }
func (h *holdingNamespace) Flush() error                             { return h.m.Flush() }
func (h *holdingNamespace) Close() error                             { return h.m.Close() }
func (h *holdingNamespace) arm(off int64)                            { h.off.Store(off) }
func (h *holdingNamespace) unblock()                                 { h.once.Do(func() { close(h.release) }) }
func (h *holdingNamespace) WriteAt(p []byte, off int64) (int, error) { return h.writeAt(p, off) }

func (h *holdingNamespace) writeAt(p []byte, off int64) (int, error) {
	if h.off.CompareAndSwap(off, -1) {
		h.started <- struct{}{}
		<-h.release
	}
	return h.m.WriteAt(p, off)
}

// TestGPUStragglersHoldLaunches: a write-back that storage is still
// executing after its launch timed out and the queue pairs were reset
// (longer than the reset waits) keeps every later launch from running
// until it is done: calls fail with ErrStragglers and a timeout. Were they
// let through, a Scatter of the same line could succeed and be written
// back, and the older Write, landing last, would undo it on storage.
func TestGPUStragglersHoldLaunches(t *testing.T) {
	var hold *holdingNamespace
	// One set of four 4 KiB ways: reading eight other lines evicts line 0.
	cfg := Config{CacheBytes: 4 * 4096, Ways: 4, QueuePairs: 2, QueueDepth: 16, Timeout: 200 * time.Millisecond}
	r := newRigWrapped(t, cfg, 1, 64*512, 11, func(m *nvme.MemoryNamespace) nvme.Namespace {
		hold = newHoldingNamespace(m)
		return hold
	})
	defer hold.unblock()
	ctx := ctxT(t)
	const per = 512 // elements per line
	old1 := r.stored(1)
	v1, v2 := ^r.stored(0), ^old1
	scatter := func(i, v uint64) error {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, v)
		return r.arr.Scatter(ctx, []uint64{i}, b)
	}
	// evict reads lines 1-8, one launch each (a warp's lanes would hold
	// eight lines of the set at once), until one fails.
	evict := func() error {
		for l := uint64(1); l <= 8; l++ {
			if err := r.arr.Gather(ctx, []uint64{l * per}, make([]byte, 8)); err != nil {
				return err
			}
		}
		return nil
	}

	if err := scatter(0, v1); err != nil {
		t.Fatal(err)
	}
	// Line 0 is the namespace's line 1 (StartLine 1).
	hold.arm(4096)
	err := evict()
	select {
	case <-hold.started:
	case <-time.After(10 * time.Second):
		t.Fatalf("line 0 was not written back by the evicting gather (%v)", err)
	}
	if err == nil {
		t.Fatal("gather whose write-back storage holds: no error")
	}
	t.Logf("gather over the held write-back: %v", err)
	if n := r.e.target.Stragglers(); n != 1 {
		t.Fatalf("%d stragglers after the reset, want the held Write", n)
	}

	start := time.Now()
	err = scatter(1, v2)
	if !errors.Is(err, ErrStragglers) || !errors.Is(err, vq.ErrTimeout) {
		t.Fatalf("scatter while the abandoned Write still runs: %v, want ErrStragglers and vq.ErrTimeout", err)
	}
	if took := time.Since(start); took < cfg.Timeout || took > 10*cfg.Timeout {
		t.Errorf("scatter refused after %v, want the engine's timeout (%v)", took, cfg.Timeout)
	}
	if err := r.e.Flush(ctx); !errors.Is(err, ErrStragglers) {
		t.Fatalf("flush while the abandoned Write still runs: %v, want ErrStragglers", err)
	}

	hold.unblock()
	if err := scatter(1, v2); err != nil {
		t.Fatalf("scatter once the Write has landed: %v", err)
	}
	if err := evict(); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := r.stored(0), r.stored(1); a != v1 || b != v2 {
		t.Fatalf("stored elements 0, 1 = %#x, %#x; want %#x, %#x", a, b, v1, v2)
	}
	r.gatherRight(t, ctx, []uint64{0, 1, 511, 512}, "a held write-back")
	checkGenerations(t, r.e)
}

// rewriteSrc, run by one thread, writes element 0, evicts its line (its
// write-back times out: the test delays that Write past the engine's
// timeout), writes element 1 of the same line, evicts the line again, reads
// element 1, waits until the delayed Write has run, evicts the line once
// more and reads element 1 again. With the line written back a second time
// in between, the delayed Write would land over the newer data and the two
// reads would differ. The device keeps the line's way BUSY instead
// (quarantine) until the host has reset the queues, so the second write
// and both reads fail (T{}) and storage never goes back.
const rewriteSrc = `
#include "bam/array.cuh"
typedef unsigned long long u64;
extern "C" __global__ void rewrite_after_timeout(bam::array<u64> a, u64 per, u64 lines, u64 v1, u64 v2, u64 wait_ns, u64 *out) {
	if (blockIdx.x != 0 || threadIdx.x != 0) return;
	u64 sum = 0;
	a.write(0, v1);
	for (u64 l = 1; l <= lines; l++) sum += a[l * per];
	a.write(1, v2);
	for (u64 l = 1; l <= lines; l++) sum += a[l * per];
	out[0] = a[1];
	const u64 until = bam::detail::globaltimer() + wait_ns;
	while (bam::detail::globaltimer() < until) {
	}
	for (u64 l = 1; l <= lines; l++) sum += a[l * per];
	out[1] = a[1];
	out[2] = sum;
}
`

// TestGPUWriteBackQuarantine runs rewriteSrc with the first Write of line 0
// delayed to 3x the timeout and checks that element 1 never reads as two
// different values, in the kernel or after it.
func TestGPUWriteBackQuarantine(t *testing.T) {
	cudatest.Device(t)
	ptx := compileTestKernel(t, rewriteSrc)
	timeout := 100 * time.Millisecond
	if cudatest.Sanitizer() != "" {
		timeout = time.Second
	}
	for _, route := range []FillRoute{RouteBounce, RouteCopyEngine} {
		t.Run(route.String(), func(t *testing.T) {
			// Queues deep enough that the launch's commands never come
			// round to the timed-out Write's ring slot, which stays
			// abandoned until the reset: a ticket that did would wait
			// for it and fail, and the kernel would stop writing.
			cfg := Config{CacheBytes: 4 * 4096, Ways: 4, QueuePairs: 1, QueueDepth: 256, Timeout: timeout, FillRoute: route}
			r := newRig(t, cfg, 1, 64*512, 13)
			ctx := ctxT(t)
			fn := loadTestKernel(t, r, ptx, "rewrite_after_timeout")
			out := testOutput(t, r, 24)
			old0, old1 := r.stored(0), r.stored(1)
			v1, v2 := ^old0, ^old1
			var delayed atomic.Int64
			r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
				if c.Opcode == nvme.OpWrite && c.SLBA() == 1 && delayed.Add(1) == 1 {
					return nvme.Fault{Delay: 3 * timeout}
				}
				return nvme.Fault{}
			})
			lc := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1}, Block: cuda.Dim3{X: 32}}
			err := r.e.Launch(ctx, fn, lc, r.arr.Arg(), cuda.U64(512), cuda.U64(8), cuda.U64(v1), cuda.U64(v2),
				cuda.U64(uint64(6*timeout)), cuda.Ptr(out.Ptr()))
			r.e.SetFaultHook(nil)
			if delayed.Load() == 0 {
				t.Fatalf("line 0 was never written back (launch: %v)", err)
			}
			if !errors.Is(err, vq.ErrTimeout) {
				t.Fatalf("launch with a write-back delayed past the timeout: %v, want a timeout", err)
			}
			b := make([]byte, 24)
			if err := out.Read(0, b); err != nil {
				t.Fatal(err)
			}
			seen := []uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
			t.Logf("launch: %v; element 1 read in the kernel as %#x, %#x (old %#x, new %#x)", err, seen[0], seen[1], old1, v2)
			got := make([]byte, 16)
			if err := r.arr.Gather(ctx, []uint64{0, 1}, got); err != nil {
				t.Fatalf("gather after the launch: %v", err)
			}
			e0 := binary.LittleEndian.Uint64(got)
			seen = append(seen, binary.LittleEndian.Uint64(got[8:]))
			if err := r.e.Invalidate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.arr.Gather(ctx, []uint64{0, 1}, got); err != nil {
				t.Fatal(err)
			}
			if e := binary.LittleEndian.Uint64(got); e != e0 || (e != old0 && e != v1) {
				t.Fatalf("element 0 read %#x, then %#x from storage; want one of %#x, %#x, the same both times", e0, e, old0, v1)
			}
			seen = append(seen, binary.LittleEndian.Uint64(got[8:]), r.stored(1))
			var first uint64
			for _, v := range seen {
				if v == 0 {
					continue // a read the failed launch did not serve
				}
				if v != old1 && v != v2 {
					t.Fatalf("element 1 read %#x: neither its old %#x nor its new %#x (reads %#x)", v, old1, v2, seen)
				}
				if first == 0 {
					first = v
				} else if v != first {
					t.Fatalf("element 1 read as both %#x and %#x (reads in order, storage last: %#x)", first, v, seen)
				}
			}
			checkGenerations(t, r.e)
		})
	}
}
