package cuda_test

import "unsafe"

// squareSource is a run-time compiled kernel that uses the device library.
const squareSource = `#include "bam/common.cuh"
BAM_KERNEL void square_pattern(bam::u64 *out, bam::u64 n) {
	for (bam::u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		const bam::u64 p = bam::pattern64(2, i);
		out[i] = p * p;
	}
}
`

func unsafeU32(b []byte) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func unsafeU64(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}
