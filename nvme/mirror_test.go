package nvme

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeMirror mirrors a host buffer registered in the DMA space into a Go
// slice. Copy copies at once; the copy reports done only once the gate is
// open (and fails when fail is set).
type fakeMirror struct {
	base   uint64
	region []byte
	mirror []byte

	mu     sync.Mutex
	copies [][2]uint64 // off, n
	lanes  map[int]bool
	gate   chan struct{} // closed: copies complete
	fail   atomic.Bool
	start  atomic.Bool // Copy returns an error
}

func (m *fakeMirror) Region() (uint64, uint64) { return m.base, uint64(len(m.region)) }

func (m *fakeMirror) Copy(lane int, off, n uint64) (MirrorCopy, error) {
	if m.start.Load() {
		return nil, errors.New("fake mirror: copy refused")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.copies = append(m.copies, [2]uint64{off, n})
	m.lanes[lane] = true
	copy(m.mirror[off:off+n], m.region[off:off+n])
	return fakeCopy{m}, nil
}

type fakeCopy struct{ m *fakeMirror }

func (c fakeCopy) Done() (bool, error) {
	select {
	case <-c.m.gate:
	default:
		return false, nil
	}
	if c.m.fail.Load() {
		return true, errors.New("fake mirror: copy failed")
	}
	return true, nil
}

func (m *fakeMirror) copied() [][2]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][2]uint64(nil), m.copies...)
}

// mirrorRig is a Target with a memory namespace of 4 KiB blocks and one
// queue pair whose staging buffer (one 4 KiB slot per entry) is mirrored.
type mirrorRig struct {
	t   *Target
	ns  *MemoryNamespace
	qp  *QueuePairMemory
	c   *simpleClient
	m   *fakeMirror
	ctx context.Context
}

const mirrorSlot = 4096

func newMirrorRig(tb testing.TB, depth uint32, run uint32, gateOpen bool) *mirrorRig {
	tb.Helper()
	ns, err := NewMemoryNamespace(mirrorSlot, 1024)
	if err != nil {
		tb.Fatal(err)
	}
	for lba := uint64(0); lba < 1024; lba++ {
		b := make([]byte, mirrorSlot)
		pattern(b, mirrorSlot, lba, 7)
		if _, err := ns.WriteAt(b, int64(lba*mirrorSlot)); err != nil {
			tb.Fatal(err)
		}
	}
	dma := NewDMASpace()
	tg, err := NewTarget(TargetConfig{Workers: 2, Logger: quietLogger}, dma)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tg.AddNamespace(1, ns); err != nil {
		tb.Fatal(err)
	}
	region := alignedBuffer(int(depth)*mirrorSlot, 4096)
	base, err := dma.RegisterHost(region)
	if err != nil {
		tb.Fatal(err)
	}
	m := &fakeMirror{base: base, region: region, mirror: make([]byte, len(region)), lanes: map[int]bool{}, gate: make(chan struct{})}
	if gateOpen {
		close(m.gate)
	}
	qp, err := NewQueuePairMemory(1, depth)
	if err != nil {
		tb.Fatal(err)
	}
	qp.Mirror, qp.MirrorRun = m, run
	if err := tg.AddQueuePair(qp); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	if err := tg.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tg.Close() })
	return &mirrorRig{t: tg, ns: ns, qp: qp, c: newSimpleClient(qp, tg.Kick), m: m, ctx: ctx}
}

// read builds a Read of LBA lba into slot (and the slot after it for two
// blocks), asking for the mirror when hint is set.
func (r *mirrorRig) read(slot uint32, lba uint64, blocks uint32, hint bool) Command {
	p1 := r.m.base + uint64(slot)*mirrorSlot
	var p2 uint64
	if blocks == 2 {
		p2 = p1 + mirrorSlot
	}
	cmd := ReadWrite(OpRead, 1, lba, blocks, p1, p2)
	cmd.CID = uint16(slot)
	if hint {
		cmd.CDW3 = MirrorHint
	}
	return cmd
}

