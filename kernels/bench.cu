// bench.cu: kernels that exist only to measure the GPU data path
// (internal/gpubench): NVMe reads through the device queues (Q1, Q2, L1),
// a single-lock queue baseline, a GPU -> host -> GPU round trip, cold and
// all-hit reads through bam::array and bam::array_ref, the plain
// device-array baselines, and ablations (no coalescing, atomic padding).
//
// Every kernel leaves something the host checks: sums of the data read,
// counts of completed and failed commands, mismatched words.
#include "bam/array.cuh"
#include "bam/read_ahead.cuh"

using bam::u32;
using bam::u64;

namespace {

namespace V = bam::layout::vq;
namespace L = bam::layout::engine;

// Mode bits of bam_bench_queue_read.
constexpr u64 mode_locked = 1;   // single-lock queue instead of bam::queue
constexpr u64 mode_copy = 2;     // copy each line into device memory (the bounce route)
constexpr u64 mode_verify = 4;   // compare every word with the pattern
constexpr u64 mode_latency = 8;  // record per-command latencies
constexpr u64 mode_direct = 16;  // PRPs name a line of dst: the Target's copy engine fills it (the copy-engine route)
constexpr u64 mode_copier = 32;  // with mode_copy: hand the copy to the fill copier's warps (bam/copier.cuh)
constexpr u64 mode_mirror = 64;  // with mode_copy: ask for the staging mirror when the queue is busy (queue::mirror_hint)

// Counter slots of bam_bench_queue_read.
constexpr int ctr_completed = 0;
constexpr int ctr_failed = 1;
constexpr int ctr_mismatched = 2;
constexpr int ctr_start = 3;  // %globaltimer of the first thread to start (time box origin)
constexpr int ctr_offloaded = 5;  // copies done by the fill copier (mode_copier)
constexpr int ctr_first_failure = 4;  // first failure: 1<<32 | NVMe status, 2<<32 reserve timeout, 3<<32 wait timeout, 4<<32 copier timeout

__device__ __forceinline__ void note_failure(u64 *counters, u64 what) {
	atomicCAS(reinterpret_cast<unsigned long long *>(counters + ctr_first_failure), 0ull, what);
}

__device__ __forceinline__ u64 first_start(u64 *slot) {
	const u64 seen = bam::detail::ld_relaxed_gpu(slot);
	if (seen != 0) return seen;
	const u64 now = bam::detail::globaltimer();
	const u64 prev = atomicCAS(reinterpret_cast<unsigned long long *>(slot), 0ull, static_cast<unsigned long long>(now));
	return prev != 0 ? prev : now;
}

// add_counts adds a thread's completed, failed and mismatched counts to
// the counters.
__device__ __forceinline__ void add_counts(u64 *counters, u64 done, u64 failed, u64 bad) {
	if (done) atomicAdd(reinterpret_cast<unsigned long long *>(counters + ctr_completed), done);
	if (failed) atomicAdd(reinterpret_cast<unsigned long long *>(counters + ctr_failed), failed);
	if (bad) atomicAdd(reinterpret_cast<unsigned long long *>(counters + ctr_mismatched), bad);
}

__device__ __forceinline__ u64 cycles() {
	u64 c;
	asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
	return c;
}

// lockq is BaM's "locking" queue on the same queue memory: one spin lock
// per queue pair (the vq tail-lock word) around enqueue plus doorbell, and
// the same lock around dequeuing completions; the CQ entry at the head is
// peeked without the lock. The CID of a command is its SQ position, free
// again when its submitter retires it, as in bam::queue. Used only as the
// baseline of Q1; the queue metadata must be zeroed before switching
// between it and bam::queue.
namespace lockq {

using bam::queue_desc;
namespace Q = bam::queue;
namespace D = bam::detail;

// lock spins (with backoff) until it holds q's lock; false once the
// clock passes limit.
__device__ __forceinline__ bool lock(const queue_desc &q, u64 limit) {
	u64 *w = Q::word(q, V::TailLockOffset);
	D::backoff b;
	for (u32 i = 0;; i++) {
		if (D::ld_relaxed_gpu(w) == 0 && atomicCAS(reinterpret_cast<unsigned long long *>(w), 0ull, 1ull) == 0) {
			__threadfence();
			return true;
		}
		if ((i & 7) == 7 && D::globaltimer() > limit) return false;
		b.pause();
	}
}

__device__ __forceinline__ void unlock(const queue_desc &q) {
	// Doorbell stores of this holder reach the host before the next one's.
	__threadfence_system();
	atomicExch(reinterpret_cast<unsigned long long *>(Q::word(q, V::TailLockOffset)), 0ull);
}

// drain takes every valid completion at the CQ head. Caller holds the lock.
__device__ void drain(const queue_desc &q) {
	const u64 mask = q.depth - 1;
	const u32 sh = Q::shift(q);
	const u64 head = D::ld_relaxed_gpu(Q::word(q, V::CQHeadOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	u64 n = 0;
	u32 last_sqhd = 0;
	while (n < mask) {
		const u64 p = head + n;
		const u64 slot = p & mask;
		const u32 dw3 = D::ld_acquire_sys(cq + slot * 4 + 3);
		const u32 expected = ((p >> sh) & 1) == 0 ? 1u : 0u;
		if (((dw3 >> 16) & 1u) != expected) break;
		const u32 dw0 = D::ld_volatile_sys(cq + slot * 4 + 0);
		const u32 dw2 = D::ld_volatile_sys(cq + slot * 4 + 2);
		const u64 cid = dw3 & 0xffffu;
		last_sqhd = dw2 & 0xffffu;
		if (cid < q.depth) {
			u64 *rec = Q::cid_record(q, cid);
			const u64 result = (static_cast<u64>(dw0) << V::ResultDW0Shift) |
			                   (static_cast<u64>(dw2 & 0xffffu) << V::ResultSQHDShift) |
			                   (static_cast<u64>(dw3 >> 17) << V::ResultStatusShift);
			D::st_relaxed_gpu(rec + V::CIDResultOffset / 8, result);
			__threadfence();
			const u64 prev = atomicCAS(reinterpret_cast<unsigned long long *>(rec + V::CIDStateOffset / 8),
			                           static_cast<unsigned long long>(V::CIDInFlight),
			                           static_cast<unsigned long long>(V::CIDDone));
			if (prev == V::CIDAbandoned) D::st_release_gpu(rec + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
		}
		n++;
	}
	if (n == 0) return;
	D::st_relaxed_gpu(Q::word(q, V::CQHeadOffset), head + n);
	D::st_release_sys(reinterpret_cast<u32 *>(q.cq_doorbell), static_cast<u32>((head + n) & mask));
	const u64 sqhead = D::ld_relaxed_gpu(Q::word(q, V::SQHeadOffset));
	const u64 sqtail = D::ld_relaxed_gpu(Q::word(q, V::SQTailOffset));
	const u64 delta = (static_cast<u64>(last_sqhd) - sqhead) & mask;
	if (delta != 0 && delta <= sqtail - sqhead) D::st_relaxed_gpu(Q::word(q, V::SQHeadOffset), sqhead + delta);
}

// completion_at_head peeks (without the lock) whether the CQ head holds a
// new entry.
__device__ __forceinline__ bool completion_at_head(const queue_desc &q) {
	const u64 head = D::ld_relaxed_gpu(Q::word(q, V::CQHeadOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	const u32 dw3 = D::ld_volatile_sys(cq + (head & (q.depth - 1)) * 4 + 3);
	const u32 expected = ((head >> Q::shift(q)) & 1) == 0 ? 1u : 0u;
	return ((dw3 >> 16) & 1u) == expected;
}

// Results of submit_read.
constexpr int submitted = 0;
constexpr int stopped = 1;    // the time box ended before the command was enqueued
constexpr int timed_out = 2;  // the deadline passed before the command was enqueued

// submit_read enqueues a Read of one line into the staging slot of its
// position; *pos receives the position (= CID). Gives up, enqueueing
// nothing, when the clock passes stop (the benchmark's time box) or the
// deadline.
__device__ int submit_read(const queue_desc &q, u32 nsid, u64 lba, u32 blocks, u32 line_shift, u64 deadline, u64 stop,
                           u64 *pos) {
	const u64 mask = q.depth - 1;
	const u64 limit = stop < deadline ? stop : deadline;
	D::backoff b;
	for (;;) {
		if (!lock(q, limit)) return D::globaltimer() > deadline ? timed_out : stopped;
		const u64 tail = D::ld_relaxed_gpu(Q::word(q, V::SQTailOffset));
		const u64 head = D::ld_relaxed_gpu(Q::word(q, V::SQHeadOffset));
		const u64 p = tail & mask;
		u64 *state = Q::cid_record(q, p) + V::CIDStateOffset / 8;
		if (tail - head < mask && D::ld_acquire_gpu(state) == V::CIDFree) {
			D::st_relaxed_gpu(state, static_cast<u64>(V::CIDInFlight));
			u64 prp1, prp2;
			Q::prps(q, p, line_shift, &prp1, &prp2);
			bam::nvme_command cmd = bam::nvme_command::read_write(bam::nvme_op_read, nsid, lba, blocks, prp1, prp2);
			cmd.dw[0] = (cmd.dw[0] & 0xffffu) | (static_cast<u32>(p) << 16);
			uint4 *sqe = reinterpret_cast<uint4 *>(q.sq + p * 64);
#pragma unroll
			for (int i = 0; i < 4; i++) {
				asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + i), "r"(cmd.dw[4 * i]),
				             "r"(cmd.dw[4 * i + 1]), "r"(cmd.dw[4 * i + 2]), "r"(cmd.dw[4 * i + 3])
				             : "memory");
			}
			__threadfence_system();
			D::st_relaxed_gpu(Q::word(q, V::SQTailOffset), tail + 1);
			D::st_release_sys(reinterpret_cast<u32 *>(q.sq_doorbell), static_cast<u32>((tail + 1) & mask));
			unlock(q);
			*pos = p;
			return submitted;
		}
		// Full, or the position's previous command not retired: help
		// dequeue, then retry.
		if (completion_at_head(q)) drain(q);
		unlock(q);
		const u64 now = D::globaltimer();
		if (now > deadline) return timed_out;
		if (now > stop) return stopped;
		b.pause();
	}
}

// wait polls the command's CID record; when the CQ head shows a new entry
// it takes the lock and dequeues. False on timeout (the CID is abandoned).
__device__ bool wait(const queue_desc &q, u64 pos, u64 deadline, u32 *status) {
	u64 *state = Q::cid_record(q, pos) + V::CIDStateOffset / 8;
	D::backoff b;
	for (u32 i = 0;; i++) {
		if (D::ld_acquire_gpu(state) == V::CIDDone) break;
		if (completion_at_head(q)) {
			if (lock(q, deadline)) {
				drain(q);
				unlock(q);
				continue;
			}
		}
		if ((i & 7) == 7 && D::globaltimer() > deadline) {
			if (atomicCAS(reinterpret_cast<unsigned long long *>(state), static_cast<unsigned long long>(V::CIDInFlight),
			              static_cast<unsigned long long>(V::CIDAbandoned)) == V::CIDInFlight) {
				*status = bam::status_timeout;
				return false;
			}
			break;
		}
		b.pause();
	}
	const u64 result = D::ld_relaxed_gpu(Q::cid_record(q, pos) + V::CIDResultOffset / 8);
	*status = static_cast<u32>(result >> V::ResultStatusShift) & 0x7fffu;
	return true;
}

}  // namespace lockq

// copy_checked copies one line from a staging slot to device memory (16-byte
// accesses, eight in flight, as bam::cache does) and reports whether its
// first and last words are the expected ones.
__device__ __forceinline__ bool copy_checked(unsigned char *to, const unsigned char *from, u64 bytes, u64 first, u64 last) {
	const uint4 *src = reinterpret_cast<const uint4 *>(from);
	uint4 *dst = reinterpret_cast<uint4 *>(to);
	const u64 n = bytes / 16;
	u64 f = 0, l = 0;
	for (u64 i = 0; i < n; i += 8) {
		uint4 v[8];
#pragma unroll
		for (int k = 0; k < 8; k++) v[k] = bam::detail::ld_host16(src + i + k);
#pragma unroll
		for (int k = 0; k < 8; k++) __stcg(dst + i + k, v[k]);
		if (i == 0) f = static_cast<u64>(v[0].x) | (static_cast<u64>(v[0].y) << 32);
		if (i + 8 >= n) l = static_cast<u64>(v[7].z) | (static_cast<u64>(v[7].w) << 32);
	}
	return f == first && l == last;
}

// ends_match reports whether the first and last words of a line copied
// into device memory (own: no other thread writes it; loaded at L2) or, when
// the line is shared, of its staging slot (loaded uncached) are first and
// last.
__device__ __forceinline__ bool ends_match(const unsigned char *line, const unsigned char *slot, bool own, u64 words, u64 first, u64 last) {
	const unsigned long long *w = reinterpret_cast<const unsigned long long *>(own ? line : slot);
	return own ? (__ldcg(w) == first && __ldcg(w + words - 1) == last) : (__ldcv(w) == first && __ldcv(w + words - 1) == last);
}

// perm_bits is a bijection on [0, 2^bits) that scatters consecutive inputs.
__device__ __forceinline__ u64 perm_bits(u64 x, u32 bits, u64 seed) {
	const u64 mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
	const u32 s = bits > 1 ? bits / 2 : 1;
#pragma unroll
	for (int r = 0; r < 3; r++) {
		x = (x * 0x9e3779b97f4a7c15ull) & mask;
		x ^= x >> s;
		x = (x + bam::mix64(seed + r)) & mask;
	}
	return x;
}

// read_nc reads element i of a u64 array without warp coalescing: every
// lane acquires and releases the line for itself, taking references even
// on a hit (ablation C4).
__device__ __noinline__ u64 read_nc(const bam::array_desc &d, u64 i) {
	if (i >= d.elem_count) {
		bam::detail::record_error(d, L::ErrCodeOutOfRange, 0, i, 0, 0);
		return 0;
	}
	const u64 per = (1ull << d.line_shift) / 8;
	const u64 line = i / per;
	const bam::cache::handle h = bam::cache::acquire(d, bam::cache::locate(d, line), 1, i);
	if (!h.ok) return 0;
	const u64 v = bam::detail::load_line<u64>(bam::cache::line_data(d, h.way) + (i - line * per) * 8);
	bam::cache::release(d, h.way, 1, false);
	return v;
}

__device__ __forceinline__ void add_sum(u64 *out, u64 s) {
	s = bam::warp_sum(s);
	if ((threadIdx.x & 31u) == 0 && s != 0) atomicAdd(reinterpret_cast<unsigned long long *>(out), s);
}

}  // namespace

// bam_bench_queue_read: every thread issues up to iters Reads of one line
// (random line of the namespace nsid, which holds pattern64(data_seed, w)
// in its 64-bit word w) through its warp's queue pair, stopping early once
// budget_ns have passed since the first thread started. Counters:
// [0] completed, [1] failed (status or timeout), [2] mismatched words,
// [3] start time, [5] copies done by the fill copier. mode_copy copies each line into dst (dst_lines lines,
// rotating) and checks its first and last word; mode_verify compares every
// word; otherwise the first word of the staging slot is checked.
// mode_direct names thread tid's line of dst (tid mod dst_lines) in the PRPs
// instead of the staging slot: the Target copies the data in with the copy
// engine before it completes the command; the line's first and last word
// are checked when every thread has a line of its own.
// mode_copier (with mode_copy) posts each copy to the fill copier ring
// copier instead, copying only what it declines, and checks the line's
// first and last word in dst afterwards. mode_mirror (with mode_copy) has
// the Reads ask for the staging mirror when their queue is busy (the data
// is then copied from the mirror in device memory).
// mode_latency records, for command k < lat_n, lat_words u64 at
// lat[lat_words*k]: I/O nanoseconds (%globaltimer, reserve to completion),
// I/O cycles (%clock64), the same two up to the data being in device
// memory, and the cycles from the start to the end of reserve and to the
// end of issue (the doorbell rung; both 0 in mode_locked). Package
// gpubench reads them (latWords).
constexpr u64 lat_words = 6;

BAM_KERNEL void bam_bench_queue_read(const bam::queue_desc *queues, u64 nqueues, u64 mode, u64 iters, u64 budget_ns,
                                     u64 timeout_ns, u64 nsid, u64 lines, u64 line_shift, u64 lba_shift, u64 seed,
                                     u64 data_seed, unsigned char *dst, u64 dst_lines, u64 *counters, u64 *lat, u64 lat_n,
                                     u64 copier) {
	namespace D = bam::detail;
	const u64 tid = bam::global_thread_id();
	const bam::queue_desc &q = queues[(tid >> 5) % nqueues];
	const u64 stop = first_start(counters + ctr_start) + budget_ns;
	const u32 ls = static_cast<u32>(line_shift);
	const u64 bytes = 1ull << ls;
	const u64 words = bytes / 8;
	const u32 blocks = 1u << lba_shift;
	u64 done = 0, failed = 0, bad = 0, offloaded = 0;
	for (u64 it = 0; it < iters; it++) {
		if (D::globaltimer() > stop) break;
		const u64 k = tid * iters + it;
		const u64 line = bam::mix64(seed + k) % lines;
		const u64 lba = line << lba_shift;
		const u64 g0 = D::globaltimer();
		const u64 c0 = cycles();
		const u64 deadline = g0 + timeout_ns;
		u64 pos;
		u32 status = 0, dw0 = 0;
		bool ok;
		u64 c_reserved = c0, c_issued = c0;
		if (mode & mode_locked) {
			const int r = lockq::submit_read(q, static_cast<u32>(nsid), lba, blocks, ls, deadline, stop, &pos);
			if (r == lockq::stopped) break;
			if (r != lockq::submitted) {
				failed++;
				break;
			}
			ok = lockq::wait(q, pos, deadline, &status);
		} else {
			if (!bam::queue::reserve(q, deadline, &pos)) {
				failed++;
				note_failure(counters, 2ull << 32);
				break;
			}
			c_reserved = cycles();
			u64 prp1, prp2;
			if (mode & mode_direct) {
				bam::queue::prps_to(q, pos, ls, reinterpret_cast<u64>(dst + ((tid % dst_lines) << ls)), &prp1, &prp2);
			} else {
				bam::queue::prps(q, pos, ls, &prp1, &prp2);
			}
			bam::nvme_command cmd = bam::nvme_command::read_write(bam::nvme_op_read, static_cast<u32>(nsid), lba, blocks, prp1, prp2);
			// Only reads whose data goes on to device memory want the
			// mirror, as the cache's fills do.
			if ((mode & mode_copy) && (mode & mode_mirror)) cmd.dw[3] = bam::queue::mirror_hint(q, pos);
			bam::queue::issue(q, pos, cmd);
			c_issued = cycles();
			ok = bam::queue::wait(q, pos, deadline, &status, &dw0);
		}
		const u64 g1 = D::globaltimer();
		const u64 c1 = cycles();
		if (!ok) {  // timed out: the CID was abandoned, nothing to retire
			failed++;
			note_failure(counters, 3ull << 32);
			break;
		}
		if (!bam::queue::status_ok(status)) {
			failed++;
			note_failure(counters, 1ull << 32 | status);
			bam::queue::retire(q, pos);
			continue;
		}
		const unsigned char *slot = bam::queue::data_slot(q, pos, ls, dw0);
		const u64 wbase = line * words;
		if (mode & mode_direct) {
			// The line is in dst already. Each thread has a line of its own
			// when the grid fits dst; check it then.
			if (static_cast<u64>(gridDim.x) * blockDim.x <= dst_lines) {
				const unsigned long long *to = reinterpret_cast<const unsigned long long *>(dst + ((tid % dst_lines) << ls));
				if (__ldcg(to) != bam::pattern64(data_seed, wbase) || __ldcg(to + words - 1) != bam::pattern64(data_seed, wbase + words - 1)) bad++;
			}
		} else if (mode & mode_verify) {
			const u64 *w = reinterpret_cast<const u64 *>(slot);
			for (u64 j = 0; j < words; j++) {
				if (__ldcv(reinterpret_cast<const unsigned long long *>(w + j)) != bam::pattern64(data_seed, wbase + j)) bad++;
			}
		}
		if (mode & mode_direct) {
			// nothing to copy: checked above
		} else if (mode & mode_copy) {
			unsigned char *to = dst + ((k % dst_lines) << ls);
			const u64 first = bam::pattern64(data_seed, wbase), last = bam::pattern64(data_seed, wbase + words - 1);
			u32 r = bam::copier::declined;
			// With the copier, each thread copies into a line of its own
			// (tid mod dst_lines), checked after the copy when no other
			// thread shares it; otherwise the staging slot is checked.
			const bool own = static_cast<u64>(gridDim.x) * blockDim.x <= dst_lines;
			if (mode & mode_copier) {
				to = dst + ((tid % dst_lines) << ls);
				r = bam::copier::run(copier, to, slot, bytes, false, deadline);
			}
			if (r == bam::copier::copied) {
				offloaded++;
				if (!ends_match(to, slot, own, words, first, last)) bad++;
			} else {
				if (r == bam::copier::timed_out) {
					failed++;
					note_failure(counters, 4ull << 32);
				}
				if (!copy_checked(to, slot, bytes, first, last)) bad++;
			}
		} else if (!(mode & mode_verify)) {
			if (__ldcv(reinterpret_cast<const unsigned long long *>(slot)) != bam::pattern64(data_seed, wbase)) bad++;
		}
		bam::queue::retire(q, pos);
		done++;
		if ((mode & mode_latency) && k < lat_n) {
			const u64 g2 = D::globaltimer();
			const u64 c2 = cycles();
			u64 *l = lat + lat_words * k;
			l[0] = g1 - g0;
			l[1] = c1 - c0;
			l[2] = g2 - g0;
			l[3] = c2 - c0;
			l[4] = c_reserved - c0;
			l[5] = c_issued - c0;
		}
	}
	add_counts(counters, done, failed, bad);
	if (offloaded) atomicAdd(reinterpret_cast<unsigned long long *>(counters + ctr_offloaded), offloaded);
}

// read_group: the lanes of mask (calling together, on one queue) take
// consecutive tickets with one fetch-and-add (queue::reserve_group: a
// caller that keeps its lanes' slots until the warp's copy must not wait
// on its own), then each issues a Read of its line into its staging slot
// and waits for it. Returns whether the command completed (*status, *dw0
// as queue::wait); reservation and wait timeouts are noted in counters.
__device__ __forceinline__ bool read_group(const bam::queue_desc &q, u32 mask, u64 deadline, u64 nsid, u64 line, u64 lba_shift, u32 ls,
                                           u64 *counters, u64 *pos, u32 *status, u32 *dw0) {
	if (!bam::queue::reserve_group(q, mask, deadline, pos)) {
		note_failure(counters, 2ull << 32);
		return false;
	}
	u64 prp1, prp2;
	bam::queue::prps(q, *pos, ls, &prp1, &prp2);
	bam::queue::issue(q, *pos, bam::nvme_command::read_write(bam::nvme_op_read, static_cast<u32>(nsid), line << lba_shift, 1u << lba_shift, prp1, prp2));
	const bool ok = bam::queue::wait(q, *pos, deadline, status, dw0);
	if (!ok) note_failure(counters, 3ull << 32);  // abandoned: nothing to retire
	return ok;
}

// finish_read ends a read_group command once its warp's copy is done: a
// completed Read (has) has the first and last word of its line checked
// (ends_match) and is counted in *done, mismatches in *bad; every
// completed command, failed status or not, is retired.
__device__ __forceinline__ void finish_read(const bam::queue_desc &q, u64 pos, bool ok, bool has, const unsigned char *to, u64 from,
                                            bool own, u64 words, u64 data_seed, u64 line, u64 *done, u64 *bad) {
	if (has) {
		const u64 wbase = line * words;
		if (!ends_match(to, reinterpret_cast<const unsigned char *>(from), own, words, bam::pattern64(data_seed, wbase),
		                bam::pattern64(data_seed, wbase + words - 1))) {
			(*bad)++;
		}
		(*done)++;
	}
	if (ok) bam::queue::retire(q, pos);
}

// bam_bench_queue_read_warp is bam_bench_queue_read's mode_copy with the
// bounce route's copy done by the warp (DESIGN.md §3): each lane reads a
// line of its own through its warp's queue pair, as there, and once every
// lane's completion is in, the warp's lanes copy all of the warp's lines
// into dst together, two at a time, before each lane checks the first and
// last word of its own line and retires its command. mode and the latency
// arguments are accepted for the launch's sake and ignored. A lane whose
// command fails leaves the loop; the others go on without it. Counters as
// bam_bench_queue_read's.
BAM_KERNEL void bam_bench_queue_read_warp(const bam::queue_desc *queues, u64 nqueues, u64 mode, u64 iters, u64 budget_ns,
                                          u64 timeout_ns, u64 nsid, u64 lines, u64 line_shift, u64 lba_shift, u64 seed,
                                          u64 data_seed, unsigned char *dst, u64 dst_lines, u64 *counters, u64 *lat,
                                          u64 lat_n, u64 copier) {
	namespace D = bam::detail;
	const u64 tid = bam::global_thread_id();
	const bam::queue_desc &q = queues[(tid >> 5) % nqueues];
	const u64 stop = first_start(counters + ctr_start) + budget_ns;
	const u32 ls = static_cast<u32>(line_shift);
	const u64 bytes = 1ull << ls;
	const u64 words = bytes / 8;
	const u32 lane = threadIdx.x & 31;
	const bool own = static_cast<u64>(gridDim.x) * blockDim.x <= dst_lines;
	unsigned char *to = dst + ((tid % dst_lines) << ls);
	u32 live = __activemask();
	u64 done = 0, failed = 0, bad = 0;
	for (u64 it = 0; it < iters; it++) {
		if (__any_sync(live, D::globaltimer() > stop)) break;
		const u64 k = tid * iters + it;
		const u64 line = bam::mix64(seed + k) % lines;
		const u64 deadline = D::globaltimer() + timeout_ns;
		u64 pos = 0;
		u32 status = 0, dw0 = 0;
		const bool ok = read_group(q, live, deadline, nsid, line, lba_shift, ls, counters, &pos, &status, &dw0);
		const bool has = ok && bam::queue::status_ok(status);
		if (ok && !has) note_failure(counters, 1ull << 32 | status);
		const u64 from = has ? reinterpret_cast<u64>(bam::queue::data_slot(q, pos, ls, dw0)) : 0;
		const u32 rank = __popc(live & ((1u << lane) - 1u));
		const u32 lanes = __popc(live);
		for (u32 m = __ballot_sync(live, has); m != 0;) {
			const int j0 = __ffs(m) - 1;
			m &= m - 1;
			const int j1 = m != 0 ? __ffs(m) - 1 : j0;
			const bool two = m != 0;
			if (two) m &= m - 1;
			const u64 f0 = __shfl_sync(live, from, j0), f1 = __shfl_sync(live, from, j1);
			const u64 t0 = __shfl_sync(live, reinterpret_cast<u64>(to), j0), t1 = __shfl_sync(live, reinterpret_cast<u64>(to), j1);
			D::copy_two_from_host(reinterpret_cast<unsigned char *>(t0), reinterpret_cast<const unsigned char *>(f0), bytes,
			                      reinterpret_cast<unsigned char *>(t1), two ? reinterpret_cast<const unsigned char *>(f1) : nullptr, bytes, rank, lanes);
		}
		// The warp's stores before any lane reads its line back.
		__syncwarp(live);
		finish_read(q, pos, ok, has, to, from, own, words, data_seed, line, &done, &bad);
		const u32 next = __ballot_sync(live, has);
		if (!has) {
			failed++;
			break;
		}
		live = next;
	}
	add_counts(counters, done, failed, bad);
}

// bam_bench_queue_read_line is the bounce route as the cache's fills run
// it (bam/cache.cuh): a warp keeps a few Reads in flight, issued by its
// first g lanes (mode bits 16-23; 1 when 0), and once they complete, all 32
// lanes copy the lines into dst together, one after the other, as the
// cache's group copy does. A warp issues iters*32 Reads, g a round, so a
// launch issues as many as bam_bench_queue_read's with the same arguments.
// Launch whole warps. A failed command ends its warp's loop. Counters as
// bam_bench_queue_read's; the latency arguments and the copier ring are
// accepted for the launch's sake and ignored.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_queue_read_line(const bam::queue_desc *queues, u64 nqueues, u64 mode, u64 iters, u64 budget_ns,
                                          u64 timeout_ns, u64 nsid, u64 lines, u64 line_shift, u64 lba_shift, u64 seed,
                                          u64 data_seed, unsigned char *dst, u64 dst_lines, u64 *counters, u64 *lat,
                                          u64 lat_n, u64 copier) {
	namespace D = bam::detail;
	const u64 tid = bam::global_thread_id();
	const bam::queue_desc &q = queues[(tid >> 5) % nqueues];
	const u64 stop = first_start(counters + ctr_start) + budget_ns;
	const u32 ls = static_cast<u32>(line_shift);
	const u64 bytes = 1ull << ls;
	const u64 words = bytes / 8;
	const u32 lane = threadIdx.x & 31;
	u32 g = static_cast<u32>(mode >> 16) & 0xffu;
	g = g == 0 ? 1 : (g > 32 ? 32 : g);
	const bool own = static_cast<u64>(gridDim.x) * blockDim.x <= dst_lines;
	unsigned char *to = dst + ((tid % dst_lines) << ls);
	const u64 total = iters * 32;  // the warp's Reads
	const u64 rounds = (total + g - 1) / g;
	u64 done = 0, failed = 0, bad = 0;
	for (u64 r = 0; r < rounds; r++) {
		if (__any_sync(~0u, D::globaltimer() > stop)) break;
		// The last round may have fewer Reads than g.
		const u32 n = static_cast<u32>(min(static_cast<u64>(g), total - r * g));
		const u32 issuers = n == 32 ? ~0u : (1u << n) - 1u;
		const bool issuer = lane < n;
		const u64 line = bam::mix64(seed + tid * rounds + r) % lines;
		const u64 deadline = D::globaltimer() + timeout_ns;
		u64 pos = 0;
		u32 status = 0, dw0 = 0;
		bool ok = false;
		if (issuer) ok = read_group(q, issuers, deadline, nsid, line, lba_shift, ls, counters, &pos, &status, &dw0);
		const bool has = ok && bam::queue::status_ok(status);
		if (ok && !has) note_failure(counters, 1ull << 32 | status);
		const u64 from = has ? reinterpret_cast<u64>(bam::queue::data_slot(q, pos, ls, dw0)) : 0;
		for (u32 m = __ballot_sync(~0u, has); m != 0; m &= m - 1) {
			const int j = __ffs(m) - 1;
			const u64 f = __shfl_sync(~0u, from, j), t = __shfl_sync(~0u, reinterpret_cast<u64>(to), j);
			D::copy_from_host(reinterpret_cast<unsigned char *>(t), reinterpret_cast<const unsigned char *>(f), bytes, lane, 32);
		}
		// The warp's stores before any lane reads its line back.
		__syncwarp();
		finish_read(q, pos, ok, has, to, from, own, words, data_seed, line, &done, &bad);
		const bool lost = issuer && !has;
		if (__any_sync(~0u, lost)) {
			if (lost) failed++;
			break;
		}
	}
	add_counts(counters, done, failed, bad);
}

// bam_bench_roundtrip: one thread writes i into ping (pinned host memory)
// and spins until a host thread echoes it into pong, n times, recording
// nanoseconds and cycles of each round trip at lat[2(i-1)]. Ends by writing
// 0xffffffff into ping (the host thread's stop signal). counters[0]
// receives the round trips done, counters[1] the timeouts.
BAM_KERNEL void bam_bench_roundtrip(u32 *ping, const u32 *pong, u64 n, u64 timeout_ns, u64 *lat, u64 *counters) {
	namespace D = bam::detail;
	if (bam::global_thread_id() != 0) return;
	u64 done = 0, timeouts = 0;
	for (u64 i = 1; i <= n; i++) {
		const u64 g0 = D::globaltimer();
		const u64 c0 = cycles();
		D::st_release_sys(ping, static_cast<u32>(i));
		bool echoed = false;
		for (u32 s = 0;; s++) {
			if (D::ld_acquire_sys(pong) == static_cast<u32>(i)) {
				echoed = true;
				break;
			}
			if ((s & 63) == 63 && D::globaltimer() > g0 + timeout_ns) break;
		}
		const u64 c1 = cycles();
		const u64 g1 = D::globaltimer();
		if (!echoed) {
			timeouts++;
			break;
		}
		lat[2 * (i - 1)] = g1 - g0;
		lat[2 * (i - 1) + 1] = c1 - c0;
		done++;
	}
	D::st_release_sys(ping, 0xffffffffu);
	counters[0] = done;
	counters[1] = timeouts;
}

// bam_bench_sum_seq adds elements [0, n) of a through the cache,
// consecutive threads reading consecutive elements (grid-stride). With
// coalesce == 0 every lane acquires its line for itself.
//
// The coalesced and per-lane reads run in loops of their own (read_array),
// so that neither loop carries the other's call.
template <bool Coalesce>
__device__ __forceinline__ u64 read_array(const bam::array<u64> &a, u64 i) {
	if constexpr (Coalesce) {
		return a.read(i);
	} else {
		return read_nc(*a.desc, i);
	}
}

template <bool Coalesce>
__device__ __forceinline__ u64 sum_seq(const bam::array<u64> &a, u64 n) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) s += read_array<Coalesce>(a, i);
	return s;
}

BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_sum_seq(bam::array<u64> a, u64 n, u64 coalesce, u64 *out) {
	add_sum(out, coalesce ? sum_seq<true>(a, n) : sum_seq<false>(a, n));
}

// bam_bench_sum_seq_ahead is bam_bench_sum_seq's coalesced pass with an
// opt-in read-ahead: each warp prefetches the lines of its next ahead grid
// steps every ahead steps, at a phase of its own
// (bam::array::prefetch_steps), so that more lines are in flight than one
// grid step touches. Launch whole warps.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_sum_seq_ahead(bam::array<u64> a, u64 n, u64 ahead, u64 *out) {
	const u64 grid = bam::grid_threads();
	const u32 lane = threadIdx.x & 31u;
	u64 s = 0;
	// The loop runs while any lane of the warp has elements, so its lanes
	// call prefetch_steps together.
	u64 k = 0;
	for (u64 base = bam::global_thread_id() - lane; base < n; base += grid, k++) {
		a.prefetch_steps(k, base, grid, static_cast<u32>(ahead));
		if (base + lane < n) s += a.read(base + lane);
	}
	add_sum(out, s);
}

// bam_bench_sum_seq_read_ahead is bam_bench_sum_seq's coalesced pass with
// bam::read_ahead: each warp issues the Reads of its lines steps grid
// steps ahead (0: bam::read_ahead_steps, the default for the line size)
// and goes on, completing them at later steps. Launch whole warps.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_sum_seq_read_ahead(bam::array<u64> a, u64 n, u64 steps, u64 *out) {
	const u64 grid = bam::grid_threads();
	const u32 lane = threadIdx.x & 31u;
	u64 s = 0;
	bam::read_ahead<u64> ra(a, steps != 0 ? static_cast<u32>(steps) : bam::read_ahead_steps(a));
	u64 k = 0;
	for (u64 base = bam::global_thread_id() - lane; base < n; base += grid, k++) {
		ra.step(k, base, grid);
		if (base + lane < n) s += a.read(base + lane);
	}
	ra.finish();
	add_sum(out, s);
}

