package gpuengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// rig is an engine over memory namespaces holding one u64 array striped
// over all of them, filled with kernels.Pattern64(seed, i).
type rig struct {
	e     *Engine
	ns    []*nvme.MemoryNamespace
	arr   *Array
	n     uint64
	lines uint64
}

func newRig(t *testing.T, cfg Config, nns int, elems uint64, seed uint64) *rig {
	t.Helper()
	return newRigWrapped(t, cfg, nns, elems, seed, nil)
}

// newRigWrapped is newRig with the engine's namespaces wrap(member) when
// wrap is not nil (the rig's own reads and writes still go to the memory).
func newRigWrapped(t *testing.T, cfg Config, nns int, elems uint64, seed uint64, wrap func(*nvme.MemoryNamespace) nvme.Namespace) *rig {
	t.Helper()
	cudatest.Device(t)
	if cfg.LineSize == 0 {
		cfg.LineSize = 4096
	}
	per := uint64(cfg.LineSize / 8)
	lines := (elems + per - 1) / per
	linesPerNS := (lines + uint64(nns) - 1) / uint64(nns)
	r := &rig{n: elems, lines: lines}
	var nss []nvme.Namespace
	for i := 0; i < nns; i++ {
		lba := min(4096, cfg.LineSize)
		ns, err := nvme.NewMemoryNamespace(lba, (linesPerNS+1)*uint64(cfg.LineSize)/uint64(lba)+1)
		if err != nil {
			t.Fatal(err)
		}
		r.ns = append(r.ns, ns)
		if wrap != nil {
			nss = append(nss, wrap(ns))
		} else {
			nss = append(nss, ns)
		}
	}
	// element i: line l = i/per on member l%nns at line 1 + l/nns (line 0 left unused)
	for i := uint64(0); i < elems; i++ {
		off := r.offset(i, uint64(cfg.LineSize), nns)
		binary.LittleEndian.PutUint64(r.ns[r.member(i, uint64(cfg.LineSize), nns)].Bytes()[off:], kernels.Pattern64(seed, i))
	}
	e, err := New(cfg, nss)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	stripe := make([]StripeMember, nns)
	for m := range stripe {
		stripe[m] = StripeMember{Namespace: m, StartLine: 1}
	}
	r.e = e
	if r.arr, err = e.Bind(ArraySpec{Name: "test", ElemSize: 8, Len: elems, Stripe: stripe}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) member(i, lineSize uint64, nns int) int { return int((i / (lineSize / 8)) % uint64(nns)) }

func (r *rig) offset(i, lineSize uint64, nns int) uint64 {
	per := lineSize / 8
	l := i / per
	return (1+l/uint64(nns))*lineSize + (i%per)*8
}

func (r *rig) stored(i uint64) uint64 {
	ls := uint64(r.e.cfg.LineSize)
	nns := len(r.ns)
	return binary.LittleEndian.Uint64(r.ns[r.member(i, ls, nns)].Bytes()[r.offset(i, ls, nns):])
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fillRoutes are the fill routes the data-path tests run under.
var fillRoutes = []FillRoute{RouteAuto, RouteBounce, RouteCopyEngine}

// noCopier is FillCopierWarps without a fill copier: lanes copy alone.
const noCopier = -1

func TestGPUGatherSmallCache(t *testing.T) {
	type variant struct {
		route  FillRoute
		copier int
		mirror bool
	}
	var variants []variant
	for _, route := range fillRoutes {
		variants = append(variants, variant{route, 0, false})
	}
	variants = append(variants, variant{RouteBounce, noCopier, false}, variant{RouteBounce, 0, true}, variant{RouteCopyEngine, 0, true})
	for _, v := range variants {
		route := v.route
		name := route.String()
		if v.copier == noCopier {
			name += "-no-copier"
		}
		if v.mirror {
			name += "-mirror"
		}
		t.Run(name, func(t *testing.T) {
			// 32 MiB of data through a 1 MiB cache: constant eviction.
			// With -short (the GPU test script's sanitizer runs, which
			// slow every access by two orders of magnitude) the sizes and
			// the patience change, not what is checked: 4 MiB of data, 64 K
			// lookups, device waits bounded at a minute.
			elems, lookups, timeout := uint64(4<<20), 1<<20, 10*time.Second
			if testing.Short() {
				elems, lookups, timeout = 1<<19, 1<<16, time.Minute
			}
			r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 8, QueueDepth: 256, Timeout: timeout, FillRoute: route, FillCopierWarps: v.copier, StagingMirror: v.mirror}, 2, elems, 7)
			ctx := ctxT(t)
			rng := rand.New(rand.NewPCG(1, 2))
			idx := make([]uint64, lookups)
			for i := range idx {
				idx[i] = rng.Uint64N(r.n)
			}
			out := make([]byte, len(idx)*8)
			for round := 0; round < 2; round++ {
				if err := r.arr.Gather(ctx, idx, out); err != nil {
					t.Fatal(err)
				}
				for i, j := range idx {
					if got, want := binary.LittleEndian.Uint64(out[i*8:]), kernels.Pattern64(7, j); got != want {
						t.Fatalf("round %d: gather[%d] = element %d = %#x, want %#x", round, i, j, got, want)
					}
				}
			}
			st, err := r.e.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("stats: %+v", st)
			if st.Fills == 0 || st.Commands < st.Fills {
				t.Errorf("stats show no fills: %+v", st)
			}
			// Random lookups leave most lanes alone on their line: on the
			// bounce route the fill copier must have done copies, and
			// none without it.
			switch {
			case route != RouteCopyEngine && v.copier != noCopier && st.Offloads == 0:
				t.Errorf("the fill copier did no copy: %+v", st)
			case (route == RouteCopyEngine || v.copier == noCopier) && st.Offloads != 0:
				t.Errorf("%d copies offloaded without a fill copier on this route: %+v", st.Offloads, st)
			}
			// The lookups through eight queues keep them busy: with
			// a staging mirror the staging route must have taken some
			// lines from it, and none without one (or on the copy-engine
			// route, whose Reads name the line itself).
			ts := r.e.TargetStats()
			t.Logf("target: %d reads, %d from the mirror in %d copies, %d mirror failures", ts.Reads, ts.Mirrored, ts.MirrorCopies, ts.MirrorFailures)
			switch {
			case ts.MirrorFailures != 0:
				t.Errorf("%d mirror copies failed", ts.MirrorFailures)
			case route != RouteCopyEngine && v.mirror && ts.Mirrored == 0:
				t.Error("no Read completed from the staging mirror")
			case (route == RouteCopyEngine || !v.mirror) && ts.Mirrored != 0:
				t.Errorf("%d Reads completed from the mirror on a route that has none", ts.Mirrored)
			}
			// Sequential range and a reduction.
			buf := make([]byte, r.n*8)
			if err := r.arr.ReadRange(ctx, 0, buf); err != nil {
				t.Fatal(err)
			}
			var sum uint64
			for i := uint64(0); i < r.n; i++ {
				v := binary.LittleEndian.Uint64(buf[i*8:])
				if want := kernels.Pattern64(7, i); v != want {
					t.Fatalf("range[%d] = %#x, want %#x", i, v, want)
				}
				sum += v
			}
			got, _, err := r.arr.Sum(ctx, SumU64, 0, r.n)
			if err != nil {
				t.Fatal(err)
			}
			if got != sum {
				t.Fatalf("sum = %#x, want %#x", got, sum)
			}
			checkGenerations(t, r.e)
		})
	}
}

