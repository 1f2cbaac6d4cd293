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

// Pages hints that b's first n bytes will be read soon, prefetching only
// the first line of each page of pageBytes: enough to start the address
// translations and let the hardware prefetchers follow each page.
func Pages(b []byte, n, pageBytes int) {
	n = min(n, len(b))
	if pageBytes <= 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for at := 0; at < n; at += pageBytes - int((base+uintptr(at))%uintptr(pageBytes)) {
		lines1(base+uintptr(at), 1)
	}
}
