// bam/queue.cuh: GPU threads submitting NVMe commands to a queue pair and
// collecting their completions, on the metadata layout of package vq
// (layout::vq). The protocol is vq's (see vq/doc.go); what differs on the
// device is said where it differs.
//
// A command goes through four calls, so that a caller can fill or drain the
// command's staging slot (pinned host memory owned by the slot while the
// command is outstanding) at the right moments:
//
//	u64 t;  if (!queue::reserve(q, deadline, &t)) ...   // ticket + its turn
//	... write the data of a Write into queue::staging(q, t) ...
//	queue::issue(q, t, cmd);                              // SQE, marker, doorbell
//	u32 status; if (!queue::wait(q, t, deadline, &status)) ...  // completion
//	... read the data of a Read from queue::staging(q, t) ...
//	queue::retire(q, t);                                  // slot free for t + depth
//
// Lanes of a warp that keep their slots until every one of them has its
// completion (to copy all their lines together) take their tickets with
// queue::reserve_group instead of reserve.
//
// Throughput. Reads whose data a kernel copies into device memory moved
// fastest (H200, 64 queue pairs of 256 entries, 4 KiB: 48-50 GB/s, about
// 0.9 of the link's copy rate) when a few lanes of each warp kept one Read
// in flight each, the whole warp copied each completed line with all 32
// lanes, and the commands outstanding stayed near 60 % of the queues'
// entries; every lane reading (queues full, warps waiting for slots) or
// one Read a warp were 5-16 % slower (kernels/bench.cu
// bam_bench_queue_read_line, bench/results/logs/q2-warp-lines-*.txt).
//
// Staging mirror (internal/gpuengine/mirror.go, nvme.Mirror). When the
// queue has one (q.mirror != 0), a Read built with mirror_hint set in CDW3
// may complete with MirroredDW0 in dword 0; its data is then also in the
// mirror, in device memory, at the slot's offset: wait's dw0 and data_slot
// say where to read it. The Target gathers hinted Reads into runs copied
// by the copy engine, so a hinted Read may complete later than it would
// alone: hint only when the queue is busy (mirror_hint decides).
//
// Device rules. The CID of ticket t is its SQ position t mod depth, so a CID
// is unique among outstanding commands because a position is reused only
// after retire. Ticket t may use its slot when (a) the slot's turn counter
// says the controller consumed the previous occupant (SQHD), (b) the CID
// record is free (its previous occupant retired), and (c) the next slot's
// previous occupant was consumed too, which keeps at most depth-1 entries in
// the SQ (the full-queue rule). Completions are harvested in CQ order by the
// holder of the head lock only, so the host's CQ is read over PCIe by one
// thread at a time, never by every waiter. Waiters watch their CID record in
// device memory. Every wait is bounded by a %globaltimer deadline.
#ifndef BAM_QUEUE_CUH
#define BAM_QUEUE_CUH

#include "bam/detail/desc.cuh"
#include "bam/detail/sync.cuh"

namespace bam {

// nvme_command is a submission queue entry being built, as 16 dwords.
struct nvme_command {
	u32 dw[16];