// bam_bench_sum_range adds elements [0, n) of a through the cache with
// bam::for_range (warps take the range a line at a time), as the engine's
// range operations do: chunks taken from the counter at next (zero before
// the launch) as warps finish them, or fixed shares when next is null, each
// warp filling ahead lines at once (0: bam::fill_ahead; 1: none ahead of
// its reads).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_sum_range(bam::array<u64> a, u64 n, u64 ahead, u64 *next, u64 *out) {
	u64 s = 0;
	bam::for_range(a, 0, n, [&](u64 i) { s += a.read(i); }, next, ahead == 0 ? bam::fill_ahead : static_cast<u32>(ahead));
	add_sum(out, s);
}

// bam_bench_sum_lines_perm adds every element of a (2^lines_log2 lines of
// per_line elements), one warp per line, lines visited in a pseudo-random
// permutation: the permutation's positions taken from the counter at next
// (zero before the launch) as warps finish them, or every warps-th of them
// for each warp when next is null. As in bam::for_range, at most half of
// the cache's lines are in flight: warps beyond that stay idle (a warp
// holds no reference between its reads, so more lines in flight than the
// cache can keep get evicted while still being read). With ahead > 1 (0:
// bam::fill_ahead) each warp fills its next ahead lines at once
// (bam::array::prefetch), as far as for_range would.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_sum_lines_perm(bam::array<u64> a, u64 lines_log2, u64 per_line, u64 seed, u64 ahead,
                                                          u64 *next, u64 *out) {
	const u64 lines = 1ull << lines_log2;
	const u64 grid_warps = bam::grid_threads() >> 5;
	ahead = min(ahead == 0 ? bam::fill_ahead : ahead, max(a.lines_in_flight() / grid_warps, 1ull));
	const u64 warps = min(grid_warps, max(a.lines_in_flight() / ahead, 1ull));
	const u32 lane = threadIdx.x & 31u;
	const u32 bits = static_cast<u32>(lines_log2);
	const u64 self = bam::global_thread_id() >> 5;
	const u64 stride = next != nullptr ? 1 : warps;
	u64 s = 0;
	for (u64 g = 0; self < warps; g++) {
		u64 base = self + g * ahead * warps;
		if (next != nullptr) {
			if (lane == 0) base = atomicAdd(reinterpret_cast<unsigned long long *>(next), static_cast<unsigned long long>(ahead));
			base = __shfl_sync(~0u, base, 0);
		}
		if (base >= lines) break;
		if (ahead > 1) {
			const u64 w = base + lane * stride;
			a.prefetch(lane < ahead && w < lines ? perm_bits(w, bits, seed) * per_line : ~0ull);
		}
		for (u64 j = 0; j < ahead; j++) {
			const u64 w = base + j * stride;
			if (w >= lines) break;
			const u64 line = perm_bits(w, bits, seed);
			for (u64 e = lane; e < per_line; e += 32) s += a.read(line * per_line + e);
		}
	}
	add_sum(out, s);
}

