// bam/copier.cuh: the fill copier. A staging copy (a line moving between a
// staging slot in pinned host memory and the cache in device memory) is
// fast only when many lanes do it together: one lane's 16-byte loads are
// each a PCIe request of their own, so a lane alone moves a 4 KiB line in
// hundreds of microseconds, and a GPU full of lone lanes is bound by the
// request rate at about 2.5 GB/s. Lanes that own a copy but have no warp to
// share it with (a fill for one lane, a write-back) post it to a ring in
// device memory instead; the warps of a small copier kernel, running beside
// the user's kernel, take jobs off the ring and copy each with all 32 lanes,
// 512 bytes per load instruction.
//
// The ring is bounded and every wait is bounded. Posting never blocks: with
// no copier running or the ring full, the poster copies the line itself
// (declined). A job nobody takes before the copier's warps exit is
// withdrawn by its poster, who copies it itself; a copier warp that later takes the ticket
// finds it withdrawn and frees the slot. So the copier only ever makes a
// copy faster, never a condition for progress: the kernels are correct when
// it never runs (compute-sanitizer serialises kernels, for one).
//
// Protocol (tickets, as in a bounded MPMC ring with per-slot sequences):
//   - slot t&mask is free for ticket t when its seq == t. A poster takes
//     ticket t by fetch-and-add of the tail, waits until the slot is free,
//     writes the job and claim=Open, then stores seq = t+1 (release).
//   - tickets fall into CopierHeads classes (t mod CopierHeads), each with a
//     head of its own, so that copier warps do not all contend for one word.
//     A copier warp takes ticket h of class r when seq == h+1, by CAS of
//     head r; it serves its own class first and the others when its own is
//     empty, so every class is served while any copier warp runs. It then
//     claims the job: CAS claim Open -> Taken. It copies, fences (system
//     scope when the destination is host memory) and stores claim = Done
//     (release); the poster, seeing Done, frees the slot: seq = t + slots.
//   - a poster withdraws an untaken job by CAS claim Open -> Dropped; the
//     copier that takes the ticket then frees the slot itself.
// Layout: layout::engine::Copier* (internal/gpuengine/layout.go).
#ifndef BAM_COPIER_CUH
#define BAM_COPIER_CUH

#include "bam/common.cuh"
#include "bam/detail/layout.h"
#include "bam/detail/sync.cuh"

namespace bam {
namespace detail {

// copy_from_host copies the share of lane `rank` of `lanes` lanes of a
// staging slot (host memory written by the Target) into device memory:
// 16-byte chunks rank, rank+lanes, ..., up to eight loads in flight per
// lane, stores at L2 (the line's readers never load it into L1).
__device__ __forceinline__ void copy_from_host(unsigned char *to, const unsigned char *from, u64 bytes, u32 rank, u32 lanes) {
	const uint4 *src = reinterpret_cast<const uint4 *>(from);
	uint4 *dst = reinterpret_cast<uint4 *>(to);
	const u64 n = bytes / 16;
	for (u64 base = rank; base < n; base += 8ull * lanes) {
		uint4 v[8];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n) v[k] = ld_host16(src + c);
		}
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n) __stcg(dst + c, v[k]);
		}
	}
}

// copy_two_from_host is copy_from_host for two staging slots at once (from1
// may be null: the first alone), each lane's loads of both in flight
// together: a warp copying its lanes' lines one after the other then waits
// for one PCIe round trip per pair instead of per line.
__device__ __forceinline__ void copy_two_from_host(unsigned char *to0, const unsigned char *from0, u64 bytes0, unsigned char *to1,
                                                   const unsigned char *from1, u64 bytes1, u32 rank, u32 lanes) {
	const uint4 *s0 = reinterpret_cast<const uint4 *>(from0);
	const uint4 *s1 = reinterpret_cast<const uint4 *>(from1);
	uint4 *d0 = reinterpret_cast<uint4 *>(to0);
	uint4 *d1 = reinterpret_cast<uint4 *>(to1);
	const u64 n0 = bytes0 / 16;
	const u64 n1 = from1 != nullptr ? bytes1 / 16 : 0;
	const u64 n = n0 > n1 ? n0 : n1;
	for (u64 base = rank; base < n; base += 8ull * lanes) {
		uint4 a[8], b[8];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n0) a[k] = ld_host16(s0 + c);
			if (c < n1) b[k] = ld_host16(s1 + c);
		}
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n0) __stcg(d0 + c, a[k]);
			if (c < n1) __stcg(d1 + c, b[k]);
		}
	}
}

