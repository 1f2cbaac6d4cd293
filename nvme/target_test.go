package nvme

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// quietLogger discards the Target's protocol-error logs in tests that
// provoke them on purpose.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a Target with one memory namespace (NSID 1), one queue pair and
// a registered host buffer, driven by a simpleClient.
type harness struct {
	t      *Target
	ns     Namespace
	qp     *QueuePairMemory
	c      *simpleClient
	buf    []byte // host data buffer
	bufDMA uint64
	ctx    context.Context
}

func newHarness(tb testing.TB, cfg TargetConfig, ns Namespace, depth uint32) *harness {
	tb.Helper()
	if ns == nil {
		m, err := NewMemoryNamespace(512, 1024)
		if err != nil {
			tb.Fatal(err)
		}
		ns = m
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	dma := NewDMASpace()
	tg, err := NewTarget(cfg, dma)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tg.AddNamespace(1, ns); err != nil {
		tb.Fatal(err)
	}
	qp, err := NewQueuePairMemory(1, depth)
	if err != nil {
		tb.Fatal(err)
	}
	if err := tg.AddQueuePair(qp); err != nil {
		tb.Fatal(err)
	}
	buf := alignedBuffer(1<<20, 4096)
	base, err := dma.RegisterHost(buf)
	if err != nil {
		tb.Fatal(err)
	}
	// ctx bounds the test's waits; the Target itself runs until Close.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	if err := tg.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tg.Close() })
	return &harness{t: tg, ns: ns, qp: qp, c: newSimpleClient(qp, tg.Kick), buf: buf, bufDMA: base, ctx: ctx}
}

// alignedBuffer returns n bytes starting on an align boundary.
func alignedBuffer(n, align int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(addrOf(b)) % align; r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// rw builds a Read or Write of blocks blocks at slba whose data is at offset
// off of the harness buffer, with PRP lists placed at the end of the buffer.
func (h *harness) rw(tb testing.TB, op Opcode, slba uint64, blocks uint32, off int) Command {
	tb.Helper()
	lba := h.ns.LBASize()
	entries, err := PRPEntries(h.bufDMA+uint64(off), int(blocks)*lba, 4096)
	if err != nil {
		tb.Fatal(err)
	}
	lists := []PRPListPage{
		{Addr: h.bufDMA + uint64(len(h.buf)-8192), Bytes: h.buf[len(h.buf)-8192:]},
		{Addr: h.bufDMA + uint64(len(h.buf)-4096), Bytes: h.buf[len(h.buf)-4096:]},
	}
	p1, p2, _, err := BuildPRP(entries, 4096, lists)
	if err != nil {
		tb.Fatal(err)
	}
	return ReadWrite(op, 1, slba, blocks, p1, p2)
}

func (h *harness) do(tb testing.TB, cmd Command) Completion {
	tb.Helper()
	cmd.CID = uint16(rand.Uint32())
	e, err := h.c.do(h.ctx, &cmd)
	if err != nil {
		tb.Fatal(err)
	}
	if e.CID != cmd.CID || e.SQID != h.qp.ID {
		tb.Fatalf("completion CID %d SQID %d, want %d %d", e.CID, e.SQID, cmd.CID, h.qp.ID)
	}
	return e
}

// pattern fills p with the checksummed pattern of the blocks starting at
// lba: each block holds its LBA, a generation and a CRC32 of the rest.
func pattern(p []byte, lbaSize int, lba uint64, gen uint32) {
	for i := 0; i+lbaSize <= len(p); i += lbaSize {
		b := p[i : i+lbaSize]
		binary.LittleEndian.PutUint64(b, lba+uint64(i/lbaSize))
		binary.LittleEndian.PutUint32(b[8:], gen)
		for j := 16; j < lbaSize-4; j++ {
			b[j] = byte(uint64(j)*31 + lba + uint64(i/lbaSize) + uint64(gen))
		}
		binary.LittleEndian.PutUint32(b[lbaSize-4:], crc32.ChecksumIEEE(b[:lbaSize-4]))
	}
}

// checkPattern verifies blocks written by pattern; it returns the
// generation of each block.
func checkPattern(tb testing.TB, p []byte, lbaSize int, lba uint64) []uint32 {
	tb.Helper()
	var gens []uint32
	for i := 0; i+lbaSize <= len(p); i += lbaSize {
		b := p[i : i+lbaSize]
		if got, want := binary.LittleEndian.Uint32(b[lbaSize-4:]), crc32.ChecksumIEEE(b[:lbaSize-4]); got != want {
			tb.Fatalf("block %d: checksum %#x, want %#x", lba+uint64(i/lbaSize), got, want)
		}
		if got := binary.LittleEndian.Uint64(b); got != lba+uint64(i/lbaSize) {
			tb.Fatalf("block %d holds block %d", lba+uint64(i/lbaSize), got)
		}
		gens = append(gens, binary.LittleEndian.Uint32(b[8:]))
	}
	return gens
}

func TestTargetReadWrite(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 16)
	// Transfers of 1..40 blocks at assorted buffer offsets exercise PRP1
	// only, PRP1+PRP2 and PRP lists.
	for _, tc := range []struct {
		blocks uint32
		off    int
	}{{1, 0}, {1, 512}, {8, 0}, {8, 512}, {9, 4096 - 512}, {16, 100 * 4}, {40, 0}, {40, 2048}} {
		slba := uint64(tc.blocks) * 3
		pattern(h.buf[tc.off:], 512, slba, 7)
		want := append([]byte(nil), h.buf[tc.off:tc.off+int(tc.blocks)*512]...)
		if e := h.do(t, h.rw(t, OpWrite, slba, tc.blocks, tc.off)); !e.Status.Success() {
			t.Fatalf("write %+v: %v", tc, e.Status)
		}
		clear(h.buf[:len(h.buf)-8192])
		if e := h.do(t, h.rw(t, OpRead, slba, tc.blocks, tc.off)); !e.Status.Success() {
			t.Fatalf("read %+v: %v", tc, e.Status)
		}
		if !bytes.Equal(h.buf[tc.off:tc.off+len(want)], want) {
			t.Fatalf("read %+v: data differs", tc)
		}
		checkPattern(t, h.buf[tc.off:tc.off+len(want)], 512, slba)
	}
	s := h.t.Stats()
	if s.Reads != 8 || s.Writes != 8 || s.Errors != 0 || s.Completions != 16 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTargetBadCommands(t *testing.T) {
	h := newHarness(t, TargetConfig{MaxTransfer: 64 << 10}, nil, 8)
	good := func() Command { return h.rw(t, OpRead, 0, 1, 0) }
	cases := []struct {
		name string
		cmd  func() Command
		want Status
	}{
		{"ok", good, StatusSuccess},
		{"opcode", func() Command { c := good(); c.Opcode = 0x7F; return c }, StatusInvalidOpcode},
		{"compare unsupported", func() Command { c := good(); c.Opcode = OpCompare; return c }, StatusInvalidOpcode},
		{"nsid 0", func() Command { c := good(); c.NSID = 0; return c }, StatusInvalidNamespace},
		{"nsid 2", func() Command { c := good(); c.NSID = 2; return c }, StatusInvalidNamespace},
		{"nsid broadcast read", func() Command { c := good(); c.NSID = nsidAll; return c }, StatusInvalidNamespace},
		{"flush nsid 9", func() Command { return Command{Opcode: OpFlush, NSID: 9} }, StatusInvalidNamespace},
		{"flush broadcast", func() Command { return Command{Opcode: OpFlush, NSID: nsidAll} }, StatusSuccess},
		{"slba past end", func() Command { return h.rw(t, OpRead, 1024, 1, 0) }, StatusLBAOutOfRange},
		{"range past end", func() Command { return h.rw(t, OpRead, 1020, 8, 0) }, StatusLBAOutOfRange},
		{"slba huge", func() Command { c := good(); c.CDW10, c.CDW11 = 0xFFFFFFFF, 0xFFFFFFFF; return c }, StatusLBAOutOfRange},
		{"past MDTS", func() Command { return h.rw(t, OpRead, 0, 129, 0) }, StatusInvalidField},
		{"max NLB", func() Command { c := good(); c.CDW12 = 0xFFFF; return c }, StatusInvalidField},
		{"fused", func() Command { c := good(); c.Fuse = 1; return c }, StatusInvalidField},
		{"sgl", func() Command { c := good(); c.PSDT = 1; return c }, StatusInvalidField},
		{"prp1 unaligned", func() Command { c := good(); c.PRP1 += 2; return c }, StatusInvalidField},
		{"prp2 offset", func() Command { c := h.rw(t, OpRead, 0, 16, 0); c.PRP2 += 512; return c }, StatusInvalidField},
		{"prp list unaligned", func() Command { c := h.rw(t, OpRead, 0, 24, 0); c.PRP2 += 4; return c }, StatusInvalidField},
		{"prp list entry offset", func() Command {
			c := h.rw(t, OpRead, 0, 24, 0)
			list := h.buf[len(h.buf)-8192:]
			binary.LittleEndian.PutUint64(list[8:], binary.LittleEndian.Uint64(list[8:])+64)
			return c
		}, StatusInvalidField},
		{"prp unmapped", func() Command { c := good(); c.PRP1 = 4096; return c }, StatusDataTransferError},
		{"prp list unmapped", func() Command { c := h.rw(t, OpRead, 0, 24, 0); c.PRP2 = 1 << 12; return c }, StatusDataTransferError},
		{"write zeroes past end", func() Command {
			return Command{Opcode: OpWriteZeroes, NSID: 1, CDW10: 1000, CDW12: 99}
		}, StatusLBAOutOfRange},
		{"write zeroes", func() Command { return Command{Opcode: OpWriteZeroes, NSID: 1, CDW10: 10, CDW12: 99} }, StatusSuccess},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := h.do(t, tc.cmd())
			if e.Status.Code() != tc.want {
				t.Fatalf("status %v, want %v", e.Status, tc.want)
			}
		})
	}
	if err := h.t.Err(1); err != nil {
		t.Fatalf("queue error after bad commands: %v", err)
	}
}