// bam_bench_lookup_array: count random 8-byte lookups, lookup i reading
// element mix64(seed + i) & mask, through the cache (coalesced, or per lane
// when coalesce == 0).
template <bool Coalesce>
__device__ __forceinline__ u64 lookup_array(const bam::array<u64> &a, u64 mask, u64 count, u64 seed) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) s += read_array<Coalesce>(a, bam::mix64(seed + i) & mask);
	return s;
}

BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_lookup_array(bam::array<u64> a, u64 mask, u64 count, u64 seed, u64 coalesce, u64 *out) {
	add_sum(out, coalesce ? lookup_array<true>(a, mask, count, seed) : lookup_array<false>(a, mask, count, seed));
}

// bam_bench_lookup_plain is bam_bench_lookup_array on a device array.
BAM_KERNEL void bam_bench_lookup_plain(const u64 *__restrict__ data, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		s += data[bam::mix64(seed + i) & mask];
	}
	add_sum(out, s);
}

// bam_bench_lookup_skewed: lookup i reads, with probability hot_per_256/256,
// element (h >> 8) & hot_mask (the first hot_mask+1 elements), else
// (h >> 8) & mask, h = mix64(seed + i). For the victim-policy ablation.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_lookup_skewed(bam::array<u64> a, u64 mask, u64 hot_mask, u64 hot_per_256, u64 count, u64 seed,
                                        u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		const u64 h = bam::mix64(seed + i);
		const u64 j = (h & 0xff) < hot_per_256 ? (h >> 8) & hot_mask : (h >> 8) & mask;
		s += a.read(j);
	}
	add_sum(out, s);
}

