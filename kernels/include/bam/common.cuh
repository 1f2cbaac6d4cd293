// bam/common.cuh: the small vocabulary every bam kernel and device header
// uses: fixed-width integer names, grid-stride indexing, the test pattern
// generator and warp reductions.
//
// Self-contained on purpose: no standard or CUDA runtime header is included,
// so the same file compiles under nvcc and under NVRTC (which has no
// standard library) without include paths.
#ifndef BAM_COMMON_CUH
#define BAM_COMMON_CUH

// BAM_KERNEL declares a kernel the host loads by name: C linkage, so the
// symbol in the PTX is the plain name.
#define BAM_KERNEL extern "C" __global__

namespace bam {

typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

static_assert(sizeof(u32) == 4 && sizeof(u64) == 8, "bam assumes 32-bit int and 64-bit long long");

// Mask of all 32 lanes of a warp, for *_sync intrinsics.
constexpr u32 full_warp_mask = 0xffffffffu;

// global_thread_id is the calling thread's index in a one-dimensional grid,
// 64-bit so grids over arrays of more than 2^32 elements do not wrap.
__device__ __forceinline__ u64 global_thread_id() {
	return static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// grid_threads is the number of threads in a one-dimensional grid: the
// stride of a grid-stride loop.
__device__ __forceinline__ u64 grid_threads() {
	return static_cast<u64>(gridDim.x) * blockDim.x;
}

// mix64 is the splitmix64 finalizer: a bijection on 64-bit words with good
// avalanche. Mirrored by kernels.Mix64 in Go; the two must stay identical.
__host__ __device__ __forceinline__ u64 mix64(u64 x) {
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

// pattern64 is element i of the test pattern with the given seed: never
// all-zero data, different for every (seed, i), and cheap to recompute on
// the host (kernels.Pattern64) to check results.
__host__ __device__ __forceinline__ u64 pattern64(u64 seed, u64 i) {
	return mix64(seed + (i + 1) * 0x9e3779b97f4a7c15ull);
}

// warp_sum returns the sum (mod 2^64) of v over the 32 lanes of the warp, in
// every lane. Precondition: all 32 lanes of the warp call it together
// (blockDim.x a multiple of 32, no lane returned early).
__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
	for (int off = 16; off > 0; off >>= 1) {
		v += __shfl_xor_sync(full_warp_mask, v, off);
	}
	return v;
}

}  // namespace bam

#endif  // BAM_COMMON_CUH