func TestTargetNamespaceErrors(t *testing.T) {
	m, _ := NewMemoryNamespace(512, 64)
	fns := &failingNamespace{Namespace: m}
	h := newHarness(t, TargetConfig{}, fns, 4)
	fns.fail.Store(true)
	if e := h.do(t, h.rw(t, OpRead, 0, 1, 0)); e.Status.Code() != StatusUnrecoveredRead {
		t.Fatalf("read: %v", e.Status)
	}
	if e := h.do(t, h.rw(t, OpWrite, 0, 1, 0)); e.Status.Code() != StatusWriteFault {
		t.Fatalf("write: %v", e.Status)
	}
	if e := h.do(t, Command{Opcode: OpFlush, NSID: 1}); e.Status.Code() != StatusWriteFault {
		t.Fatalf("flush: %v", e.Status)
	}
	fns.fail.Store(false)
	if e := h.do(t, h.rw(t, OpRead, 0, 1, 0)); !e.Status.Success() {
		t.Fatalf("read: %v", e.Status)
	}
}

// failingNamespace fails every operation while fail is set.
type failingNamespace struct {
	Namespace
	fail atomic.Bool
}

var errMedia = errors.New("media error")

func (f *failingNamespace) ReadAt(p []byte, off int64) (int, error) {
	if f.fail.Load() {
		return 0, errMedia
	}
	return f.Namespace.ReadAt(p, off)
}

