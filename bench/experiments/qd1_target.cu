// qd1_target measures where a queue-depth-1 read's time goes (L1) without
// the Go Target: one GPU thread reads 4 KiB lines through bam/queue.cuh
// against a minimal NVMe target written in C++ (one host thread that spins
// on the SQ doorbell, copies the line from a host buffer into the staging
// slot and posts the completion). If this C++ target gives the latency the
// Go Target gives, the time is on the GPU side.
//
// It prints, in order:
//   - GPU -> host -> GPU round trips, plain and behind stores to host
//     memory (does an SQE's worth of partial-line writes delay a doorbell?);
//   - the device primitives the queue is made of, one thread at a time:
//     PCIe loads of host memory (one, and 2-8 in flight in one line or in
//     eight lines), fences, atomics, __nanosleep;
//   - QD1 reads with variants of the issue (queue::issue, a single-submitter
//     issue behind one system-scope fence, the same with the SQE written by
//     four lanes, the tail lock with two fences fewer, an arrival counter
//     instead of the tail lock) and of the wait (queue::wait; a lock-free
//     peek at the CQ; harvest with time stamps of its stages; a harvest that
//     reads one entry when one command is outstanding).
// The "wait split" lines compare %globaltimer with the host's
// CLOCK_REALTIME, offset by a round trip's midpoint; the two clocks drift
// apart by about a microsecond per second, so those splits are rough. The
// stage times inside the GPU are not affected.
//
// Standalone (not part of the build): nvcc -O2 -std=c++17 -arch=sm_90
// -I../../kernels/include -o qd1 qd1_target.cu && ./qd1. Results:
// bench/results/logs/qd1-target-*.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bam/queue.cuh"

#define CK(x)                                                                              \
	do {                                                                                   \
		cudaError_t e = (x);                                                               \
		if (e != cudaSuccess) {                                                            \
			printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));       \
			exit(1);                                                                       \
		}                                                                                  \
	} while (0)

using bam::u32;
using bam::u64;
namespace V = bam::layout::vq;
namespace D = bam::detail;

constexpr u32 kDepth = 256;
constexpr u32 kLineShift = 12;
constexpr u64 kLines = 4096;  // 16 MiB of source data
constexpr u64 kSeed = 7;

// One record per command: ns (globaltimer), cycles to reserved, to issued,
// to completed.
struct rec {
	u64 ns, reserved, issued, done;
	u64 g_issued, g_done;  // %globaltimer after the doorbell, at completion
	u64 g[7];              // harvest_timed's stamps (wait modes 3 and 4)
	u64 polls;
};

