package vq

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/bam-go/bam/nvme"
)

const testLBA = 512

// stress reports whether the large configurations run (BAM_STRESS=1).
func stress() bool { return os.Getenv("BAM_STRESS") == "1" }

// rigConfig describes a Target with queue pairs and their clients.
type rigConfig struct {
	queues, depth int
	blocks        uint64
	file          bool // back the namespace by a file instead of memory
	faults        nvme.FaultHook
	timeout       time.Duration
	locked        bool // clients are Locked queues instead of QueuePairs
	buffers       int  // per-goroutine 512-byte DMA buffers
}

// rig is a running Target with its clients and a registered DMA buffer.
type rig struct {
	target  *nvme.Target
	mems    []*nvme.QueuePairMemory
	qps     []*QueuePair
	subs    []Submitter
	mapper  *Mapper
	buf     []byte
	bufBase uint64
}

func newRig(t testing.TB, cfg rigConfig) *rig {
	t.Helper()
	dma := nvme.NewDMASpace()
	tgt, err := nvme.NewTarget(nvme.TargetConfig{Faults: cfg.faults}, dma)
	if err != nil {
		t.Fatal(err)
	}
	var ns nvme.Namespace
	if cfg.file {
		ns, err = nvme.OpenFileNamespace(filepath.Join(t.TempDir(), "ns"),
			nvme.FileOptions{LBASize: testLBA, Size: int64(cfg.blocks) * testLBA, Create: true})
	} else {
		ns, err = nvme.NewMemoryNamespace(testLBA, cfg.blocks)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.AddNamespace(1, ns); err != nil {
		t.Fatal(err)
	}
	r := &rig{target: tgt}
	for i := range cfg.queues {
		mem, err := nvme.NewQueuePairMemory(uint16(i+1), uint32(cfg.depth))
		if err != nil {
			t.Fatal(err)
		}
		if err := tgt.AddQueuePair(mem); err != nil {
			t.Fatal(err)
		}
		qid := mem.ID
		opts := Options{Timeout: cfg.timeout, Notify: func() { tgt.Kick(qid) }}
		var s Submitter
		if cfg.locked {
			s, err = NewLocked(mem, opts)
		} else {
			var q *QueuePair
			q, err = New(mem, opts)
			r.qps = append(r.qps, q)
			s = q
		}
		if err != nil {
			t.Fatal(err)
		}
		r.mems = append(r.mems, mem)
		r.subs = append(r.subs, s)
	}
	r.mapper, err = NewMapper(r.subs...)
	if err != nil {
		t.Fatal(err)
	}
	n := max(cfg.buffers, 1)
	raw := make([]byte, n*testLBA+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&raw[0]))%4096)) % 4096
	r.buf = raw[off : off+n*testLBA]
	if r.bufBase, err = dma.RegisterHost(r.buf); err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tgt.Close()
		ns.Close()
	})
	return r
}

// block returns goroutine g's DMA buffer and its address.
func (r *rig) block(g int) ([]byte, uint64) {
	return r.buf[g*testLBA : (g+1)*testLBA], r.bufBase + uint64(g*testLBA)
}

// fillPattern writes the pattern of (lba, gen) into b: a header naming both,
// then words derived from them, so a read returning another block or another
// generation is caught and named.
func fillPattern(b []byte, lba, gen uint64) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], lba)
	le.PutUint64(b[8:], gen)
	x := lba*0x9e3779b97f4a7c15 ^ gen*0xbf58476d1ce4e5b9 ^ 0x94d049bb133111eb
	for i := 16; i+8 <= len(b); i += 8 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		le.PutUint64(b[i:], x)
	}
}

func checkPattern(b []byte, lba, gen uint64) error {
	want := make([]byte, len(b))
	fillPattern(want, lba, gen)
	if string(want) == string(b) {
		return nil
	}
	le := binary.LittleEndian
	return fmt.Errorf("lba %d gen %d: read back block of lba %d gen %d (or corrupt)", lba, gen, le.Uint64(b[0:]), le.Uint64(b[8:]))
}