// seq_passes walks the passes of the sequential-read kernels below. With
// W = n / (32 * coarsen) warps, warp w reads in pass r the chunk
// (w + r * (W / reps)) mod W: lane l the elements chunk*32*coarsen + 32j + l,
// j < coarsen. Every pass reads the whole array once. Chunk k is read by
// warps k, k - W/reps, k - 2W/reps, ...; when W/reps is at least the
// warps resident at once, those run in different waves, so no wave reads
// a chunk twice, and with an array larger than L2 every pass reads HBM
// (gpubench.ArrayParams.ArrayBytes says how large). base() is the lane's
// first element of the current pass; next() moves to the next pass.
//
// The sequential kernels count in 32 bits (seq_index), as a kernel over
// fewer than 2^31 elements would (gpubench caps C3's array at 8 GiB): a
// loop that may call the cache's slow path keeps its counters in local
// memory around that call, and 64-bit counters there cost the span loop
// 8 % (bench/results/logs/c3-span-loads-*). The plain kernel counts the
// same way.
typedef u32 seq_index;

struct seq_passes {
	seq_index chunk, step, warps, elems;
	__device__ __forceinline__ seq_passes(seq_index n, seq_index coarsen, seq_index reps)
		: chunk(static_cast<seq_index>(bam::global_thread_id() >> 5)), step(0), warps(n / (32 * coarsen)), elems(32 * coarsen) {
		if (reps > 0 && chunk < warps) step = warps / reps; // warps past the array stay past it
	}
	__device__ __forceinline__ seq_index base() const { return chunk * elems + (threadIdx.x & 31u); }
	__device__ __forceinline__ void next() {
		chunk += step;
		if (chunk >= warps) chunk -= warps;
	}
};