// realtime_ns is the host's CLOCK_REALTIME, the clock %globaltimer follows
// (up to an offset that the round trip measures).
static u64 realtime_ns() {
	timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return static_cast<u64>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// stamps holds the target's times of each command: doorbell seen, CQE
// posted (realtime_ns), in command order.
struct stamps {
	std::vector<u64> seen, posted;
	std::atomic<size_t> n{0};
	explicit stamps(size_t cap) : seen(cap), posted(cap) {}
};

// ---------------------------------------------------------------- device

// peek_posted reports whether the CQ entry at the head has been written,
// reading it without the head lock.
__device__ bool peek_posted(const bam::queue_desc &q) {
	const u64 head = D::ld_relaxed_gpu(bam::queue::word(q, V::CQHeadOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	const uint4 e = D::ld_cqe(cq + (head & (q.depth - 1)) * 4);
	return bam::queue::posted(e.w, head, bam::queue::shift(q));
}

// wait_peek is queue::wait with the CQ read before the head lock is
// taken: the lock, its fence and its unlock only when there is an entry.
__device__ bool wait_peek(const bam::queue_desc &q, u64 t, u64 deadline, u32 *status, bool sleep) {
	const u64 cid = t & (q.depth - 1);
	u64 *state = bam::queue::cid_record(q, cid) + V::CIDStateOffset / 8;
	u64 mine = ~0ull;
	D::backoff b;
	for (u32 i = 0;; i++) {
		if (D::ld_acquire_gpu(state) == V::CIDDone) break;
		if (peek_posted(q) && bam::queue::harvest(q, cid, &mine) > 0 && mine != ~0ull) {
			*status = static_cast<u32>(mine >> V::ResultStatusShift) & 0x7fffu;
			return true;
		}
		if ((i & 7) == 7 && D::globaltimer() > deadline) return false;
		if (sleep) b.pause();
	}
	const u64 result = D::ld_relaxed_gpu(bam::queue::cid_record(q, cid) + V::CIDResultOffset / 8);
	*status = static_cast<u32>(result >> V::ResultStatusShift) & 0x7fffu;
	return true;
}

// harvest_timed is queue::harvest (bam/queue.cuh) with %globaltimer stamps
// of its stages in g[]: [0] start, [1] CQ entries loaded, [2] after the
// system-scope acquire fence, [3] results and states delivered, [4] CQ
// doorbell rung, [5] SQ head moved, [6] unlocked. Only stamps of a harvest
// that took something are kept.
__device__ u32 harvest_timed(const bam::queue_desc &q, u64 want, u64 *mine, u64 *g) {
	using namespace bam::queue;
	u64 s[7];
	s[0] = D::globaltimer();
	u64 *lock = word(q, V::HeadLockOffset);
	if (D::ld_relaxed_gpu(lock) != 0 || atomicCAS(reinterpret_cast<unsigned long long *>(lock), 0ull, 1ull) != 0) return 0;
	__threadfence();
	const u64 mask = q.depth - 1;
	const u32 sh = shift(q);
	const u64 head = D::ld_relaxed_gpu(word(q, V::CQHeadOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	u32 n = 0;
	u32 last_sqhd = 0;
	constexpr u32 W = 8;
	for (;;) {
		uint4 e[W];
#pragma unroll
		for (u32 k = 0; k < W; k++) e[k] = D::ld_cqe(cq + ((head + n + k) & mask) * 4);
		if (n >= mask || !posted(e[0].w, head + n, sh)) break;
		if (n == 0) s[1] = D::globaltimer();
		u32 m = 1;
#pragma unroll
		for (u32 k = 1; k < W; k++) {
			if (m == k && n + k < mask && posted(e[k].w, head + n + k, sh)) m = k + 1;
		}
		D::fence_acquire_sys();
		if (n == 0) s[2] = D::globaltimer();
#pragma unroll
		for (u32 k = 0; k < W; k++) {
			const u64 cid = e[k].w & 0xffffu;
			if (k < m && cid < q.depth) {
				D::st_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8, result_of(e[k]));
				if (cid == want) *mine = result_of(e[k]);
			}
		}
		D::fence_acq_rel_gpu();
		u64 prev[W];
#pragma unroll
		for (u32 k = 0; k < W; k++) {
			const u64 cid = e[k].w & 0xffffu;
			prev[k] = V::CIDInFlight;
			if (k < m && cid < q.depth) {
				prev[k] = atomicCAS(reinterpret_cast<unsigned long long *>(cid_record(q, cid) + V::CIDStateOffset / 8),
				                    static_cast<unsigned long long>(V::CIDInFlight), static_cast<unsigned long long>(V::CIDDone));
			}
		}
#pragma unroll
		for (u32 k = 0; k < W; k++) {
			if (prev[k] == V::CIDAbandoned) {
				D::st_release_gpu(cid_record(q, e[k].w & 0xffffu) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
			}
		}
#pragma unroll
		for (u32 k = 0; k < W; k++) {
			if (k < m) last_sqhd = e[k].z & 0xffffu;
		}
		if (n == 0) s[3] = D::globaltimer();
		n += m;
		if (m < W) break;
	}
	if (n > 0) {
		D::st_relaxed_gpu(word(q, V::CQHeadOffset), head + n);
		D::st_release_sys(reinterpret_cast<u32 *>(q.cq_doorbell), static_cast<u32>((head + n) & mask));
		s[4] = D::globaltimer();
		const u64 sqhead = D::ld_relaxed_gpu(word(q, V::SQHeadOffset));
		const u64 sqtail = D::ld_acquire_gpu(word(q, V::SQTailOffset));
		const u64 delta = (static_cast<u64>(last_sqhd) - sqhead) & mask;
		if (delta != 0 && delta <= sqtail - sqhead) {
			D::fence_acq_rel_gpu();
			for (u64 v = sqhead; v < sqhead + delta; v++) D::st_relaxed_gpu(turn(q, v & mask), (v >> sh) + 1);
			D::st_relaxed_gpu(word(q, V::SQHeadOffset), sqhead + delta);
		}
		s[5] = D::globaltimer();
	}
	D::st_release_gpu(lock, 0ull);
	if (n > 0) {
		s[6] = D::globaltimer();
		for (int i = 0; i < 7; i++) g[i] = s[i];
	}
	return n;
}

// wait_timed is queue::wait on harvest_timed; *polls counts its harvests.
__device__ bool wait_timed(const bam::queue_desc &q, u64 t, u64 deadline, u32 *status, u64 *g, u64 *polls, bool sleep) {
	const u64 cid = t & (q.depth - 1);
	u64 *state = bam::queue::cid_record(q, cid) + V::CIDStateOffset / 8;
	u64 mine = ~0ull;
	D::backoff b;
	for (u32 i = 0;; i++) {
		if (D::ld_acquire_gpu(state) == V::CIDDone) break;
		++*polls;
		if (harvest_timed(q, cid, &mine, g) > 0) {
			if (mine != ~0ull) {
				*status = static_cast<u32>(mine >> V::ResultStatusShift) & 0x7fffu;
				return true;
			}
			continue;
		}
		if ((i & 7) == 7 && D::globaltimer() > deadline) return false;
		if (sleep) b.pause();
	}
	const u64 result = D::ld_relaxed_gpu(bam::queue::cid_record(q, cid) + V::CIDResultOffset / 8);
	*status = static_cast<u32>(result >> V::ResultStatusShift) & 0x7fffu;
	return true;
}

__device__ __forceinline__ uint4 ld_cqe_acquire(const u32 *p) {
	uint4 v;
	asm volatile("ld.acquire.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
	return v;
}

__device__ __forceinline__ u64 cas_acquire_gpu(u64 *p, u64 expect, u64 v) {
	u64 old;
	asm volatile("atom.acquire.gpu.global.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(p), "l"(expect), "l"(v) : "memory");
	return old;
}

__device__ __forceinline__ void st_relaxed_sys(u32 *p, u32 v) {
	asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// harvest_fast is harvest_timed reworked for latency: the entry at the
// head is read with an acquire load together with the next one (two loads
// in flight, not eight), the window of eight only when the next one is
// posted too; a completion of the harvester's own CID is not delivered to
// its record; the CQ doorbell is a relaxed store; the SQ head and tail are
// read together. Stamps as harvest_timed's (the loads stage ends when the
// probe's two entries are in).
__device__ u32 harvest_fast(const bam::queue_desc &q, u64 want, u64 *mine, u64 *g) {
	using namespace bam::queue;
	u64 s[7];
	s[0] = D::globaltimer();
	u64 *lock = word(q, V::HeadLockOffset);
	if (D::ld_relaxed_gpu(lock) != 0 || cas_acquire_gpu(lock, 0ull, 1ull) != 0) return 0;
	const u64 mask = q.depth - 1;
	const u32 sh = shift(q);
	const u64 head = D::ld_relaxed_gpu(word(q, V::CQHeadOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	const uint4 e1 = D::ld_cqe(cq + ((head + 1) & mask) * 4);
	const uint4 e0 = ld_cqe_acquire(cq + (head & mask) * 4);
	u32 n = 0;
	u32 last_sqhd = 0;
	if (posted(e0.w, head, sh)) {
		s[1] = D::globaltimer();
		s[2] = s[1];
		const u64 cid = e0.w & 0xffffu;
		if (cid == want) {
			*mine = result_of(e0);
		} else if (cid < q.depth) {
			D::st_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8, result_of(e0));
			D::fence_acq_rel_gpu();
			const u64 prev = atomicCAS(reinterpret_cast<unsigned long long *>(cid_record(q, cid) + V::CIDStateOffset / 8),
			                           static_cast<unsigned long long>(V::CIDInFlight), static_cast<unsigned long long>(V::CIDDone));
			if (prev == V::CIDAbandoned) D::st_release_gpu(cid_record(q, cid) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
		}
		last_sqhd = e0.z & 0xffffu;
		n = 1;
		s[3] = D::globaltimer();
		// More behind it: the windowed loop of harvest, from n = 1.
		constexpr u32 W = 8;
		while (posted(e1.w, head + 1, sh)) {
			uint4 e[W];
#pragma unroll
			for (u32 k = 0; k < W; k++) e[k] = D::ld_cqe(cq + ((head + n + k) & mask) * 4);
			if (n >= mask || !posted(e[0].w, head + n, sh)) break;
			u32 m = 1;
#pragma unroll
			for (u32 k = 1; k < W; k++) {
				if (m == k && n + k < mask && posted(e[k].w, head + n + k, sh)) m = k + 1;
			}
			D::fence_acquire_sys();
#pragma unroll
			for (u32 k = 0; k < W; k++) {
				const u64 cid = e[k].w & 0xffffu;
				if (k < m && cid < q.depth) {
					if (cid == want) {
						*mine = result_of(e[k]);
					} else {
						D::st_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8, result_of(e[k]));
					}
				}
			}
			D::fence_acq_rel_gpu();
			u64 prev[W];
#pragma unroll
			for (u32 k = 0; k < W; k++) {
				const u64 cid = e[k].w & 0xffffu;
				prev[k] = V::CIDInFlight;
				if (k < m && cid < q.depth && cid != want) {
					prev[k] = atomicCAS(reinterpret_cast<unsigned long long *>(cid_record(q, cid) + V::CIDStateOffset / 8),
					                    static_cast<unsigned long long>(V::CIDInFlight), static_cast<unsigned long long>(V::CIDDone));
				}
			}
#pragma unroll
			for (u32 k = 0; k < W; k++) {
				if (prev[k] == V::CIDAbandoned) {
					D::st_release_gpu(cid_record(q, e[k].w & 0xffffu) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
				}
			}
#pragma unroll
			for (u32 k = 0; k < W; k++) {
				if (k < m) last_sqhd = e[k].z & 0xffffu;
			}
			n += m;
			if (m < W) break;
		}
	}
	if (n > 0) {
		D::st_relaxed_gpu(word(q, V::CQHeadOffset), head + n);
		st_relaxed_sys(reinterpret_cast<u32 *>(q.cq_doorbell), static_cast<u32>((head + n) & mask));
		s[4] = D::globaltimer();
		const u64 sqhead = D::ld_relaxed_gpu(word(q, V::SQHeadOffset));
		const u64 sqtail = D::ld_relaxed_gpu(word(q, V::SQTailOffset));
		const u64 delta = (static_cast<u64>(last_sqhd) - sqhead) & mask;
		if (delta != 0 && delta <= sqtail - sqhead) {
			D::fence_acq_rel_gpu();
			for (u64 v = sqhead; v < sqhead + delta; v++) D::st_relaxed_gpu(turn(q, v & mask), (v >> sh) + 1);
			D::st_relaxed_gpu(word(q, V::SQHeadOffset), sqhead + delta);
		}
		s[5] = D::globaltimer();
	}
	D::st_release_gpu(lock, 0ull);
	if (n > 0) {
		s[6] = D::globaltimer();
		for (int i = 0; i < 7; i++) g[i] = s[i];
	}
	return n;
}

// issue_lean is queue::issue with the tail lock taken by an acquire CAS
// (no fence after it) and the SQ tail word stored relaxed (the doorbell's
// system-scope release covers it): the same protocol, two fences fewer.
__device__ void issue_lean(const bam::queue_desc &q, u64 t, bam::nvme_command cmd) {
	using namespace bam::queue;
	const u64 mask = q.depth - 1;
	const u64 pos = t & mask;
	cmd.dw[0] = (cmd.dw[0] & 0xffffu) | (static_cast<u32>(pos) << 16);
	uint4 *sqe = reinterpret_cast<uint4 *>(q.sq + pos * 64);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + i), "r"(cmd.dw[4 * i]),
		             "r"(cmd.dw[4 * i + 1]), "r"(cmd.dw[4 * i + 2]), "r"(cmd.dw[4 * i + 3])
		             : "memory");
	}
	D::st_release_gpu(marker(q, pos), t + 1);
	__threadfence();
	u64 *lock = word(q, V::TailLockOffset);
	for (;;) {
		if (cas_acquire_gpu(lock, 0ull, 1ull) != 0) return;
		const u64 start = D::ld_relaxed_gpu(word(q, V::SQTailOffset));
		u64 tail = start;
		while (D::ld_acquire_gpu(marker(q, tail & mask)) == tail + 1) tail++;
		if (tail != start) {
			D::st_relaxed_gpu(word(q, V::SQTailOffset), tail);
			D::st_release_sys(reinterpret_cast<u32 *>(q.sq_doorbell), static_cast<u32>(tail & mask));
		}
		D::st_release_gpu(lock, 0ull);
		__threadfence();
		if (D::ld_acquire_gpu(marker(q, tail & mask)) != tail + 1) return;
	}
}

// issue_counter replaces the tail lock by an arrival counter (the tail
// lock word): a submitter sets its marker, then adds one; the one that
// found 0 flushes, and leaves only when a CAS of the count it last saw to 0
// succeeds, so an arrival during its flush makes it go round again. No
// store-load fence pair is needed: the counter's read-modify-writes order
// everything.
__device__ void issue_counter(const bam::queue_desc &q, u64 t, bam::nvme_command cmd) {
	using namespace bam::queue;
	const u64 mask = q.depth - 1;
	const u64 pos = t & mask;
	cmd.dw[0] = (cmd.dw[0] & 0xffffu) | (static_cast<u32>(pos) << 16);
	uint4 *sqe = reinterpret_cast<uint4 *>(q.sq + pos * 64);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + i), "r"(cmd.dw[4 * i]),
		             "r"(cmd.dw[4 * i + 1]), "r"(cmd.dw[4 * i + 2]), "r"(cmd.dw[4 * i + 3])
		             : "memory");
	}
	D::st_release_gpu(marker(q, pos), t + 1);
	u64 *count = word(q, V::TailLockOffset);
	u64 seen;
	asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(seen) : "l"(count) : "memory");
	if (seen != 0) return;
	seen = 1;
	for (;;) {
		const u64 start = D::ld_relaxed_gpu(word(q, V::SQTailOffset));
		u64 tail = start;
		while (D::ld_acquire_gpu(marker(q, tail & mask)) == tail + 1) tail++;
		if (tail != start) {
			D::st_relaxed_gpu(word(q, V::SQTailOffset), tail);
			D::st_release_sys(reinterpret_cast<u32 *>(q.sq_doorbell), static_cast<u32>(tail & mask));
		}
		u64 prev;
		asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, 0;" : "=l"(prev) : "l"(count), "l"(seen) : "memory");
		if (prev == seen) return;
		seen = prev;
	}
}

// wait_fast is wait_timed on harvest_fast, spinning or with backoff.
__device__ bool wait_fast(const bam::queue_desc &q, u64 t, u64 deadline, u32 *status, u64 *g, u64 *polls, bool sleep) {
	const u64 cid = t & (q.depth - 1);
	u64 *state = bam::queue::cid_record(q, cid) + V::CIDStateOffset / 8;
	u64 mine = ~0ull;
	D::backoff b;
	for (u32 i = 0;; i++) {
		if (D::ld_acquire_gpu(state) == V::CIDDone) break;
		++*polls;
		if (harvest_fast(q, cid, &mine, g) > 0) {
			if (mine != ~0ull) {
				*status = static_cast<u32>(mine >> V::ResultStatusShift) & 0x7fffu;
				return true;
			}
			continue;
		}
		if ((i & 7) == 7 && D::globaltimer() > deadline) return false;
		if (sleep) b.pause();
	}
	const u64 result = D::ld_relaxed_gpu(bam::queue::cid_record(q, cid) + V::CIDResultOffset / 8);
	*status = static_cast<u32>(result >> V::ResultStatusShift) & 0x7fffu;
	return true;
}

// issue_plain is the one-submitter issue: SQE, the tail words, one
// system-scope fence, the doorbell (BaM's order). Only valid with a single
// submitting thread.
__device__ void issue_plain(const bam::queue_desc &q, u64 t, bam::nvme_command cmd) {
	const u64 pos = t & (q.depth - 1);
	cmd.dw[0] = (cmd.dw[0] & 0xffffu) | (static_cast<u32>(pos) << 16);
	uint4 *sqe = reinterpret_cast<uint4 *>(q.sq + pos * 64);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + i), "r"(cmd.dw[4 * i]),
		             "r"(cmd.dw[4 * i + 1]), "r"(cmd.dw[4 * i + 2]), "r"(cmd.dw[4 * i + 3])
		             : "memory");
	}
	D::st_relaxed_gpu(bam::queue::marker(q, pos), t + 1);
	D::st_relaxed_gpu(bam::queue::word(q, V::SQTailOffset), t + 1);
	__threadfence_system();
	asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(q.sq_doorbell), "r"(static_cast<u32>((t + 1) & (q.depth - 1)))
	             : "memory");
}