// copy_to_host is the other direction: a line (read at L2, since L1 is not
// coherent with the multiprocessors that wrote it) into a staging slot,
// with write-through stores.
__device__ __forceinline__ void copy_to_host(unsigned char *to, const unsigned char *from, u64 bytes, u32 rank, u32 lanes) {
	const uint4 *src = reinterpret_cast<const uint4 *>(from);
	uint4 *dst = reinterpret_cast<uint4 *>(to);
	const u64 n = bytes / 16;
	for (u64 base = rank; base < n; base += 8ull * lanes) {
		uint4 v[8];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n) v[k] = __ldcg(src + c);
		}
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const u64 c = base + static_cast<u64>(k) * lanes;
			if (c < n) __stwt(dst + c, v[k]);
		}
	}
}

}  // namespace detail

namespace copier {

namespace CL = layout::engine;

// Outcomes of run.
constexpr u32 copied = 0;     // a copier warp copied it
constexpr u32 declined = 1;   // not copied: the caller copies it itself
constexpr u32 timed_out = 2;  // taken but not finished by the deadline: the caller copies it itself and reports a timeout

__device__ __forceinline__ u64 *word64(u64 ring, u64 off) { return reinterpret_cast<u64 *>(ring + off); }
__device__ __forceinline__ u32 *word32(u64 ring, u64 off) { return reinterpret_cast<u32 *>(ring + off); }

// slot returns the address of ticket t's slot.
__device__ __forceinline__ u64 slot(u64 ring, u64 mask, u64 t) {
	return ring + CL::CopierSlotsOffset + (t & mask) * CL::CopierSlotBytes;
}

// running reports whether any copier warp is serving the ring.
__device__ __forceinline__ bool running(u64 ring) {
	return ring != 0 && detail::ld_relaxed_gpu(word32(ring, CL::CopierAliveOffset)) != 0;
}

// run has a copier warp copy bytes (a multiple of 16) from src to dst:
// host to device memory, or device to host memory when to_host. It returns
// copied once the data is at dst (visible to the caller, and to the host
// when to_host), declined when the caller must copy it itself (no copier
// running, or none left to take the job), or timed_out when the job's slot
// stayed taken or a copier took the job but did not finish it by deadline
// (the caller copies it itself and reports a timeout; the host then resets
// the ring). The abort word at stop (optional) ends the waits as the
// deadline does. The caller's stores to src must be visible at gpu scope
// before the call.
__device__ inline u32 run(u64 ring, unsigned char *dst, const unsigned char *src, u64 bytes, bool to_host, u64 deadline,
                          const u32 *stop = nullptr) {
	if (ring == 0) return declined;
	if (!running(ring)) {
		// Tells the host that the kernel wants a copier beside it.
		atomicAdd(reinterpret_cast<unsigned long long *>(word64(ring, CL::CopierMissedOffset)), 1ull);
		return declined;
	}
	const u64 mask = detail::ld_relaxed_gpu(word64(ring, CL::CopierMaskOffset));
	// One fetch-and-add per post: completions wake waiters in bursts, and
	// a compare-and-swap on one tail word fails for all of a burst but one.
	const u64 t = atomicAdd(reinterpret_cast<unsigned long long *>(word64(ring, CL::CopierTailOffset)), 1ull);
	const u64 s = slot(ring, mask, t);
	// The ring holds four times the jobs that can be outstanding (one per
	// queue entry), so the slot is almost always free already; when it is
	// not, its job of the previous round is about to be freed. The ticket
	// must be published whatever happens (copiers take tickets in order):
	// if the slot stays taken past the deadline, the ticket is lost and
	// the host resets the ring, as it resets queues after a timeout.
	u32 ns = 32;
	if (detail::ld_acquire_gpu(word64(s, CL::CopierSeqOffset)) != t) {
		atomicAdd(reinterpret_cast<unsigned long long *>(word64(ring, CL::CopierWaitedOffset)), 1ull);
		for (u32 i = 0; detail::ld_acquire_gpu(word64(s, CL::CopierSeqOffset)) != t; i++) {
			if ((i & 7) == 7 && detail::expired(deadline, stop)) return timed_out;
			__nanosleep(ns);
			if (ns < 1024) ns <<= 1;
		}
	}
	detail::st_relaxed_gpu(word64(s, CL::CopierSrcOffset), reinterpret_cast<u64>(src));
	detail::st_relaxed_gpu(word64(s, CL::CopierDstOffset), reinterpret_cast<u64>(dst));
	detail::st_relaxed_gpu(word32(s, CL::CopierSizeOffset), static_cast<u32>(bytes) | (to_host ? static_cast<u32>(CL::CopierToHost) : 0u));
	detail::st_relaxed_gpu(word32(s, CL::CopierClaimOffset), static_cast<u32>(CL::CopierClaimOpen));
	detail::st_release_gpu(word64(s, CL::CopierSeqOffset), t + 1);

	// An untaken job is withdrawn only when no copier runs any more (or at
	// the deadline): withdrawing it because the ring is busy would put
	// lanes back to copying alone, whose 16-byte requests slow every
	// copier's PCIe reads down, which withdraws more jobs.
	u32 *claim = word32(s, CL::CopierClaimOffset);
	ns = 64;
	for (u32 i = 0;; i++) {
		const u32 c = detail::ld_acquire_gpu(claim);
		if (c == CL::CopierClaimDone) {
			detail::st_release_gpu(word64(s, CL::CopierSeqOffset), t + mask + 1);
			return copied;
		}
		if ((i & 7) == 7) {
			const bool over = detail::expired(deadline, stop);
			if (c == CL::CopierClaimOpen && (over || !running(ring))) {
				if (atomicCAS(claim, static_cast<u32>(CL::CopierClaimOpen), static_cast<u32>(CL::CopierClaimDropped)) ==
				    CL::CopierClaimOpen) {
					atomicAdd(reinterpret_cast<unsigned long long *>(word64(ring, CL::CopierDroppedOffset)), 1ull);
					return declined;  // the copier that takes the ticket frees the slot
				}
				continue;  // taken meanwhile
			}
			if (c == CL::CopierClaimTaken && over) return timed_out;  // the slot stays used until the ring is reset
		}
		__nanosleep(ns);
		if (ns < 1024) ns <<= 1;
	}
}

// serve is the body of a copier warp: all 32 lanes call it together. It
// takes jobs until the ring's stop word holds epoch, or until no job came
// for idle_ns (the kernel it serves has ended or never started beside it).
// The last of the launch's warps (warps in all) to start stores epoch into
// started, a word of host memory: the host launches the kernel the copier
// serves after that, so that kernel's blocks cannot take every
// multiprocessor first and keep the copier from ever running beside it.
__device__ inline void serve(u64 ring, u32 epoch, u64 idle_ns, u32 *started, u32 warps) {
	const u32 lane = threadIdx.x & 31;
	const u64 mask = detail::ld_relaxed_gpu(word64(ring, CL::CopierMaskOffset));
	constexpr u32 classes = static_cast<u32>(CL::CopierHeads);
	static_assert((classes & (classes - 1)) == 0, "CopierHeads must be a power of two");
	const u32 home = static_cast<u32>(global_thread_id() >> 5) & (classes - 1);
	if (lane == 0) {
		// Counts warps of an earlier launch still draining too: then the
		// host hears early, which only costs overlap.
		if (atomicAdd(word32(ring, CL::CopierAliveOffset), 1u) + 1 >= warps && started != nullptr) {
			detail::st_release_sys(started, epoch);
		}
	}
	u64 last = detail::globaltimer();
	u32 ns = 64;
	for (u32 idle = 0;; idle++) {
		u64 h = ~0ull;
		if (lane == 0) {
			// Own class first, then the others. Another copier winning a
			// head means there are jobs: retry at once; sleep only when
			// every class is empty. An idle warp looks at its own class
			// only, and at all of them every eighth round, so that idle
			// copiers do not load the L2 the kernel beside them uses.
			const u32 scan = (idle & 7) == 0 ? classes : 1;
			for (u32 i = 0; i < scan && h == ~0ull; i++) {
				const u32 r = (home + i) & (classes - 1);
				u64 *head = word64(ring, CL::CopierHeadsOffset + r * CL::CopierHeadStride);
				for (int tries = 0; tries < 4; tries++) {
					const u64 k = detail::ld_relaxed_gpu(head);
					const u64 at = k * classes + r;
					const u64 seq = detail::ld_acquire_gpu(word64(slot(ring, mask, at), CL::CopierSeqOffset));
					if (seq != at + 1) break;
					if (atomicCAS(reinterpret_cast<unsigned long long *>(head), k, k + 1) == k) {
						h = at;
						break;
					}
				}
			}
		}
		h = __shfl_sync(full_warp_mask, h, 0);
		if (h == ~0ull) {
			u32 quit = 0;
			if (lane == 0) {
				quit = detail::ld_relaxed_gpu(word32(ring, CL::CopierStopOffset)) == epoch ||
				       detail::globaltimer() - last > idle_ns;
			}
			if (__shfl_sync(full_warp_mask, quit, 0)) break;
			__nanosleep(ns);
			if (ns < 2048) ns <<= 1;
			continue;
		}
		ns = 64;
		idle = ~0u;  // the next round, right after a job, scans every class
		const u64 s = slot(ring, mask, h);
		u32 c = 0;
		u64 src = 0, dst = 0;
		u32 size = 0;
		if (lane == 0) {
			c = atomicCAS(word32(s, CL::CopierClaimOffset), static_cast<u32>(CL::CopierClaimOpen), static_cast<u32>(CL::CopierClaimTaken));
			if (c == CL::CopierClaimOpen) {
				src = detail::ld_relaxed_gpu(word64(s, CL::CopierSrcOffset));
				dst = detail::ld_relaxed_gpu(word64(s, CL::CopierDstOffset));
				size = detail::ld_relaxed_gpu(word32(s, CL::CopierSizeOffset));
			} else {
				// Withdrawn by its poster (Dropped): free the slot.
				detail::st_release_gpu(word64(s, CL::CopierSeqOffset), h + mask + 1);
			}
		}
		c = __shfl_sync(full_warp_mask, c, 0);
		if (c != CL::CopierClaimOpen) continue;
		src = __shfl_sync(full_warp_mask, src, 0);
		dst = __shfl_sync(full_warp_mask, dst, 0);
		size = __shfl_sync(full_warp_mask, size, 0);
		const u64 bytes = size & ~static_cast<u32>(CL::CopierToHost);
		if (size & CL::CopierToHost) {
			detail::copy_to_host(reinterpret_cast<unsigned char *>(dst), reinterpret_cast<const unsigned char *>(src), bytes, lane, 32);
			__threadfence_system();
		} else {
			detail::copy_from_host(reinterpret_cast<unsigned char *>(dst), reinterpret_cast<const unsigned char *>(src), bytes, lane, 32);
			__threadfence();
		}
		__syncwarp();
		if (lane == 0) {
			detail::st_release_gpu(word32(s, CL::CopierClaimOffset), static_cast<u32>(CL::CopierClaimDone));
			atomicAdd(reinterpret_cast<unsigned long long *>(word64(ring, CL::CopierJobsOffset)), 1ull);
		}
		last = detail::globaltimer();
	}
	if (lane == 0) atomicSub(word32(ring, CL::CopierAliveOffset), 1u);
}

}  // namespace copier
}  // namespace bam

#endif  // BAM_COPIER_CUH
