// bam/coalesce.cuh: grouping the lanes of a warp that want the same thing
// (the same cache line), so one leader acts for the group: one acquire with
// the group's count, one release. BaM §7.1.
#ifndef BAM_COALESCE_CUH
#define BAM_COALESCE_CUH

#include "bam/common.cuh"

namespace bam {
namespace coalesce {

// group describes the calling lane's group among the lanes of mask.
struct group {
	u32 mask;    // lanes with the same key
	u32 leader;  // lowest lane of the group (__ffs(mask) - 1)
	u32 count;   // lanes in the group
	__device__ __forceinline__ bool is_leader() const { return (threadIdx.x & 31) == leader; }

	// broadcast sends the leader's value to every lane of the group.
	template <typename V>
	__device__ __forceinline__ V broadcast(V v) const {
		return __shfl_sync(mask, v, leader);
	}
};

// by groups the lanes of mask by key. Every lane of mask must call it.
__device__ __forceinline__ group by(u32 mask, u64 key) {
	group g;
	g.mask = __match_any_sync(mask, key);
	g.leader = __ffs(g.mask) - 1;
	g.count = __popc(g.mask);
	return g;
}

// by groups the lanes of mask by key within space (an array's descriptor,
// say): lanes group only when both match. Use it wherever lanes can come
// from different call sites: the hardware may run lanes converged inside a
// __noinline__ function that they reached from different calls, so lanes
// reading line 5 of one array and line 5 of another can share an
// __activemask() there, and grouping them by line alone would hand one
// array's line to the other's lanes.
__device__ __forceinline__ group by(u32 mask, u64 space, u64 key) {
	group g;
	g.mask = __match_any_sync(mask, key) & __match_any_sync(mask, space);
	g.leader = __ffs(g.mask) - 1;
	g.count = __popc(g.mask);
	return g;
}

// any_dirty reports whether any lane of mask wrote (the group's release
// marks the line dirty if so).
__device__ __forceinline__ bool any(u32 mask, bool pred) { return __any_sync(mask, pred); }

}  // namespace coalesce
}  // namespace bam

#endif  // BAM_COALESCE_CUH
