package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DefaultPageSize is the memory page size (CC.MPS = 0) used for PRPs unless
// configured otherwise.
const DefaultPageSize = 4096

// prpEntrySize is the size of one PRP list entry.
const prpEntrySize = 8

// Segment is one contiguous piece of a data transfer in the DMA space.
type Segment struct {
	Addr uint64
	Len  int
}

// PRPListPage is a page the host has set aside for a PRP list: its DMA
// address and its bytes (at least one memory page, page aligned in the DMA
// space).
type PRPListPage struct {
	Addr  uint64
	Bytes []byte
}

// ErrPRPListShort is returned by BuildPRP when the list pages supplied cannot
// hold the PRP list the transfer needs.
var ErrPRPListShort = errors.New("nvme: not enough PRP list pages")

func checkPageSize(pageSize int) error {
	if pageSize < 4096 || pageSize > 1<<27 || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("nvme: page size %d: want a power of two in 4 KiB..128 MiB", pageSize)
	}
	return nil
}

// PRPEntries returns the PRP entries that describe a transfer of length bytes
// from the contiguous DMA range starting at addr: addr itself (which may carry
// a dword-aligned offset into its page), then the start of every further page
// the range touches.
func PRPEntries(addr uint64, length, pageSize int) ([]uint64, error) {
	if err := checkPageSize(pageSize); err != nil {
		return nil, err
	}
	if length <= 0 {
		return nil, fmt.Errorf("nvme: PRP transfer length %d", length)
	}
	if addr&3 != 0 {
		return nil, fmt.Errorf("nvme: PRP address %#x is not dword aligned", addr)
	}
	ps := uint64(pageSize)
	first := ps - addr%ps
	entries := []uint64{addr}
	for done, page := first, addr-addr%ps+ps; done < uint64(length); done, page = done+ps, page+ps {
		entries = append(entries, page)
	}
	return entries, nil
}

// PRPListPagesNeeded returns how many PRP list pages a transfer described by
// n PRP entries needs (0 when PRP1 and PRP2 suffice), assuming list pages
// start on a page boundary.
func PRPListPagesNeeded(n, pageSize int) int {
	if n <= 2 {
		return 0
	}
	per := pageSize / prpEntrySize
	rest := n - 1 // entries that go into the list
	pages := 1
	for rest > per {
		rest -= per - 1 // the last slot chains to the next page
		pages++
	}
	return pages
}

// BuildPRP sets PRP1 and PRP2 for the transfer whose PRP entries are given
// (entries[0] may carry an offset; the rest must be page aligned), writing
// a PRP list into lists when more than two entries are needed. It returns
// how many list pages it used.
func BuildPRP(entries []uint64, pageSize int, lists []PRPListPage) (prp1, prp2 uint64, used int, err error) {
	if err := checkPageSize(pageSize); err != nil {
		return 0, 0, 0, err
	}
	if len(entries) == 0 {
		return 0, 0, 0, fmt.Errorf("nvme: BuildPRP: no entries")
	}
	ps := uint64(pageSize)
	for i, e := range entries[1:] {
		if e%ps != 0 {
			return 0, 0, 0, fmt.Errorf("nvme: PRP entry %d (%#x) is not page aligned", i+1, e)
		}
	}
	prp1 = entries[0]
	switch len(entries) {
	case 1:
		return prp1, 0, 0, nil
	case 2:
		return prp1, entries[1], 0, nil
	}
	need := PRPListPagesNeeded(len(entries), pageSize)
	if need > len(lists) {
		return 0, 0, 0, fmt.Errorf("%w: need %d, have %d", ErrPRPListShort, need, len(lists))
	}
	per := pageSize / prpEntrySize
	rest := entries[1:]
	for p := 0; p < need; p++ {
		lp := lists[p]
		if lp.Addr%ps != 0 || len(lp.Bytes) < pageSize {
			return 0, 0, 0, fmt.Errorf("nvme: PRP list page %d at %#x: want %d page-aligned bytes", p, lp.Addr, pageSize)
		}
		n := len(rest)
		if n > per {
			n = per - 1
		}
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint64(lp.Bytes[i*prpEntrySize:], rest[i])
		}
		rest = rest[n:]
		if len(rest) > 0 {
			binary.LittleEndian.PutUint64(lp.Bytes[(per-1)*prpEntrySize:], lists[p+1].Addr)
		}
	}
	return prp1, lists[0].Addr, need, nil
}