func (f *failingNamespace) WriteAt(p []byte, off int64) (int, error) {
	if f.fail.Load() {
		return 0, errMedia
	}
	return f.Namespace.WriteAt(p, off)
}

func (f *failingNamespace) Flush() error {
	if f.fail.Load() {
		return errMedia
	}
	return f.Namespace.Flush()
}

// TestTargetPhaseWrap runs many passes over rings of several depths,
// checking every completion's phase, CID, SQHD and data.
func TestTargetPhaseWrap(t *testing.T) {
	for _, depth := range []uint32{2, 4, 1024} {
		t.Run("", func(t *testing.T) {
			h := newHarness(t, TargetConfig{}, nil, depth)
			passes := 200
			if depth == 1024 {
				passes = 4
			}
			total := passes * int(depth)
			var posted uint64
			for i := 0; i < total; {
				// Fill what the queue allows, ring once, drain.
				var cids []uint16
				for h.c.canSubmit() && i < total {
					c := h.rw(t, OpWrite, uint64(i%1024), 1, 0)
					c.CID = uint16(i)
					if err := h.c.put(&c); err != nil {
						t.Fatal(err)
					}
					cids = append(cids, c.CID)
					i++
				}
				h.c.ring()
				for _, cid := range cids {
					slot := uint32(posted % uint64(depth))
					wantPhase := ExpectedPhase(posted, depth)
					e, err := h.c.wait(h.ctx)
					if err != nil {
						t.Fatal(err)
					}
					if e.Phase != wantPhase {
						t.Fatalf("completion %d in slot %d: phase %v, want %v", posted, slot, e.Phase, wantPhase)
					}
					if e.CID != cid || !e.Status.Success() {
						t.Fatalf("completion %d: CID %d status %v, want CID %d", posted, e.CID, e.Status, cid)
					}
					if e.SQHD > uint16(depth-1) {
						t.Fatalf("SQHD %d beyond depth %d", e.SQHD, depth)
					}
					posted++
				}
			}
			if got := h.t.Stats().Completions; got != uint64(total) {
				t.Fatalf("completions %d, want %d", got, total)
			}
		})
	}
}