func TestGPUScatterFlush(t *testing.T) {
	for _, tc := range []struct {
		lineSize int
		route    FillRoute
		copier   int
	}{{512, RouteAuto, 0}, {4096, RouteAuto, 0}, {16384, RouteAuto, 0}, {4096, RouteBounce, 0}, {16384, RouteBounce, 0},
		{4096, RouteBounce, noCopier}, {4096, RouteCopyEngine, 0}, {16384, RouteCopyEngine, 0}} {
		lineSize := tc.lineSize
		// With -short (sanitizer runs; see TestGPUGatherSmallCache) a
		// tenth of the writes a round, and device waits bounded at a
		// minute: under the tools, 200 K writers crowding 64 ways held
		// them past the 10 s bound.
		writes, timeout := 200000, 10*time.Second
		if testing.Short() {
			writes, timeout = 20000, time.Minute
		}
		// 64 lines of 2 ways: far smaller than the data, so every round evicts.
		r := newRig(t, Config{LineSize: lineSize, CacheBytes: 64 * uint64(lineSize), Ways: 2, QueuePairs: 4, QueueDepth: 64, Timeout: timeout, FillRoute: tc.route, FillCopierWarps: tc.copier}, 3, 1<<20, 9)
		ctx := ctxT(t)
		oracle := make([]uint64, r.n)
		for i := range oracle {
			oracle[i] = kernels.Pattern64(9, uint64(i))
		}
		rng := rand.New(rand.NewPCG(3, uint64(lineSize)))
		for round := 0; round < 3; round++ {
			// distinct indices, many sharing lines: concurrent writers of one line
			perm := rng.Perm(int(r.n))[:writes]
			idx := make([]uint64, len(perm))
			vals := make([]byte, len(perm)*8)
			for k, p := range perm {
				idx[k] = uint64(p)
				v := rng.Uint64() | 1
				oracle[p] = v
				binary.LittleEndian.PutUint64(vals[k*8:], v)
			}
			if err := r.arr.Scatter(ctx, idx, vals); err != nil {
				t.Fatalf("line %d %s round %d: %v", lineSize, tc.route, round, err)
			}
			// read back through the cache
			out := make([]byte, len(idx)*8)
			if err := r.arr.Gather(ctx, idx, out); err != nil {
				t.Fatal(err)
			}
			for k, j := range idx {
				if got := binary.LittleEndian.Uint64(out[k*8:]); got != oracle[j] {
					t.Fatalf("line %d %s round %d: element %d = %#x, want %#x", lineSize, tc.route, round, j, got, oracle[j])
				}
			}
		}
		if err := r.e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		dirty, err := r.e.DirtyLines(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if dirty != 0 {
			t.Errorf("line %d %s: %d dirty lines after Flush", lineSize, tc.route, dirty)
		}
		checkGenerations(t, r.e)
		for i := uint64(0); i < r.n; i++ {
			if got := r.stored(i); got != oracle[i] {
				t.Fatalf("line %d %s: after Flush, storage element %d = %#x, want %#x", lineSize, tc.route, i, got, oracle[i])
			}
		}
	}
}

func TestGPUOutOfRange(t *testing.T) {
	r := newRig(t, Config{CacheBytes: 1 << 20}, 1, 1000, 1)
	ctx := ctxT(t)
	out := make([]byte, 16)
	err := r.arr.Gather(ctx, []uint64{5, 1000}, out)
	if !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("gather past the end: %v, want ErrOutOfRange", err)
	}
	var de *DeviceError
	if !errors.As(err, &de) || de.Index != 1000 {
		t.Fatalf("error %v does not name index 1000", err)
	}
	if err := r.arr.Gather(ctx, []uint64{5, 999}, out); err != nil {
		t.Fatalf("gather after an out-of-range launch: %v", err)
	}
	if err := r.arr.ReadRange(ctx, 999, out); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read range past the end: %v, want ErrOutOfRange", err)
	}
	// ReadRangeTo stages elements in GPU memory: the last two, read back.
	dst, err := r.e.Context().Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	if err := r.arr.ReadRangeTo(ctx, 998, 2, dst.Ptr()); err != nil {
		t.Fatalf("read range to GPU memory: %v", err)
	}
	if err := dst.Read(0, out); err != nil {
		t.Fatal(err)
	}
	for i, want := range []uint64{r.stored(998), r.stored(999)} {
		if got := binary.LittleEndian.Uint64(out[8*i:]); got != want {
			t.Errorf("read range to GPU memory: element %d = %#x, want %#x", 998+i, got, want)
		}
	}
}