// issue_coop is issue_plain with the SQE written by lanes 0-3 of the warp
// in one instruction (all 32 lanes call it; lane 0 rings the doorbell).
__device__ void issue_coop(const bam::queue_desc &q, u64 t, bam::nvme_command cmd) {
	const u32 lane = threadIdx.x & 31;
	const u64 pos = t & (q.depth - 1);
	cmd.dw[0] = (cmd.dw[0] & 0xffffu) | (static_cast<u32>(pos) << 16);
	uint4 *sqe = reinterpret_cast<uint4 *>(q.sq + pos * 64);
	uint4 v = make_uint4(cmd.dw[0], cmd.dw[1], cmd.dw[2], cmd.dw[3]);
#pragma unroll
	for (u32 i = 1; i < 4; i++) {
		if (lane == i) v = make_uint4(cmd.dw[4 * i], cmd.dw[4 * i + 1], cmd.dw[4 * i + 2], cmd.dw[4 * i + 3]);
	}
	if (lane < 4) asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + lane), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
	__syncwarp();
	if (lane == 0) {
		D::st_relaxed_gpu(bam::queue::marker(q, pos), t + 1);
		D::st_relaxed_gpu(bam::queue::word(q, V::SQTailOffset), t + 1);
		__threadfence_system();
		asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(q.sq_doorbell), "r"(static_cast<u32>((t + 1) & (q.depth - 1)))
		             : "memory");
	}
	__syncwarp();
}

