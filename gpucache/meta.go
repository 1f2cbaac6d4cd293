package gpucache

import (
	"sync/atomic"
	"unsafe"
)

// region is a cache's metadata region: RegionBytes(sets, ways) bytes at a
// SectorBytes-aligned address, laid out as layout.go describes. Every access
// to it is atomic, so the same bytes can be handed to device code.
type region struct {
	words  []uint64 // keeps the memory alive
	base   unsafe.Pointer
	sets   uint32
	ways   uint32
	tags   uintptr // byte offsets of the arrays
	wbtags uintptr
	wayrec uintptr
	size   uintptr
}

func newRegion(sets, ways uint32) *region {
	size := RegionBytes(sets, ways)
	words := make([]uint64, (size+SectorBytes)/8)
	if mis := uintptr(unsafe.Pointer(&words[0])) % SectorBytes; mis != 0 {
		words = words[(SectorBytes-mis)/8:]
	}
	words = words[: size/8 : size/8]
	r := &region{
		words:  words,
		base:   unsafe.Pointer(&words[0]),
		sets:   sets,
		ways:   ways,
		tags:   uintptr(TagsOffset(sets, ways)),
		wbtags: uintptr(WriteBackTagsOffset(sets, ways)),
		wayrec: uintptr(WaysOffset(sets, ways)),
		size:   uintptr(size),
	}
	r.init()
	return r
}

// init puts the region in its fresh state: all zero except the tag arrays,
// which hold TagEmpty. It must not run concurrently with any other access.
func (r *region) init() {
	n := uintptr(r.sets) * uintptr(r.ways)
	for i := range r.words {
		atomic.StoreUint64(&r.words[i], 0)
	}
	for g := uintptr(0); g < n; g++ {
		atomic.StoreUint64(r.tag(g), TagEmpty)
		atomic.StoreUint64(r.wbTag(g), TagEmpty)
	}
}

// bytes returns the region as bytes, for copying into device memory.
func (r *region) bytes() []byte { return unsafe.Slice((*byte)(r.base), r.size) }

func (r *region) lock(set uint32) *uint32 {
	return (*uint32)(unsafe.Add(r.base, uintptr(set)*SetStride+SetLockOffset))
}

func (r *region) hand(set uint32) *uint32 {
	return (*uint32)(unsafe.Add(r.base, uintptr(set)*SetStride+SetHandOffset))
}

// Way-indexed accessors take the global way index g = set*ways + way.

func (r *region) tag(g uintptr) *uint64 {
	return (*uint64)(unsafe.Add(r.base, r.tags+g*TagBytes))
}

func (r *region) wbTag(g uintptr) *uint64 {
	return (*uint64)(unsafe.Add(r.base, r.wbtags+g*TagBytes))
}

func (r *region) state(g uintptr) *uint32 {
	return (*uint32)(unsafe.Add(r.base, r.wayrec+g*WayStride+WayStateOffset))
}

func (r *region) clock(g uintptr) *uint32 {
	return (*uint32)(unsafe.Add(r.base, r.wayrec+g*WayStride+WayClockOffset))
}

func (r *region) status(g uintptr) *uint32 {
	return (*uint32)(unsafe.Add(r.base, r.wayrec+g*WayStride+WayStatusOffset))
}

func (r *region) gen(g uintptr) *uint32 {
	return (*uint32)(unsafe.Add(r.base, r.wayrec+g*WayStride+WayGenOffset))
}

// genClaim makes way g's generation odd, changing it even when it is odd
// already (the last fill failed); genPublish makes it even again. Only the
// way's BUSY owner calls them (doc.go, Reads without references).
func (r *region) genClaim(g uintptr) {
	p := r.gen(g)
	v := atomic.LoadUint32(p)
	atomic.StoreUint32(p, v+1+v&1)
}

func (r *region) genPublish(g uintptr) {
	atomic.AddUint32(r.gen(g), 1)
}

// refs is the reference count held in state word s.
func refs(s uint32) uint32 { return s & StateRefMask }

// subRefs subtracts n references from the state word at p (fetch_sub(n)).
func subRefs(p *uint32, n uint32) uint32 { return atomic.AddUint32(p, ^(n - 1)) }
