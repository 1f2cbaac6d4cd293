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

func (r *region) status(g uintptr) *uint32 {
	return (*uint32)(unsafe.Add(r.base, r.wayrec+g*WayStride+WayStatusOffset))
}

// Tag words. tag(g) is way g's tag word: its tag (wordTag), its clock
// reference bit and its generation (wordGen; doc.go, Reads without
// references). Only the way's BUSY owner or the holder of its set's lock
// changes the tag or the generation; anyone may set or clear the clock bit
// with an atomic or/and at any time. The owner's plain stores (install,
// restore) may therefore lose a concurrent change of the clock bit, which
// costs at most one second chance of the clock policy.

// wordTag is the tag field of tag word w (TagMask in an unused slot).
func wordTag(w uint64) uint64 { return w & TagMask }

// wordGen is the generation of tag word w.
func wordGen(w uint64) uint32 { return uint32(w >> TagWordGenShift) }

// sameLine reports whether tag words a and b name the same tag at the same
// generation (their clock bits may differ).
func sameLine(a, b uint64) bool { return (a^b)&^TagWordClock == 0 }

// install gives way g the tag with an odd generation, changed even when it
// was odd already (the last fill failed), and a clear clock bit (a new line
// earns its second chance only by a hit; measured: zipf hit ratio 0.777 vs
// 0.758 with the bit set). One store, before any store to the line.
func (r *region) install(g uintptr, tag uint64) {
	p := r.tag(g)
	v := wordGen(atomic.LoadUint64(p))
	atomic.StoreUint64(p, uint64(v+1+v&1)<<TagWordGenShift|tag)
}

// publish makes way g's generation even again once the line holds its
// tag's complete data.
func (r *region) publish(g uintptr) { atomic.AddUint64(r.tag(g), 1<<TagWordGenShift) }

// restore gives way g, claimed by install, its old tag back with an even
// generation: the line still holds that tag's data, untouched.
func (r *region) restore(g uintptr, tag uint64) {
	p := r.tag(g)
	v := wordGen(atomic.LoadUint64(p))
	atomic.StoreUint64(p, uint64(v+1)<<TagWordGenShift|tag)
}

// clearTag empties way g's tag field, keeping its generation, so that a
// later install of any tag still changes the word.
func (r *region) clearTag(g uintptr) { atomic.OrUint64(r.tag(g), TagMask) }

// referenced reads way g's clock bit; setReferenced and clearReferenced
// change only that bit.
func (r *region) referenced(g uintptr) bool { return atomic.LoadUint64(r.tag(g))&TagWordClock != 0 }
func (r *region) setReferenced(g uintptr)   { atomic.OrUint64(r.tag(g), TagWordClock) }
func (r *region) clearReferenced(g uintptr) { atomic.AndUint64(r.tag(g), ^uint64(TagWordClock)) }

// refs is the reference count held in state word s.
func refs(s uint32) uint32 { return s & StateRefMask }

// subRefs subtracts n references from the state word at p (fetch_sub(n)).
func subRefs(p *uint32, n uint32) uint32 { return atomic.AddUint32(p, ^(n - 1)) }