// TestTargetCQFull checks that the Target never fills the CQ: with the host
// not consuming, exactly depth-1 completions appear, and the rest follow
// once the head doorbell moves.
func TestTargetCQFull(t *testing.T) {
	const depth = 8
	h := newHarness(t, TargetConfig{}, nil, depth)
	// Submit depth-1 commands, then after draining nothing, more: the
	// simple client refuses, so write SQEs by hand to overfill the CQ.
	sqTail := uint32(0)
	submit := func(n int) {
		for i := 0; i < n; i++ {
			c := h.rw(t, OpRead, 0, 1, 0)
			c.CID = uint16(100 + sqTail)
			c.Encode(h.qp.SQE(sqTail))
			sqTail = (sqTail + 1) % depth
		}
		h.qp.RingSQTail(sqTail)
		h.t.Kick(1)
	}
	submit(depth - 1)
	waitCond(t, func() bool { return h.t.Stats().Completions == depth-1 })
	submit(3) // these must wait: the CQ holds depth-1 unconsumed entries
	waitCond(t, func() bool { return h.t.Stats().CQFullWaits > 0 })
	time.Sleep(5 * time.Millisecond)
	if got := h.t.Stats().Completions; got != depth-1 {
		t.Fatalf("%d completions posted into a full CQ", got-(depth-1))
	}
	// Slot depth-1 must still be zero (never posted).
	if dw3 := atomic.LoadUint32(h.qp.CQEDW3(depth - 1)); dw3 != 0 {
		t.Fatalf("last CQ slot written while the CQ was full: %#x", dw3)
	}
	// Consume two entries: two more completions may be posted.
	h.qp.RingCQHead(2)
	waitCond(t, func() bool { return h.t.Stats().Completions == depth+1 })
	time.Sleep(5 * time.Millisecond)
	if got := h.t.Stats().Completions; got != depth+1 {
		t.Fatalf("completions %d, want %d", got, depth+1)
	}
	h.qp.RingCQHead(5)
	waitCond(t, func() bool { return h.t.Stats().Completions == depth+2 })
	// The wrapped entries carry phase 0.
	for i := uint32(0); i < 3; i++ {
		e, _ := DecodeCompletion(h.qp.CQE((depth - 1 + i) % depth))
		if wantPhase := i == 0; e.Phase != wantPhase {
			t.Fatalf("entry %d phase %v", i, e.Phase)
		}
	}
}