// qd1 reads n lines one after the other; launched with one warp, lane 0
// does the work (lanes 0-3 write the SQE with issue_mode 2). wait_mode: 0
// queue::wait, 1 wait_peek with backoff, 2 wait_peek spinning. issue_mode:
// 0 queue::issue, 1 issue_plain, 2 issue_coop.
__global__ void qd1(const bam::queue_desc *qp, u64 n, int wait_mode, int issue_mode, rec *out, u64 *bad) {
	const bam::queue_desc &q = *qp;
	const u32 lane = threadIdx.x & 31;
	u64 mismatched = 0;
	for (u64 k = 0; k < n; k++) {
		const u64 line = bam::mix64(k * 31 + 5) % kLines;
		const u64 g0 = D::globaltimer();
		const u64 c0 = clock64();
		const u64 deadline = g0 + 1000000000ull;
		u64 t = 0;
		bool fail = false;
		if (lane == 0) fail = !bam::queue::reserve(q, deadline, &t);
		if (__shfl_sync(bam::full_warp_mask, fail ? 1u : 0u, 0)) {
			mismatched += 1000000;
			break;
		}
		t = __shfl_sync(bam::full_warp_mask, t, 0);
		const u64 c1 = clock64();
		u64 prp1, prp2;
		bam::queue::prps(q, t, kLineShift, &prp1, &prp2);
		const auto cmd = bam::nvme_command::read_write(bam::nvme_op_read, 1, line, 1, prp1, prp2);
		if (issue_mode == 2) {
			issue_coop(q, t, cmd);
		} else if (lane == 0) {
			if (issue_mode == 1) {
				issue_plain(q, t, cmd);
			} else if (issue_mode == 3) {
				issue_lean(q, t, cmd);
			} else if (issue_mode == 4) {
				issue_counter(q, t, cmd);
			} else {
				bam::queue::issue(q, t, cmd);
			}
		}
		const u64 c2 = clock64();
		const u64 g2 = D::globaltimer();
		if (lane == 0) {
			u32 status = 0;
			u64 g[7] = {0, 0, 0, 0, 0, 0, 0}, polls = 0;
			bool ok;
			if (wait_mode >= 5) {
				ok = wait_fast(q, t, deadline, &status, g, &polls, wait_mode == 5);
			} else if (wait_mode >= 3) {
				ok = wait_timed(q, t, deadline, &status, g, &polls, wait_mode == 3);
			} else if (wait_mode == 0) {
				ok = bam::queue::wait(q, t, deadline, &status);
			} else {
				ok = wait_peek(q, t, deadline, &status, wait_mode == 1);
			}
			const u64 c3 = clock64();
			const u64 g1 = D::globaltimer();
			if (!ok || status != 0) {
				fail = true;
			} else {
				const u64 *slot = reinterpret_cast<const u64 *>(bam::queue::staging(q, t, kLineShift));
				if (__ldcv(reinterpret_cast<const unsigned long long *>(slot)) != bam::pattern64(kSeed, line * 512)) mismatched++;
				bam::queue::retire(q, t);
				out[k] = rec{g1 - g0, c1 - c0, c2 - c0, c3 - c0, g2, g1, {g[0], g[1], g[2], g[3], g[4], g[5], g[6]}, polls};
			}
		}
		if (__shfl_sync(bam::full_warp_mask, fail ? 1u : 0u, 0)) {
			mismatched += 1000000;
			break;
		}
	}
	if (lane == 0) *bad = mismatched;
}

