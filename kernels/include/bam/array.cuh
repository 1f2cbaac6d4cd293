// bam/array.cuh: the public device API. bam::array<T> is an array of T on
// storage, read and written by GPU threads through the GPU-resident cache:
//
//	__global__ void sum(bam::array<float> a, u64 n, float *out) {
//		float s = 0;
//		for (u64 i = tid; i < n; i += stride) s += a[i];   // was: const float *a
//		...
//	}
//
// Reads (a[i], a.read(i)) and writes (a.write(i, v)) group the lanes of a
// warp by cache line (bam/coalesce.cuh): the group's leader acquires the
// line once for the group, a miss is filled by NVMe commands the leader
// submits (bam/cache.cuh, bam/queue.cuh), and the leader releases it once.
// bam::array_ref<T> keeps its line referenced across consecutive accesses
// of a thread, so a thread walking a neighbour list touches the cache
// metadata once per line instead of once per element (BaM §7.2.2).
//
// Requirements: T is trivially copyable of size 1, 2, 4, 8 or 16 bytes, the
// element size the host created the array with (the host checks this when
// it binds an array to a kernel). Elements never straddle lines.
//
// Errors: an out-of-range index, a failed NVMe status, a timeout or a cache
// too small for the live references is recorded in the array's error record
// (the first one with its index, LBA and status) and the access yields T{}
// or drops the write; the host turns the record into a Go error after the
// launch. No access waits forever: every wait is bounded by the timeout the
// host configured. ok() tells a kernel that no failure was recorded, so it
// can stop early.
#ifndef BAM_ARRAY_CUH
#define BAM_ARRAY_CUH

#include "bam/cache.cuh"
#include "bam/coalesce.cuh"
#include "bam/detail/desc.cuh"

// BAM_ARRAY_BOUNDS is the launch bound for kernels that access
// bam::array: blocks of at most 256 threads, four resident per
// multiprocessor. It caps registers at 64 per thread; without it the miss
// path (queue and cache protocol, called from every access) takes about 150
// and a multiprocessor runs a single block, too few warps to hide the
// latency of the cache's atomics and of storage. Use it as
// `BAM_KERNEL void BAM_ARRAY_BOUNDS name(...)` and launch with <= 256
// threads per block.
#define BAM_ARRAY_BOUNDS __launch_bounds__(256, 4)

namespace bam {
namespace detail {

template <typename T>
__device__ __forceinline__ T load_line(const unsigned char *p) {
	static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
	              "bam::array<T>: sizeof(T) must be 1, 2, 4, 8 or 16 bytes");
	T v;
	if constexpr (sizeof(T) == 1) {
		unsigned char b = __ldcg(p);
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 2) {
		unsigned short b = __ldcg(reinterpret_cast<const unsigned short *>(p));
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 4) {
		unsigned int b = __ldcg(reinterpret_cast<const unsigned int *>(p));
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 8) {
		unsigned long long b = __ldcg(reinterpret_cast<const unsigned long long *>(p));
		v = *reinterpret_cast<const T *>(&b);
	} else {
		uint4 b = __ldcg(reinterpret_cast<const uint4 *>(p));
		v = *reinterpret_cast<const T *>(&b);
	}
	return v;
}

template <typename T>
__device__ __forceinline__ void store_line(unsigned char *p, const T &v) {
	if constexpr (sizeof(T) == 1) {
		unsigned char b = *reinterpret_cast<const unsigned char *>(&v);
		__stcg(p, b);
	} else if constexpr (sizeof(T) == 2) {
		unsigned short b = *reinterpret_cast<const unsigned short *>(&v);
		__stcg(reinterpret_cast<unsigned short *>(p), b);
	} else if constexpr (sizeof(T) == 4) {
		unsigned int b = *reinterpret_cast<const unsigned int *>(&v);
		__stcg(reinterpret_cast<unsigned int *>(p), b);
	} else if constexpr (sizeof(T) == 8) {
		unsigned long long b = *reinterpret_cast<const unsigned long long *>(&v);
		__stcg(reinterpret_cast<unsigned long long *>(p), b);
	} else {
		uint4 b = *reinterpret_cast<const uint4 *>(&v);
		__stcg(reinterpret_cast<uint4 *>(p), b);
	}
}

// elem_shift is log2(sizeof(T)); lines and elements are powers of two, so
// an index splits into line and byte offset with shifts, not a 64-bit
// division (tens of instructions on the GPU).
template <typename T>
__device__ __forceinline__ constexpr u32 elem_shift() {
	return sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : sizeof(T) == 8 ? 3 : 4;
}

// split returns element i's line and its byte offset in the line.
template <typename T>
__device__ __forceinline__ u64 split(const array_desc &d, u64 i, u64 *off) {
	const u32 shift = static_cast<u32>(d.line_shift) - elem_shift<T>();
	*off = (i & ((1ull << shift) - 1)) << elem_shift<T>();
	return i >> shift;
}

}  // namespace detail

