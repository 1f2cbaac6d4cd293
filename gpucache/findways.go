package gpucache

import (
	"sync/atomic"
	"unsafe"
)

// findWays is PeekMany's way search. On entry ways[i] is the index of the
// first way of request i's set, whose k tag words start at
// tagBase+ways[i]*TagBytes. On return ways[i] is g<<shift + offs[i] when
// way g of that set holds tags[i] (the first such way), or ^uintptr(0)
// when no way does, when offs[i] > lineMax, or when tags[i] is not a valid
// tag. The tag words are read without ordering: the search only says where
// to look, and PeekMany's last pass validates what it finds.
func findWays(tagBase unsafe.Pointer, k uintptr, tags, offs []uint64, ways []uintptr, shift uint, lineMax uint64) {
	const none = ^uintptr(0)
	offs, ways = offs[:len(tags)], ways[:len(tags)]
	for i, tag := range tags {
		base := ways[i]
		set := unsafe.Add(tagBase, base*TagBytes)
		g := none
		if k == 8 {
			// Unrolled for the common associativity (measured: 10% of
			// an all-hit lookup over DRAM; a loop over blocks of eight
			// loses it again). Checked from the last way to the first,
			// so the first match wins, as in findWays8.
			t := (*[8]uint64)(set)
			if wordTag(atomic.LoadUint64(&t[7])) == tag {
				g = base + 7
			}
			if wordTag(atomic.LoadUint64(&t[6])) == tag {
				g = base + 6
			}
			if wordTag(atomic.LoadUint64(&t[5])) == tag {
				g = base + 5
			}
			if wordTag(atomic.LoadUint64(&t[4])) == tag {
				g = base + 4
			}
			if wordTag(atomic.LoadUint64(&t[3])) == tag {
				g = base + 3
			}
			if wordTag(atomic.LoadUint64(&t[2])) == tag {
				g = base + 2
			}
			if wordTag(atomic.LoadUint64(&t[1])) == tag {
				g = base + 1
			}
			if wordTag(atomic.LoadUint64(&t[0])) == tag {
				g = base
			}
		} else {
			for w := k; w > 0; w-- {
				if wordTag(atomic.LoadUint64((*uint64)(unsafe.Add(set, (w-1)*TagBytes)))) == tag {
					g = base + w - 1
				}
			}
		}
		if g == none || offs[i] > lineMax || tag >= TagMask {
			ways[i] = none
			continue
		}
		ways[i] = g<<shift + uintptr(offs[i])
	}
}
