// bam/detail/desc.cuh: the descriptors the host passes to kernels (array,
// queue pair) and the error record kernels fill. Their layout is defined in
// Go (internal/gpuengine/layout.go) and generated into layout.h; the
// static_asserts below tie these structs to it.
#ifndef BAM_DETAIL_DESC_CUH
#define BAM_DETAIL_DESC_CUH

#include "bam/common.cuh"
#include "bam/detail/layout.h"
#include "bam/detail/sync.cuh"

namespace bam {

// queue_desc is one NVMe queue pair as device code sees it.
struct queue_desc {
	u64 meta;          // vq metadata region (device memory)
	u64 sq;            // SQ ring, pinned host memory mapped into the device
	u64 cq;            // CQ ring, likewise
	u64 sq_doorbell;   // u32 SQ tail doorbell, likewise
	u64 cq_doorbell;   // u32 CQ head doorbell, likewise
	u64 depth;         // entries per ring, a power of two
	u64 staging;       // depth staging slots of one line each (device-mapped)
	u64 staging_dma;   // DMA address of the staging slots, for PRPs
	u64 prp_list_dma;  // DMA address of depth PRP list pages, one 4 KiB page per slot
	u64 qid;           // queue identifier
	u64 prp_list;      // device-mapped pointer to the PRP list pages
	u64 mirror;        // the staging slots' mirror in device memory, 0 for none
};

// error_record holds the failure of a launch that the host reports
// (record_error says which) and counts them all.
struct error_record {
	u32 code;
	u32 status;
	u64 index;
	u64 lba;
	u64 nsid;
	u32 count;
	u32 abort;      // set by the host (never by kernels) to stop every wait of the launch
	u32 abandoned;  // non-zero once any failure left tickets, commands or copier jobs abandoned
	u32 rank;       // error_rank of the failure held
	u32 lock;       // taken by a thread writing the failure
	u32 pad_[3];
};

// array_desc is everything bam::array<T> needs to find element i: the
// cache, the queues, the object's place on the namespaces.
struct array_desc {
	u64 cache_meta;
	u64 cache_data;
	u64 sets;
	u64 ways;
	u64 line_shift;
	u64 tags_off;
	u64 wbtags_off;
	u64 ways_off;
	u64 queues;     // const queue_desc *
	u64 nqueues;
	u64 error;      // error_record *
	u64 timeout_ns;
	u64 nns;
	u64 ns_start;   // const u64 *: first physical line of the extent, per stripe member
	u64 ns_index;   // const u64 *: namespace index (NSID - 1), per stripe member
	u64 lba_shift;  // log2 of LBAs per line
	u64 elem_count;
	u64 elem_size;
	u64 stats;      // u64 *: StatsSlots x StatsCounters
	u64 policy;
	// Fill route (DESIGN.md §3): a fill whose group has fewer lanes than
	// direct_below has the Target copy the data into the line with the copy
	// engine (the PRPs name the line); larger groups read through a staging
	// slot and copy it together. Write-backs go through the copy engine
	// whenever direct_below is not 0.
	u64 direct_below;
	// Fill copier (bam/copier.cuh): a staging copy of a group of fewer
	// lanes than copy_below, and every write-back staging copy, is posted
	// to the copier ring (0: none) and done by a whole warp of the copier
	// kernel instead of by the few lanes that own it.
	u64 copier;
	u64 copy_below;
	// The tag of line 0 when the object lies on one namespace (nns == 1):
	// line l's tag is first_tag + l, so a hit needs no stripe lookup.
	u64 first_tag;
	// Read-ahead queue pairs (bam::read_ahead): queues[nqueues] to
	// queues[nqueues + ahead_queues - 1], used by nothing else, so that
	// Reads left in flight while their warp goes on never hold an entry
	// another fill waits for.
	u64 ahead_queues;
	// Lines one read-ahead Read covers at most: each staging slot of the
	// read-ahead pairs holds that many (a power of two, 1 to 32).
	u64 ahead_lines;
};

namespace L = layout::engine;

// The layout checks run under nvcc (make kernels); NVRTC, which compiles
// user kernels at run time, has no offsetof builtin and skips them.
#ifndef __CUDACC_RTC__
#define BAM_CHECK_OFFSET(T, field, value) \
	static_assert(__builtin_offsetof(T, field) == (value), #T "." #field " disagrees with internal/gpuengine/layout.go")
BAM_CHECK_OFFSET(queue_desc, meta, L::QueueMetaOffset);
BAM_CHECK_OFFSET(queue_desc, sq, L::QueueSQOffset);
BAM_CHECK_OFFSET(queue_desc, cq, L::QueueCQOffset);
BAM_CHECK_OFFSET(queue_desc, sq_doorbell, L::QueueSQDoorbellOffset);
BAM_CHECK_OFFSET(queue_desc, cq_doorbell, L::QueueCQDoorbellOffset);
BAM_CHECK_OFFSET(queue_desc, depth, L::QueueDepthOffset);
BAM_CHECK_OFFSET(queue_desc, staging, L::QueueStagingOffset);
BAM_CHECK_OFFSET(queue_desc, staging_dma, L::QueueStagingDMAOffset);
BAM_CHECK_OFFSET(queue_desc, prp_list_dma, L::QueuePRPListDMAOffset);
BAM_CHECK_OFFSET(queue_desc, qid, L::QueueIDOffset);
BAM_CHECK_OFFSET(queue_desc, prp_list, L::QueuePRPListOffset);
BAM_CHECK_OFFSET(queue_desc, mirror, L::QueueMirrorOffset);
static_assert(sizeof(queue_desc) == L::QueueDescBytes, "queue_desc size disagrees with layout.go");
BAM_CHECK_OFFSET(error_record, code, L::ErrorCodeOffset);
BAM_CHECK_OFFSET(error_record, status, L::ErrorStatusOffset);
BAM_CHECK_OFFSET(error_record, index, L::ErrorIndexOffset);
BAM_CHECK_OFFSET(error_record, lba, L::ErrorLBAOffset);
BAM_CHECK_OFFSET(error_record, nsid, L::ErrorNSIDOffset);
BAM_CHECK_OFFSET(error_record, count, L::ErrorCountOffset);
BAM_CHECK_OFFSET(error_record, abort, L::ErrorAbortOffset);
BAM_CHECK_OFFSET(error_record, abandoned, L::ErrorAbandonedOffset);
BAM_CHECK_OFFSET(error_record, rank, L::ErrorRankOffset);
BAM_CHECK_OFFSET(error_record, lock, L::ErrorLockOffset);
static_assert(sizeof(error_record) == L::ErrorRecordBytes, "error_record size disagrees with layout.go");
BAM_CHECK_OFFSET(array_desc, cache_meta, L::ArrayCacheMetaOffset);
BAM_CHECK_OFFSET(array_desc, cache_data, L::ArrayCacheDataOffset);
BAM_CHECK_OFFSET(array_desc, sets, L::ArraySetsOffset);
BAM_CHECK_OFFSET(array_desc, ways, L::ArrayWaysOffset);
BAM_CHECK_OFFSET(array_desc, line_shift, L::ArrayLineShiftOffset);
BAM_CHECK_OFFSET(array_desc, tags_off, L::ArrayTagsOffset);
BAM_CHECK_OFFSET(array_desc, wbtags_off, L::ArrayWBTagsOffset);
BAM_CHECK_OFFSET(array_desc, ways_off, L::ArrayWaysRecOffset);
BAM_CHECK_OFFSET(array_desc, queues, L::ArrayQueuesOffset);
BAM_CHECK_OFFSET(array_desc, nqueues, L::ArrayNQueuesOffset);
BAM_CHECK_OFFSET(array_desc, error, L::ArrayErrorOffset);
BAM_CHECK_OFFSET(array_desc, timeout_ns, L::ArrayTimeoutOffset);
BAM_CHECK_OFFSET(array_desc, nns, L::ArrayNNSOffset);
BAM_CHECK_OFFSET(array_desc, ns_start, L::ArrayNSStartOffset);
BAM_CHECK_OFFSET(array_desc, ns_index, L::ArrayNSIndexOffset);
BAM_CHECK_OFFSET(array_desc, lba_shift, L::ArrayLBAShiftOffset);
BAM_CHECK_OFFSET(array_desc, elem_count, L::ArrayElemCountOffset);
BAM_CHECK_OFFSET(array_desc, elem_size, L::ArrayElemSizeOffset);
BAM_CHECK_OFFSET(array_desc, stats, L::ArrayStatsOffset);
BAM_CHECK_OFFSET(array_desc, policy, L::ArrayPolicyOffset);
BAM_CHECK_OFFSET(array_desc, direct_below, L::ArrayDirectBelowOffset);
BAM_CHECK_OFFSET(array_desc, copier, L::ArrayCopierOffset);
BAM_CHECK_OFFSET(array_desc, copy_below, L::ArrayCopyBelowOffset);
BAM_CHECK_OFFSET(array_desc, first_tag, L::ArrayFirstTagOffset);
BAM_CHECK_OFFSET(array_desc, ahead_queues, L::ArrayAheadQueuesOffset);
BAM_CHECK_OFFSET(array_desc, ahead_lines, L::ArrayAheadLinesOffset);
static_assert(sizeof(array_desc) == L::ArrayDescBytes, "array_desc size disagrees with layout.go");
#undef BAM_CHECK_OFFSET
#endif

namespace detail {

// abort_word is the launch's abort word: the host sets it when the
// launch's context ends, and every bounded wait given it (queue::reserve,
// queue::wait, copier::run, the cache's own waits) then gives up as at
// its deadline.
__device__ __forceinline__ const u32 *abort_word(const array_desc &d) {
	return &reinterpret_cast<const error_record *>(d.error)->abort;
}
__device__ __forceinline__ bool aborted(const array_desc &d) { return stopped(abort_word(d)); }

// error_rank orders failures by how likely they are the cause of the
// others rather than their consequence. Highest: a failing status, an index
// out of range, a cache too small, a submitted command's completion or the
// fill copier not coming in time (nothing else held those up); then a wait
// for a queue slot (held by an older command); then a wait for a command's
// submission, another thread's fill, a way or the lock of a set (held up by
// threads that themselves wait); lowest, a wait the host stopped. A
// failure path, so not inlined: it would grow every caller's hit path.
__device__ __forceinline__ u32 error_rank(u32 code, u32 status) {
	if (code == L::ErrCodeAborted) return 1;
	if (code != L::ErrCodeTimeout) return 4;
	const u32 kind = status & static_cast<u32>(L::WaitKindMask);
	if (kind == L::WaitCompletion || kind == L::WaitCopier) return 4;
	return kind == L::WaitTurn ? 3 : 2;  // WaitSubmit, WaitLine, WaitWay, WaitSetLock
}

// record_error counts a failure of the launch and keeps it in the record
// unless the record holds one of the same or a higher error_rank: the host
// reports the earliest failure of the highest rank. (The first failure to
// be recorded is often not the cause: a thread waiting for a line can give
// up before the thread whose dropped Read fills it, whose wait began
// later.) A timeout after the host set the abort word is recorded as an
// abort.
__device__ __noinline__ void record_error(const array_desc &d, u32 code, u32 status, u64 index, u64 lba, u64 nsid) {
	if (code == L::ErrCodeTimeout && aborted(d)) code = L::ErrCodeAborted;
	error_record *e = reinterpret_cast<error_record *>(d.error);
	// Whichever failure is kept, the host must know whether any of them
	// left something abandoned that it has to reset before the next launch
	// (a timeout, an abort, a status the Target gives a command it gave up
	// on: bit 15).
	if (code == L::ErrCodeTimeout || code == L::ErrCodeAborted || (code == L::ErrCodeStatus && (status & 0x8000u) != 0)) {
		atomicExch(&e->abandoned, 1u);
	}
	atomicAdd(&e->count, 1u);
	const u32 rank = error_rank(code, status);
	if (ld_relaxed_gpu(&e->rank) >= rank) return;
	// The record's fields change together, under its lock: a holder only
	// stores them, so the wait is short; bounded all the same (a failure
	// not kept is still counted).
	for (u32 i = 0; i < (1u << 16); i++) {
		if (atomicCAS(&e->lock, 0u, 1u) == 0u) {
			__threadfence();
			if (e->rank < rank) {
				e->status = status;
				e->index = index;
				e->lba = lba;
				e->nsid = nsid;
				e->rank = rank;
				__threadfence();
				atomicExch(&e->code, code);
			}
			__threadfence();
			atomicExch(&e->lock, 0u);
			return;
		}
		if (ld_relaxed_gpu(&e->rank) >= rank) return;
	}
}

__device__ __forceinline__ bool failed(const array_desc &d) {
	return *reinterpret_cast<volatile u32 *>(&reinterpret_cast<error_record *>(d.error)->count) != 0;
}

// count adds n to a statistics counter: a reduction with no result, on a
// global address, so the thread neither waits for it nor checks, as a
// generic 64-bit atomicAdd would, whether the address is shared memory.
// No memory clobber: a counter orders nothing, and the compiler may keep
// descriptor fields in registers across it.
__device__ __forceinline__ void count_at(u64 stats, u32 counter, u64 n) {
	if (stats == 0) return;
	u64 *s = reinterpret_cast<u64 *>(stats) + (smid() % L::StatsSlots) * L::StatsCounters + counter;
	asm volatile(
	    "{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %0;\n\tred.relaxed.gpu.global.add.u64 [g], %1;\n\t}" ::"l"(s), "l"(n));
}
__device__ __forceinline__ void count(const array_desc &d, u32 counter, u64 n) { count_at(d.stats, counter, n); }

}  // namespace detail
}  // namespace bam

#endif  // BAM_DETAIL_DESC_CUH