	// read_write builds a Read (opcode 2) or Write (1) of blocks LBAs.
	__device__ static nvme_command read_write(u32 opcode, u32 nsid, u64 slba, u32 blocks, u64 prp1, u64 prp2) {
		nvme_command c;
#pragma unroll
		for (int i = 0; i < 16; i++) c.dw[i] = 0;
		c.dw[0] = opcode;
		c.dw[1] = nsid;
		c.dw[6] = static_cast<u32>(prp1);
		c.dw[7] = static_cast<u32>(prp1 >> 32);
		c.dw[8] = static_cast<u32>(prp2);
		c.dw[9] = static_cast<u32>(prp2 >> 32);
		c.dw[10] = static_cast<u32>(slba);
		c.dw[11] = static_cast<u32>(slba >> 32);
		c.dw[12] = (blocks - 1) & 0xffff;
		return c;
	}
};

constexpr u32 nvme_op_write = 0x01;
constexpr u32 nvme_op_read = 0x02;

// Pseudo-statuses for failures that are not the controller's (bit 15 is
// never set in a real 15-bit NVMe status).
constexpr u32 status_timeout = 0x8000u;

namespace queue {
namespace V = layout::vq;

__device__ __forceinline__ u64 *word(const queue_desc &q, u64 off) {
	return reinterpret_cast<u64 *>(q.meta + off);
}
__device__ __forceinline__ u64 *turn(const queue_desc &q, u64 pos) {
	return reinterpret_cast<u64 *>(q.meta + V::HeaderBytes + pos * V::TurnStride);
}
__device__ __forceinline__ u64 turns_bytes(const queue_desc &q) {
	return (q.depth * V::TurnStride + V::SectorBytes - 1) & ~(V::SectorBytes - 1);
}
__device__ __forceinline__ u64 *marker(const queue_desc &q, u64 pos) {
	return reinterpret_cast<u64 *>(q.meta + V::HeaderBytes + turns_bytes(q) + pos * V::TailMarkerStride);
}
__device__ __forceinline__ u64 *cid_record(const queue_desc &q, u64 cid) {
	const u64 markers = (q.depth * V::TailMarkerStride + V::SectorBytes - 1) & ~(V::SectorBytes - 1);
	return reinterpret_cast<u64 *>(q.meta + V::HeaderBytes + turns_bytes(q) + markers + cid * V::CIDRecordBytes);
}
__device__ __forceinline__ u32 shift(const queue_desc &q) { return __ffsll(static_cast<long long>(q.depth)) - 1; }

// staging returns the staging slot of ticket t (one line, device-mapped).
__device__ __forceinline__ unsigned char *staging(const queue_desc &q, u64 t, u32 line_shift) {
	return reinterpret_cast<unsigned char *>(q.staging + ((t & (q.depth - 1)) << line_shift));
}

// data_slot returns where the data of ticket t's completed Read is: the
// staging slot's mirror in device memory when the completion's dword 0
// says so, else the staging slot.
__device__ __forceinline__ const unsigned char *data_slot(const queue_desc &q, u64 t, u32 line_shift, u32 dw0) {
	if (dw0 == layout::engine::MirroredDW0 && q.mirror != 0) {
		return reinterpret_cast<const unsigned char *>(q.mirror + ((t & (q.depth - 1)) << line_shift));
	}
	return staging(q, t, line_shift);
}

// mirror_hint returns the CDW3 of a Read by ticket t: MirrorHint when the
// queue has a mirror and at least MirrorHintOutstanding commands
// outstanding (tickets taken and not yet harvested), else 0.
__device__ __forceinline__ u32 mirror_hint(const queue_desc &q, u64 t) {
	if (q.mirror == 0) return 0;
	const u64 head = detail::ld_relaxed_gpu(reinterpret_cast<const u64 *>(q.meta + V::CQHeadOffset));
	return t >= head + layout::engine::MirrorHintOutstanding ? static_cast<u32>(layout::engine::MirrorHint) : 0u;
}

// prps_bytes returns PRP1 and PRP2 for a transfer of bytes bytes to or
// from the page-aligned buffer at DMA address base: the second page
// directly, or, over 8 KiB, t's PRP list page, which it fills with the
// addresses of the pages after the first (system-scope stores that
// queue::issue orders before the doorbell; at most 513 pages).
__device__ __forceinline__ void prps_bytes(const queue_desc &q, u64 t, u64 bytes, u64 base, u64 *prp1, u64 *prp2) {
	*prp1 = base;
	if (bytes <= 4096) {
		*prp2 = 0;
	} else if (bytes <= 8192) {
		*prp2 = base + 4096;
	} else {
		const u64 page = (t & (q.depth - 1)) * 4096;
		u64 *entries = reinterpret_cast<u64 *>(q.prp_list + page);
		const u32 pages = static_cast<u32>((bytes + 4095) >> 12);
		for (u32 k = 1; k < pages; k++) __stwt(entries + (k - 1), base + (static_cast<u64>(k) << 12));
		*prp2 = q.prp_list_dma + page;
	}
}

// prps_to is prps_bytes for a transfer of one line.
__device__ __forceinline__ void prps_to(const queue_desc &q, u64 t, u32 line_shift, u64 base, u64 *prp1, u64 *prp2) {
	prps_bytes(q, t, 1ull << line_shift, base, prp1, prp2);
}

// prps returns PRP1 and PRP2 for a transfer of one line to or from t's
// staging slot.
__device__ __forceinline__ void prps(const queue_desc &q, u64 t, u32 line_shift, u64 *prp1, u64 *prp2) {
	prps_to(q, t, line_shift, q.staging_dma + ((t & (q.depth - 1)) << line_shift), prp1, prp2);
}

// posted reports whether dword 3 of the CQ entry at position p (counted
// from the queue's creation) was written in the current pass over the ring:
// its phase tag is 1 on even passes and 0 on odd ones.
__device__ __forceinline__ bool posted(u32 dw3, u64 p, u32 sh) { return ((dw3 >> 16) & 1u) == (((p >> sh) & 1) == 0 ? 1u : 0u); }

// result_of packs the parts of a completion entry that its waiter reads.
__device__ __forceinline__ u64 result_of(uint4 e) {
	return (static_cast<u64>(e.x) << V::ResultDW0Shift) | (static_cast<u64>(e.z & 0xffffu) << V::ResultSQHDShift) |
	       (static_cast<u64>(e.w >> 17) << V::ResultStatusShift);
}

// deliver_one hands one completion to its CID record: the result, then
// the state Done (or Free, if its submitter abandoned it).
__device__ __forceinline__ void deliver_one(const queue_desc &q, uint4 e) {
	const u64 cid = e.w & 0xffffu;
	if (cid >= q.depth) return;
	detail::st_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8, result_of(e));
	detail::fence_acq_rel_gpu();
	const u64 prev = atomicCAS(reinterpret_cast<unsigned long long *>(cid_record(q, cid) + V::CIDStateOffset / 8),
	                           static_cast<unsigned long long>(V::CIDInFlight), static_cast<unsigned long long>(V::CIDDone));
	if (prev == V::CIDAbandoned) {
		// Late completion of a command whose submitter gave up: the slot
		// is free again.
		detail::st_release_gpu(cid_record(q, cid) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
	}
}

// harvest drains valid completions at the CQ head if the head lock is free.
// For each: the result goes into the CID record and the CID turns Done (or
// Free, if its submitter abandoned it). Then the CQ doorbell is rung once and
// the SQ head moves to the last SQHD, opening the turns of the slots passed.
// Returns the number of completions taken. When one of them is CID want
// (~0 for none), its result goes to *mine instead of its CID record, whose
// state stays InFlight: the waiter that harvested its own completion
// returns it at once and retires the CID (a difference from vq, whose
// harvester delivers every completion).
//
// The costs that shape it (H200, one thread; bench/experiments/qd1_target.cu):
// a 16-byte load of the CQ takes 1.3 us, and loads of one 128-byte line
// from one thread are served one after the other, so eight entries cost
// 5.8 us against 2.8 us for eight lines. So when at most one command is
// outstanding (the ticket counter is one ahead of the head), its entry is
// read alone, with acquire ordering: queue depth 1 then waits for one load,
// not a window. Otherwise entries are read in windows of harvest_window,
// all in flight together (one poll finds a batch under load), and
// delivered in three passes (results, one fence, state changes) so that
// their stores and CASes are in flight together too. In the sm_90 build a
// window that does not wrap comes in one bulk copy (detail::ld_cq_window),
// one PCIe request instead of four served one after the other: on one
// H200 machine Q2 moved 50.1-50.3 GB/s against 48.5 with four loads, and
// C1's random 4 KiB order 50.5 against 48.4-48.5
// (bench/results/logs/bulk-cq-reads-H200-20261126.txt).
__device__ __noinline__ u32 harvest(const queue_desc &q, u64 want, u64 *mine) {
	u64 *lock = word(q, V::HeadLockOffset);
	if (detail::ld_relaxed_gpu(lock) != 0 || detail::cas_acquire_gpu(lock, 0ull, 1ull) != 0) {
		return 0;
	}
	const u64 mask = q.depth - 1;
	const u32 sh = shift(q);
	const u64 head = detail::ld_relaxed_gpu(word(q, V::CQHeadOffset));
	const u64 tickets = detail::ld_relaxed_gpu(word(q, V::TicketOffset));
	const u32 *cq = reinterpret_cast<const u32 *>(q.cq);
	u32 n = 0;
	u32 last_sqhd = 0;
	if (tickets <= head + 1) {
		// At most one command outstanding: its entry alone, one load.
		const uint4 first = detail::ld_cqe_acquire(cq + (head & mask) * 4);
		if (!posted(first.w, head, sh)) {
			detail::st_release_gpu(lock, 0ull);
			return 0;
		}
		if ((first.w & 0xffffu) == want) {
			*mine = result_of(first);
		} else {
			deliver_one(q, first);
		}
		n = 1;
		last_sqhd = first.z & 0xffffu;
	}
	// Four entries a window: one thread's loads of one line are served one
	// after the other (about 0.65 us per entry beyond the first), and a
	// poll under load finds only a few entries. Against eight, measured
	// interleaved on one H200 machine: cold 4 KiB gathers (C1) 48.7-49.1
	// GB/s against 46.3-47.7, one element per thread 15.5-17.6 against
	// 12.7-13.0; Q2 the same; raw queue IOPS (Q1, 64 K threads) 14.2-15.5
	// M against 13.6-17.6 M. Two entries made Q2 slower (21-43 GB/s), and
	// a first window of four followed by windows of eight lost C1's gain.
	constexpr u32 harvest_window = 4;
	static_assert(harvest_window == 4, "detail::ld_cq_window reads four entries");
	while (tickets > head + n && n < mask) {
		uint4 e[harvest_window];
		const u64 first = (head + n) & mask;
		if (first + harvest_window <= q.depth) {
			// The window does not wrap: one request where the build can
			// (detail::ld_cq_window).
			detail::ld_cq_window(cq + first * 4, e);
		} else {
#pragma unroll
			for (u32 k = 0; k < harvest_window; k++) e[k] = detail::ld_cqe(cq + ((head + n + k) & mask) * 4);
		}
		// Nothing new at the head (the common case of a poll): this looks
		// at the first entry only, so an empty poll need not wait for the
		// other loads.
		if (!posted(e[0].w, head + n, sh)) break;
		// m: the new entries at the head of the window, at most mask in
		// all (a full ring would look empty to the controller).
		u32 m = 1;
#pragma unroll
		for (u32 k = 1; k < harvest_window; k++) {
			if (m == k && n + k < mask && posted(e[k].w, head + n + k, sh)) m = k + 1;
		}
		detail::fence_acquire_sys();
#pragma unroll
		for (u32 k = 0; k < harvest_window; k++) {
			const u64 cid = e[k].w & 0xffffu;
			if (k < m && cid < q.depth) {
				if (cid == want) {
					*mine = result_of(e[k]);
				} else {
					detail::st_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8, result_of(e[k]));
				}
			}
		}
		// Every result before any state change that publishes it.
		detail::fence_acq_rel_gpu();
		u64 prev[harvest_window];
#pragma unroll
		for (u32 k = 0; k < harvest_window; k++) {
			const u64 cid = e[k].w & 0xffffu;
			prev[k] = V::CIDInFlight;
			if (k < m && cid < q.depth && cid != want) {
				prev[k] = atomicCAS(reinterpret_cast<unsigned long long *>(cid_record(q, cid) + V::CIDStateOffset / 8),
				                    static_cast<unsigned long long>(V::CIDInFlight),
				                    static_cast<unsigned long long>(V::CIDDone));
			}
		}
#pragma unroll
		for (u32 k = 0; k < harvest_window; k++) {
			if (prev[k] == V::CIDAbandoned) {
				detail::st_release_gpu(cid_record(q, e[k].w & 0xffffu) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
			}
		}
#pragma unroll
		for (u32 k = 0; k < harvest_window; k++) {
			if (k < m) last_sqhd = e[k].z & 0xffffu;
		}
		n += m;
		if (m < harvest_window) break;
	}
	if (n == 0) {
		detail::st_release_gpu(lock, 0ull);
		return 0;
	}
	detail::st_relaxed_gpu(word(q, V::CQHeadOffset), head + n);
	// The doorbell's value depends on every entry it frees, so the loads
	// of those entries are done before it is stored: no fence is needed
	// for the controller. Between holders, the unlock (a gpu-scope release)
	// and the next holder's acquire order this store before the next
	// holder's, for the host too (causality order; coherence follows it).
	detail::st_relaxed_sys(reinterpret_cast<u32 *>(q.cq_doorbell), static_cast<u32>((head + n) & mask));
	// Move the SQ head to the last SQHD and open the next turn of every
	// slot passed. The SQ tail read here is at least the one whose doorbell
	// the controller had seen when it posted these entries: the flusher
	// stored it before its doorbell's system-scope release, and the
	// entries were read with acquire ordering.
	const u64 sqhead = detail::ld_relaxed_gpu(word(q, V::SQHeadOffset));
	const u64 sqtail = detail::ld_relaxed_gpu(word(q, V::SQTailOffset));
	const u64 delta = (static_cast<u64>(last_sqhd) - sqhead) & mask;
	if (delta != 0 && delta <= sqtail - sqhead) {
		// One fence, then plain stores: together a release of every
		// turn, without a fence per slot.
		detail::fence_acq_rel_gpu();
		for (u64 v = sqhead; v < sqhead + delta; v++) {
			detail::st_relaxed_gpu(turn(q, v & mask), (v >> sh) + 1);
		}
		detail::st_relaxed_gpu(word(q, V::SQHeadOffset), sqhead + delta);
	}
	// The unlock releases, at gpu scope, everything this holder did. A
	// release store, not an exchange: nothing waits for its answer.
	detail::st_release_gpu(lock, 0ull);
	return n;
}

// reserve takes a ticket and waits until its slot may be used. Returns false
// on timeout, or once the abort word at stop (optional) is set; the ticket
// is then lost and the queue needs a reset (the host resets every queue
// after a failed launch).
__device__ inline bool reserve_ticket(const queue_desc &q, u64 t, u64 deadline, const u32 *stop);
__device__ inline bool reserve(const queue_desc &q, u64 deadline, u64 *ticket, const u32 *stop = nullptr) {
	const u64 t = atomicAdd(reinterpret_cast<unsigned long long *>(word(q, V::TicketOffset)), 1ull);
	if (!reserve_ticket(q, t, deadline, stop)) return false;
	*ticket = t;
	return true;
}

// reserve_group is reserve for the lanes of mask (all of which call it
// together, on the same queue): one fetch-and-add takes consecutive
// tickets for them all, in lane order. A caller that keeps some of its
// lanes' slots while others wait for theirs (a warp that copies all of its
// lines once every lane's command completed) must take its tickets this
// way: a ticket then waits only for the slots of smaller tickets, taken by
// earlier groups, so no two groups can each hold a slot the other waits
// for. Taking them one lane at a time, a warp could hold a slot another
// warp's lane waits for while one of its own lanes waits for a slot of
// that warp. Such a caller also needs fewer lanes than the queue has
// entries: the SQ holds at most depth - 1 commands, so with more, a lane
// would wait for a slot its own warp keeps.
__device__ inline bool reserve_group(const queue_desc &q, u32 mask, u64 deadline, u64 *ticket, const u32 *stop = nullptr) {
	const u32 lane = threadIdx.x & 31;
	const int leader = __ffs(mask) - 1;
	u64 base = 0;
	if (static_cast<int>(lane) == leader) {
		base = atomicAdd(reinterpret_cast<unsigned long long *>(word(q, V::TicketOffset)), static_cast<unsigned long long>(__popc(mask)));
	}
	const u64 t = __shfl_sync(mask, base, leader) + __popc(mask & ((1u << lane) - 1u));
	if (!reserve_ticket(q, t, deadline, stop)) return false;
	*ticket = t;
	return true;
}

// slot_ready reports whether ticket t's slot may be used now (the rules at
// the top of this file), from relaxed loads: the caller fences before it
// touches the slot.
__device__ __forceinline__ bool slot_ready(const queue_desc &q, u64 t) {
	const u64 mask = q.depth - 1;
	const u32 sh = shift(q);
	return detail::ld_relaxed_gpu(turn(q, t & mask)) == (t >> sh) &&
	       detail::ld_relaxed_gpu(cid_record(q, t & mask) + V::CIDStateOffset / 8) == V::CIDFree &&
	       detail::ld_relaxed_gpu(turn(q, (t + 1) & mask)) >= ((t + 1) >> sh);
}

// try_reserve_group is reserve_group that never waits: the lanes of mask
// (all of which call it together, on the same queue) take consecutive
// tickets in lane order, as many as have their slots ready now, by a
// compare-and-swap of the ticket counter, so a ticket is taken only when
// its slot may be used at once. Returns true in the lanes that got one
// (*ticket), false in the others. For queues whose tickets are all taken
// this way: a fetch-and-add elsewhere could take a ticket whose slot a
// caller of this function holds for long (bam::read_ahead's queues).
__device__ inline bool try_reserve_group(const queue_desc &q, u32 mask, u64 *ticket) {
	const u32 lane = threadIdx.x & 31;
	const int leader = __ffs(mask) - 1;
	u64 base = 0;
	u32 granted = 0;
	if (static_cast<int>(lane) == leader) {
		unsigned long long *counter = reinterpret_cast<unsigned long long *>(word(q, V::TicketOffset));
		const u32 want = static_cast<u32>(min(static_cast<u64>(__popc(mask)), q.depth - 1));
		for (u32 attempt = 0; attempt < 4 && granted == 0; attempt++) {
			base = detail::ld_relaxed_gpu(word(q, V::TicketOffset));
			u32 m = 0;
			while (m < want && slot_ready(q, base + m)) m++;
			if (m == 0 && attempt == 0) {
				// Completions not yet harvested may free slots.
				u64 unused;
				if (harvest(q, ~0ull, &unused) > 0) continue;
			}
			if (m == 0) break;
			if (atomicCAS(counter, base, base + m) == base) granted = m;
		}
	}
	base = __shfl_sync(mask, base, leader);
	granted = __shfl_sync(mask, granted, leader);
	const u32 rank = __popc(mask & ((1u << lane) - 1u));
	if (rank >= granted) return false;
	const u64 t = base + rank;
	// The lane's own loads of what the leader found, acquired by its own
	// fence, before it touches the slot (the words cannot change back: a
	// ready slot stays ready until its ticket uses it).
	(void)slot_ready(q, t);
	detail::fence_acq_rel_gpu();
	detail::st_relaxed_gpu(cid_record(q, t & (q.depth - 1)) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDInFlight));
	*ticket = t;
	return true;
}

// reserve_ticket waits until ticket t's slot may be used (the rules at the
// top of this file), then marks its CID in flight.
__device__ inline bool reserve_ticket(const queue_desc &q, u64 t, u64 deadline, const u32 *stop) {
	const u64 mask = q.depth - 1;
	const u32 sh = shift(q);
	const u64 pos = t & mask;
	const u64 next = t + 1;
	detail::backoff b;
	for (u32 i = 0;; i++) {
		// The three words are read together (relaxed) and acquired by one
		// fence once they all say go: three acquire loads one after the
		// other cost about 0.25 us more.
		const u64 own_turn = detail::ld_relaxed_gpu(turn(q, pos));
		const u64 cid_state = detail::ld_relaxed_gpu(cid_record(q, pos) + V::CIDStateOffset / 8);
		const u64 next_turn = detail::ld_relaxed_gpu(turn(q, next & mask));
		if (own_turn == (t >> sh) && cid_state == V::CIDFree && next_turn >= (next >> sh)) {
			detail::fence_acq_rel_gpu();
			break;
		}
		u64 unused;
		if (harvest(q, ~0ull, &unused) > 0) continue;
		if ((i & 7) == 7 && detail::expired(deadline, stop)) return false;
		b.pause();
	}
	detail::st_relaxed_gpu(cid_record(q, pos) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDInFlight));
	return true;
}