// roundtrip: ping a host thread n times through pinned memory and wait for
// its echo (the GPU <-> host round trip of L1). Launched with one warp;
// lane 0 pings. Before each ping, mode 1 has lane 0 store 64 bytes (an
// SQE's worth, four 16-byte stores) into host line sqe, mode 2 has lanes
// 0-3 store them in one instruction, mode 3 has lane 0 store 16 bytes, mode
// 4 stores 4 bytes into another host line (a CQ doorbell's worth) after
// mode 1's 64 bytes; each with a system-scope fence before the ping.
__global__ void roundtrip(u32 *ping, const u32 *pong, u32 *sqe, u32 *other, int mode, u64 n, u64 *ns) {
	const u32 lane = threadIdx.x & 31;
	for (u64 i = 1; i <= n; i++) {
		const u64 g0 = D::globaltimer();
		uint4 *line = reinterpret_cast<uint4 *>(sqe);
		const uint4 v = make_uint4(static_cast<u32>(i), lane, 1, 2);
		if (mode == 1 || mode == 4) {
			if (lane == 0) {
				for (int j = 0; j < 4; j++) __stwt(line + j, v);
			}
		} else if (mode == 2) {
			if (lane < 4) __stwt(line + lane, v);
		} else if (mode == 3) {
			if (lane == 0) __stwt(line, v);
		}
		if (mode == 4 && lane == 0) __stwt(other, static_cast<u32>(i));
		__syncwarp();
		if (lane == 0) {
			if (mode != 0) __threadfence_system();
			D::st_release_sys(ping, static_cast<u32>(i));
			const u64 stop = g0 + 1000000000ull;
			while (D::ld_acquire_sys(pong) != static_cast<u32>(i)) {
				if (D::globaltimer() > stop) break;
			}
			const u64 g1 = D::globaltimer();
			ns[3 * (i - 1)] = g1 - g0;
			ns[3 * (i - 1) + 1] = g0;
			ns[3 * (i - 1) + 2] = g1;
		}
		__syncwarp();
	}
}

