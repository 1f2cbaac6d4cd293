// bam/cache.cuh: the set-associative line cache of package gpucache, on the
// same metadata bytes (layout::gpucache) in device memory. gpucache/doc.go
// is the protocol's reference; the steps below are numbered as there.
//
// A line is acquired by one thread on behalf of a group of n requests (the
// leader of a coalesced warp group, bam/coalesce.cuh) with one fetch_add(n)
// and released with one fetch_sub(n). Misses are filled through an NVMe Read
// into the staging slot of the command's queue entry, then copied into the
// line by the lanes of the filling group, or, for groups too small to copy
// fast, by a warp of the fill copier (bam/copier.cuh). Under load the
// Target may also copy the slot into its mirror in device memory (the
// completion says so, queue::data_slot); the copy into the line then reads
// device memory instead of crossing PCIe. Dirty victims are copied out to a
// staging slot the same way and written with an NVMe Write. No lock is
// held across I/O and every wait is bounded by the descriptor's timeout.
//
// Quarantine. A command whose wait timed out may still run: a Write lands
// when storage gets to it, a Read on the copy-engine route still copies
// into its line. So the way of a write-back that timed out gets its line
// back (VALID, DIRTY) but keeps BUSY, and so does the way of a timed-out
// copy-engine fill: until the launch ends, nobody changes, evicts or
// writes back that line again, which would let the older Write land last
// or the late copy overwrite a line that took the way since. Readers
// still read the line without references (peek); those that wait for BUSY
// give up once the launch has a failure recorded. The host clears BUSY
// between launches, after the queue pairs were reset and storage has
// finished every command given up on (bam_cache_release_quarantine).
#ifndef BAM_CACHE_CUH
#define BAM_CACHE_CUH

#include "bam/copier.cuh"
#include "bam/detail/desc.cuh"
#include "bam/detail/sync.cuh"
#include "bam/queue.cuh"

