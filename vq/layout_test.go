package vq

import (
	"context"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/bam-go/bam/nvme"
)

// TestLayoutRegions checks, for every depth, that the arrays start on sector
// boundaries after the header, do not overlap and fit in RegionBytes.
func TestLayoutRegions(t *testing.T) {
	hot := []uintptr{TicketOffset, SQTailOffset, TailLockOffset, SQHeadOffset, CQHeadOffset, HeadLockOffset, PollerOffset}
	for i, off := range hot {
		if off%SectorBytes != 0 || off >= HeaderBytes {
			t.Errorf("hot word %d at %d: not alone in a sector inside the header", i, off)
		}
		for _, o := range hot[:i] {
			if o/SectorBytes == off/SectorBytes {
				t.Errorf("hot words at %d and %d share a sector", o, off)
			}
		}
	}
	for d := uint32(2); d <= 65536; d *= 2 {
		type span struct{ lo, hi uintptr }
		spans := []span{
			{0, HeaderBytes},
			{TurnsOffset(d), TurnsOffset(d) + uintptr(d)*TurnStride},
			{TailMarkersOffset(d), TailMarkersOffset(d) + uintptr(d)*TailMarkerStride},
			{CIDsOffset(d), CIDsOffset(d) + uintptr(d)*CIDRecordBytes},
		}
		for i, s := range spans {
			if s.lo%SectorBytes != 0 {
				t.Errorf("depth %d: array %d at %d not sector aligned", d, i, s.lo)
			}
			if s.hi > RegionBytes(d) {
				t.Errorf("depth %d: array %d ends at %d beyond %d", d, i, s.hi, RegionBytes(d))
			}
			if i > 0 && spans[i-1].hi > s.lo {
				t.Errorf("depth %d: array %d overlaps the previous one", d, i)
			}
		}
	}
}

// TestLayoutExported checks that the generator sees the values the code
// uses.
func TestLayoutExported(t *testing.T) {
	g := Layout()
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, c := range g.Consts {
		got[c.Name] = c.Value
	}
	for name, want := range map[string]uint64{
		"SectorBytes": SectorBytes, "TicketOffset": TicketOffset, "SQTailOffset": SQTailOffset,
		"TailLockOffset": TailLockOffset, "SQHeadOffset": SQHeadOffset, "CQHeadOffset": CQHeadOffset,
		"HeadLockOffset": HeadLockOffset, "PollerOffset": PollerOffset, "HeaderBytes": HeaderBytes,
		"TurnStride": TurnStride, "TailMarkerStride": TailMarkerStride, "CIDRecordBytes": CIDRecordBytes,
		"CIDStateOffset": CIDStateOffset, "CIDResultOffset": CIDResultOffset, "CIDDone": CIDDone,
		"CIDAbandoned": CIDAbandoned, "ResultStatusShift": ResultStatusShift,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s: exported %d (present %t), code uses %d", name, v, ok, want)
		}
	}
}

// TestRegionWords runs commands through a queue and reads the counters back
// from the raw region at the published offsets, as a device mirror would.
func TestRegionWords(t *testing.T) {
	const n = 10
	r := newRig(t, rigConfig{queues: 1, depth: 4, blocks: 1, buffers: 1})
	q := r.qps[0]
	_, addr := r.block(0)
	for range n {
		cmd := nvme.ReadWrite(nvme.OpRead, 1, 0, 1, addr, 0)
		if _, err := q.Submit(context.Background(), &cmd); err != nil {
			t.Fatal(err)
		}
	}
	words := q.Metadata()
	if p := uintptr(unsafe.Pointer(&words[0])); p%SectorBytes != 0 {
		t.Fatalf("region at %#x not aligned", p)
	}
	at := func(off uintptr) uint64 { return atomic.LoadUint64(&words[off/8]) }
	if at(TicketOffset) != n || at(SQTailOffset) != n || at(CQHeadOffset) != n {
		t.Errorf("ticket %d sq tail %d cq head %d, want %d", at(TicketOffset), at(SQTailOffset), at(CQHeadOffset), n)
	}
	if at(TailLockOffset) != 0 || at(HeadLockOffset) != 0 || at(PollerOffset) != 0 {
		t.Error("a lock is still held")
	}
	// Slot 1 took tickets 1, 5 and 9: its marker holds 10 and, once the
	// controller consumed all three, its turn is 3.
	if m := at(TailMarkersOffset(4) + 1*TailMarkerStride); m != 10 {
		t.Errorf("slot 1 marker %d, want 10", m)
	}
	if turn := at(TurnsOffset(4) + 1*TurnStride); turn != 3 {
		t.Errorf("slot 1 turn %d, want 3", turn)
	}
	for cid := range 3 {
		if st := at(CIDsOffset(4) + uintptr(cid)*CIDRecordBytes + CIDStateOffset); st != CIDFree {
			t.Errorf("cid %d state %d, want free", cid, st)
		}
	}
}
