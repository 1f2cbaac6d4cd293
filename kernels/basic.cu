// basic.cu: the first kernel family: filling device arrays with the test
// pattern, gathering by an index array, and touching mapped pinned host
// memory. All kernels use grid-stride loops, so any grid size is correct;
// size the grid for occupancy, not for n.
#include "bam/common.cuh"

using bam::u32;
using bam::u64;

// bam_fill_pattern_u64 sets dst[i] = pattern64(seed, i) for i < n.
BAM_KERNEL void bam_fill_pattern_u64(u64 *__restrict__ dst, u64 n, u64 seed) {
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		dst[i] = bam::pattern64(seed, i);
	}
}

// bam_fill_pattern_u32 sets dst[i] to the low 32 bits of pattern64(seed, i).
BAM_KERNEL void bam_fill_pattern_u32(u32 *__restrict__ dst, u64 n, u64 seed) {
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		dst[i] = static_cast<u32>(bam::pattern64(seed, i));
	}
}

// gather reads out[i] = src[idx[i]] for i < n. An index at or past src_len
// reads nothing: out[i] = fallback and *out_of_range counts it (device-scope
// atomic; may be null when the caller guarantees the indices).
template <typename T>
__device__ __forceinline__ void gather(T *__restrict__ out, const T *__restrict__ src, u64 src_len,
                                       const u64 *__restrict__ idx, u64 n, T fallback,
                                       u32 *__restrict__ out_of_range) {
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		const u64 j = idx[i];
		if (j < src_len) {
			out[i] = src[j];
		} else {
			out[i] = fallback;
			if (out_of_range != nullptr) atomicAdd(out_of_range, 1u);
		}
	}
}

// bam_gather_u64: gather of 64-bit elements (see gather).
BAM_KERNEL void bam_gather_u64(u64 *__restrict__ out, const u64 *__restrict__ src, u64 src_len,
                               const u64 *__restrict__ idx, u64 n, u64 fallback, u32 *out_of_range) {
	gather<u64>(out, src, src_len, idx, n, fallback, out_of_range);
}

// bam_gather_u32: gather of 32-bit elements (see gather).
BAM_KERNEL void bam_gather_u32(u32 *__restrict__ out, const u32 *__restrict__ src, u64 src_len,
                               const u64 *__restrict__ idx, u64 n, u32 fallback, u32 *out_of_range) {
	gather<u32>(out, src, src_len, idx, n, fallback, out_of_range);
}

// bam_mapped_add_u32 adds delta to each of n words of mapped pinned host
// memory, reading and writing them across PCIe. volatile keeps every access
// a real load and store to host memory; the system-scope fence makes the
// stores visible to the host before the kernel's completion is observed
// (kernel completion already implies it; the fence documents the intent for
// callers that poll instead of synchronising).
BAM_KERNEL void bam_mapped_add_u32(volatile u32 *data, u64 n, u32 delta) {
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		data[i] = data[i] + delta;
	}
	__threadfence_system();
}