namespace bam {
namespace cache {
namespace C = layout::gpucache;

constexpr u32 state_valid = 1u << C::StateValidBit;
constexpr u32 state_busy = 1u << C::StateBusyBit;
constexpr u32 state_dirty = 1u << C::StateDirtyBit;
constexpr u32 ref_mask = static_cast<u32>(C::StateRefMask);

// A way's tag word: its tag (the TagMask bits; all ones in an unused
// slot), its clock reference bit and its generation (gpucache/layout.go).
constexpr u64 tag_mask = C::TagMask;
constexpr u64 word_clock = 1ull << C::TagWordClockBit;
constexpr u64 gen_one = 1ull << C::TagWordGenShift;
__device__ __forceinline__ u64 word_tag(u64 w) { return w & tag_mask; }
__device__ __forceinline__ u32 word_gen(u64 w) { return static_cast<u32>(w >> C::TagWordGenShift); }
// same_line: a and b hold the same tag at the same generation (their clock
// bits may differ).
__device__ __forceinline__ bool same_line(u64 a, u64 b) { return ((a ^ b) & ~word_clock) == 0; }

__device__ __forceinline__ u64 *tag_at(const array_desc &d, u64 g) {
	return reinterpret_cast<u64 *>(d.cache_meta + d.tags_off + g * C::TagBytes);
}
__device__ __forceinline__ u64 *wbtag_at(const array_desc &d, u64 g) {
	return reinterpret_cast<u64 *>(d.cache_meta + d.wbtags_off + g * C::TagBytes);
}
__device__ __forceinline__ u32 *state_at(const array_desc &d, u64 g) {
	return reinterpret_cast<u32 *>(d.cache_meta + d.ways_off + g * C::WayStride + C::WayStateOffset);
}
__device__ __forceinline__ u32 *status_at(const array_desc &d, u64 g) {
	return reinterpret_cast<u32 *>(d.cache_meta + d.ways_off + g * C::WayStride + C::WayStatusOffset);
}
__device__ __forceinline__ u32 *set_lock(const array_desc &d, u64 set) {
	return reinterpret_cast<u32 *>(d.cache_meta + set * C::SetStride + C::SetLockOffset);
}
__device__ __forceinline__ u32 *set_hand(const array_desc &d, u64 set) {
	return reinterpret_cast<u32 *>(d.cache_meta + set * C::SetStride + C::SetHandOffset);
}

// line_data returns the bytes of way g.
__device__ __forceinline__ unsigned char *line_data(const array_desc &d, u64 g) {
	return reinterpret_cast<unsigned char *>(d.cache_data + (g << d.line_shift));
}

// set_of mirrors gpucache.SetIndex: each aligned block of sets lines is
// rotated by a hash of the block's number (layout::cache::SetHashMul says
// why).
__device__ __forceinline__ u64 set_of(u64 tag, u64 sets) {
	const u64 h = (tag & C::TagLineMask) + (tag >> C::TagNamespaceShift) * C::SetHashMul;
	// The same value; a shift and a mask instead of 64-bit divisions when
	// the set count is a power of two (the usual case).
	if ((sets & (sets - 1)) == 0) {
		const u32 bits = static_cast<u32>(__ffsll(static_cast<long long>(sets)) - 1);
		return (h + ((h >> bits) * C::SetHashMul >> C::SetSkewShift)) & (sets - 1);
	}
	return (h % sets + ((h / sets) * C::SetHashMul >> C::SetSkewShift) % sets) % sets;
}

// where is a line's place on storage: its tag and its first LBA.
struct where {
	u64 tag;
	u64 nsid;
	u64 lba;
};

// locate maps line l of the array's object to its namespace and LBA
// (striped: line l on stripe member l mod N, at its extent start + l / N).
__device__ __forceinline__ where locate(const array_desc &d, u64 l) {
	const u64 *start = reinterpret_cast<const u64 *>(d.ns_start);
	const u64 *index = reinterpret_cast<const u64 *>(d.ns_index);
	const u64 m = d.nns == 1 ? 0 : l % d.nns;
	const u64 phys = start[m] + (d.nns == 1 ? l : l / d.nns);
	where w;
	w.tag = (index[m] << C::TagNamespaceShift) | phys;
	w.nsid = index[m] + 1;
	w.lba = phys << d.lba_shift;
	return w;
}

// find_way returns the way of the K ways from base whose tag word holds
// tag, or ~0, and that word in *word.
// The tags are loaded eight at a time before any is compared, so a set of
// up to eight ways costs one round trip to L2 instead of one per way. With
// an even K (tag arrays start on a sector, so pairs are 16-byte aligned)
// two tags come per access: a hit without a reference made thirteen L2
// requests, eight of them for the tags, and the L2 is the busiest unit of
// all-hit random reads (C2 profile, H200). With these pairs and
// peek_begin's one-vector record read a hit makes eight, and C2 rose 5 %;
// with the generation and the clock bit in the tag word, six.
__device__ __forceinline__ u64 find_way(const u64 *tags, u64 base, u64 K, u64 tag, u64 *word) {
	for (u64 k0 = 0; k0 < K; k0 += 8) {
		u64 t[8];
		if ((K & 1) == 0) {
#pragma unroll
			for (u32 j = 0; j < 8; j += 2) {
				if (k0 + j < K) {
					detail::ld_relaxed_gpu_v2(tags + base + k0 + j, &t[j], &t[j + 1]);
				} else {
					t[j] = t[j + 1] = static_cast<u64>(C::TagEmpty);
				}
			}
		} else {
#pragma unroll
			for (u32 j = 0; j < 8; j++) t[j] = k0 + j < K ? detail::ld_relaxed_gpu(tags + base + k0 + j) : static_cast<u64>(C::TagEmpty);
		}
#pragma unroll
		for (u32 j = 0; j < 8; j++) {
			if (word_tag(t[j]) == tag) {
				*word = t[j];
				return base + k0 + j;
			}
		}
	}
	return ~0ull;
}

// timed_out is the status of a wait of kind (a layout::engine Wait*
// constant) that gave up at its deadline or at the host's abort: the
// record's status then names the wait (DeviceError.Wait on the host).
static_assert(L::TimeoutStatus == status_timeout, "one timeout bit for the device and the host");
__device__ __forceinline__ u32 timed_out(u64 kind) { return status_timeout | static_cast<u32>(kind & L::WaitKindMask); }
// wait_kind is the kind of a failed wait for ticket t's completion: its
// command's completion, or its submission when the SQ tail never passed
// it (an earlier ticket of the queue was not issued).
__device__ __forceinline__ u64 wait_kind(const queue_desc &q, u64 t) { return queue::submitted(q, t) ? L::WaitCompletion : L::WaitSubmit; }
// is_timeout reports whether st is a timed_out status rather than a
// controller's.
__device__ __forceinline__ bool is_timeout(u32 st) { return (st & status_timeout) != 0; }

// pick_queue spreads warps over the queue pairs.
__device__ __forceinline__ const queue_desc &pick_queue(const array_desc &d) {
	const u64 warp = global_thread_id() >> 5;
	return reinterpret_cast<const queue_desc *>(d.queues)[warp % d.nqueues];
}

// offload hands a staging copy of one line to d's fill copier
// (bam/copier.cuh) and reports whether it was done there; when it was not,
// the caller copies the line itself. A copier that took the job but did not
// finish it by deadline is recorded as a timeout (the caller still copies,
// so the launch ends; the host then resets the ring).
__device__ __forceinline__ bool offload(const array_desc &d, unsigned char *to, const unsigned char *from, bool to_host, u64 deadline) {
	if (d.copier == 0) return false;
	const u32 r = copier::run(d.copier, to, from, 1ull << d.line_shift, to_host, deadline, detail::abort_word(d));
	if (r == copier::timed_out) detail::record_error(d, L::ErrCodeTimeout, timed_out(L::WaitCopier), 0, 0, 0);
	if (r != copier::copied) return false;
	detail::count(d, L::StatOffloads, 1);
	return true;
}

// write_line writes way g to storage at w with one NVMe Write: through the
// copy engine (the PRPs name the line and the Target copies it out before it
// completes) when the descriptor enables that route, else through a staging
// slot this thread copies the line into. Returns the NVMe status (0 on
// success, a timed_out status on a timeout). Fills go through io_read
// instead.
__device__ __noinline__ u32 write_line(const array_desc &d, u64 g, const where &w, u64 deadline) {
	const queue_desc &q = pick_queue(d);
	u64 t;
	if (detail::aborted(d) || !queue::reserve(q, deadline, &t, detail::abort_word(d))) return timed_out(L::WaitTurn);
	const u32 shift = static_cast<u32>(d.line_shift);
	u64 prp1, prp2;
	if (d.direct_below != 0) {
		// The line's stores must be done before the copy engine reads it.
		__threadfence();
		queue::prps_to(q, t, shift, reinterpret_cast<u64>(line_data(d, g)), &prp1, &prp2);
	} else {
		unsigned char *slot = queue::staging(q, t, shift);
		if (!offload(d, slot, line_data(d, g), true, deadline)) detail::copy_to_host(slot, line_data(d, g), 1ull << shift, 0, 1);
		queue::prps(q, t, shift, &prp1, &prp2);
	}
	const u32 blocks = 1u << d.lba_shift;
	queue::issue(q, t, nvme_command::read_write(nvme_op_write, static_cast<u32>(w.nsid), w.lba, blocks, prp1, prp2));
	detail::count(d, L::StatCommands, 1);
	u32 status, dw0;
	if (!queue::wait(q, t, deadline, &status, &dw0, detail::abort_word(d))) return timed_out(wait_kind(q, t));
	queue::retire(q, t);
	return status;
}

// io_read submits an NVMe Read of the line at w for way g, filled for a group
// of n lanes, and waits for it. Groups smaller than d.direct_below take the
// copy-engine route: the PRPs name the line itself, the Target copies the
// data in before it posts the completion, and nothing is left pending
// (h->staging == 0). Other groups read into a staging slot that stays owned by
// the caller (h->staging, h->queue, h->ticket) until finish_fill retires it.
// On failure nothing is held. Returns the NVMe status (a timed_out status on a
// timeout).
__device__ inline u32 io_read(const array_desc &d, const where &w, u64 g, u32 n, u64 deadline, struct handle *h);
// start_read issues the Read of the line at w for way g at ticket t of q
// (taken by the caller), into the line itself when direct; end_read waits
// for its completion and ends it as io_read does (h, the status).
__device__ inline void start_read(const array_desc &d, const queue_desc &q, u64 t, const where &w, u64 g, bool direct);
__device__ inline u32 end_read(const array_desc &d, const queue_desc &q, u64 t, bool direct, u64 deadline, struct handle *h);
// read_at is io_read after its reservation: the Read at ticket t of q
// (taken by the caller, with queue::reserve or reserve_group), into the
// line itself when direct.
__device__ inline u32 read_at(const array_desc &d, const queue_desc &q, u64 t, const where &w, u64 g, bool direct, u64 deadline,
                              struct handle *h);

// Result of acquire.
struct handle {
	u64 way;  // way index g, valid when ok
	bool ok;
	// A deferred fill (acquire_deferred): the line's data is in the
	// staging slot of ticket `ticket` of queue `queue` (or the slot's
	// mirror), not yet copied into the line; the way is still BUSY.
	// complete or the group copy finishes it.
	u64 staging;  // the data: staging slot or its mirror; 0 when nothing is pending
	u64 queue;    // const queue_desc *
	u64 ticket;
};

__device__ __forceinline__ void fail(const array_desc &d, u32 code, u32 status, u64 index, const where &w) {
	detail::record_error(d, code, status, index, w.lba, w.nsid);
}

// crowded reports whether no way of the set at base could be claimed
// because some are held by references (not merely being filled or written
// back): the live references outnumber the set's ways, and waiting longer
// would not help. Ways that are all being filled or written back mean
// instead that storage did not answer in time.
__device__ __noinline__ bool crowded(const array_desc &d, u64 base, u64 K) {
	bool held = false;
	for (u64 k = 0; k < K; k++) {
		const u32 s = detail::ld_relaxed_gpu(state_at(d, base + k));
		if (!(s & state_busy) && !(s & ref_mask)) return false;
		if (!(s & state_busy)) held = true;
	}
	return held;
}

// fail_wait records a wait of kind (WaitWay or WaitSetLock) for the set at
// base that outlasted its deadline: as a cache too small when the set is
// crowded, else as a timeout (an abort when the host stopped the launch).
__device__ __forceinline__ void fail_wait(const array_desc &d, u64 base, u64 K, u64 index, const where &w, u64 kind) {
	if (!detail::aborted(d) && crowded(d, base, K)) {
		fail(d, L::ErrCodeCacheTooSmall, 0, index, w);
	} else {
		fail(d, L::ErrCodeTimeout, timed_out(kind), index, w);
	}
}

__device__ __forceinline__ bool take_lock(u32 *lock, u64 deadline, const u32 *stop) {
	detail::backoff b;
	for (u32 i = 0;; i++) {
		if (detail::ld_relaxed_gpu(lock) == C::LockFree &&
		    atomicCAS(lock, static_cast<u32>(C::LockFree), static_cast<u32>(C::LockHeld)) == C::LockFree) {
			__threadfence();
			return true;
		}
		if ((i & 7) == 7 && detail::expired(deadline, stop)) return false;
		b.pause();
	}
}

// try_lock takes the set lock if it is free now, without waiting.
__device__ __forceinline__ bool try_lock(u32 *lock) {
	if (detail::ld_relaxed_gpu(lock) != C::LockFree || atomicCAS(lock, static_cast<u32>(C::LockFree), static_cast<u32>(C::LockHeld)) != C::LockFree) {
		return false;
	}
	__threadfence();
	return true;
}

// drop_lock releases the set lock with a release store: the holder's
// accesses come before it, and nothing waits for an exchange's answer.
__device__ __forceinline__ void drop_lock(u32 *lock) { detail::st_release_gpu(lock, static_cast<u32>(C::LockFree)); }

// claimed_word is the tag word a claim of a way whose word was w installs
// for tag: an odd generation, changed even when it was odd already (the
// last fill failed), so every claim changes the word, and a clear clock
// bit. Only the BUSY owner changes a word's tag or generation; others may
// only set or clear its clock bit, with an atomic or/and (gpucache/meta.go).
__device__ __forceinline__ u64 claimed_word(u64 w, u64 tag) {
	const u32 g = word_gen(w);
	return (static_cast<u64>(g + 1u + (g & 1u)) << C::TagWordGenShift) | tag;
}
// publish makes the generation of the word at p even again; it follows a
// fence that orders the line's stores before it.
__device__ __forceinline__ void publish(u64 *p) { atomicAdd(reinterpret_cast<unsigned long long *>(p), gen_one); }
// set_clock and clear_clock change only the clock bit of the word at p.
__device__ __forceinline__ void set_clock(u64 *p) { atomicOr(reinterpret_cast<unsigned long long *>(p), word_clock); }
__device__ __forceinline__ void clear_clock(u64 *p) { atomicAnd(reinterpret_cast<unsigned long long *>(p), ~word_clock); }
// clear_tag empties the tag field of the word at p and keeps its generation.
__device__ __forceinline__ void clear_tag(u64 *p) { atomicOr(reinterpret_cast<unsigned long long *>(p), tag_mask); }

// take_way sets BUSY on way g for a claim and reports whether the way was
// neither BUSY nor referenced before (its state then in *old); a way found
// referenced gets its BUSY bit back off.
__device__ __forceinline__ bool take_way(const array_desc &d, u64 g, u32 *old) {
	const u32 o = atomicOr(state_at(d, g), state_busy);
	if ((o & state_busy) == 0 && (o & ref_mask) == 0) {
		*old = o;
		return true;
	}
	if ((o & state_busy) == 0) atomicAnd(state_at(d, g), ~state_busy);
	return false;
}

// Outcomes of claim.
enum claim_outcome : u32 {
	claim_done,    // *way is BUSY for the line, with n references
	claim_again,   // the line was installed meanwhile or is being written back
	claim_none,    // every way of the set is held or in flight
	claim_failed,  // a failure was recorded (set lock wait, write-back)
};

// claim_locked is the miss path's claim of a way for the line at w
// (gpucache/doc.go, miss steps 2-6), for a caller that took the set's lock
// (step 1): under it, it re-scans the set, chooses a victim (a free way
// first, then the clock hand) and installs the line's tag with n references
// and BUSY; it drops the lock, then writes a dirty victim back. With spare >
// 0 it claims only while more than spare ways of the set are not BUSY
// (bam::read_ahead leaves ways for the fills that others wait for).
__device__ __forceinline__ u32 claim_locked(const array_desc &d, const where &w, u64 set, u64 base, u64 K, u32 n, u64 deadline,
                                            u64 index, u64 *way, u32 spare = 0) {
	u32 *lock = set_lock(d, set);
	// 2. re-scan
	bool again = false;
	for (u64 k = 0; k < K && !again; k++) {
		const u64 gk = base + k;
		if (detail::ld_relaxed_gpu(wbtag_at(d, gk)) == w.tag) {
			again = true;  // its write-back is in flight
			break;
		}
		if (word_tag(detail::ld_relaxed_gpu(tag_at(d, gk))) == w.tag) {
			const u32 s = detail::ld_relaxed_gpu(state_at(d, gk));
			if (s & (state_valid | state_busy)) {
				again = true;  // installed meanwhile: take the hit path
			} else {
				clear_tag(tag_at(d, gk));
			}
		}
	}
	if (again) {
		drop_lock(lock);
		return claim_again;
	}
	if (spare != 0) {
		u32 idle = 0;
		for (u64 k = 0; k < K; k++) idle += (detail::ld_relaxed_gpu(state_at(d, base + k)) & state_busy) == 0 ? 1u : 0u;
		if (idle <= spare) {
			drop_lock(lock);
			return claim_none;
		}
	}
	// 3-4. choose and claim a victim
	u64 victim = ~0ull;
	u32 old = 0;
	for (u64 k = 0; k < K && victim == ~0ull; k++) {  // a free way first
		const u64 gk = base + k;
		const u32 s = detail::ld_relaxed_gpu(state_at(d, gk));
		if ((s & (state_valid | state_busy)) == 0 && (s & ref_mask) == 0 && take_way(d, gk, &old)) victim = gk;
	}
	u32 *hand = set_hand(d, set);
	u32 hv = detail::ld_relaxed_gpu(hand);
	const bool clock = d.policy == L::PolicyClock;
	for (u64 step = 0; step < 2 * K && victim == ~0ull; step++) {
		const u64 gk = base + (hv % K);
		hv = (hv + 1) % static_cast<u32>(K);
		const u32 s = detail::ld_relaxed_gpu(state_at(d, gk));
		if ((s & state_busy) || (s & ref_mask)) continue;
		if (clock && (detail::ld_relaxed_gpu(tag_at(d, gk)) & word_clock)) {
			clear_clock(tag_at(d, gk));
			continue;
		}
		if (take_way(d, gk, &old)) victim = gk;
	}
	detail::st_relaxed_gpu(hand, hv);
	if (victim == ~0ull) {
		drop_lock(lock);
		return claim_none;
	}
	// 5. install
	const bool dirty = (old & state_valid) && (old & state_dirty);
	const u64 old_word = detail::ld_relaxed_gpu(tag_at(d, victim));
	const u64 old_tag = word_tag(old_word);
	if (dirty) detail::st_relaxed_gpu(wbtag_at(d, victim), old_tag);
	detail::st_relaxed_gpu(status_at(d, victim), static_cast<u32>(C::StatusOK));
	// The new tag with an odd generation and a clear clock bit (a new
	// line starts unreferenced by the hand, measured better in
	// gpucache), after the stores above and before any store to the line.
	detail::st_release_gpu(tag_at(d, victim), claimed_word(old_word, w.tag));
	__threadfence();
	atomicAdd(state_at(d, victim), n);
	atomicAnd(state_at(d, victim), ~(state_valid | state_dirty));
	drop_lock(lock);
	// 6. write the dirty victim back, no lock held
	if (dirty) {
		// Recover the victim's place on storage from its tag.
		where ow;
		ow.tag = old_tag;
		ow.nsid = (old_tag >> C::TagNamespaceShift) + 1;
		ow.lba = (old_tag & C::TagLineMask) << d.lba_shift;
		const u32 st = write_line(d, victim, ow, deadline);
		detail::count(d, L::StatWriteBacks, 1);
		if (st != 0) {
			take_lock(lock, deadline + d.timeout_ns, nullptr);  // restores the dirty line: not stopped by an abort
			detail::st_relaxed_gpu(wbtag_at(d, victim), static_cast<u64>(C::TagEmpty));
			// The old tag at an even generation: the old data,
			// untouched, is its tag's again.
			const u32 gen = word_gen(detail::ld_relaxed_gpu(tag_at(d, victim)));
			detail::st_release_gpu(tag_at(d, victim), (static_cast<u64>(gen + 1u) << C::TagWordGenShift) | old_tag);
			atomicOr(state_at(d, victim), state_valid | state_dirty);
			// A Write that timed out may still run (quarantine).
			if (!is_timeout(st)) atomicAnd(state_at(d, victim), ~state_busy);
			atomicSub(state_at(d, victim), n);
			drop_lock(lock);
			fail(d, is_timeout(st) ? L::ErrCodeTimeout : L::ErrCodeStatus, st, index, ow);
			return claim_failed;
		}
		__threadfence();
		detail::st_release_gpu(wbtag_at(d, victim), static_cast<u64>(C::TagEmpty));
	}
	*way = victim;
	return claim_done;
}

// installed reports whether a way of the K from base holds the tag of w,
// VALID or BUSY: someone claimed the line.
__device__ __forceinline__ bool installed(const array_desc &d, const where &w, u64 base, u64 K) {
	u64 word;
	const u64 g = find_way(tag_at(d, 0), base, K, w.tag, &word);
	return g != ~0ull && (detail::ld_relaxed_gpu(state_at(d, g)) & (state_valid | state_busy)) != 0;
}

// claim is claim_locked after waiting for the set lock (step 1: short; no
// I/O under it). It waits only for the lock, whose holders never wait
// while holding it, and for the write-back's I/O. While it waits it looks
// for the line now and then, and returns claim_again once someone has
// installed it: the misses of one line that raced to the lock (every lane
// of a warp, when each acquires alone) then take the hit path instead of
// the lock one after the other, thousands of times for a 64 KiB line.
__device__ __noinline__ u32 claim(const array_desc &d, const where &w, u64 set, u64 base, u64 K, u32 n, u64 deadline, u64 index,
                                     u64 *way) {
	u32 *lock = set_lock(d, set);
	detail::backoff b;
	for (u32 i = 0;; i++) {
		if (try_lock(lock)) break;
		if ((i & 3) == 3 && installed(d, w, base, K)) return claim_again;
		if ((i & 7) == 7 && detail::expired(deadline, detail::abort_word(d))) {
			// Other misses of the set kept the lock; they too may be
			// waiting for ways that stay held.
			fail_wait(d, base, K, index, w, L::WaitSetLock);
			return claim_failed;
		}
		b.pause();
	}
	return claim_locked(d, w, set, base, K, n, deadline, index, way);
}

// claim_absent claims a way for the line at w, BUSY and unreferenced
// (*way), when no way of its set holds the line's tag (resident, being
// filled or a failed fill's leftover) and a way can be taken now. It never
// waits for another thread's fill or references, only for a dirty
// victim's write-back, so a warp may keep several ways it claimed this way
// BUSY while their Reads are in flight (bam::array's prefetch): none of
// them waits on another warp. False when the line needs no fill from this
// thread, when no way was free, when the set's lock was held, or when a
// failure was recorded. spare is claim_locked's.
//
// It does not wait for the set lock either. Its callers' lanes claim up to
// 32 sets at once, and a lane waiting for one set's lock while a lane of
// its warp held another's could keep that lock held: in a cold pass with
// read-ahead over 64 KiB lines through a 32 MiB cache (H200), lanes
// waiting for a set lock timed out after 5 s in 1 to 3 of 4 runs, with no
// I/O in flight (bench/results/logs/set-lock-wait-H200-20261126.txt). A
// line whose set is locked is left to its reads, like one whose set has no
// way free.
__device__ __noinline__ bool claim_absent(const array_desc &d, const where &w, u64 index, u64 *way, u32 spare = 0) {
	if (detail::failed(d)) return false;
	const u64 K = d.ways;
	const u64 set = set_of(w.tag, d.sets);
	const u64 base = set * K;
	u64 word;
	if (find_way(tag_at(d, 0), base, K, w.tag, &word) != ~0ull) return false;
	if (!try_lock(set_lock(d, set))) return false;
	if (claim_locked(d, w, set, base, K, 0, detail::globaltimer() + d.timeout_ns, index, way, spare) != claim_done) return false;
	detail::count(d, L::StatMisses, 1);
	return true;
}

// unclaim gives back way g, claimed by claim_absent (BUSY, unreferenced by
// its claimer) and never filled: its tag is emptied first, so that the
// readers that took references on it while it was BUSY find another tag
// once BUSY clears, drop them and take the miss path again (acquire, step
// 6); no failure is recorded.
__device__ __forceinline__ void unclaim(const array_desc &d, u64 g) {
	clear_tag(tag_at(d, g));
	__threadfence();
	atomicAnd(state_at(d, g), ~state_busy);
}

// end_fill ends step 7 for way g, claimed with n references, once its
// Read returned st (io_read, read_at): a failed Read records the error,
// then marks the way's fill failed and drops the references, so that a
// waiter that sees BUSY clear without VALID finds the failure recorded and
// unwinds (acquire, step 6); on the copy-engine route (nothing pending in
// h) the line is published. On success h holds the way.
__device__ __forceinline__ void end_fill(const array_desc &d, u64 g, u32 n, u32 st, u64 index, const where &w, handle *h) {
	detail::count(d, L::StatFills, 1);
	if (st != 0) {
		fail(d, is_timeout(st) ? L::ErrCodeTimeout : L::ErrCodeStatus, st, index, w);
		detail::st_relaxed_gpu(status_at(d, g), static_cast<u32>(C::StatusFillFailed));
		__threadfence();
		// A timed-out Read on the copy-engine route may still copy into
		// the line: the way stays BUSY (quarantine).
		if (!is_timeout(st) || d.direct_below == 0) atomicAnd(state_at(d, g), ~state_busy);
		atomicSub(state_at(d, g), n);
		return;
	}
	h->way = g;
	h->ok = true;
	if (h->staging == 0) {
		// Copy-engine route: the data is in the line; publish it.
		__threadfence();
		publish(tag_at(d, g));
		atomicXor(state_at(d, g), state_valid | state_busy);
	}
}

// acquire takes n references on the line at w for a group of requests; the
// line is filled first on a miss. index names the element for errors. On
// failure the error is recorded in the descriptor's error record.
__device__ __forceinline__ handle acquire_impl(const array_desc &d, const where &w, u32 n, u64 index) {
	const u64 K = d.ways;
	const u64 set = set_of(w.tag, d.sets);
	const u64 base = set * K;
	const u64 start = detail::globaltimer();
	const u64 deadline = start + d.timeout_ns;
	detail::backoff b;
	handle h{0, false, 0, 0, 0};
	for (u32 round = 0;; round++) {
		if (round > 0 && detail::expired(deadline, detail::abort_word(d))) {
			fail_wait(d, base, K, index, w, L::WaitWay);
			return h;
		}
		if (round > 0 && detail::failed(d)) return h;  // another thread failed: unwind fast
		// 1. scan
		u64 word = 0;
		u64 g = find_way(tag_at(d, 0), base, K, w.tag, &word);
		bool miss = g == ~0ull;
		if (!miss) {
			// 2. speculative reference, then re-check the tag
			u32 old = atomicAdd(state_at(d, g), n);
			__threadfence();
			word = detail::ld_relaxed_gpu(tag_at(d, g));
			if (word_tag(word) != w.tag) {
				atomicSub(state_at(d, g), n);
				detail::count(d, L::StatRetries, 1);
				continue;
			}
			if ((old & state_valid) && !(old & state_busy)) {  // 3. hit
				if (!(word & word_clock)) set_clock(tag_at(d, g));
				h.way = g;
				h.ok = true;
				return h;
			}
			if (old & state_valid) {  // 4. being evicted or written back
				atomicSub(state_at(d, g), n);
				b.pause();
				continue;
			}
			if (!(old & state_busy)) {  // 5. a failed fill's leftover
				atomicSub(state_at(d, g), n);
				miss = true;
			} else {
				// 6. being filled: keep the references, wait for BUSY to clear
				u32 s;
				detail::backoff wb;
				for (u32 i = 0;; i++) {
					s = detail::ld_acquire_gpu(state_at(d, g));
					if (!(s & state_busy)) break;
					if ((i & 7) == 7) {
						if (detail::expired(deadline, detail::abort_word(d))) {
							atomicSub(state_at(d, g), n);
							fail(d, L::ErrCodeTimeout, timed_out(L::WaitLine), index, w);
							return h;
						}
						// The launch failed already: the way may
						// be quarantined, and stay BUSY.
						if (detail::failed(d)) {
							atomicSub(state_at(d, g), n);
							return h;
						}
					}
					wb.pause();
				}
				if (word_tag(detail::ld_relaxed_gpu(tag_at(d, g))) != w.tag) {
					atomicSub(state_at(d, g), n);
					continue;
				}
				if (s & state_valid) {
					h.way = g;
					h.ok = true;
					return h;
				}
				// Not filled. The way's status cannot say by whom: BUSY
				// may have been a claimer's fetch_or, undone because the
				// way was referenced (take_way), over a fill that failed
				// in an earlier launch, whose error this launch never
				// recorded. Returning now would hand the caller T{} with
				// no error. Start over instead: a failure of this launch
				// is in the error record, and the next round unwinds on
				// it; otherwise the miss path clears the leftover and
				// fills the line.
				atomicSub(state_at(d, g), n);
				continue;
			}
		}
		if (!miss) continue;
		// A launch that has failed starts no more I/O: its call returns
		// that failure anyway, and a timeout may have lost a queue ticket,
		// behind which every later command of the queue would wait out
		// the timeout too, miss after miss, far past the launch's bound
		// (bench/results/logs/shared-gpu-overrun-H200-20261126.txt).
		if (detail::failed(d)) return h;
		detail::count(d, L::StatMisses, 1);
		// Miss: claim a way (steps 1-6).
		u64 victim;
		const u32 c = claim(d, w, set, base, K, n, deadline, index, &victim);
		if (c == claim_failed) return h;
		if (c != claim_done) {
			// Installed meanwhile: take the hit path. Every way held or in
			// flight: wait for one; past the deadline the next round says
			// which (fail_wait).
			b.pause();
			continue;
		}
		// 7. fill: the data lands in a staging slot; the caller copies it
		// into the line (alone or with its warp group) and publishes VALID
		// with finish_fill.
		end_fill(d, victim, n, io_read(d, w, victim, n, deadline, &h), index, w, &h);
		return h;
	}
}

__device__ inline u32 io_read(const array_desc &d, const where &w, u64 g, u32 n, u64 deadline, handle *h) {
	const queue_desc &q = pick_queue(d);
	u64 t;
	if (detail::aborted(d) || !queue::reserve(q, deadline, &t, detail::abort_word(d))) return timed_out(L::WaitTurn);
	return read_at(d, q, t, w, g, n < d.direct_below, deadline, h);
}

__device__ inline u32 read_at(const array_desc &d, const queue_desc &q, u64 t, const where &w, u64 g, bool direct, u64 deadline, handle *h) {
	start_read(d, q, t, w, g, direct);
	return end_read(d, q, t, direct, deadline, h);
}

__device__ inline void start_read(const array_desc &d, const queue_desc &q, u64 t, const where &w, u64 g, bool direct) {
	const u32 shift = static_cast<u32>(d.line_shift);
	u64 prp1, prp2;
	if (direct) {
		queue::prps_to(q, t, shift, reinterpret_cast<u64>(line_data(d, g)), &prp1, &prp2);
	} else {
		queue::prps(q, t, shift, &prp1, &prp2);
	}
	const u32 blocks = 1u << d.lba_shift;
	nvme_command cmd = nvme_command::read_write(nvme_op_read, static_cast<u32>(w.nsid), w.lba, blocks, prp1, prp2);
	if (!direct) cmd.dw[3] = queue::mirror_hint(q, t);
	queue::issue(q, t, cmd);
	detail::count(d, L::StatCommands, 1);
}

__device__ inline u32 end_read(const array_desc &d, const queue_desc &q, u64 t, bool direct, u64 deadline, handle *h) {
	const u32 shift = static_cast<u32>(d.line_shift);
	u32 status, dw0;
	if (!queue::wait(q, t, deadline, &status, &dw0, detail::abort_word(d))) return timed_out(wait_kind(q, t));
	if (!queue::status_ok(status) || direct) {
		queue::retire(q, t);
		return status;
	}
	h->staging = reinterpret_cast<u64>(queue::data_slot(q, t, shift, dw0));
	h->queue = reinterpret_cast<u64>(&q);
	h->ticket = t;
	return 0;
}

// copy_part copies the share of lane `rank` of `lanes` lanes of one line
// from a staging slot into the line.
__device__ __forceinline__ void copy_part(unsigned char *to, const unsigned char *from, u64 bytes, u32 rank, u32 lanes) {
	detail::copy_from_host(to, from, bytes, rank, lanes);
}

// finish_fill retires the fill's staging slot (unless h.queue is 0: a line
// of a Read that another thread retires) and publishes the line: one
// atomic BUSY -> VALID after the copy's stores (DESIGN.md §5: the data is
// visible before the line turns VALID).
__device__ __forceinline__ void finish_fill(const array_desc &d, handle &h) {
	if (h.staging == 0) return;
	__threadfence();
	if (h.queue != 0) queue::retire(*reinterpret_cast<const queue_desc *>(h.queue), h.ticket);
	publish(tag_at(d, h.way));
	atomicXor(state_at(d, h.way), state_valid | state_busy);
	h.staging = 0;
}

// complete finishes a deferred fill for the calling thread alone: through
// the fill copier when one runs, else with this thread's own loads.
__device__ __forceinline__ void complete(const array_desc &d, handle &h) {
	if (h.staging == 0) return;
	unsigned char *line = line_data(d, h.way);
	const unsigned char *slot = reinterpret_cast<const unsigned char *>(h.staging);
	if (!offload(d, line, slot, false, detail::globaltimer() + d.timeout_ns)) copy_part(line, slot, 1ull << d.line_shift, 0, 1);
	finish_fill(d, h);
}

// acquire_deferred is acquire that may return with a fill pending
// (h.staging != 0): see complete and bam::array's group copy.
__device__ __noinline__ handle acquire_deferred(const array_desc &d, const where &w, u32 n, u64 index) {
	return acquire_impl(d, w, n, index);
}

// acquire takes n references on the line at w, filling it on a miss; the
// line is resident when it returns ok.
__device__ __forceinline__ handle acquire(const array_desc &d, const where &w, u32 n, u64 index) {
	handle h = acquire_deferred(d, w, n, index);
	complete(d, h);
	return h;
}

// probe is the first half of a hit, taken by a group's leader without any
// call: the way found for the tag, the state word before the leader's
// fetch_add on it, and the tag read again after that fetch_add.
struct probe {
	u64 way;        // the way whose tag matched, ~0 when none did
	u32 old;        // state before the fetch_add (when way != ~0)
	u64 tag_after;  // the way's tag word after the fetch_add (when way != ~0)