// count_groups adds the warp's number of line acquisitions to the
// statistics with one atomic per warp access.
__device__ __forceinline__ void count_groups(const array_desc &d, u32 active, const coalesce::group &g) {
	const u32 leaders = __ballot_sync(active, g.is_leader());
	if ((threadIdx.x & 31) == static_cast<u32>(__ffs(active) - 1)) detail::count(d, layout::engine::StatAcquires, __popc(leaders));
}

// group_fill finishes a fill the group's leader left pending: every lane
// of the group copies a share of the line from the staging slot (a lane
// alone would need 256 sequential 16-byte loads across PCIe for a 4 KiB
// line), then the leader publishes it. Only lanes of the group take part,
// and they are all waiting for their leader anyway, so the copy never waits
// on a lane that might itself wait on this line. A group of fewer lanes
// than the descriptor's copy_below hands the copy to the fill copier
// (bam/copier.cuh), whose warps copy with all 32 lanes; it copies itself
// when the copier declines.
__device__ __forceinline__ void group_fill(const array_desc &d, const coalesce::group &g, cache::handle &h) {
	const u64 staging = g.broadcast(h.staging);
	if (staging == 0) return;
	const u64 way = g.broadcast(h.way);
	unsigned char *line = cache::line_data(d, way);
	const unsigned char *slot = reinterpret_cast<const unsigned char *>(staging);
	u32 offloaded = 0;
	if (g.count < d.copy_below && d.copier != 0) {
		if (g.is_leader()) offloaded = cache::offload(d, line, slot, false, detail::globaltimer() + d.timeout_ns);
		offloaded = g.broadcast(offloaded);
	}
	if (!offloaded) {
		const u32 lane = threadIdx.x & 31;
		const u32 rank = __popc(g.mask & ((1u << lane) - 1u));
		cache::copy_part(line, slot, 1ull << d.line_shift, rank, g.count);
	}
	__syncwarp(g.mask);
	if (g.is_leader()) cache::finish_fill(d, h);
}

template <typename T>
class array {
   public:
	// The kernel argument: a pointer to the descriptor the host built.
	const array_desc *desc;

	__device__ __forceinline__ u64 size() const { return desc->elem_count; }

	// ok reports that no access of this launch has failed yet.
	__device__ __forceinline__ bool ok() const { return !detail::failed(*desc); }

	// elems_per_line is how many elements one cache line holds.
	__device__ __forceinline__ u64 elems_per_line() const { return (1ull << desc->line_shift) / sizeof(T); }

	__device__ __forceinline__ T operator[](u64 i) const { return read(i); }

