// membench.cu: kernels that measure memory paths: a wide-load reading
// reduction used for zero-copy reads of pinned host memory over PCIe and
// for device memory.
#include "bam/common.cuh"

using bam::u64;

// bam_read_sum_u64 adds every 64-bit word of src (n16 16-byte vectors) into
// *sum (mod 2^64), so the reads cannot be optimised away and the host can
// check them. Each thread keeps four independent 16-byte loads in flight per
// iteration. src must be 16-byte aligned. Lanes reduce in the warp and one
// atomic per warp updates *sum; blockDim.x must be a multiple of 32 (other
// shapes fall back to one atomic per thread).
BAM_KERNEL void bam_read_sum_u64(const ulonglong2 *__restrict__ src, u64 n16, u64 *sum) {
	const u64 stride = bam::grid_threads();
	u64 i = bam::global_thread_id();
	u64 a = 0, b = 0;
	for (; i + 3 * stride < n16; i += 4 * stride) {
		const ulonglong2 v0 = src[i];
		const ulonglong2 v1 = src[i + stride];
		const ulonglong2 v2 = src[i + 2 * stride];
		const ulonglong2 v3 = src[i + 3 * stride];
		a += v0.x + v1.x + v2.x + v3.x;
		b += v0.y + v1.y + v2.y + v3.y;
	}
	for (; i < n16; i += stride) {
		const ulonglong2 v = src[i];
		a += v.x;
		b += v.y;
	}
	u64 s = a + b;
	if ((blockDim.x & 31u) != 0) {
		atomicAdd(sum, s);
		return;
	}
	s = bam::warp_sum(s);
	if ((threadIdx.x & 31u) == 0) atomicAdd(sum, s);
}