// bam_bench_seq_ref: reps passes over a as seq_passes lays them out,
// each lane holding its line in a bam::array_ref across its reads. Launch
// n / coarsen threads (n a multiple of 32 * coarsen, below 2^31).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_seq_ref(bam::array<u64> a, u64 n64, u64 coarsen64, u64 reps64, u64 *out) {
	const seq_index n = static_cast<seq_index>(n64), coarsen = static_cast<seq_index>(coarsen64), reps = static_cast<seq_index>(reps64);
	u64 s = 0;
	seq_passes pass(n, coarsen, reps);
	for (seq_index r = 0; r < reps; r++, pass.next()) {
		const seq_index base = pass.base();
		bam::array_ref<u64> ref(a);
		for (seq_index j = 0; j < coarsen; j++) {
			const seq_index i = base + 32 * j;
			if (i < n) s += ref[i];
		}
		ref.release();
	}
	add_sum(out, s);
}

// bam_bench_seq_span is bam_bench_seq_ref reading through the spans of
// the lines the array_ref holds (array_ref::span): one span per line, the
// line's elements of the lane read with plain loads.
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_seq_span(bam::array<u64> a, u64 n64, u64 coarsen64, u64 reps64, u64 *out) {
	const seq_index n = static_cast<seq_index>(n64), coarsen = static_cast<seq_index>(coarsen64), reps = static_cast<seq_index>(reps64);
	u64 s = 0;
	seq_passes pass(n, coarsen, reps);
	for (seq_index r = 0; r < reps; r++, pass.next()) {
		const seq_index base = pass.base();
		bam::array_ref<u64> ref(a);
		for (seq_index j = 0; j < coarsen;) {
			const seq_index i = base + 32 * j;
			if (i >= n) break;
			const bam::line_span<u64> sp = ref.span(i);
			if (sp.end <= i) break;
			seq_index stop = static_cast<seq_index>(j + (sp.end - i + 31) / 32);
			if (stop > coarsen) stop = coarsen;
			for (; j < stop; j++) s += sp[base + 32 * j];
		}
		ref.release();
	}
	add_sum(out, s);
}