// newFaultRig is the engine of the fault tests, a 1 MiB cache with four
// queue pairs of 64 entries and a 500 ms timeout over 256 Ki elements, and
// the 4096 indices they gather.
func newFaultRig(t *testing.T) (*rig, []uint64) {
	r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: 500 * time.Millisecond}, 1, 1<<18, 5)
	idx := make([]uint64, 4096)
	for i := range idx {
		idx[i] = uint64(i) * 61 % r.n
	}
	return r, idx
}

// gatherRight gathers idx after a failure (what) and fails the test unless
// the gather succeeds with every element right.
func (r *rig) gatherRight(t *testing.T, ctx context.Context, idx []uint64, what string) {
	t.Helper()
	out := make([]byte, len(idx)*8)
	if err := r.arr.Gather(ctx, idx, out); err != nil {
		t.Fatalf("%s: engine not usable afterwards: %v", what, err)
	}
	for i, j := range idx {
		if got, want := binary.LittleEndian.Uint64(out[i*8:]), r.stored(j); got != want {
			t.Fatalf("%s: element %d = %#x after recovery, want %#x", what, j, got, want)
		}
	}
}

func TestGPUFaults(t *testing.T) {
	r, idx := newFaultRig(t)
	ctx := ctxT(t)
	out := make([]byte, len(idx)*8)
	check := func(what string) {
		t.Helper()
		r.gatherRight(t, ctx, idx, what)
	}

	// A failing status reaches Go as the NVMe status.
	var fired atomic.Int64
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && fired.Add(1) == 10 {
			return nvme.Fault{Kind: nvme.FaultFail, Status: nvme.StatusUnrecoveredRead}
		}
		return nvme.Fault{}
	})
	err := r.arr.Gather(ctx, idx, out)
	if !errors.Is(err, nvme.ErrUnrecoveredRead) {
		t.Fatalf("injected read error: got %v, want nvme.ErrUnrecoveredRead", err)
	}
	t.Logf("status error: %v", err)
	r.e.SetFaultHook(nil)
	check("failed status")

	// The same through ReadRange, whose warps hold a line and copy it.
	fired.Store(0)
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && fired.Add(1) == 10 {
			return nvme.Fault{Kind: nvme.FaultFail, Status: nvme.StatusUnrecoveredRead}
		}
		return nvme.Fault{}
	})
	if err := r.e.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}
	err = r.arr.ReadRange(ctx, 0, make([]byte, r.n*8))
	if !errors.Is(err, nvme.ErrUnrecoveredRead) {
		t.Fatalf("injected read error in a range read: got %v, want nvme.ErrUnrecoveredRead", err)
	}
	t.Logf("status error in a range read: %v", err)
	r.e.SetFaultHook(nil)
	check("failed status in a range read")

	// A dropped command becomes a timeout within the bound.
	fired.Store(0)
	var droppedAt atomic.Pointer[nvme.Command]
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && fired.Add(1) == 3 {
			cc := *c
			droppedAt.Store(&cc)
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	})
	if err := r.e.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = r.arr.Gather(ctx, idx, out)
	took := time.Since(start)
	if !errors.Is(err, vq.ErrTimeout) {
		t.Fatalf("dropped command: got %v, want vq.ErrTimeout", err)
	}
	if took > 10*time.Second {
		t.Errorf("dropped command took %v to report, bound 500ms per wait", took)
	}
	// The error names the dropped Read's wait for its completion, at one
	// of its lines, although waits for the lines it fills (and for the
	// lines its warp fills with it), and for Reads issued behind a ticket
	// stuck on its slot and so never submitted, may have given up first:
	// the record keeps the failure most likely to be the cause.
	dropped := droppedAt.Load()
	if dropped == nil {
		t.Fatal("no Read was dropped")
	}
	if de := (*DeviceError)(nil); !errors.As(err, &de) || de.Wait != WaitCompletion ||
		de.NSID != dropped.NSID || de.LBA < dropped.SLBA() || de.LBA >= dropped.SLBA()+uint64(dropped.Blocks()) {
		t.Errorf("dropped command (nsid %d lba %d, %d blocks): %v: want a DeviceError naming the wait for its completion, at one of its lines",
			dropped.NSID, dropped.SLBA(), dropped.Blocks(), err)
	}
	t.Logf("drop: %v after %v", err, took)
	r.e.SetFaultHook(nil)
	check("dropped command")

	// A stalled namespace (every read delayed past the bound) times out too.
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead {
			return nvme.Fault{Delay: 2 * time.Second}
		}
		return nvme.Fault{}
	})
	if err := r.e.Invalidate(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	err = r.arr.Gather(ctx, idx, out)
	if !errors.Is(err, vq.ErrTimeout) {
		t.Fatalf("stalled namespace: got %v, want vq.ErrTimeout", err)
	}
	if de := (*DeviceError)(nil); !errors.As(err, &de) || de.Wait != WaitCompletion {
		t.Errorf("stalled namespace: %v: want a DeviceError naming a Read's wait for its completion", err)
	}
	t.Logf("stall: %v after %v", err, time.Since(start))
	r.e.SetFaultHook(nil)
	check("stalled namespace")
	checkGenerations(t, r.e)
}

