package hugepages

import (
	"syscall"
	"unsafe"
)

// Advise asks the kernel to back b with transparent huge pages
// where it can. The cache's regions are large, long-lived and read at
// random: with 4 KiB pages nearly every lookup in a large cache also
// misses the TLB, and a page walk costs as much as the line itself (more
// under virtualisation). The advice is a hint; when it fails (THP disabled
// or absent) nothing else changes.
func Advise(b []byte) {
	const page = 4096
	if len(b) < hugePageBytes {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	skip := (page - start%page) % page
	n := (uintptr(len(b)) - skip) &^ (page - 1)
	_ = syscall.Madvise(b[skip:skip+n], syscall.MADV_HUGEPAGE)
}

// hugePageBytes is the transparent huge page size on the platforms the
// project supports (x86-64, and arm64 with 4 KiB base pages): smaller
// regions are not advised.
const hugePageBytes = 2 << 20
