// bam/detail/sync.cuh: loads, stores and fences with their memory scope
// spelled out, the %globaltimer clock that bounds every wait, and backoff.
//
// Scopes: metadata words (queue tickets, cache states) live in device memory
// and are shared by the GPU's threads: gpu scope. Rings, doorbells and
// staging slots live in pinned host memory shared with host threads: sys
// scope, and loads that must not be served from a cache.
#ifndef BAM_DETAIL_SYNC_CUH
#define BAM_DETAIL_SYNC_CUH

#include "bam/common.cuh"

namespace bam {
namespace detail {

__device__ __forceinline__ u64 ld_acquire_gpu(const u64 *p) {
	u64 v;
	asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ u32 ld_acquire_gpu(const u32 *p) {
	u32 v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ u64 ld_relaxed_gpu(const u64 *p) {
	u64 v;
	asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ u32 ld_relaxed_gpu(const u32 *p) {
	u32 v;
	asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

// ld_relaxed_gpu_v2 reads two adjacent u64 words (16-byte aligned) in one
// access; each word is read as by ld_relaxed_gpu.
__device__ __forceinline__ void ld_relaxed_gpu_v2(const u64 *p, u64 *a, u64 *b) {
	asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
}

// ld_acquire_gpu_v4 reads four adjacent u32 words (16-byte aligned) in one
// access, each with acquire ordering (gpu scope): the loads after it are
// not satisfied before it.
__device__ __forceinline__ uint4 ld_acquire_gpu_v4(const u32 *p) {
	uint4 v;
	asm volatile("ld.acquire.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p)
	             : "memory");
	return v;
}

__device__ __forceinline__ void st_release_gpu(u64 *p, u64 v) {
	asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_release_gpu(u32 *p, u32 v) {
	asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_gpu(u64 *p, u64 v) {
	asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_gpu(u32 *p, u32 v) {
	asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ld_acquire_sys reads a word of host memory written by a host thread; the
// loads after it see what the host wrote before it.
__device__ __forceinline__ u32 ld_acquire_sys(const u32 *p) {
	u32 v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ u32 ld_volatile_sys(const u32 *p) {
	u32 v;
	asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
}

// st_release_sys stores a doorbell in host memory after every earlier store
// of the thread (and, with a preceding fence, of the threads it synchronised
// with) is visible to the host.
__device__ __forceinline__ void st_release_sys(u32 *p, u32 v) {
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// st_relaxed_sys stores a word of host memory with no ordering of its own
// (a CQ doorbell, whose value already depends on every load it covers).
__device__ __forceinline__ void st_relaxed_sys(u32 *p, u32 v) {
	asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// cas_acquire_gpu is compare-and-swap with acquire ordering (gpu scope):
// a try-lock that sees the previous holder's writes without a fence.
__device__ __forceinline__ u64 cas_acquire_gpu(u64 *p, u64 expect, u64 v) {
	u64 old;
	asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(p), "l"(expect), "l"(v) : "memory");
	return old;
}

// atomic_add_acquire adds v to *p with acquire ordering (gpu scope) and
// returns the old value: the loads after it (the tag re-check, the line's
// data) cannot be satisfied before it, without a full fence.
__device__ __forceinline__ u32 atomic_add_acquire(u32 *p, u32 v) {
	u32 old;
	asm volatile("atom.add.acquire.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
	return old;
}

// atomic_sub_release subtracts v from *p with release ordering (gpu scope):
// the caller's loads and stores of the line come before it.
__device__ __forceinline__ void atomic_sub_release(u32 *p, u32 v) {
	asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(0u - v) : "memory");
}

// atomic_or_release sets bits in *p with release ordering (gpu scope).
__device__ __forceinline__ void atomic_or_release(u32 *p, u32 v) {
	asm volatile("red.release.gpu.global.or.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ld_cqe reads one 16-byte completion queue entry from host memory in one
// access (the controller writes dword 3, which holds the phase tag, last;
// a PCIe read of an aligned 16 bytes sees one snapshot of the entry's
// cache line).
__device__ __forceinline__ uint4 ld_cqe(const u32 *p) {
	uint4 v;
	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p)
	             : "memory");
	return v;
}

// ld_cqe_acquire is ld_cqe with acquire ordering at system scope: once it
// has seen an entry the Target posted, the loads after it see everything
// the Target wrote before the entry (the data of a Read). A fence after a
// plain load would do the same for several entries at once, at about half
// a microsecond more on the H200.
__device__ __forceinline__ uint4 ld_cqe_acquire(const u32 *p) {
	uint4 v;
	asm volatile("ld.acquire.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p)
	             : "memory");
	return v;
}

// ld_host16 reads 16 bytes of host memory written by a host thread (a
// staging slot). relaxed.sys loads are coherent with the host's writes, so
// no stale copy from an earlier use of the slot is returned, yet unlike
// volatile (.cv) loads many of them can be in flight at once.
__device__ __forceinline__ uint4 ld_host16(const uint4 *p) {
	uint4 v;
	asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p)
	             : "memory");
	return v;
}

// fence_acquire_sys orders the loads before it (completion entries read
// from host memory) before every access after it, at system scope.
__device__ __forceinline__ void fence_acquire_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// fence_acq_rel_gpu followed by relaxed stores or atomics releases, at gpu
// scope, every access before it: one fence for a batch of release stores
// instead of one per store (st.release carries a fence of its own).
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// globaltimer is the GPU's nanosecond clock; it ticks coarsely (about a
// microsecond) but never stops, which is all a bound on a wait needs.
__device__ __forceinline__ u64 globaltimer() {
	u64 t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// stopped reports whether the abort word at stop (nullptr: none) is set.
// The host writes the word with a copy while the kernel runs, so it is read
// at gpu scope, past the multiprocessor's own cache.
__device__ __forceinline__ bool stopped(const u32 *stop) { return stop != nullptr && ld_relaxed_gpu(stop) != 0; }

// expired reports whether a wait bounded by deadline and stop must give
// up: the deadline has passed or the abort word is set.
__device__ __forceinline__ bool expired(u64 deadline, const u32 *stop) { return globaltimer() > deadline || stopped(stop); }

// smid is the multiprocessor running the thread (for spreading counters).
__device__ __forceinline__ u32 smid() {
	u32 id;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
	return id;
}

// backoff sleeps the thread for a growing, capped time so that waiters do
// not steal issue slots from the threads they wait for.
struct backoff {
	u32 ns = 32;
	__device__ __forceinline__ void pause() {
		__nanosleep(ns);
		if (ns < 2048) ns <<= 1;
	}
};

// BAM_BULK_CQ_READS is 1 where ld_cq_window reads a window of completion
// entries with one bulk copy (the sm_90 build of the kernels, PTX ISA 8.0:
// nvcc 12 and later, or nvcc 11.8 with BAM_PTX_ISA_80 defined and the
// PTX's version raised by make kernels), else 0. A build may define it to
// 0 to keep the four loads.
#ifndef BAM_BULK_CQ_READS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    ((defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12) || defined(BAM_PTX_ISA_80))
#define BAM_BULK_CQ_READS 1
#else
#define BAM_BULK_CQ_READS 0
#endif
#endif

#if BAM_BULK_CQ_READS
// cq_window_slot is where a thread's bulk copies of completion entries
// land: the entries, the copies' transaction barrier, and the slot's state
// word: the block's token (bits 63-2), the parity of the barrier's next
// phase (bit 1) and busy (bit 0).
struct __align__(16) cq_window_slot {
	uint4 e[4];
	unsigned long long bar;
	unsigned long long state;
};

// cq_window_slots are a block's 32 slots. Thread (warp w, lane l) uses
// slot (l + w) mod 32, so no two lanes of a warp share one, and threads of
// different warps hand a slot on through its state word. compute-
// sanitizer's racecheck models no hand-over through atomics and reports
// each one (bench/experiments/racecheck_slots.cu), so it checks the
// compute_80 build (kernels.BuildEnv).
__device__ __forceinline__ cq_window_slot *cq_window_slots() {
	__shared__ cq_window_slot slots[32];
	return slots;
}

// cq_window_token names this block of this launch (%gridid is unique per
// launch): shared memory starts with whatever an earlier block left, so a
// slot whose state word does not carry the token has no barrier yet.
__device__ __forceinline__ unsigned long long cq_window_token() {
	unsigned long long grid;
	asm("mov.u64 %0, %%gridid;" : "=l"(grid));
	const u64 block = blockIdx.x + static_cast<u64>(gridDim.x) * (blockIdx.y + static_cast<u64>(gridDim.y) * blockIdx.z);
	return mix64(grid * 0x9e3779b97f4a7c15ull + block) << 2;
}
#endif

// ld_cq_window reads the four 16-byte completion entries at p (16-byte
// aligned, consecutive in the ring) into e. Under load, four loads of one
// line from one thread are served one after the other (about 14 us against
// 5 us for the four in one request with 2 MiB of other reads of host memory
// in flight, H200, bench/experiments/cq_poll_inflight.cu); where the build
// has it (BAM_BULK_CQ_READS), the window comes in one bulk copy of 64
// bytes into the thread's slot in shared memory, or by the four loads
// while another thread has the slot. Each entry is a snapshot of its 16
// bytes either way. Like ld_cqe, the reads are not ordered before later
// loads: the caller fences (fence_acquire_sys) once it has seen an entry
// posted.
__device__ __forceinline__ void ld_cq_window(const u32 *p, uint4 e[4]) {
#if BAM_BULK_CQ_READS
	const u32 tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	cq_window_slot *s = cq_window_slots() + (((tid & 31) + (tid >> 5)) & 31);
	const unsigned long long token = cq_window_token();
	const u32 bar = static_cast<u32>(__cvta_generic_to_shared(&s->bar));
	const unsigned long long cur = atomicAdd(&s->state, 0ull);
	bool claimed = false;
	u32 phase = 0;
	if ((cur & ~3ull) == token) {
		// The slot's barrier is this block's: claim it if free.
		claimed = (cur & 1) == 0 && atomicCAS(&s->state, cur, cur | 1) == cur;
		phase = static_cast<u32>(cur >> 1) & 1;
	} else if (atomicCAS(&s->state, cur, token | 1) == cur) {
		// First use in this block: a barrier of one arrival per phase.
		claimed = true;
		asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	if (claimed) {
		__threadfence_block();
		const u32 dst = static_cast<u32>(__cvta_generic_to_shared(&s->e[0]));
		// The copy must not overtake the last holder's reads of the slot.
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 64;" ::"r"(bar) : "memory");
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(dst),
		             "l"(p), "r"(bar)
		             : "memory");
		// Bounded like every wait; the copy of 64 bytes takes microseconds.
		// Past the bound the slot stays busy (the copy may still land in
		// it) and this read falls back to the loads.
		const u64 deadline = globaltimer() + 1000000000ull;
		u32 done = 0;
		for (u32 i = 0;; i++) {
			asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
			             : "=r"(done)
			             : "r"(bar), "r"(phase)
			             : "memory");
			if (done || ((i & 63) == 63 && globaltimer() > deadline)) break;
		}
		if (done) {
#pragma unroll
			for (int k = 0; k < 4; k++) e[k] = s->e[k];
			// The entries are in registers before the slot is handed on.
			__threadfence_block();
			atomicExch(&s->state, token | (static_cast<unsigned long long>(phase ^ 1) << 1));
			return;
		}
	}
#endif
#pragma unroll
	for (int k = 0; k < 4; k++) e[k] = ld_cqe(p + 4 * k);
}

}  // namespace detail
}  // namespace bam

#endif  // BAM_DETAIL_SYNC_CUH