func waitCond(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not reached in 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestTargetBogusDoorbells(t *testing.T) {
	for _, tc := range []struct {
		name string
		ring func(t *testing.T, h *harness)
	}{
		{"sq tail", func(_ *testing.T, h *harness) { h.qp.RingSQTail(h.qp.Depth + 3); h.t.Kick(1) }},
		{"cq head", func(t *testing.T, h *harness) {
			h.qp.RingCQHead(0xFFFFFFFF)
			c := h.rw(t, OpRead, 0, 1, 0)
			h.c.submit(&c)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, TargetConfig{}, nil, 4)
			tc.ring(t, h)
			waitCond(t, func() bool { return h.t.Err(1) != nil })
			if err := h.t.Err(1); !errors.Is(err, ErrHostProtocol) {
				t.Fatalf("Err = %v", err)
			}
			if h.t.Stats().QueueErrors != 1 {
				t.Fatalf("stats %+v", h.t.Stats())
			}
		})
	}
}

func TestTargetGarbageSQEs(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 64)
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 50; round++ {
		n := 1 + r.IntN(20)
		for i := 0; i < n; i++ {
			sqe := h.qp.SQE(h.c.sqTail)
			for j := range sqe {
				sqe[j] = byte(r.Uint32())
			}
			// Steer some at the real namespace and buffer.
			if r.IntN(2) == 0 {
				binary.LittleEndian.PutUint32(sqe[4:], 1)
				binary.LittleEndian.PutUint64(sqe[24:], h.bufDMA+uint64(r.IntN(1<<20))&^3)
			}
			h.c.sqTail = (h.c.sqTail + 1) % 64
			h.c.outstanding++
		}
		h.c.ring()
		for i := 0; i < n; i++ {
			if _, err := h.c.wait(h.ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := h.t.Err(1); err != nil {
		t.Fatal(err)
	}
}

func TestTargetKickless(t *testing.T) {
	// A client that never kicks (as GPU threads cannot) is still served.
	h := newHarness(t, TargetConfig{IdlePoll: 2 * time.Millisecond}, nil, 4)
	h.c.kick = nil
	for i := 0; i < 20; i++ {
		if e := h.do(t, h.rw(t, OpRead, 0, 1, 0)); !e.Status.Success() {
			t.Fatal(e.Status)
		}
		time.Sleep(time.Millisecond) // let the worker park
	}
}

func TestTargetRemoveQueuePair(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 4)
	h.do(t, h.rw(t, OpRead, 0, 1, 0))
	if err := h.t.RemoveQueuePair(h.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.t.RemoveQueuePair(h.ctx, 1); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("second remove: %v", err)
	}
	if got := h.t.Stats().Completions; got != 1 {
		t.Fatalf("retired stats lost: %d", got)
	}
	// Commands rung after removal are not served.
	c := h.rw(t, OpRead, 0, 1, 0)
	h.c.submit(&c)
	time.Sleep(5 * time.Millisecond)
	if _, ok := h.c.poll(); ok {
		t.Fatal("removed queue served")
	}
	// A new queue with the same ID can be added.
	qp, _ := NewQueuePairMemory(1, 4)
	if err := h.t.AddQueuePair(qp); err != nil {
		t.Fatal(err)
	}
	h.qp, h.c = qp, newSimpleClient(qp, h.t.Kick)
	if e := h.do(t, h.rw(t, OpRead, 0, 1, 0)); !e.Status.Success() {
		t.Fatal(e.Status)
	}
}

// wrappedNamespace hides the memory namespace's inline marker, so its
// commands take the executor path.
type wrappedNamespace struct{ Namespace }

func TestTargetManyQueues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline bool
	}{{"inline", true}, {"executors", false}} {
		t.Run(tc.name, func(t *testing.T) { testManyQueues(t, tc.inline) })
	}
}