// hangingReads holds every ReadAt while hang is set, until release is
// closed.
type hangingReads struct {
	nvme.Namespace
	hang    *atomic.Bool
	release chan struct{}
}

func (h hangingReads) ReadAt(p []byte, off int64) (int, error) {
	if h.hang.Load() {
		<-h.release
	}
	return h.Namespace.ReadAt(p, off)
}

// TestGPUCloseWithHangingNamespace: a namespace whose Reads never return
// holds neither a launch (it times out) nor Close, which returns within
// about the engine's Timeout saying commands still run; the engine is freed
// once they return.
func TestGPUCloseWithHangingNamespace(t *testing.T) {
	var hang atomic.Bool
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	const timeout = 300 * time.Millisecond
	r := newRigWrapped(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: timeout}, 1, 1<<16, 4,
		func(m *nvme.MemoryNamespace) nvme.Namespace {
			return hangingReads{Namespace: m, hang: &hang, release: release}
		})
	ctx := ctxT(t)
	idx := []uint64{1, 1000, 5000, 60000}
	hang.Store(true)
	if err := r.arr.Gather(ctx, idx, make([]byte, len(idx)*8)); !errors.Is(err, vq.ErrTimeout) {
		t.Fatalf("gather with every Read hanging: %v, want vq.ErrTimeout", err)
	}
	start := time.Now()
	err := r.e.Close()
	took := time.Since(start)
	if !errors.Is(err, nvme.ErrStillRunning) {
		t.Fatalf("close with Reads hanging: %v, want nvme.ErrStillRunning", err)
	}
	if took > timeout+5*time.Second {
		t.Fatalf("close took %v with a %v timeout", took, timeout)
	}
	t.Logf("close: %v after %v", err, took)
	select {
	case <-r.e.freed:
		t.Fatal("engine freed while its Reads still run")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-r.e.freed:
	case <-time.After(30 * time.Second):
		t.Fatal("engine not freed 30s after the Reads returned")
	}
	if err := r.e.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestGPUStaleFillFailure puts the way of one line in the state a failed
// fill of an earlier launch leaves (the line's tag at an odd generation,
// StatusFillFailed, neither VALID nor BUSY), with BUSY set on top, as a
// claimer of another line sets it before it finds the way referenced and
// clears it again. A Gather of an element of that line then takes its
// reference and waits for BUSY; the test clears BUSY while the kernel
// waits. The element must come back right: the failure was the earlier
// launch's, which this one never recorded, so returning without the line
// (as the device code once did) handed back T{} with no error — the wrong
// value a Gather returned once after a stalled namespace.
func TestGPUStaleFillFailure(t *testing.T) {
	r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: 3 * time.Second}, 1, 1<<16, 9)
	ctx := ctxT(t)
	const x = 12345
	out := make([]byte, 8)
	if err := r.arr.Gather(ctx, []uint64{x}, out); err != nil {
		t.Fatal(err)
	}
	c := r.e.caches[0]
	K, N := uint32(c.ways), uint32(c.sets)
	buf := make([]byte, gpucache.RegionBytes(N, K))
	if err := c.meta.Read(0, buf); err != nil {
		t.Fatal(err)
	}
	tags, ways := gpucache.TagsOffset(N, K), gpucache.WaysOffset(N, K)
	tag := uint64(1 + x*8/uint64(c.lineSize)) // namespace 0, StartLine 1
	way := ^uint64(0)
	for g := uint64(0); g < uint64(N)*uint64(K); g++ {
		if binary.LittleEndian.Uint64(buf[tags+g*gpucache.TagBytes:])&gpucache.TagMask == tag {
			way = g
		}
	}
	if way == ^uint64(0) {
		t.Fatalf("line %#x not resident after a gather of it", tag)
	}
	word := binary.LittleEndian.Uint64(buf[tags+way*gpucache.TagBytes:]) &^ gpucache.TagWordClock
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], word+1<<gpucache.TagWordGenShift) // odd: claimed, never published
	if err := c.meta.Write(tags+way*gpucache.TagBytes, b[:]); err != nil {
		t.Fatal(err)
	}
	stateAt := ways + way*gpucache.WayStride + gpucache.WayStateOffset
	binary.LittleEndian.PutUint32(b[:], gpucache.StateBusy)
	binary.LittleEndian.PutUint32(b[4:], gpucache.StatusFillFailed)
	if err := c.meta.Write(stateAt, b[:]); err != nil { // state, then status
		t.Fatal(err)
	}

	errc := make(chan error, 1)
	got := make([]byte, 8)
	go func() { errc <- r.arr.Gather(ctx, []uint64{x}, got) }()
	// The waiter holds one reference on the BUSY way; clear BUSY under
	// it. The engine launches on a stream that does not synchronise with
	// these copies, so they run beside the kernel.
	waited := false
	for start := time.Now(); time.Since(start) < 2*time.Second && !waited; {
		if err := c.meta.Read(stateAt, b[:4]); err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint32(b[:4]) == gpucache.StateBusy|1 {
			binary.LittleEndian.PutUint32(b[:4], 1)
			if err := c.meta.Write(stateAt, b[:4]); err != nil {
				t.Fatal(err)
			}
			waited = true
		}
	}
	err := <-errc
	if !waited {
		// A tool that serialises copies with kernels keeps the state
		// from being seen while the kernel runs.
		t.Skipf("the waiter was not seen waiting while its kernel ran (gather: %v)", err)
	}
	if err != nil {
		t.Fatalf("gather after an earlier launch's failed fill: %v", err)
	}
	if v := binary.LittleEndian.Uint64(got); v != r.stored(x) {
		t.Fatalf("element %d = %#x with no error, want %#x", x, v, r.stored(x))
	}
	checkGenerations(t, r.e)
}