// primitive times n repetitions of one primitive, returning total cycles
// and total ns in out[0], out[1].
__global__ void primitive(int which, u64 n, u32 *host, u64 *dev, u64 *out) {
	u64 sink = 0;
	const u64 g0 = D::globaltimer();
	const u64 c0 = clock64();
	for (u64 i = 0; i < n; i++) {
		switch (which) {
		case 0:  // PCIe load: ld.volatile of a host word
			sink += D::ld_volatile_sys(host + (i & 7) * 32);
			break;
		case 1:  // PCIe load: 16-byte CQ entry
		{
			const uint4 e = D::ld_cqe(host + (i & 7) * 32);
			sink += e.w;
			break;
		}
		case 2:  // atomicCAS on device memory
			sink += atomicCAS(reinterpret_cast<unsigned long long *>(dev), sink, sink + 1);
			break;
		case 3:  // ld.acquire.gpu of device memory
			sink += D::ld_acquire_gpu(dev + (i & 7) * 16);
			break;
		case 4:  // 64-byte SQE store to host + __threadfence_system
		{
			uint4 *p = reinterpret_cast<uint4 *>(host + 1024);
			for (int j = 0; j < 4; j++) __stwt(p + j, make_uint4(i, j, 0, 0));
			__threadfence_system();
			break;
		}
		case 5:  // 64-byte SQE store to host + st.release.gpu of a device word
		{
			uint4 *p = reinterpret_cast<uint4 *>(host + 1024);
			for (int j = 0; j < 4; j++) __stwt(p + j, make_uint4(i, j, 0, 0));
			D::st_release_gpu(dev, i);
			break;
		}
		case 6:  // st.release.sys of a host word
			D::st_release_sys(host + 2048, static_cast<u32>(i));
			break;
		case 7:  // st.release.sys of a host word, then __threadfence
			D::st_release_sys(host + 2048, static_cast<u32>(i));
			__threadfence();
			break;
		case 8:  // __nanosleep(32)
			__nanosleep(32);
			break;
		case 9:  // __nanosleep(2048)
			__nanosleep(2048);
			break;
		case 10:  // try-lock and unlock of a device word (the harvest's lock)
			if (D::ld_relaxed_gpu(dev + 64) == 0 && atomicCAS(reinterpret_cast<unsigned long long *>(dev + 64), 0ull, 1ull) == 0) {
				__threadfence();
				D::st_release_gpu(dev + 64, 0ull);
			}
			break;
		case 11:  // globaltimer read
			sink += D::globaltimer();
			break;
		case 12:
		case 13:
		case 14:  // 2, 4, 8 CQ entries of one 128-byte line in flight
		{
			const int w = 1 << (which - 11);
			uint4 e[8];
			for (int j = 0; j < 8; j++) {
				if (j < w) e[j] = D::ld_cqe(host + j * 4);
			}
			for (int j = 0; j < 8; j++) {
				if (j < w) sink += e[j].w;
			}
			break;
		}
		case 15:  // 8 loads of 16 bytes in flight, each in its own 128-byte line
		{
			uint4 e[8];
			for (int j = 0; j < 8; j++) e[j] = D::ld_cqe(host + j * 32);
			for (int j = 0; j < 8; j++) sink += e[j].w;
			break;
		}
		case 16:  // ld.acquire.sys of 16 bytes
		{
			const uint4 e = ld_cqe_acquire(host);
			sink += e.w;
			break;
		}
		case 17:  // st.relaxed.sys of a host word
			st_relaxed_sys(host + 2048, static_cast<u32>(i));
			break;
		case 18:  // acquire CAS of a device word
			sink += cas_acquire_gpu(dev, sink, sink + 1);
			break;
		case 19:  // fence.acq_rel.sys
			D::fence_acquire_sys();
			break;
		}
	}
	const u64 c1 = clock64();
	const u64 g1 = D::globaltimer();
	out[0] = c1 - c0;
	out[1] = g1 - g0;
	out[2] = sink;
}

// ------------------------------------------------------------------ host

struct host_queue {
	bam::queue_desc d;
	unsigned char *sq, *cq, *staging;
	u32 *sq_doorbell, *cq_doorbell;
	unsigned char *meta;
	u64 meta_bytes;
};

static u64 round_up(u64 v, u64 to) { return (v + to - 1) & ~(to - 1); }

static host_queue make_queue() {
	host_queue h{};
	unsigned char *ring;
	const u64 ring_bytes = kDepth * 64 + kDepth * 16 + 4096;
	CK(cudaHostAlloc(reinterpret_cast<void **>(&ring), ring_bytes, cudaHostAllocMapped));
	memset(ring, 0, ring_bytes);
	h.sq = ring;
	h.cq = ring + kDepth * 64;
	h.sq_doorbell = reinterpret_cast<u32 *>(h.cq + kDepth * 16);
	h.cq_doorbell = h.sq_doorbell + 32;
	CK(cudaHostAlloc(reinterpret_cast<void **>(&h.staging), kDepth << kLineShift, cudaHostAllocMapped));
	h.meta_bytes = V::HeaderBytes + round_up(kDepth * V::TurnStride, V::SectorBytes) +
	               round_up(kDepth * V::TailMarkerStride, V::SectorBytes) + kDepth * V::CIDRecordBytes;
	CK(cudaMalloc(&h.meta, h.meta_bytes));
	CK(cudaMemset(h.meta, 0, h.meta_bytes));
	void *dp;
	h.d.meta = reinterpret_cast<u64>(h.meta);
	CK(cudaHostGetDevicePointer(&dp, h.sq, 0));
	h.d.sq = reinterpret_cast<u64>(dp);
	CK(cudaHostGetDevicePointer(&dp, h.cq, 0));
	h.d.cq = reinterpret_cast<u64>(dp);
	CK(cudaHostGetDevicePointer(&dp, h.sq_doorbell, 0));
	h.d.sq_doorbell = reinterpret_cast<u64>(dp);
	CK(cudaHostGetDevicePointer(&dp, h.cq_doorbell, 0));
	h.d.cq_doorbell = reinterpret_cast<u64>(dp);
	CK(cudaHostGetDevicePointer(&dp, h.staging, 0));
	h.d.staging = reinterpret_cast<u64>(dp);
	h.d.staging_dma = reinterpret_cast<u64>(h.staging);  // the target's "DMA address" is the host pointer
	h.d.depth = kDepth;
	h.d.qid = 1;
	return h;
}