// flush_tail moves the SQ tail over every marked slot and rings the
// doorbell once for the batch, if it can take the tail lock (vq's tail-lock
// protocol); a holder re-checks the next slot after unlocking, so a marker
// set while it held the lock is not left behind.
__device__ inline void flush_tail(const queue_desc &q) {
	const u64 mask = q.depth - 1;
	u64 *lock = word(q, V::TailLockOffset);
	for (;;) {
		// An acquire CAS: the previous holder's SQ tail without a fence.
		if (detail::cas_acquire_gpu(lock, 0ull, 1ull) != 0) return;
		const u64 start = detail::ld_relaxed_gpu(word(q, V::SQTailOffset));
		u64 tail = start;
		while (detail::ld_acquire_gpu(marker(q, tail & mask)) == tail + 1) tail++;
		if (tail != start) {
			// The tail word is read by the next holder (through the lock)
			// and by harvesters (through the doorbell and the
			// completions), so a relaxed store before the doorbell's
			// release is enough.
			detail::st_relaxed_gpu(word(q, V::SQTailOffset), tail);
			// Cumulativity: the submitters released their markers after
			// writing their SQEs, we acquired the markers, and this
			// system-scope release orders all of those SQEs before the
			// doorbell for the host (PTX memory model: release is
			// cumulative). A fence of its own here adds nothing.
			detail::st_release_sys(reinterpret_cast<u32 *>(q.sq_doorbell), static_cast<u32>(tail & mask));
		}
		// The doorbell store must reach the host before the next holder's,
		// or the controller could see the tail move backwards. The unlock
		// (a gpu-scope release store; nothing waits for an exchange's
		// answer) releases it, and the next holder acquires the lock
		// before its own system-scope release of the doorbell, so the two
		// stores are ordered for the host too (causality order; both
		// stores are sys-scope, so coherence follows it). A system-scope
		// fence here, as before, waited for the doorbell to cross PCIe:
		// with the one that issue() had before the marker, about 1.4 us
		// of each command's latency at queue depth 1 (L1, H200).
		detail::st_release_gpu(lock, 0ull);
		// Store then load, on both sides (a submitter sets its marker, then
		// tries the lock): without a full fence between them each side may
		// read the other's old value, the submitter's try-lock failing
		// while this re-check misses its marker, and its command would sit
		// in the SQ with no doorbell.
		__threadfence();
		if (detail::ld_acquire_gpu(marker(q, tail & mask)) != tail + 1) return;
	}
}