	// held: the fetch_add found the way VALID and not BUSY, so the line
	// cannot be evicted while the references are held and its data may be
	// loaded. The load is the tag's data only once confirmed also holds.
	__device__ __forceinline__ bool held() const { return way != ~0ull && (old & (state_valid | state_busy)) == state_valid; }
	__device__ __forceinline__ bool confirmed(u64 tag) const { return held() && word_tag(tag_after) == tag; }
};

// probe_hit scans the set of tag (from the fields of v, loaded once by the
// caller) and, when a way holds the tag, takes n references on it and
// re-reads its tag (gpucache/doc.go, hit steps 1-3). The caller loads the
// line as soon as held() and keeps it when confirmed(tag); otherwise it
// calls unprobe and takes the full protocol.
__device__ __forceinline__ probe probe_hit(const u64 *tags, unsigned char *recs, u64 sets, u64 K, u64 tag, u32 n) {
	u64 word;
	probe p{find_way(tags, set_of(tag, sets) * K, K, tag, &word), 0, 0};
	if (p.way == ~0ull) return p;
	u32 *state = reinterpret_cast<u32 *>(recs + p.way * C::WayStride + C::WayStateOffset);
	p.old = detail::atomic_add_acquire(state, n);
	// Issued right after the fetch_add, so it overlaps the caller's data
	// load instead of preceding it.
	p.tag_after = detail::ld_relaxed_gpu(tags + p.way);
	return p;
}

// unprobe undoes a probe that was not confirmed; mark_hit records a
// confirmed one for the clock, in the way's tag word (callers call it only
// when the word they read had the bit clear; nothing waits on it).
__device__ __forceinline__ void unprobe(unsigned char *recs, const probe &p, u32 n) {
	if (p.way != ~0ull) atomicSub(reinterpret_cast<u32 *>(recs + p.way * C::WayStride + C::WayStateOffset), n);
}
__device__ __forceinline__ void mark_hit(u64 *tags, u64 way) { set_clock(tags + way); }

// peek_begin and peek_end read a resident line without a reference, as a
// sequence lock (gpucache/doc.go, Reads without references): begin finds
// the way whose tag word holds tag; when ok() (an even generation: no fill
// in progress, the line complete) the caller loads from the line with
// acquire ordering (bam::detail::load_line_acquire), whose address depends
// on the word, and end re-reads the word (acquire). The loads are the
// tag's data when end finds the same tag at the same generation: no claim
// began before they completed. Otherwise the caller takes references. A
// hit thus costs three dependent loads (the set's tag words, the element,
// the word again) where a generation and clock bit in the way record cost
// five: C2 went from 0.31 to 0.38-0.44 of a plain device array in
// bench/experiments/c2_hit_chain.cu (H200).
struct peek {
	u64 way;   // the way whose tag matched, ~0 when none did
	u64 word;  // its tag word (when way != ~0): tag, clock bit, generation