// serve is the minimal target: spin on the SQ doorbell, run each Read by
// copying from src into the PRP1 address, post the completion (dword 3,
// with the phase tag, last).
static void serve(host_queue *h, const unsigned char *src, std::atomic<bool> *stop, stamps *st) {
	u32 head = 0, cq_tail = 0, phase = 1;
	volatile u32 *db = h->sq_doorbell;
	while (!stop->load(std::memory_order_relaxed)) {
		const u32 tail = *db;
		if (tail == head) continue;
		const u64 seen = realtime_ns();
		std::atomic_thread_fence(std::memory_order_acquire);
		while (head != tail) {
			const u32 *sqe = reinterpret_cast<const u32 *>(h->sq + head * 64);
			const u32 cid = sqe[0] >> 16;
			const u64 prp1 = sqe[6] | static_cast<u64>(sqe[7]) << 32;
			const u64 slba = sqe[10] | static_cast<u64>(sqe[11]) << 32;
			memcpy(reinterpret_cast<void *>(prp1), src + ((slba % kLines) << kLineShift), 1u << kLineShift);
			head = (head + 1) & (kDepth - 1);
			u32 *cqe = reinterpret_cast<u32 *>(h->cq + cq_tail * 16);
			cqe[0] = 0;
			cqe[1] = 0;
			cqe[2] = head | (1u << 16);
			std::atomic_thread_fence(std::memory_order_release);
			reinterpret_cast<std::atomic<u32> *>(cqe + 3)->store(cid | (phase << 16), std::memory_order_release);
			const u64 posted = realtime_ns();
			cq_tail = (cq_tail + 1) & (kDepth - 1);
			if (cq_tail == 0) phase ^= 1;
			const size_t i = st->n.load(std::memory_order_relaxed);
			if (i < st->seen.size()) {
				st->seen[i] = seen;
				st->posted[i] = posted;
				st->n.store(i + 1, std::memory_order_release);
			}
		}
	}
}