// TestGPUFaultsFillAhead runs faults through a ReadRange whose warps fill
// lines ahead of their reads (bam::array::prefetch): 16 Mi elements through
// 512 MiB of 4 KiB lines, so that the launch's 16896 warps take whole lines
// and half the cache holds three lines for each (kernels/array.cu reads
// bam::fill_ahead = 3 ahead). A failed status and a dropped command among
// the fills reach Go as errors, and the next read returns every element.
func TestGPUFaultsFillAhead(t *testing.T) {
	// With read-ahead pairs (the default) a warp's consecutive lines go
	// out as Reads of two lines (fill_runs), whose failures fail both.
	for _, pairs := range []int{0, -1} {
		t.Run(fmt.Sprintf("read-ahead-pairs=%d", pairs), func(t *testing.T) { testFaultsFillAhead(t, pairs) })
	}
}

func testFaultsFillAhead(t *testing.T, pairs int) {
	const seed = 7
	r := newRig(t, Config{CacheBytes: 512 << 20, Timeout: 500 * time.Millisecond, ReadAheadQueuePairs: pairs}, 1, 16<<20, seed)
	ctx := ctxT(t)
	buf := make([]byte, r.n*8)
	check := func(what string) {
		t.Helper()
		if err := r.e.Invalidate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.arr.ReadRange(ctx, 0, buf); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for i := uint64(0); i < r.n; i++ {
			if got := binary.LittleEndian.Uint64(buf[i*8:]); got != kernels.Pattern64(seed, i) {
				t.Fatalf("%s: element %d = %#x, want %#x", what, i, got, kernels.Pattern64(seed, i))
			}
		}
	}
	check("cold read")
	for _, c := range []struct {
		name  string
		fault nvme.Fault
		want  error
	}{
		{"failed status", nvme.Fault{Kind: nvme.FaultFail, Status: nvme.StatusUnrecoveredRead}, nvme.ErrUnrecoveredRead},
		{"dropped command", nvme.Fault{Kind: nvme.FaultDrop}, vq.ErrTimeout},
	} {
		var fired atomic.Int64
		r.e.SetFaultHook(func(q uint16, cmd *nvme.Command) nvme.Fault {
			if cmd.Opcode == nvme.OpRead && fired.Add(1) == 1000 {
				return c.fault
			}
			return nvme.Fault{}
		})
		if err := r.e.Invalidate(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := r.arr.ReadRange(ctx, 0, buf)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: got %v, want %v", c.name, err, c.want)
		}
		t.Logf("%s: %v after %v", c.name, err, time.Since(start))
		r.e.SetFaultHook(nil)
		check("after " + c.name)
	}
	checkGenerations(t, r.e)
}

