package prefetch

import "unsafe"

// LineBytes is the cache line size the prefetches step by.
const LineBytes = 64

// Bytes hints that the first n bytes of b will be read soon: one prefetch
// per cache line, for at most maxLines lines. An empty b does nothing.
func Bytes(b []byte, n, maxLines int) {
	n = min(n, len(b))
	if n <= 0 || maxLines <= 0 {
		return
	}
	lines := min((n+LineBytes-1)/LineBytes, maxLines)
	lines1(uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(lines))
}