// stressScale multiplies stress test sizes; set NVME_STRESS=10 for a
// longer run.
func stressScale() int {
	if v, err := strconv.Atoi(os.Getenv("NVME_STRESS")); err == nil && v > 0 {
		return v
	}
	return 1
}

func testManyQueues(t *testing.T, inline bool) {
	// Several single-goroutine clients on their own queues (some of depth
	// 2, so the CQ is full all the time), sharing a namespace and fewer
	// workers than queues.
	m, _ := NewMemoryNamespace(4096, 256)
	var ns Namespace = m
	if !inline {
		ns = wrappedNamespace{m}
	}
	h := newHarness(t, TargetConfig{Workers: 2, Executors: 3}, ns, 4)
	const clients = 6
	n := 300 * stressScale()
	if testing.Short() {
		n = 100
	}
	errc := make(chan error, clients)
	for k := 0; k < clients; k++ {
		qp, _ := NewQueuePairMemory(uint16(10+k), uint32(2<<(k%3)))
		if err := h.t.AddQueuePair(qp); err != nil {
			t.Fatal(err)
		}
		buf := alignedBuffer(4096, 4096)
		base, err := h.t.DMA().RegisterHost(buf)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c := newSimpleClient(qp, h.t.Kick)
			for i := 0; i < n; i++ {
				lba := uint64(k*40 + i%40)
				pattern(buf, 4096, lba, uint32(i))
				cmd := ReadWrite(OpWrite, 1, lba, 1, base, 0)
				if e, err := c.do(h.ctx, &cmd); err != nil || !e.Status.Success() {
					errc <- errors.Join(err, e.Status.Err(&cmd))
					return
				}
				clear(buf)
				cmd = ReadWrite(OpRead, 1, lba, 1, base, 0)
				if e, err := c.do(h.ctx, &cmd); err != nil || !e.Status.Success() {
					errc <- errors.Join(err, e.Status.Err(&cmd))
					return
				}
				if gen := binary.LittleEndian.Uint32(buf[8:]); gen != uint32(i) || binary.LittleEndian.Uint64(buf) != lba {
					errc <- errors.New("read back wrong block")
					return
				}
			}
			errc <- nil
		}()
	}
	for k := 0; k < clients; k++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestTargetIdleCPU checks that an idle Target parks instead of spinning.
func TestTargetIdleCPU(t *testing.T) {
	h := newHarness(t, TargetConfig{Workers: 2}, nil, 4)
	h.do(t, h.rw(t, OpRead, 0, 1, 0))
	time.Sleep(20 * time.Millisecond)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0, w0 := cpu(), time.Now()
	time.Sleep(300 * time.Millisecond)
	used, wall := cpu()-c0, time.Since(w0)
	if used > wall/4 {
		t.Fatalf("idle Target used %v CPU in %v", used, wall)
	}
	t.Logf("idle Target used %v CPU in %v", used, wall)
}

// A delayed command whose queue pair was removed meanwhile must not run: its
// data buffer may already belong to someone else (the host reuses the
// queue's memory after a reset). Nor does the removal wait out its delay:
// a stalled namespace must not hold up the host's reset.
func TestTargetDelayedCommandAfterRemove(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 4)
	pattern(h.buf[:512], 512, 0, 7)
	if e := h.do(t, h.rw(t, OpWrite, 0, 1, 0)); !e.Status.Success() {
		t.Fatal(e.Status)
	}
	const delay = 100 * time.Millisecond
	h.t.SetFaultHook(func(uint16, *Command) Fault { return Fault{Delay: delay} })
	clear(h.buf[:512])
	c := h.rw(t, OpRead, 0, 1, 0)
	h.c.submit(&c)
	waitCond(t, func() bool { return h.t.Stats().Delayed == 1 })
	ctx, cancel := context.WithTimeout(h.ctx, delay/4)
	defer cancel()
	if err := h.t.RemoveQueuePair(ctx, 1); err != nil {
		t.Fatalf("remove with a delayed command pending: %v, want no wait for the delay", err)
	}
	time.Sleep(2 * delay)
	for i, b := range h.buf[:512] {
		if b != 0 {
			t.Fatalf("byte %d of the removed queue's buffer written after the removal: %#x", i, b)
		}
	}
	if err := h.t.RemoveQueuePair(h.ctx, 1); !errors.Is(err, ErrNoQueue) {
		t.Fatalf("second remove: %v", err)
	}
}