// prpWalker turns PRP1/PRP2 of a command into segments, reading PRP list
// pages through the DMA space. Its scratch buffer is reused between calls.
type prpWalker struct {
	pageSize int
	list     []byte
	segs     []Segment
}

// walk returns the segments of a transfer of length bytes, merging
// neighbours that are contiguous in the DMA space. On a malformed PRP it
// returns StatusInvalidField; on an unreadable PRP list, StatusDataTransferError.
func (w *prpWalker) walk(dma *DMASpace, prp1, prp2 uint64, length int) ([]Segment, Status) {
	w.segs = w.segs[:0]
	if length <= 0 {
		return w.segs, StatusSuccess
	}
	ps := uint64(w.pageSize)
	if prp1&3 != 0 {
		return nil, StatusInvalidField
	}
	remaining := uint64(length)
	first := ps - prp1%ps
	if first > remaining {
		first = remaining
	}
	w.add(prp1, first)
	remaining -= first
	if remaining == 0 {
		return w.segs, StatusSuccess
	}
	if remaining <= ps {
		// PRP2 is the second data page.
		if prp2%ps != 0 {
			return nil, StatusInvalidField
		}
		w.add(prp2, remaining)
		return w.segs, StatusSuccess
	}
	// PRP2 points at a PRP list; it may start inside its page but must be
	// qword aligned.
	if prp2&7 != 0 {
		return nil, StatusInvalidField
	}
	if cap(w.list) < w.pageSize {
		w.list = make([]byte, w.pageSize)
	}
	listAddr := prp2
	for remaining > 0 {
		// Entries available in this list page, from listAddr to the page end.
		slots := (ps - listAddr%ps) / prpEntrySize
		pagesLeft := (remaining + ps - 1) / ps
		// The last slot chains to another page only when more entries
		// are needed than fit.
		useChain := pagesLeft > slots
		n := slots
		if useChain {
			n = slots - 1
		} else {
			n = pagesLeft
		}
		buf := w.list[:(n+boolToU64(useChain))*prpEntrySize]
		if err := dma.Read(listAddr, buf); err != nil {
			return nil, StatusDataTransferError
		}
		for i := uint64(0); i < n; i++ {
			e := binary.LittleEndian.Uint64(buf[i*prpEntrySize:])
			if e%ps != 0 {
				return nil, StatusInvalidField
			}
			l := ps
			if l > remaining {
				l = remaining
			}
			w.add(e, l)
			remaining -= l
		}
		if !useChain {
			break
		}
		next := binary.LittleEndian.Uint64(buf[n*prpEntrySize:])
		if next&7 != 0 || slots < 2 {
			return nil, StatusInvalidField
		}
		listAddr = next
	}
	return w.segs, StatusSuccess
}

func (w *prpWalker) add(addr, n uint64) {
	if k := len(w.segs); k > 0 && w.segs[k-1].Addr+uint64(w.segs[k-1].Len) == addr {
		w.segs[k-1].Len += int(n)
		return
	}
	w.segs = append(w.segs, Segment{Addr: addr, Len: int(n)})
}

func boolToU64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// WalkPRP returns the data segments described by PRP1 and PRP2 for a
// transfer of length bytes with the given memory page size, reading PRP list
// pages from dma. Adjacent segments contiguous in the DMA space are merged.
// A malformed PRP yields StatusInvalidField, an unreadable list
// StatusDataTransferError.
func WalkPRP(dma *DMASpace, prp1, prp2 uint64, length, pageSize int) ([]Segment, Status) {
	if checkPageSize(pageSize) != nil {
		return nil, StatusInvalidField
	}
	w := prpWalker{pageSize: pageSize}
	segs, st := w.walk(dma, prp1, prp2, length)
	return segs, st
}
