package nvme

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMemoryNamespaceBasics(t *testing.T) {
	if _, err := NewMemoryNamespace(1000, 8); err == nil {
		t.Fatal("LBA size 1000 accepted")
	}
	if _, err := NewMemoryNamespace(512, 0); err == nil {
		t.Fatal("empty namespace accepted")
	}
	m, err := NewMemoryNamespace(512, 512) // 256 KiB: four lock stripes
	if err != nil {
		t.Fatal(err)
	}
	// A write across stripe boundaries reads back whole.
	p := make([]byte, 200*512)
	pattern(p, 512, 60, 1)
	if _, err := m.WriteAt(p, 60*512); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(p))
	if _, err := m.ReadAt(got, 60*512); err != nil || !bytes.Equal(got, p) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := m.ReadAt(got, 400*512); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := m.WriteAt(got[:1], -1); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := m.WriteZeroes(61*512, 512); err != nil {
		t.Fatal(err)
	}
	m.ReadAt(got[:1024], 60*512)
	if !bytes.Equal(got[:512], p[:512]) || !bytes.Equal(got[512:1024], make([]byte, 512)) {
		t.Fatal("WriteZeroes zeroed the wrong block")
	}
	if err := m.Crash(); !errors.Is(err, ErrNoCrashSimulation) {
		t.Fatalf("Crash on a plain namespace: %v", err)
	}
	m.Close()
	if _, err := m.ReadAt(got[:512], 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

func TestMemoryNamespaceCrash(t *testing.T) {
	m, _ := NewStrictMemoryNamespace(512, 16)
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 512) }
	m.WriteAt(blk('A'), 512)
	m.Flush()
	m.WriteAt(blk('B'), 512)
	m.WriteAt(blk('C'), 1024)
	m.WriteAt(blk('D'), 1024)
	if m.Unflushed() != 2 {
		t.Fatalf("unflushed %d", m.Unflushed())
	}
	if err := m.Crash(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1024)
	m.ReadAt(got, 512)
	if !bytes.Equal(got[:512], blk('A')) || !bytes.Equal(got[512:], blk(0)) {
		t.Fatal("crash did not revert to the flushed state")
	}
	if m.Unflushed() != 0 {
		t.Fatal("durable copies kept after crash")
	}
}

// TestMemoryNamespaceCrashModel runs random writes, flushes and crashes
// against a model that tracks durable and current contents.
func TestMemoryNamespaceCrashModel(t *testing.T) {
	const blocks = 32
	r := rand.New(rand.NewPCG(3, 4))
	m, _ := NewStrictMemoryNamespace(512, blocks)
	cur := make([]byte, blocks*512)
	durable := make([]byte, blocks*512)
	for step := 0; step < 2000; step++ {
		switch k := r.IntN(10); {
		case k < 7:
			lba, n := r.IntN(blocks), 1+r.IntN(4)
			n = min(n, blocks-lba)
			p := make([]byte, n*512)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			if r.IntN(4) == 0 {
				clear(p)
				m.WriteZeroes(int64(lba*512), int64(len(p)))
			} else {
				m.WriteAt(p, int64(lba*512))
			}
			copy(cur[lba*512:], p)
		case k < 9:
			m.Flush()
			copy(durable, cur)
		default:
			m.Crash()
			copy(cur, durable)
		}
		if !bytes.Equal(m.Bytes(), cur) {
			t.Fatalf("step %d: namespace differs from the model", step)
		}
	}
}

// TestTargetFlushCrash checks the Flush command against the crash model
// through a Target.
func TestTargetFlushCrash(t *testing.T) {
	m, _ := NewStrictMemoryNamespace(512, 64)
	h := newHarness(t, TargetConfig{}, m, 8)
	pattern(h.buf, 512, 0, 1)
	h.do(t, h.rw(t, OpWrite, 0, 8, 0))
	if e := h.do(t, Command{Opcode: OpFlush, NSID: 1}); !e.Status.Success() {
		t.Fatal(e.Status)
	}
	readGens := func() []uint32 {
		clear(h.buf[:8*512])
		if e := h.do(t, h.rw(t, OpRead, 0, 8, 0)); !e.Status.Success() {
			t.Fatal(e.Status)
		}
		return checkPattern(t, h.buf[:8*512], 512, 0)
	}
	// Unflushed writes are lost.
	pattern(h.buf, 512, 0, 2)
	h.do(t, h.rw(t, OpWrite, 0, 4, 0))
	if err := m.Crash(); err != nil {
		t.Fatal(err)
	}
	if got, want := readGens(), []uint32{1, 1, 1, 1, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Fatalf("after crash: generations %v, want %v", got, want)
	}
	// A FUA write is durable on completion.
	fua := h.rw(t, OpWrite, 4, 2, 2048)
	fua.CDW12 |= 1 << 30
	pattern(h.buf[2048:], 512, 4, 3)
	h.do(t, fua)
	m.Crash()
	if got, want := readGens(), []uint32{1, 1, 1, 1, 3, 3, 1, 1}; !slices.Equal(got, want) {
		t.Fatalf("after FUA and crash: generations %v, want %v", got, want)
	}
	if s := h.t.Stats(); s.Flushes != 1 || s.Writes != 3 {
		t.Fatalf("stats %+v", s)
	}
}