	// read returns element i (T{} after a recorded failure).
	__device__ T read(u64 i) const {
		const array_desc &d = *desc;
		if (i >= d.elem_count) {
			detail::record_error(d, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return T{};
		}
		u64 off;
		const u64 line = detail::split<T>(d, i, &off);
		const u32 active = __activemask();
		const coalesce::group g = coalesce::by(active, line);
		count_groups(d, active, g);
		cache::handle h{0, false, 0, 0, 0};
		if (g.is_leader()) h = cache::acquire_hit(d, cache::locate(d, line), g.count, i);
		group_fill(d, g, h);
		const u64 way = g.broadcast(h.way);
		const u32 ok = g.broadcast(static_cast<u32>(h.ok));
		T v{};
		if (ok) v = detail::load_line<T>(cache::line_data(d, way) + off);
		__syncwarp(g.mask);
		if (ok && g.is_leader()) cache::release(d, way, g.count, false);
		return v;
	}

	// write stores v at element i; the line is marked dirty and reaches
	// storage on eviction or Flush.
	__device__ void write(u64 i, const T &v) const {
		const array_desc &d = *desc;
		if (i >= d.elem_count) {
			detail::record_error(d, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return;
		}
		u64 off;
		const u64 line = detail::split<T>(d, i, &off);
		const u32 active = __activemask();
		const coalesce::group g = coalesce::by(active, line);
		count_groups(d, active, g);
		cache::handle h{0, false, 0, 0, 0};
		if (g.is_leader()) h = cache::acquire_hit(d, cache::locate(d, line), g.count, i);
		group_fill(d, g, h);
		const u64 way = g.broadcast(h.way);
		const u32 ok = g.broadcast(static_cast<u32>(h.ok));
		if (ok) detail::store_line<T>(cache::line_data(d, way) + off, v);
		__syncwarp(g.mask);
		if (ok && g.is_leader()) cache::release(d, way, g.count, true);
	}
};

// array_ref keeps one line referenced across a thread's consecutive reads.
// Lanes that move to a new line at the same call are grouped: one release
// per old line, one acquire per new line. Call release() (or let the
// destructor run) before the kernel ends; all lanes of a warp that use
// array_refs should call operator[] together for the grouping to pay.
template <typename T>
class array_ref {
	const array_desc *desc_;
	u64 line_;
	u64 way_;
	bool held_;

	__device__ void drop(u32 mask) {
		// group the lanes of mask that hold a line by way; one release each
		const u64 key = held_ ? way_ : ~0ull;
		const coalesce::group g = coalesce::by(mask, key);
		if (held_ && g.is_leader()) cache::release(*desc_, way_, g.count, false);
		held_ = false;
	}

   public:
	__device__ explicit array_ref(array<T> a) : desc_(a.desc), line_(~0ull), way_(0), held_(false) {}
	__device__ ~array_ref() { release(); }
	array_ref(const array_ref &) = delete;
	array_ref &operator=(const array_ref &) = delete;

	__device__ T operator[](u64 i) {
		const array_desc &d = *desc_;
		if (i >= d.elem_count) {
			detail::record_error(d, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return T{};
		}
		u64 off;
		const u64 line = detail::split<T>(d, i, &off);
		// The held line: no warp-wide work, no metadata, one load.
		if (held_ && line == line_) return detail::load_line<T>(cache::line_data(d, way_) + off);
		{
			// The lanes that move to another line at this call, together.
			const u32 movers = __activemask();
			drop(movers);
			const coalesce::group g = coalesce::by(movers, line);
			count_groups(d, movers, g);
			cache::handle h{0, false, 0, 0, 0};
			if (g.is_leader()) h = cache::acquire_hit(d, cache::locate(d, line), g.count, i);
			group_fill(d, g, h);
			const u64 way = g.broadcast(h.way);
			const u32 ok = g.broadcast(static_cast<u32>(h.ok));
			if (!ok) return T{};
			held_ = true;
			line_ = line;
			way_ = way;
		}
		return detail::load_line<T>(cache::line_data(d, way_) + off);
	}

	// release drops the held line (each lane its own reference).
	__device__ void release() {
		if (held_) {
			cache::release(*desc_, way_, 1, false);
			held_ = false;
		}
	}
};

}  // namespace bam

#endif  // BAM_ARRAY_CUH
