package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// listArena is host memory registered for PRP list pages.
type listArena struct {
	buf  []byte
	base uint64
}

func newListArena(tb testing.TB, dma *DMASpace, pages, pageSize int) *listArena {
	buf := alignedBuffer(pages*pageSize, pageSize)
	base, err := dma.RegisterHost(buf)
	if err != nil {
		tb.Fatal(err)
	}
	return &listArena{buf: buf, base: base}
}

func (a *listArena) pages(pageSize int) []PRPListPage {
	var ps []PRPListPage
	for off := 0; off+pageSize <= len(a.buf); off += pageSize {
		ps = append(ps, PRPListPage{Addr: a.base + uint64(off), Bytes: a.buf[off : off+pageSize]})
	}
	return ps
}

// oracleSegments is the transfer a list of PRP entries describes, one piece
// per page, merged where contiguous.
func oracleSegments(entries []uint64, length, pageSize int) []Segment {
	w := prpWalker{pageSize: pageSize}
	rem := length
	for i, e := range entries {
		n := pageSize
		if i == 0 {
			n = pageSize - int(e%uint64(pageSize))
		}
		n = min(n, rem)
		w.add(e, uint64(n))
		rem -= n
	}
	return w.segs
}

func TestPRPBuildWalkProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, ps := range []int{4096, 8192} {
		dma := NewDMASpace()
		arena := newListArena(t, dma, 4, ps)
		for iter := 0; iter < 300; iter++ {
			maxPages := 3
			if iter%3 == 0 {
				maxPages = 1500
			}
			length := 1 + r.IntN(maxPages*ps)
			addr := (uint64(1+r.IntN(1<<20)) * uint64(ps)) + uint64(r.IntN(ps/4))*4
			var entries []uint64
			if iter%2 == 0 {
				// Contiguous buffer.
				var err error
				entries, err = PRPEntries(addr, length, ps)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				// Scattered pages.
				first := ps - int(addr%uint64(ps))
				entries = []uint64{addr}
				for done := first; done < length; done += ps {
					entries = append(entries, uint64(r.IntN(1<<24))*uint64(ps))
				}
			}
			lists := arena.pages(ps)
			p1, p2, used, err := BuildPRP(entries, ps, lists)
			if errors.Is(err, ErrPRPListShort) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := PRPListPagesNeeded(len(entries), ps); used != want {
				t.Fatalf("used %d list pages, PRPListPagesNeeded says %d", used, want)
			}
			segs, st := WalkPRP(dma, p1, p2, length, ps)
			if !st.Success() {
				t.Fatalf("walk: %v (entries %d, length %d)", st, len(entries), length)
			}
			if want := oracleSegments(entries, length, ps); !reflect.DeepEqual(segs, want) {
				t.Fatalf("length %d page %d: segments differ: got %d want %d", length, ps, len(segs), len(want))
			}
			if iter%2 == 0 && (len(segs) != 1 || segs[0] != (Segment{addr, length})) {
				t.Fatalf("contiguous transfer walked to %v", segs)
			}
		}
	}
}

func TestPRPListPagesNeeded(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 0}, {2, 0}, {3, 1}, {513, 1}, {514, 2}, {1 + 511 + 512, 2}, {1 + 511 + 513, 3},
	} {
		if got := PRPListPagesNeeded(tc.n, 4096); got != tc.want {
			t.Errorf("PRPListPagesNeeded(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestPRPWalkOffsetList(t *testing.T) {
	// A PRP list may start inside its page (qword aligned); its last slot
	// then chains to the next list page.
	dma := NewDMASpace()
	arena := newListArena(t, dma, 2, 4096)
	le := binary.LittleEndian
	first := arena.buf[4096-16:]
	le.PutUint64(first[0:], 0x10000)         // data page 2
	le.PutUint64(first[8:], arena.base+4096) // chain
	le.PutUint64(arena.buf[4096:], 0x20000)  // data page 3
	le.PutUint64(arena.buf[4104:], 0x30000)  // data page 4
	segs, st := WalkPRP(dma, 0x5000, arena.base+4096-16, 4*4096, 4096)
	want := []Segment{{0x5000, 4096}, {0x10000, 4096}, {0x20000, 4096}, {0x30000, 4096}}
	if !st.Success() || !reflect.DeepEqual(segs, want) {
		t.Fatalf("walk %v %v", segs, st)
	}
	// A chain from a list with one slot left makes no progress: rejected.
	le.PutUint64(arena.buf[4096-8:], arena.base+4096-8)
	if _, st := WalkPRP(dma, 0x5000, arena.base+4096-8, 4*4096, 4096); st != StatusInvalidField {
		t.Fatalf("self-chaining list: %v", st)
	}
}

func TestPRPWalkErrors(t *testing.T) {
	dma := NewDMASpace()
	arena := newListArena(t, dma, 1, 4096)
	for _, tc := range []struct {
		name     string
		p1, p2   uint64
		length   int
		pageSize int
		want     Status
	}{
		{"prp1 not dword aligned", 0x1002, 0, 512, 4096, StatusInvalidField},
		{"prp2 page has offset", 0x1000, 0x2200, 8192, 4096, StatusInvalidField},
		{"list not qword aligned", 0x1000, arena.base + 4, 3 * 4096, 4096, StatusInvalidField},
		{"list unmapped", 0x1000, 0x40000, 3 * 4096, 4096, StatusDataTransferError},
		{"list entry offset", 0x1000, arena.base, 3 * 4096, 4096, StatusInvalidField},
		{"bad page size", 0x1000, 0, 512, 1000, StatusInvalidField},
		{"one page ignores prp2", 0x1000, 0x7, 4096, 4096, StatusSuccess},
	} {
		binary.LittleEndian.PutUint64(arena.buf, 0x3004) // an entry with an offset
		if _, st := WalkPRP(dma, tc.p1, tc.p2, tc.length, tc.pageSize); st != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, st, tc.want)
		}
	}
}

func TestBuildPRPErrors(t *testing.T) {
	if _, _, _, err := BuildPRP([]uint64{0x1000, 0x2001}, 4096, nil); err == nil {
		t.Fatal("unaligned second entry accepted")
	}
	if _, _, _, err := BuildPRP([]uint64{0x1000, 0x2000, 0x3000}, 4096, nil); !errors.Is(err, ErrPRPListShort) {
		t.Fatalf("missing list page: %v", err)
	}
	if _, err := PRPEntries(0x1001, 10, 4096); err == nil {
		t.Fatal("odd address accepted")
	}
	if _, err := PRPEntries(0x1000, 10, 3000); err == nil {
		t.Fatal("bad page size accepted")
	}
	p1, p2, used, err := BuildPRP([]uint64{0x1010}, 4096, nil)
	if err != nil || p1 != 0x1010 || p2 != 0 || used != 0 {
		t.Fatalf("single entry: %#x %#x %d %v", p1, p2, used, err)
	}
}

func ExampleBuildPRP() {
	// A 10 KiB transfer from DMA address 0x10000 spans three pages: PRP1
	// names the first, PRP2 a list holding the other two.
	entries, _ := PRPEntries(0x10000, 10<<10, 4096)
	list := PRPListPage{Addr: 0x80000, Bytes: make([]byte, 4096)}
	prp1, prp2, used, _ := BuildPRP(entries, 4096, []PRPListPage{list})
	fmt.Printf("entries %#x\nPRP1 %#x PRP2 %#x, %d list page\n", entries, prp1, prp2, used)
	// Output:
	// entries [0x10000 0x11000 0x12000]
	// PRP1 0x10000 PRP2 0x80000, 1 list page
}