static double pct(std::vector<double> v, double p) {
	if (v.empty()) return 0;
	std::sort(v.begin(), v.end());
	return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int main() {
	CK(cudaSetDeviceFlags(cudaDeviceMapHost));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device: %s\n", prop.name);

	std::vector<unsigned char> src(kLines << kLineShift);
	for (u64 i = 0; i < src.size() / 8; i++) {
		const u64 v = bam::pattern64(kSeed, i);
		memcpy(&src[i * 8], &v, 8);
	}

	// Round trips, plain and behind stores to host memory.
	double clock_offset = 0;
	{
		u32 *pp;
		CK(cudaHostAlloc(reinterpret_cast<void **>(&pp), 4096, cudaHostAllocMapped));
		memset(pp, 0, 4096);
		u32 *ping = pp, *pong = pp + 32, *sqe = pp + 64, *other = pp + 128;
		const u64 n = 2000;
		u64 *ns;
		CK(cudaMalloc(&ns, 3 * n * 8));
		std::vector<u64> host_seen(n + 1);
		const char *names[] = {"plain", "64 B by one lane", "64 B by four lanes", "16 B by one lane", "64 B by one lane + 4 B elsewhere", "host copies 4 KiB first"};
		unsigned char *stg;
		CK(cudaHostAlloc(reinterpret_cast<void **>(&stg), 8192, cudaHostAllocMapped));
		for (int mode = 0; mode < 6; mode++) {
			for (int reads = 0; reads < 2; reads++) {
				std::atomic<bool> stop{false};
				std::atomic<u32> sink{0};
				std::thread echo([&] {
					volatile u32 *vping = ping;
					volatile u32 *vpong = pong;
					volatile u32 *vsqe = sqe;
					u32 last = 0, acc = 0;
					while (!stop.load(std::memory_order_relaxed)) {
						const u32 v = *vping;
						if (v != last) {
							if (v <= n) host_seen[v] = realtime_ns();
							if (mode == 5) memcpy(stg, src.data() + (v % kLines) * 4096, 4096);
							if (reads) {
								for (int j = 0; j < 16; j++) acc += vsqe[j];
							}
							*vpong = v;
							last = v;
						}
					}
					sink = acc;
				});
				roundtrip<<<1, 32>>>(ping, pong, sqe, other, mode, n, ns);
				CK(cudaDeviceSynchronize());
				stop = true;
				echo.join();
				std::vector<u64> h(3 * n);
				CK(cudaMemcpy(h.data(), ns, 3 * n * 8, cudaMemcpyDeviceToHost));
				std::vector<double> d, off;
				for (u64 i = 100; i < n; i++) {
					d.push_back(h[3 * i]);
					off.push_back(static_cast<double>(static_cast<long long>(host_seen[i + 1] - (h[3 * i + 1] + h[3 * i + 2]) / 2)));
				}
				if (mode == 0 && reads == 0) {
					clock_offset = pct(off, 0.5);
					printf("host realtime - globaltimer: %.0f ns (midpoint of the round trip; p1-p99 spread %.0f ns)\n", clock_offset,
					       pct(off, 0.99) - pct(off, 0.01));
				}
				printf("round trip %-34s host %-10s p50 %.2f us p99 %.2f us\n", names[mode], reads ? "reads it" : "echoes", pct(d, 0.5) / 1e3,
				       pct(d, 0.99) / 1e3);
				memset(pp, 0, 4096);
			}
		}
	}

	// Primitives.
	{
		u32 *host;
		CK(cudaHostAlloc(reinterpret_cast<void **>(&host), 1 << 16, cudaHostAllocMapped));
		memset(host, 0, 1 << 16);
		u32 *dhost;
		CK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&dhost), host, 0));
		u64 *dev, *out;
		CK(cudaMalloc(&dev, 1 << 16));
		CK(cudaMemset(dev, 0, 1 << 16));
		CK(cudaMalloc(&out, 64));
		const char *names[] = {"PCIe load u32 (ld.volatile)",
		                       "PCIe load 16 B (ld_cqe)",
		                       "atomicCAS device word",
		                       "ld.acquire.gpu device word",
		                       "64 B to host + __threadfence_system",
		                       "64 B to host + st.release.gpu device word",
		                       "st.release.sys host word",
		                       "st.release.sys host word + __threadfence",
		                       "__nanosleep(32)",
		                       "__nanosleep(2048)",
		                       "try-lock + fence + unlock (device)",
		                       "globaltimer read",
		                       "2 CQ entries in flight (one line)",
		                       "4 CQ entries in flight (one line)",
		                       "8 CQ entries in flight (one line)",
		                       "8 x 16 B in flight (8 lines)",
		                       "ld.acquire.sys 16 B",
		                       "st.relaxed.sys host word",
		                       "atom.acquire.cas device word",
		                       "fence.acq_rel.sys alone"};
		for (int w = 0; w < 20; w++) {
			const u64 n = 4000;
			primitive<<<1, 1>>>(w, 200, dhost, dev, out);
			primitive<<<1, 1>>>(w, n, dhost, dev, out);
			CK(cudaDeviceSynchronize());
			u64 r[3];
			CK(cudaMemcpy(r, out, 24, cudaMemcpyDeviceToHost));
			printf("primitive %-44s %7.0f cycles %7.3f us\n", names[w], double(r[0]) / n, double(r[1]) / n / 1e3);
		}
	}

	// QD1 reads against the C++ target.
	host_queue h = make_queue();
	bam::queue_desc *dq;
	CK(cudaMalloc(&dq, sizeof(bam::queue_desc)));
	CK(cudaMemcpy(dq, &h.d, sizeof(h.d), cudaMemcpyHostToDevice));
	const u64 n = 3000;
	rec *out;
	u64 *bad;
	CK(cudaMalloc(&out, n * sizeof(rec)));
	CK(cudaMalloc(&bad, 8));
	stamps st(1 << 16);
	std::atomic<bool> stop{false};
	std::thread target(serve, &h, src.data(), &stop, &st);
	struct variant {
		const char *name;
		int wait_mode, issue_mode;
	} variants[] = {{"queue::issue + queue::wait", 0, 0},          {"issue_plain + queue::wait", 0, 1},
	                {"issue_coop + queue::wait", 0, 2},            {"issue_lean + queue::wait", 0, 3},
	                {"issue_counter + queue::wait", 0, 4},         {"queue::issue + wait_timed (backoff)", 3, 0},
	                {"queue::issue + wait_fast (backoff)", 5, 0},  {"queue::issue + wait_fast (spin)", 6, 0},
	                {"issue_lean + wait_fast (backoff)", 5, 3},    {"issue_counter + wait_fast (backoff)", 5, 4},
	                {"queue::issue + queue::wait (again)", 0, 0}};
	for (const auto &v : variants) {
		qd1<<<1, 32>>>(dq, 200, v.wait_mode, v.issue_mode, out, bad);  // warm-up
		CK(cudaDeviceSynchronize());
		const size_t first = st.n.load(std::memory_order_acquire);
		qd1<<<1, 32>>>(dq, n, v.wait_mode, v.issue_mode, out, bad);
		CK(cudaDeviceSynchronize());
		const size_t last = st.n.load(std::memory_order_acquire);
		std::vector<rec> r(n);
		u64 b;
		CK(cudaMemcpy(r.data(), out, n * sizeof(rec), cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(&b, bad, 8, cudaMemcpyDeviceToHost));
		double ns = 0, cyc = 0;
		std::vector<double> tot, res, iss, wai, to_seen, service, to_done, polls;
		std::vector<double> stage[8];
		for (const auto &x : r) {
			ns += x.ns;
			cyc += x.done;
		}
		const double ns_per_cycle = ns / cyc;
		for (u64 k = 0; k < n; k++) {
			const auto &x = r[k];
			tot.push_back(x.done * ns_per_cycle / 1e3);
			res.push_back(x.reserved * ns_per_cycle / 1e3);
			iss.push_back((x.issued - x.reserved) * ns_per_cycle / 1e3);
			wai.push_back((x.done - x.issued) * ns_per_cycle / 1e3);
			if (last - first == n) {
				const double seen = static_cast<double>(st.seen[first + k]) - clock_offset;
				const double posted = static_cast<double>(st.posted[first + k]) - clock_offset;
				to_seen.push_back((seen - static_cast<double>(x.g_issued)) / 1e3);
				service.push_back((posted - seen) / 1e3);
				to_done.push_back((static_cast<double>(x.g_done) - posted) / 1e3);
				if (v.wait_mode >= 3 && x.g[6] != 0) {
					stage[0].push_back((static_cast<double>(x.g[0]) - posted) / 1e3);  // successful poll started, after posting
					for (int j = 1; j < 7; j++) stage[j].push_back((static_cast<double>(x.g[j]) - static_cast<double>(x.g[j - 1])) / 1e3);
					stage[7].push_back((static_cast<double>(x.g_done) - static_cast<double>(x.g[6])) / 1e3);
					polls.push_back(static_cast<double>(x.polls));
				}
			}
		}
		printf("qd1 %-38s p50 %6.2f us p99 %6.2f | reserve %5.2f issue %5.2f wait %6.2f | bad %llu\n", v.name,
		       pct(tot, 0.5), pct(tot, 0.99), pct(res, 0.5), pct(iss, 0.5), pct(wai, 0.5), static_cast<unsigned long long>(b));
		if (!to_seen.empty()) {
			printf("    wait split p50: doorbell -> target sees it %5.2f us, service %5.2f us, CQE posted -> GPU has it %5.2f us\n",
			       pct(to_seen, 0.5), pct(service, 0.5), pct(to_done, 0.5));
		}
		if (!stage[0].empty()) {
			printf("    harvest p50: poll began %.2f us after posting; loads %.2f, sys fence %.2f, deliver %.2f, CQ doorbell %.2f, SQ head %.2f, unlock %.2f, return %.2f us; polls %.0f\n",
			       pct(stage[0], 0.5), pct(stage[1], 0.5), pct(stage[2], 0.5), pct(stage[3], 0.5), pct(stage[4], 0.5), pct(stage[5], 0.5),
			       pct(stage[6], 0.5), pct(stage[7], 0.5), pct(polls, 0.5));
		}
		if (to_seen.empty()) {
			printf("    (target stamps: %zu for %llu commands)\n", last - first, static_cast<unsigned long long>(n));
		}
	}
	stop = true;
	target.join();
	return 0;
}