// blockingNamespace holds every WriteAt (every ReadAt instead, with
// reads) until release is closed, telling started each time one begins.
type blockingNamespace struct {
	Namespace
	reads   bool
	started chan struct{}
	release chan struct{}
}

func (b *blockingNamespace) hold() {
	b.started <- struct{}{}
	<-b.release
}

func (b *blockingNamespace) WriteAt(p []byte, off int64) (int, error) {
	if !b.reads {
		b.hold()
	}
	return b.Namespace.WriteAt(p, off)
}

func (b *blockingNamespace) ReadAt(p []byte, off int64) (int, error) {
	if b.reads {
		b.hold()
	}
	return b.Namespace.ReadAt(p, off)
}

// A Write still running in its namespace when RemoveQueuePair gives up is a
// straggler until it returns: its data still lands, so the host must not
// write the same blocks again before Stragglers reports none.
func TestTargetStragglers(t *testing.T) {
	m, err := NewMemoryNamespace(512, 1024)
	if err != nil {
		t.Fatal(err)
	}
	ns := &blockingNamespace{Namespace: m, started: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, TargetConfig{}, ns, 4)
	if n := h.t.Stragglers(); n != 0 {
		t.Fatalf("stragglers before any removal: %d", n)
	}
	pattern(h.buf[:512], 512, 3, 9)
	c := h.rw(t, OpWrite, 3, 1, 0)
	h.c.submit(&c)
	<-ns.started
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
	defer cancel()
	if err := h.t.RemoveQueuePair(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("remove with a write running: %v, want a deadline error", err)
	}
	if n := h.t.Stragglers(); n != 1 {
		t.Fatalf("stragglers with the write still running: %d, want 1", n)
	}
	close(ns.release)
	waitCond(t, func() bool { return h.t.Stragglers() == 0 })
	got := make([]byte, 512)
	if _, err := m.ReadAt(got, 3*512); err != nil {
		t.Fatal(err)
	}
	if gens := checkPattern(t, got, 512, 3); gens[0] != 9 {
		t.Fatalf("block 3 holds generation %d after the straggling write, want 9", gens[0])
	}
}

// Shutdown returns within its bound while a Read hangs in its namespace,
// saying so, and Done is closed once the Read returns. Its data still lands
// (the memory must stay allocated until then).
func TestTargetShutdownBounded(t *testing.T) {
	m, err := NewMemoryNamespace(512, 1024)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 512)
	pattern(want, 512, 5, 7)
	if _, err := m.WriteAt(want, 5*512); err != nil {
		t.Fatal(err)
	}
	ns := &blockingNamespace{Namespace: m, reads: true, started: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarness(t, TargetConfig{}, ns, 4)
	c := h.rw(t, OpRead, 5, 1, 0)
	h.c.submit(&c)
	<-ns.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = h.t.Shutdown(ctx)
	if !errors.Is(err, ErrStillRunning) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a Read hanging: %v, want ErrStillRunning and a deadline error", err)
	}
	if !strings.Contains(err.Error(), ": 1 after") {
		t.Errorf("Shutdown's error does not count the one running command: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v with a 50ms bound", d)
	}
	select {
	case <-h.t.Done():
		t.Fatal("Done closed while a Read still runs")
	default:
	}
	close(ns.release)
	select {
	case <-h.t.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after the Read returned")
	}
	if !bytes.Equal(h.buf[:512], want) {
		t.Fatal("the Read that outlived Shutdown did not land its data")
	}
	if err := h.t.Close(); err != nil {
		t.Fatalf("Close after Done: %v", err)
	}
}