// issue writes the command of ticket t into its SQ slot (CID = position),
// marks the slot and moves the SQ tail over every marked slot, ringing the
// doorbell once per batch (flush_tail).
__device__ inline void issue(const queue_desc &q, u64 t, nvme_command cmd) {
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
	// The SQE (and any staging data written before) must be visible to the
	// host before anyone rings a doorbell that covers it: the marker is a
	// release, and the thread that rings the doorbell acquires it and then
	// releases the doorbell at system scope (flush_tail), which carries
	// the SQE along. No system-scope fence is needed here.
	detail::st_release_gpu(marker(q, pos), t + 1);
	// The marker before the try-lock: see flush_tail.
	__threadfence();
	flush_tail(q);
}

// submitted reports whether ticket t's command has been handed to the
// controller: the SQ tail has passed it. A command issued after a ticket
// whose holder has not issued yet waits in the SQ until it has.
__device__ __forceinline__ bool submitted(const queue_desc &q, u64 t) { return detail::ld_relaxed_gpu(word(q, V::SQTailOffset)) > t; }

// wait polls t's CID record (helping to harvest) until its completion
// arrives; *status receives the 15-bit NVMe status and *dw0 the
// completion's dword 0. Returns false on timeout, or once the abort word
// at stop (optional) is set: the CID is abandoned and freed when its
// completion comes.
__device__ inline bool wait(const queue_desc &q, u64 t, u64 deadline, u32 *status, u32 *dw0, const u32 *stop = nullptr) {
	const u64 cid = t & (q.depth - 1);
	u64 *state = cid_record(q, cid) + V::CIDStateOffset / 8;
	// A result word never has bit 63 set (layout::vq), so ~0 means none.
	u64 mine = ~0ull;
	detail::backoff b;
	for (u32 i = 0;; i++) {
		if (detail::ld_acquire_gpu(state) == V::CIDDone) break;
		if (harvest(q, cid, &mine) > 0) {
			// This thread delivered its own completion: the result is
			// at hand (the harvest's system-scope acquire fence came
			// after the entry's load), no need to load it back.
			if (mine != ~0ull) {
				*status = static_cast<u32>(mine >> V::ResultStatusShift) & 0x7fffu;
				*dw0 = static_cast<u32>(mine >> V::ResultDW0Shift);
				return true;
			}
			continue;
		}
		// Belt and braces for the doorbell: if the SQ tail has not passed
		// this command yet, try to ring it ourselves.
		if ((i & 15) == 15 && detail::ld_relaxed_gpu(word(q, V::SQTailOffset)) <= t) flush_tail(q);
		if ((i & 7) == 7 && detail::expired(deadline, stop)) {
			if (atomicCAS(reinterpret_cast<unsigned long long *>(state), static_cast<unsigned long long>(V::CIDInFlight),
			              static_cast<unsigned long long>(V::CIDAbandoned)) == V::CIDInFlight) {
				*status = status_timeout;
				*dw0 = 0;
				return false;
			}
			break;  // it completed meanwhile
		}
		b.pause();
	}
	const u64 result = detail::ld_relaxed_gpu(cid_record(q, cid) + V::CIDResultOffset / 8);
	*status = static_cast<u32>(result >> V::ResultStatusShift) & 0x7fffu;
	*dw0 = static_cast<u32>(result >> V::ResultDW0Shift);
	return true;
}

// wait without dword 0.
__device__ inline bool wait(const queue_desc &q, u64 t, u64 deadline, u32 *status) {
	u32 dw0;
	return wait(q, t, deadline, status, &dw0);
}

// retire frees t's slot and CID for ticket t + depth.
__device__ __forceinline__ void retire(const queue_desc &q, u64 t) {
	detail::st_release_gpu(cid_record(q, t & (q.depth - 1)) + V::CIDStateOffset / 8, static_cast<u64>(V::CIDFree));
}

// status_ok reports success (SCT 0, SC 0; DNR, CRD and M ignored).
__device__ __forceinline__ bool status_ok(u32 status) { return (status & 0x7ffu) == 0; }

}  // namespace queue
}  // namespace bam

#endif  // BAM_QUEUE_CUH