// TestGPURangeRuns reads an array of one namespace with ReadRange, whose
// warps fill their next lines at once: with read-ahead pairs of two- and
// four-line slots those go out as Reads of several lines (fewer Reads than
// fills), without them one Read a line. Every element comes back
// either way, and so do the elements written between the two passes,
// whose lines the second pass's fills evict dirty (data twice the cache;
// with -short, for the sanitizers, less data than the cache). The cache
// is large enough that half of it holds two lines for each of the launch's
// warps (16896 on an H200), so that each warp fills two lines ahead.
func TestGPURangeRuns(t *testing.T) {
	const seed = 11
	const cacheBytes = 320 << 20
	elems := uint64(2*cacheBytes) / 8
	if testing.Short() {
		elems = 16 << 20
	}
	for _, c := range []struct {
		pairs, readBytes int
		merged           bool
	}{
		{0, 0, true}, {0, 16 << 10, true}, {-1, 0, false},
	} {
		t.Run(fmt.Sprintf("pairs=%d,read=%d", c.pairs, c.readBytes), func(t *testing.T) {
			r := newRig(t, Config{CacheBytes: cacheBytes, ReadAheadQueuePairs: c.pairs, ReadAheadReadBytes: c.readBytes, Timeout: time.Minute}, 1, elems, seed)
			ctx := ctxT(t)
			want := make([]uint64, r.n)
			for i := range want {
				want[i] = kernels.Pattern64(seed, uint64(i))
			}
			buf := make([]byte, r.n*8)
			for round := 0; round < 2; round++ {
				if round == 0 {
					if err := r.e.Invalidate(ctx); err != nil {
						t.Fatal(err)
					}
				}
				before, err := r.e.Stats()
				if err != nil {
					t.Fatal(err)
				}
				if err := r.arr.ReadRange(ctx, 0, buf); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				after, err := r.e.Stats()
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got := binary.LittleEndian.Uint64(buf[i*8:]); got != want[i] {
						t.Fatalf("round %d: element %d = %#x, want %#x", round, i, got, want[i])
					}
				}
				fills, reads := after.Fills-before.Fills, after.Target.Reads-before.Target.Reads
				t.Logf("round %d: %d fills, %d Reads, %d commands", round, fills, reads, after.Commands-before.Commands)
				// All lines but those the cache holds (none, cold).
				if held := uint64(round) * min(r.lines, cacheBytes/4096); fills+held < r.lines {
					t.Fatalf("round %d: %d fills for a read of %d lines", round, fills, r.lines)
				}
				if fills > 0 && c.merged != (reads < fills) { // -short's second pass: all hits
					t.Fatalf("round %d: %d Reads for %d fills, merged %v", round, reads, fills, c.merged)
				}
				// Rewrite a stretch in the middle: the next round's
				// fills evict those lines dirty.
				lo := r.n / 3
				part := make([]byte, (r.n/8)*8)
				for i := uint64(0); i < r.n/8; i++ {
					want[lo+i] = want[lo+i]*5 + uint64(round)
					binary.LittleEndian.PutUint64(part[i*8:], want[lo+i])
				}
				if err := r.arr.WriteRange(ctx, lo, part); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A launch whose context ends stops at once: the kernel's waits read the
// abort word with their deadlines, so a stalled namespace holds the call
// for neither the timeout nor the stall. A stopped write-back leaves its
// lines dirty, and the engine serves the next call.
func TestGPUContextStopsKernel(t *testing.T) {
	const timeout = 20 * time.Second
	r := newRig(t, Config{CacheBytes: 1 << 20, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: timeout}, 1, 1<<18, 5)
	ctx := ctxT(t)
	idx := make([]uint64, 4096)
	for i := range idx {
		idx[i] = uint64(i) * 61 % r.n
	}
	out := make([]byte, len(idx)*8)
	stall := func(op nvme.Opcode) {
		r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
			if c.Opcode == op {
				return nvme.Fault{Delay: time.Minute}
			}
			return nvme.Fault{}
		})
	}
	const quick = 5 * time.Second // well under the timeout and the stall
	stopped := func(what string, want error, call func(context.Context) error, cctx context.Context) {
		t.Helper()
		start := time.Now()
		err := call(cctx)
		took := time.Since(start)
		if !errors.Is(err, want) {
			t.Fatalf("%s: got %v, want %v", what, err, want)
		}
		if took > quick {
			t.Errorf("%s: returned after %v; the wait bound is %v", what, took, timeout)
		}
		t.Logf("%s: %v after %v", what, err, took)
	}
	gather := func(c context.Context) error { return r.arr.Gather(c, idx, out) }

	stall(nvme.OpRead)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	stopped("gather, cancelled", context.Canceled, gather, cctx)
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	stopped("gather, past its deadline", context.DeadlineExceeded, gather, dctx)
	dcancel()
	r.e.SetFaultHook(nil)
	if err := gather(ctx); err != nil {
		t.Fatalf("gather after the stops: %v", err)
	}
	for i, j := range idx {
		if got := binary.LittleEndian.Uint64(out[i*8:]); got != kernels.Pattern64(5, j) {
			t.Fatalf("element %d wrong after the stops", j)
		}
	}

	// Two dirty lines whose write-back stalls: Flush stops, the lines stay
	// dirty, and the next Flush writes them.
	widx := make([]uint64, 1000)
	vals := make([]byte, 8*len(widx))
	for i := range widx {
		widx[i] = uint64(i)
		binary.LittleEndian.PutUint64(vals[8*i:], ^kernels.Pattern64(5, uint64(i)))
	}
	if err := r.arr.Scatter(ctx, widx, vals); err != nil {
		t.Fatal(err)
	}
	stall(nvme.OpWrite)
	cctx, cancel = context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	stopped("flush, cancelled", context.Canceled, r.e.Flush, cctx)
	r.e.SetFaultHook(nil)
	dirty, err := r.e.DirtyLines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dirty == 0 {
		t.Fatal("no dirty lines left after a stopped flush")
	}
	if err := r.e.Flush(ctx); err != nil {
		t.Fatalf("flush after a stopped flush: %v", err)
	}
	for _, i := range widx {
		if got, want := r.stored(i), ^kernels.Pattern64(5, i); got != want {
			t.Fatalf("storage element %d = %#x after flush, want %#x", i, got, want)
		}
	}
	checkGenerations(t, r.e)
}

func TestGPUCacheTooSmall(t *testing.T) {
	// One set of one way, but the engine must still serve a whole warp
	// touching many lines (each group holds its line only briefly).
	r := newRig(t, Config{CacheBytes: 4096, Ways: 1, QueuePairs: 2, QueueDepth: 16, Timeout: 5 * time.Second}, 1, 1<<14, 3)
	ctx := ctxT(t)
	idx := make([]uint64, 2048)
	for i := range idx {
		idx[i] = uint64(i*37) % r.n
	}
	out := make([]byte, len(idx)*8)
	err := r.arr.Gather(ctx, idx, out)
	if err != nil && !errors.Is(err, gpucache.ErrCacheTooSmall) {
		t.Fatalf("tiny cache: %v", err)
	}
	if err == nil {
		for i, j := range idx {
			if got := binary.LittleEndian.Uint64(out[i*8:]); got != kernels.Pattern64(3, j) {
				t.Fatalf("tiny cache: element %d wrong", j)
			}
		}
	}
}

func TestGPUTinyQueue(t *testing.T) {
	for _, depth := range []int{2, 4, 64} {
		r := newRig(t, Config{CacheBytes: 64 << 10, Ways: 2, QueuePairs: 1, QueueDepth: depth, Timeout: 5 * time.Second}, 1, 1<<16, 11)
		ctx := ctxT(t)
		// Every command the device builds must name whole, mapped pages:
		// staging slots in host memory, or cache lines (the copy-engine
		// route).
		var bad atomic.Int64
		lines := func(addr uint64, n int) bool {
			return addr%4096 == 0 && addr >= uint64(r.e.caches[0].lineBase) && addr+uint64(n) <= uint64(r.e.caches[0].lineBase)+r.e.caches[0].lineBytes
		}
		r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
			segs, st := nvme.WalkPRP(r.e.dma, c.PRP1, c.PRP2, int(c.Blocks())*4096, 4096)
			for _, sg := range segs {
				if _, ok := r.e.dma.Bytes(sg.Addr, sg.Len); !(ok || lines(sg.Addr, sg.Len)) || !st.Success() {
					if bad.Add(1) <= 3 {
						t.Errorf("command %+v: segments %+v (%v) not mapped host memory or whole cache lines", *c, segs, st)
					}
				}
			}
			return nvme.Fault{}
		})
		for _, n := range []int{1, 32, 64, 4096} {
			idx := make([]uint64, n)
			for i := range idx {
				idx[i] = uint64(i*512+i) % r.n
			}
			out := make([]byte, n*8)
			err := r.arr.Gather(ctx, idx, out)
			if err != nil {
				t.Fatal(err)
			}
			for i, j := range idx {
				if got := binary.LittleEndian.Uint64(out[i*8:]); got != kernels.Pattern64(11, j) {
					t.Fatalf("depth %d n %d: element %d = %#x, want %#x", depth, n, j, got, kernels.Pattern64(11, j))
				}
			}
		}
	}
}

