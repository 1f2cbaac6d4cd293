// array.cu: host-launched operations on arrays on storage, through the
// GPU-resident cache (bam/array.cuh): gather, scatter, ranges, a reduction
// and the write-back of dirty lines. One kernel per element size; the host
// picks by the array's element size. Any grid is correct: the passes share
// their positions out with bam::for_range, a line's worth per warp, taken
// from the work counter the host zeroes for each launch (next, the last
// argument), and the passes over the array's own elements fill
// bam::fill_ahead lines a warp at once.
#include "bam/array.cuh"

using bam::u32;
using bam::u64;

namespace {

template <typename T>
__device__ void gather(bam::array<T> a, const u64 *__restrict__ idx, u64 n, T *__restrict__ out, u64 *next) {
	bam::for_range(a, 0, n, [&](u64 i) { out[i] = a.read(idx[i]); }, next);
}

template <typename T>
__device__ void scatter(bam::array<T> a, const u64 *__restrict__ idx, const T *__restrict__ vals, u64 n, u64 *next) {
	bam::for_range(a, 0, n, [&](u64 i) { a.write(idx[i], vals[i]); }, next);
}

// read_range holds each chunk's line (one acquire for the warp) while it
// copies it with plain loads, where a.read(j) per element checked the
// cache's tags 32 times a line (4-byte elements, 4 KiB lines), and gives it
// back before the next chunk: a line held across the next chunk's miss
// would keep two lines a warp out of the cache's reach for a fill's time.
template <typename T>
__device__ void read_range(bam::array<T> a, u64 start, u64 n, T *__restrict__ out, u64 *next) {
	bam::array_ref<T> ref(a);
	bam::for_chunks(
	    a, start, n,
	    [&](u64 lo, u64 hi, u32 lane, u32 step) {
		    const bam::line_span<T> s = ref.span(lo);  // empty after a recorded failure
		    for (u64 j = lo + lane; j < hi; j += step) out[j - start] = s.contains(j) ? s[j] : T{};
		    ref.release();
	    },
	    next, bam::fill_ahead);
}

template <typename T>
__device__ void write_range(bam::array<T> a, u64 start, u64 n, const T *__restrict__ in, u64 *next) {
	bam::for_range(a, start, n, [&](u64 j) { a.write(j, in[j - start]); }, next, bam::fill_ahead);
}

// sum adds elements [start, start+n) into *out (integer sums wrap mod 2^64;
// floating sums accumulate in double, so their last bits depend on order).
template <typename T, typename Acc>
__device__ void sum(bam::array<T> a, u64 start, u64 n, Acc *out, u64 *next) {
	Acc s = 0;
	bam::for_range(a, start, n, [&](u64 j) { s += static_cast<Acc>(a.read(j)); }, next, bam::fill_ahead);
	atomicAdd(out, s);
}

}  // namespace

#define BAM_ARRAY_OPS(SUFFIX, T)                                                                                            \
	BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_gather_##SUFFIX(bam::array<T> a, const u64 *idx, u64 n, T *out, u64 *next) {         \
		gather<T>(a, idx, n, out, next);                                                                                     \
	}                                                                                                                        \
	BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_scatter_##SUFFIX(bam::array<T> a, const u64 *idx, const T *vals, u64 n, u64 *next) { \
		scatter<T>(a, idx, vals, n, next);                                                                                   \
	}                                                                                                                        \
	BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_read_range_##SUFFIX(bam::array<T> a, u64 start, u64 n, T *out, u64 *next) {          \
		read_range<T>(a, start, n, out, next);                                                                               \
	}                                                                                                                        \
	BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_write_range_##SUFFIX(bam::array<T> a, u64 start, u64 n, const T *in, u64 *next) {    \
		write_range<T>(a, start, n, in, next);                                                                               \
	}

BAM_ARRAY_OPS(e1, unsigned char)
BAM_ARRAY_OPS(e2, unsigned short)
BAM_ARRAY_OPS(e4, unsigned int)
BAM_ARRAY_OPS(e8, unsigned long long)
BAM_ARRAY_OPS(e16, uint4)

// Reductions over a range: bam_array_sum_<type>(array, start, n, out, next).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_sum_u32(bam::array<unsigned int> a, u64 start, u64 n, unsigned long long *out, u64 *next) {
	sum<unsigned int, unsigned long long>(a, start, n, out, next);
}
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_sum_u64(bam::array<unsigned long long> a, u64 start, u64 n, unsigned long long *out,
                                                   u64 *next) {
	sum<unsigned long long, unsigned long long>(a, start, n, out, next);
}
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_sum_f32(bam::array<float> a, u64 start, u64 n, double *out, u64 *next) {
	sum<float, double>(a, start, n, out, next);
}
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_array_sum_f64(bam::array<double> a, u64 start, u64 n, double *out, u64 *next) {
	sum<double, double>(a, start, n, out, next);
}

// bam_cache_write_back writes every dirty, unreferenced line back to
// storage (Flush's first half; the host then flushes the namespaces). One
// thread per way. desc names the cache; its element fields are unused.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_cache_write_back(const bam::array_desc *desc) {
	const u64 ways = desc->sets * desc->ways;
	for (u64 g = bam::global_thread_id(); g < ways; g += bam::grid_threads()) {
		bam::cache::write_back_way(*desc, g);
	}
}

// bam_cache_dirty_count counts ways that are VALID and DIRTY (tests check
// that a Flush leaves none behind).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_cache_dirty_count(const bam::array_desc *desc, unsigned long long *out) {
	const u64 ways = desc->sets * desc->ways;
	u64 c = 0;
	for (u64 g = bam::global_thread_id(); g < ways; g += bam::grid_threads()) {
		const u32 s = *reinterpret_cast<volatile u32 *>(bam::cache::state_at(*desc, g));
		if ((s & bam::cache::state_valid) && (s & bam::cache::state_dirty)) c++;
	}
	if (c) atomicAdd(out, c);
}

// bam_cache_release_quarantine clears BUSY on every way of the cache that
// has it and counts those ways into out. The host runs it only between
// launches, after the queue pairs were reset and no abandoned command still
// runs in storage (internal/gpuengine: Engine.settle), when a way can be
// BUSY only because a command over its line timed out (the quarantine of
// bam/cache.cuh).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_cache_release_quarantine(const bam::array_desc *desc, unsigned long long *out) {
	const u64 ways = desc->sets * desc->ways;
	u64 c = 0;
	for (u64 g = bam::global_thread_id(); g < ways; g += bam::grid_threads()) {
		u32 *state = bam::cache::state_at(*desc, g);
		if (*reinterpret_cast<volatile u32 *>(state) & bam::cache::state_busy) {
			atomicAnd(state, ~bam::cache::state_busy);
			c++;
		}
	}
	if (c) atomicAdd(out, c);
}

// bam_fill_copier runs the warps of the fill copier (bam/copier.cuh) beside
// a kernel that uses arrays: every warp serves the ring until its stop word
// holds epoch or no job came for idle_ns; the last warp to start stores
// epoch into started (device-mapped host memory). Launch with whole warps.
BAM_KERNEL void bam_fill_copier(u64 ring, u64 epoch, u64 idle_ns, u32 *started) {
	const u32 warps = (gridDim.x * blockDim.x) / 32;
	bam::copier::serve(ring, static_cast<u32>(epoch), idle_ns, started, warps);
}
