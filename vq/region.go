package vq

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// region is a queue pair's metadata region: RegionBytes(depth) bytes of
// 64-bit words at a SectorBytes-aligned address. Every access is atomic.
type region struct {
	words []uint64 // keeps the memory alive
	base  unsafe.Pointer
	depth uint32
	turns uintptr // byte offsets of the arrays
	marks uintptr
	cids  uintptr
}

// newRegion lays a region over words (allocated when nil). Caller-supplied
// words must be zeroed, SectorBytes-aligned and at least RegionBytes long.
func newRegion(words []uint64, depth uint32) (*region, error) {
	need := RegionBytes(depth)
	if words == nil {
		words = make([]uint64, (need+SectorBytes)/8)
		p := uintptr(unsafe.Pointer(&words[0]))
		if mis := p % SectorBytes; mis != 0 {
			words = words[(SectorBytes-mis)/8:]
		}
	}
	if uintptr(len(words))*8 < need {
		return nil, fmt.Errorf("vq: metadata region has %d bytes, depth %d needs %d", len(words)*8, depth, need)
	}
	if p := uintptr(unsafe.Pointer(&words[0])); p%SectorBytes != 0 {
		return nil, fmt.Errorf("vq: metadata region at %#x is not %d-byte aligned", p, SectorBytes)
	}
	return &region{
		words: words,
		base:  unsafe.Pointer(&words[0]),
		depth: depth,
		turns: TurnsOffset(depth),
		marks: TailMarkersOffset(depth),
		cids:  CIDsOffset(depth),
	}, nil
}

func (r *region) word(off uintptr) *uint64 { return (*uint64)(unsafe.Add(r.base, off)) }

func (r *region) turn(pos uint64) *uint64 { return r.word(r.turns + uintptr(pos)*TurnStride) }

func (r *region) marker(pos uint64) *uint64 {
	return r.word(r.marks + uintptr(pos)*TailMarkerStride)
}

func (r *region) cidState(cid uint16) *uint64 {
	return r.word(r.cids + uintptr(cid)*CIDRecordBytes + CIDStateOffset)
}

func (r *region) cidResult(cid uint16) *uint64 {
	return r.word(r.cids + uintptr(cid)*CIDRecordBytes + CIDResultOffset)
}

func (r *region) load(off uintptr) uint64     { return atomic.LoadUint64(r.word(off)) }
func (r *region) store(off uintptr, v uint64) { atomic.StoreUint64(r.word(off), v) }
func (r *region) tryLock(off uintptr) bool    { return atomic.CompareAndSwapUint64(r.word(off), 0, 1) }
func (r *region) unlock(off uintptr)          { atomic.StoreUint64(r.word(off), 0) }