// TestGPUFillCopier drives the fill copier in both directions on a small
// data set (fast enough for compute-sanitizer): random gathers leave lanes
// alone on their lines (fills through the copier), random scatters into a
// cache far smaller than the data evict dirty lines (write-backs through
// the copier), and Flush writes the rest back. The copier must have done
// copies, and no post may have found its ring slot taken.
func TestGPUFillCopier(t *testing.T) {
	r := newRig(t, Config{CacheBytes: 256 << 10, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: 10 * time.Second}, 2, 1<<19, 21)
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(5, 6))
	oracle := make([]uint64, r.n)
	for i := range oracle {
		oracle[i] = kernels.Pattern64(21, uint64(i))
	}
	idx := make([]uint64, 1<<14)
	for round := 0; round < 2; round++ {
		for i := range idx {
			idx[i] = rng.Uint64N(r.n)
		}
		out := make([]byte, len(idx)*8)
		if err := r.arr.Gather(ctx, idx, out); err != nil {
			t.Fatal(err)
		}
		for i, j := range idx {
			if got := binary.LittleEndian.Uint64(out[i*8:]); got != oracle[j] {
				t.Fatalf("round %d: element %d = %#x, want %#x", round, j, got, oracle[j])
			}
		}
		// Distinct indices: which of two writes of one element in a
		// launch lands is not defined.
		vals := make([]byte, len(idx)*8)
		for i, p := range rng.Perm(int(r.n))[:len(idx)] {
			idx[i] = uint64(p)
			v := rng.Uint64() | 1
			binary.LittleEndian.PutUint64(vals[i*8:], v)
			oracle[p] = v
		}
		if err := r.arr.Scatter(ctx, idx, vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < r.n; i++ {
		if got := r.stored(i); got != oracle[i] {
			t.Fatalf("after Flush, storage element %d = %#x, want %#x", i, got, oracle[i])
		}
	}
	st, err := r.e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.Offloads == 0 || st.WriteBacks == 0 {
		t.Errorf("the fill copier did %d copies for %d fills and %d write-backs", st.Offloads, st.Fills, st.WriteBacks)
	}
	if st.CopierWaited != 0 {
		t.Errorf("%d posts found their ring slot taken", st.CopierWaited)
	}
}

// checkGenerations reads the cache metadata back once the engine is idle
// and checks what reads without references rely on: no way is BUSY or
// referenced, and a way that holds a tag holds its data (VALID) exactly
// when its generation is even (gpucache/doc.go, Reads without references).
func checkGenerations(t *testing.T, e *Engine) {
	t.Helper()
	for _, c := range e.caches {
		checkCacheGenerations(t, c)
	}
}

func checkCacheGenerations(t *testing.T, c *lineCache) {
	t.Helper()
	K := uint32(c.ways)
	N := uint32(c.sets)
	buf := make([]byte, gpucache.RegionBytes(N, K))
	if err := c.meta.Read(0, buf); err != nil {
		t.Fatal(err)
	}
	tags, ways := gpucache.TagsOffset(N, K), gpucache.WaysOffset(N, K)
	bad := 0
	for g := uint64(0); g < uint64(N)*uint64(K); g++ {
		word := binary.LittleEndian.Uint64(buf[tags+g*gpucache.TagBytes:])
		tag, gen := word&gpucache.TagMask, word>>gpucache.TagWordGenShift
		rec := buf[ways+g*gpucache.WayStride:]
		state := binary.LittleEndian.Uint32(rec[gpucache.WayStateOffset:])
		valid := state&gpucache.StateValid != 0
		switch {
		case state&(gpucache.StateBusy|gpucache.StateRefMask) != 0:
			t.Errorf("%d-byte lines, way %d: state %#x busy or referenced on an idle engine", c.lineSize, g, state)
		case tag == gpucache.TagMask && valid:
			t.Errorf("way %d: VALID without a tag", g)
		case tag != gpucache.TagMask && valid != (gen%2 == 0):
			t.Errorf("way %d: tag %#x, state %#x, generation %d: VALID and an even generation disagree", g, tag, state, gen)
		default:
			continue
		}
		if bad++; bad == 10 {
			t.Fatal("more ways disagree")
		}
	}
}

// TestGPUMoreCaches binds arrays of one namespace to caches of three line
// sizes, each far smaller than its array and with its own number of queue
// pairs, and checks gathers, scatters and Flush through each, and that
// each cache counts its own fills.
func TestGPUMoreCaches(t *testing.T) {
	cudatest.Device(t)
	ns, err := nvme.NewMemoryNamespace(512, 16<<20/512)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{LineSize: 4096, CacheBytes: 64 << 10, Ways: 2, QueuePairs: 4, QueueDepth: 64, Timeout: 10 * time.Second,
		MoreCaches: []CacheConfig{{LineSize: 512, CacheBytes: 16 << 10, QueuePairs: 1}, {LineSize: 16384, CacheBytes: 256 << 10, QueuePairs: 7}}}, []nvme.Namespace{ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	if _, err := e.Bind(ArraySpec{Name: "x", ElemSize: 8, Len: 1, Stripe: []StripeMember{{}}, LineSize: 1024}); err == nil {
		t.Fatal("bound an array to a cache that does not exist")
	}
	const n = 1 << 18 // 2 MiB of u64 per array
	type col struct {
		line  int
		start uint64 // byte offset in the namespace
		arr   *Array
		want  []uint64
	}
	cols := []*col{{line: 512, start: 1 << 20}, {line: 0, start: 4 << 20}, {line: 16384, start: 8 << 20}}
	for k, c := range cols {
		c.want = make([]uint64, n)
		for i := range c.want {
			c.want[i] = kernels.Pattern64(uint64(k), uint64(i))
			binary.LittleEndian.PutUint64(ns.Bytes()[c.start+uint64(i)*8:], c.want[i])
		}
		ls := uint64(c.line)
		if ls == 0 {
			ls = 4096
		}
		if c.arr, err = e.Bind(ArraySpec{Name: fmt.Sprint("col", k), ElemSize: 8, Len: n,
			Stripe: []StripeMember{{StartLine: c.start / ls}}, LineSize: c.line}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 2; round++ {
		for k, c := range cols {
			perm := rng.Perm(n)[:20000]
			idx := make([]uint64, len(perm))
			vals := make([]byte, 8*len(perm))
			for j, p := range perm {
				idx[j] = uint64(p)
				c.want[p] = rng.Uint64()
				binary.LittleEndian.PutUint64(vals[8*j:], c.want[p])
			}
			if err := c.arr.Scatter(ctx, idx, vals); err != nil {
				t.Fatalf("col %d round %d: %v", k, round, err)
			}
		}
		for k, c := range cols {
			buf := make([]byte, 8*n)
			if err := c.arr.ReadRange(ctx, 0, buf); err != nil {
				t.Fatal(err)
			}
			for i := range c.want {
				if got := binary.LittleEndian.Uint64(buf[8*i:]); got != c.want[i] {
					t.Fatalf("col %d (%d-byte lines) round %d: element %d = %#x, want %#x", k, c.line, round, i, got, c.want[i])
				}
			}
		}
	}
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if dirty, err := e.DirtyLines(ctx); err != nil || dirty != 0 {
		t.Fatalf("%d dirty lines after Flush (%v)", dirty, err)
	}
	checkGenerations(t, e)
	for k, c := range cols {
		for i := range c.want {
			if got := binary.LittleEndian.Uint64(ns.Bytes()[c.start+uint64(i)*8:]); got != c.want[i] {
				t.Fatalf("col %d: after Flush, storage element %d = %#x, want %#x", k, i, got, c.want[i])
			}
		}
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var filled uint64
	for i, cs := range st.Caches {
		t.Logf("cache %d: %+v", i, cs)
		if cs.Fills == 0 || cs.WriteBacks == 0 || cs.FilledBytes != cs.Fills*uint64(cs.LineSize) {
			t.Errorf("cache of %d-byte lines: %+v", cs.LineSize, cs)
		}
		filled += cs.FilledBytes
	}
	if len(st.Caches) != 3 || st.Caches[0].LineSize != 4096 || st.Caches[1].LineSize != 512 || st.Caches[2].LineSize != 16384 {
		t.Fatalf("caches %+v", st.Caches)
	}
	if st.FilledBytes != filled || st.Fills != st.Caches[0].Fills+st.Caches[1].Fills+st.Caches[2].Fills {
		t.Fatalf("totals %+v do not sum the caches", st)
	}
}