	__device__ __forceinline__ bool ok() const { return way != ~0ull && (word_gen(word) & 1u) == 0; }
	// referenced: the clock bit was set (a hit sets it only when clear).
	__device__ __forceinline__ bool referenced() const { return (word & word_clock) != 0; }
};

__device__ __forceinline__ peek peek_begin(const u64 *tags, u64 sets, u64 K, u64 tag) {
	peek p{0, 0};
	p.way = find_way(tags, set_of(tag, sets) * K, K, tag, &p.word);
	return p;
}

__device__ __forceinline__ bool peek_end(const u64 *tags, const peek &p) { return same_line(detail::ld_acquire_gpu(tags + p.way), p.word); }

// release drops n references; a writer marks the line dirty first, after
// its stores (so Flush never clears DIRTY over an unwritten store).
__device__ __forceinline__ void release(unsigned char *recs, u64 g, u32 n, bool dirty) {
	u32 *state = reinterpret_cast<u32 *>(recs + g * C::WayStride + C::WayStateOffset);
	if (dirty) detail::atomic_or_release(state, state_dirty);
	detail::atomic_sub_release(state, n);
}
__device__ __forceinline__ void release(const array_desc &d, u64 g, u32 n, bool dirty) {
	release(reinterpret_cast<unsigned char *>(d.cache_meta) + d.ways_off, g, n, dirty);
}

// write_back_way writes way g back if it is VALID and DIRTY and nobody holds
// it: claimed like a victim but keeping VALID and its tag; BUSY|DIRTY clear
// together on success. Returns false on an I/O failure (recorded).
__device__ __noinline__ bool write_back_way(const array_desc &d, u64 g) {
	const u32 s = detail::ld_relaxed_gpu(state_at(d, g));
	if ((s & (state_valid | state_dirty)) != (state_valid | state_dirty) || (s & state_busy) || (s & ref_mask)) {
		return true;
	}
	const u32 o = atomicOr(state_at(d, g), state_busy);
	if ((o & state_busy) || (o & ref_mask) || (o & (state_valid | state_dirty)) != (state_valid | state_dirty)) {
		if (!(o & state_busy)) atomicAnd(state_at(d, g), ~state_busy);
		return true;
	}
	const u64 tag = word_tag(detail::ld_relaxed_gpu(tag_at(d, g)));
	where w;
	w.tag = tag;
	w.nsid = (tag >> C::TagNamespaceShift) + 1;
	w.lba = (tag & C::TagLineMask) << d.lba_shift;
	const u64 deadline = detail::globaltimer() + d.timeout_ns;
	const u32 st = write_line(d, g, w, deadline);
	detail::count(d, L::StatWriteBacks, 1);
	__threadfence();
	if (st != 0) {
		if (!is_timeout(st)) atomicAnd(state_at(d, g), ~state_busy);  // else quarantined
		fail(d, is_timeout(st) ? L::ErrCodeTimeout : L::ErrCodeStatus, st, g, w);
		return false;
	}
	atomicAnd(state_at(d, g), ~(state_busy | state_dirty));
	return true;
}

}  // namespace cache
}  // namespace bam

#endif  // BAM_CACHE_CUH