// submitAll puts the commands and rings the doorbell once, then collects
// their completions by CID.
func (r *mirrorRig) submitAll(tb testing.TB, cmds []Command) map[uint16]Completion {
	tb.Helper()
	for i := range cmds {
		if err := r.c.put(&cmds[i]); err != nil {
			tb.Fatal(err)
		}
	}
	r.c.ring()
	got := map[uint16]Completion{}
	for range cmds {
		e, err := r.c.wait(r.ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if !e.Status.Success() {
			tb.Fatalf("CID %d: status %v", e.CID, e.Status)
		}
		got[e.CID] = e
	}
	return got
}

func TestMirrorCopiesRunsOfHintedReads(t *testing.T) {
	const n = 40 // 160 KiB: one run of 128 KiB, then one of 32 KiB
	r := newMirrorRig(t, 64, 128<<10, true)
	var cmds []Command
	for i := uint32(0); i < n; i++ {
		cmds = append(cmds, r.read(i, uint64(100+3*i), 1, true))
	}
	got := r.submitAll(t, cmds)
	copies := r.m.copied()
	if len(copies) != 1 || copies[0] != [2]uint64{0, 128 << 10} {
		t.Fatalf("copies %v, want one of the first 128 KiB", copies)
	}
	for i := uint32(0); i < n; i++ {
		want := uint32(0)
		if i < 32 {
			want = MirroredDW0
		}
		if got[uint16(i)].DW0 != want {
			t.Errorf("slot %d: DW0 %d, want %d", i, got[uint16(i)].DW0, want)
		}
		// The data is in the region always, and in the mirror when the
		// completion says so.
		exp := make([]byte, mirrorSlot)
		pattern(exp, mirrorSlot, uint64(100+3*i), 7)
		off := i * mirrorSlot
		if !bytes.Equal(r.m.region[off:off+mirrorSlot], exp) {
			t.Errorf("slot %d: region holds the wrong data", i)
		}
		if want == MirroredDW0 && !bytes.Equal(r.m.mirror[off:off+mirrorSlot], exp) {
			t.Errorf("slot %d: mirror holds the wrong data", i)
		}
	}
	st := r.t.Stats()
	if st.Mirrored != 32 || st.MirrorCopies != 1 || st.MirrorFailures != 0 {
		t.Errorf("stats: %d mirrored, %d copies, %d failures; want 32, 1, 0", st.Mirrored, st.MirrorCopies, st.MirrorFailures)
	}
}

func TestMirrorLeavesOthersInTheRegion(t *testing.T) {
	r := newMirrorRig(t, 64, 0, true)
	// Unhinted Reads, a hinted run too short to copy, and two-block Reads
	// continuing each other (contiguous: 8 of them, 64 KiB, one copy).
	var cmds []Command
	for i := uint32(0); i < 8; i++ {
		cmds = append(cmds, r.read(i, uint64(i), 1, false))
	}
	for i := uint32(8); i < 12; i++ {
		cmds = append(cmds, r.read(i, uint64(i), 1, true))
	}
	got := r.submitAll(t, cmds)
	for cid, e := range got {
		if e.DW0 != 0 {
			t.Errorf("CID %d: DW0 %d, want 0", cid, e.DW0)
		}
	}
	if c := r.m.copied(); len(c) != 0 {
		t.Fatalf("copies %v, want none", c)
	}
	cmds = cmds[:0]
	for i := uint32(0); i < 8; i++ {
		c := r.read(16+2*i, uint64(500+2*i), 2, true)
		c.CID = uint16(100 + i)
		cmds = append(cmds, c)
	}
	got = r.submitAll(t, cmds)
	for cid, e := range got {
		if e.DW0 != MirroredDW0 {
			t.Errorf("CID %d: DW0 %d, want mirrored", cid, e.DW0)
		}
	}
	if c := r.m.copied(); len(c) != 1 || c[0] != [2]uint64{16 * mirrorSlot, 64 << 10} {
		t.Fatalf("copies %v, want one of 64 KiB at slot 16", c)
	}
	exp := make([]byte, 16*mirrorSlot)
	pattern(exp, mirrorSlot, 500, 7)
	if !bytes.Equal(r.m.mirror[16*mirrorSlot:32*mirrorSlot], exp) {
		t.Error("mirror holds the wrong data")
	}
}

func TestMirrorFailuresCompleteFromTheRegion(t *testing.T) {
	for _, tc := range []struct {
		name        string
		start, done bool
	}{{"copy refused", true, false}, {"copy failed", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMirrorRig(t, 64, 0, true)
			r.m.start.Store(tc.start)
			r.m.fail.Store(tc.done)
			var cmds []Command
			for i := uint32(0); i < 16; i++ {
				cmds = append(cmds, r.read(i, uint64(i), 1, true))
			}
			for cid, e := range r.submitAll(t, cmds) {
				if e.DW0 != 0 {
					t.Errorf("CID %d: DW0 %d, want 0 after a failed copy", cid, e.DW0)
				}
			}
			if st := r.t.Stats(); st.MirrorFailures != 1 || st.Mirrored != 0 {
				t.Errorf("stats: %d failures, %d mirrored; want 1, 0", st.MirrorFailures, st.Mirrored)
			}
		})
	}
}

func TestMirrorRemovalWaitsForCopies(t *testing.T) {
	r := newMirrorRig(t, 64, 0, false) // copies never finish until the gate opens
	var cmds []Command
	for i := uint32(0); i < 16; i++ {
		cmds = append(cmds, r.read(i, uint64(i), 1, true))
	}
	for i := range cmds {
		if err := r.c.put(&cmds[i]); err != nil {
			t.Fatal(err)
		}
	}
	r.c.ring()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.m.copied()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no copy started")
		}
		time.Sleep(100 * time.Microsecond)
	}
	q := (*r.t.queues.Load())[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.t.RemoveQueuePair(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RemoveQueuePair with a copy under way: %v, want a deadline error", err)
	}
	close(r.m.gate)
	deadline = time.Now().Add(10 * time.Second)
	for q.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the removed queue's run was never retired")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if _, ok := r.c.poll(); ok {
		t.Error("a completion was posted to a removed queue")
	}
	if st := r.t.Stats(); st.Mirrored != 0 {
		t.Errorf("%d Reads of a removed queue counted as mirrored", st.Mirrored)
	}
}