// bam_bench_seq_array is bam_bench_seq_ref without array_ref: every read
// acquires its line (coalesced, or per lane when coalesce == 0).
template <bool Coalesce>
__device__ __forceinline__ u64 seq_array(const bam::array<u64> &a, seq_index n, seq_index coarsen, seq_index reps) {
	u64 s = 0;
	seq_passes pass(n, coarsen, reps);
	for (seq_index r = 0; r < reps; r++, pass.next()) {
		const seq_index base = pass.base();
		for (seq_index j = 0; j < coarsen; j++) {
			const seq_index i = base + 32 * j;
			if (i < n) s += read_array<Coalesce>(a, i);
		}
	}
	return s;
}

BAM_KERNEL void BAM_ARRAY_BOUNDS bam_bench_seq_array(bam::array<u64> a, u64 n64, u64 coarsen64, u64 reps64, u64 coalesce, u64 *out) {
	const seq_index n = static_cast<seq_index>(n64), coarsen = static_cast<seq_index>(coarsen64), reps = static_cast<seq_index>(reps64);
	add_sum(out, coalesce ? seq_array<true>(a, n, coarsen, reps) : seq_array<false>(a, n, coarsen, reps));
}

// bam_bench_seq_plain is bam_bench_seq_ref on a device array.
BAM_KERNEL void bam_bench_seq_plain(const u64 *__restrict__ data, u64 n64, u64 coarsen64, u64 reps64, u64 *out) {
	const seq_index n = static_cast<seq_index>(n64), coarsen = static_cast<seq_index>(coarsen64), reps = static_cast<seq_index>(reps64);
	u64 s = 0;
	seq_passes pass(n, coarsen, reps);
	for (seq_index r = 0; r < reps; r++, pass.next()) {
		const seq_index base = pass.base();
		for (seq_index j = 0; j < coarsen; j++) {
			const seq_index i = base + 32 * j;
			if (i < n) s += data[i];
		}
	}
	add_sum(out, s);
}

// bam_bench_atomic_stride: thread t adds 1, iters times, to word
// (t mod nwords) * stride of words: hot counters packed (stride 1) or
// padded to their own sectors (ablation C4). The words must start at zero;
// their sum is then threads * iters.
BAM_KERNEL void bam_bench_atomic_stride(u64 *words, u64 nwords, u64 stride, u64 iters) {
	const u64 tid = bam::global_thread_id();
	unsigned long long *w = reinterpret_cast<unsigned long long *>(words + (tid % nwords) * stride);
	for (u64 i = 0; i < iters; i++) atomicAdd(w, 1ull);
}
