package gpucache

import (
	"errors"
	"testing"
	"unsafe"
)

func TestLayoutGeometry(t *testing.T) {
	for _, g := range []struct{ sets, ways uint32 }{{1, 1}, {1, 3}, {7, 5}, {64, 8}, {1000, 16}, {3, MaxWays}} {
		n := uint64(g.sets) * uint64(g.ways)
		arrays := []struct {
			name      string
			off, size uint64
		}{
			{"sets", SetsOffset(g.sets, g.ways), uint64(g.sets) * SetStride},
			{"tags", TagsOffset(g.sets, g.ways), n * TagBytes},
			{"wbtags", WriteBackTagsOffset(g.sets, g.ways), n * TagBytes},
			{"ways", WaysOffset(g.sets, g.ways), n * WayStride},
		}
		end := uint64(0)
		for _, a := range arrays {
			if a.off%SectorBytes != 0 {
				t.Errorf("%dx%d: %s at %d not sector aligned", g.sets, g.ways, a.name, a.off)
			}
			if a.off < end {
				t.Errorf("%dx%d: %s at %d overlaps the previous array ending at %d", g.sets, g.ways, a.name, a.off, end)
			}
			end = a.off + a.size
		}
		if r := RegionBytes(g.sets, g.ways); r < end || r%SectorBytes != 0 {
			t.Errorf("%dx%d: region %d bytes, arrays end at %d", g.sets, g.ways, r, end)
		}
	}
	// Field offsets fit their records and do not overlap.
	if SetHandOffset < SetLockOffset+4 || SetHandOffset+4 > SetStride {
		t.Error("set record fields overlap or overflow")
	}
	if WayStatusOffset < WayStateOffset+4 || WayStatusOffset+4 > WayStride {
		t.Error("way record fields overlap or overflow")
	}
	if TagMask>>TagBits != 0 || TagWordClock&TagMask != 0 || TagWordClockBit >= TagWordGenShift || TagWordGenShift+TagWordGenBits != 64 ||
		TagNamespaceShift+TagNamespaceBits != TagBits || TagEmpty&TagMask != TagMask {
		t.Error("tag word fields overlap or do not fill the word")
	}
	if StateDirty|StateBusy|StateValid|StateRefMask != 0xFFFFFFFF || (StateDirty|StateBusy|StateValid)&StateRefMask != 0 {
		t.Error("state bits and reference count do not partition the word")
	}
}

func TestRegionAccessors(t *testing.T) {
	r := newRegion(3, 5)
	base := uintptr(r.base)
	if base%SectorBytes != 0 {
		t.Fatalf("region at %#x not aligned", base)
	}
	at := func(p unsafe.Pointer) uint64 { return uint64(uintptr(p) - base) }
	if got := at(unsafe.Pointer(r.hand(2))); got != 2*SetStride+SetHandOffset {
		t.Errorf("hand(2) at %d", got)
	}
	g := uintptr(2*5 + 4)
	if got, want := at(unsafe.Pointer(r.tag(g))), TagsOffset(3, 5)+uint64(g)*TagBytes; got != want {
		t.Errorf("tag(%d) at %d, want %d", g, got, want)
	}
	if got, want := at(unsafe.Pointer(r.state(g))), WaysOffset(3, 5)+uint64(g)*WayStride+WayStateOffset; got != want {
		t.Errorf("state(%d) at %d, want %d", g, got, want)
	}
	if *r.tag(g) != TagEmpty || *r.wbTag(0) != TagEmpty || *r.state(g) != 0 {
		t.Error("fresh region not initialised")
	}
	if uint64(len(r.bytes())) != RegionBytes(3, 5) {
		t.Error("bytes() length")
	}
}

func TestSetIndexAndTags(t *testing.T) {
	const sets = 16
	// Consecutive lines take consecutive sets, but for one step in every
	// sets (where a block of the mapping ends).
	for _, ns := range []uint8{0, 2} {
		breaks := 0
		for line := range uint64(64 * sets) {
			tag, err := MakeTag(ns, line)
			if err != nil {
				t.Fatal(err)
			}
			next, _ := MakeTag(ns, line+1)
			if (SetIndex(tag, sets)+1)%sets != SetIndex(next, sets) {
				breaks++
			}
		}
		if breaks > 64 {
			t.Errorf("namespace %d: %d of %d consecutive lines not in consecutive sets, want at most 64", ns, breaks, 64*sets)
		}
	}
	// Lines a multiple of the set count apart spread over the sets (a
	// plain modulo would put them all in one).
	for _, n := range []uint32{16, 32, 1024} {
		load := map[uint32]int{}
		for k := range uint64(64) {
			tag, _ := MakeTag(1, 7+k*uint64(n))
			load[SetIndex(tag, n)]++
		}
		most := 0
		for _, l := range load {
			most = max(most, l)
		}
		if want := min(64, int(n)) / 2; len(load) < want || most > 8 {
			t.Errorf("%d sets: 64 lines %d apart in %d sets (want >= %d), at most %d in one (want <= 8)", n, n, len(load), want, most)
		}
	}
	a, _ := MakeTag(0, 5)
	b, _ := MakeTag(1, 5)
	if SetIndex(a, sets) == SetIndex(b, sets) {
		t.Error("line 5 of namespaces 0 and 1 share a set")
	}
	if _, err := MakeTag(0, TagLineMask+1); !errors.Is(err, ErrInvalidTag) {
		t.Errorf("oversized line: %v", err)
	}
	if _, err := MakeTag(0xFF, TagLineMask); !errors.Is(err, ErrInvalidTag) {
		t.Errorf("empty tag: %v", err)
	}
	if err := Layout().Validate(); err != nil {
		t.Error(err)
	}
}

func TestSetOfMatchesSetIndex(t *testing.T) {
	for _, sets := range []uint32{1, 2, 3, 64, 100, 4096} {
		c, _ := newTestCache(t, Config{Sets: sets, Ways: 1, LineSize: 512})
		for i := uint64(0); i < 5000; i++ {
			tag := (i%3)<<TagNamespaceShift | i*7919
			if got, want := c.setOf(tag), SetIndex(tag, sets); got != want {
				t.Fatalf("sets %d tag %#x: setOf %d, SetIndex %d", sets, tag, got, want)
			}
		}
	}
}
