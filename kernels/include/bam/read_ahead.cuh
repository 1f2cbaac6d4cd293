// bam/read_ahead.cuh: bam::read_ahead<T>, the read-ahead of a grid-stride
// loop of one element per thread over a bam::array<T>:
//
//	bam::read_ahead<u64> ra(a, 16);
//	u64 k = 0;
//	for (u64 base = bam::global_thread_id() - lane; base < n; base += grid, k++) {
//		ra.step(k, base, grid);
//		if (base + lane < n) s += a[base + lane];
//	}
//	ra.finish();   // or let ra go out of scope
//
// Why. Such a loop has in flight only the lines of one grid step: on an
// H200 with 8-byte elements and 4 KiB lines, 264 lines, while the path
// needs about three times as many to run at its ceiling (a fill takes some
// 57 us from miss to publication). array<T>::prefetch_steps asks for the
// lines of the next steps ahead, but its warp waits for those fills before
// it reads on. read_ahead issues the Reads and goes on: the warp completes each fill (waits for its
// completion, copies the line from its staging slot with all 32 lanes and
// publishes it) when it finds the completion already there at a later
// step, and at the latest at its next turn, before any of its lanes reads
// the line. Measured (H200 host, 4 KiB lines, 64 read-ahead queue pairs):
// 45.8 GB/s against prefetch_steps' 42.2 in one run, with 99 % of the
// lines read ahead, short of the range passes' 50
// (bench/results/logs/c1-read-ahead-queues-H200-20261125.txt). Profiled, a Read took 380-430 us from
// issue to completion in the pass (16-18 steps), so most are completed at
// the next turn, waiting, while the Target idles 13-18 %: with one Read in
// flight per warp the rate is warps / latency. Two per warp, completions
// polled or harvested otherwise, or a halved CQ backlog did not change it
// (bench/results/logs/c1-read-ahead-profile-H200-20261125.txt).
//
// Schedule. Once every `steps` steps (1 to 32), at a phase set by the
// warp's index (as prefetch_steps: the warps that share a line ask at
// different steps, and the first to ask fills it), the warp first
// completes every fill it left in flight, then issues the Reads of the
// lines its lane 0 will read 2*steps to steps+1 steps later, one lane per
// line. Its first turn fills the lines of the steps in between as
// prefetch does, waiting.
//
// Progress. A fill left in flight holds its way BUSY, and any thread that
// reads the line waits for it. A line is read ahead only for the step at
// which the loop reads its first element, and its issuer completes it
// before it reads that step; so a thread waiting at step s waits only for
// a warp to reach a step before s, and no set of warps can wait on each
// other. Its Reads go to queue pairs that nothing else uses (the engine's
// Config.ReadAheadQueuePairs) and take an entry only when one is free at
// once (queue::try_reserve_group): no other fill ever waits for an entry a
// read-ahead holds. A read-ahead claims a way only while its set keeps
// another way that is not BUSY, and keeps at most a quarter of the cache
// in flight (fewer queues for smaller caches): other misses always find a
// way that frees without waiting on a read-ahead. Lines that find no free
// way or entry are skipped; their reads fill them as usual.
//
// Requirements. All 32 lanes of each warp construct the object and call
// step and finish together (launch whole warps; run the loop while any
// lane of the warp has elements). The loop reads the array's own indices
// in grid-stride order, and nothing else in the kernel reads the array
// while the object has fills in flight: a read of a line ahead of its step
// waits for the warp that asked for it, and may time out. Without
// read-ahead queue pairs (or with a cache too small for one queue's
// entries) the object reads ahead as prefetch_steps does, waiting.
#ifndef BAM_READ_AHEAD_CUH
#define BAM_READ_AHEAD_CUH

#include "bam/array.cuh"

namespace bam {

template <typename T>
class read_ahead {
   public:
	// read_ahead prepares the read-ahead of a's grid-stride loop, asking
	// for the lines of `steps` steps at a time (at most 32; 0: none).
	__device__ read_ahead(const array<T> &a, u32 steps) : desc_(a.desc), count_(a.size()) {
		const array_desc &d = *desc_;
		steps_ = min(steps, 32u);
		shift_ = static_cast<u32>(d.line_shift) - detail::elem_shift<T>();
		queues_ = 0;
		if (d.ahead_queues != 0) {
			const queue_desc *qs = reinterpret_cast<const queue_desc *>(d.queues) + d.nqueues;
			// A quarter of the cache's lines in flight at most.
			queues_ = static_cast<u32>(min(d.ahead_queues, (d.sets * d.ways / 4) / qs[0].depth));
		}
		// The warps whose 32 elements share a line at each step are
		// consecutive: their phases are spread evenly over the steps, so
		// that each asks for as many new lines as the others
		// (prefetch_steps' schedule; asking for all of a line's steps in
		// one warp, so that its Reads share ticket updates and doorbells,
		// measured three times slower: entries ran out).
		const u64 sharing = shift_ > 5 ? 1ull << (shift_ - 5) : 1ull;
		phase_ = steps_ == 0 ? 0 : static_cast<u32>(((global_thread_id() >> 5) % sharing) * steps_ / sharing);
		started_ = false;
		queue_ = 0;
		ticket_ = 0;
		way_ = 0;
		line_ = 0;
	}

	__device__ ~read_ahead() { finish(); }

	// step is called by all 32 lanes of the warp at the top of each step
	// k (0, 1, ...) of the loop, base being the index lane 0 reads at
	// that step and stride the grid's.
	__device__ void step(u64 k, u64 base, u64 stride) {
		if (steps_ == 0) return;
		const u32 lane = threadIdx.x & 31u;
		const bool turn = (k + phase_) % steps_ == 0;
		if (!turn) {
			if (__ballot_sync(full_warp_mask, queue_ != 0) != 0) poll();
			return;
		}
		if (queues_ == 0 || !started_) {
			// The lines of the next steps, waiting for them.
			started_ = true;
			const u64 i = base + (lane + 1) * stride;
			const bool want = lane < steps_ && i < count_;
			fill_lines(desc_, want ? i >> shift_ : 0, want, i);
			if (queues_ == 0) return;
		} else {
			complete(queue_ != 0);
		}
		issue(k, base, stride);
	}

	// finish completes every fill the warp left in flight; all 32 lanes
	// call it together, after the loop (the destructor calls it too).
	__device__ void finish() {
		if (__ballot_sync(full_warp_mask, queue_ != 0) != 0) complete(queue_ != 0);
	}

   private:
	// poll completes the fills whose completions have arrived. Out of
	// line, like the rest of the slow path: a loop step that is not a
	// turn then costs one vote.
	__device__ __noinline__ void poll() {
		const u32 pending = __ballot_sync(full_warp_mask, queue_ != 0);
		if (pending == 0) return;
		namespace V = layout::vq;
		const queue_desc *q = reinterpret_cast<const queue_desc *>(queue_);
		const auto done = [&]() {
			return q != nullptr && detail::ld_acquire_gpu(queue::cid_record(*q, ticket_ & (q->depth - 1)) + V::CIDStateOffset / 8) == V::CIDDone;
		};
		u32 ready = __ballot_sync(full_warp_mask, done());
		if (ready == 0) {
			// Nobody waits on these queues: harvest them here.
			const u32 lane = threadIdx.x & 31u;
			if (lane == static_cast<u32>(__ffs(pending) - 1)) {
				u64 unused;
				queue::harvest(*q, ~0ull, &unused);
			}
			ready = __ballot_sync(full_warp_mask, done());
			if (ready == 0) return;
		}
		complete(((ready >> (threadIdx.x & 31u)) & 1u) != 0);
	}

	// complete ends the fills of the lanes where mine is set: each waits
	// for its Read's completion, then the warp copies the lines together
	// and each lane publishes its own.
	__device__ __noinline__ void complete(bool mine) {
		const array_desc &d = *desc_;
		cache::handle h{0, false, 0, 0, 0};
		if (mine) {
			const queue_desc &q = *reinterpret_cast<const queue_desc *>(queue_);
			const u32 st = cache::end_read(d, q, ticket_, false, detail::globaltimer() + d.timeout_ns, &h);
			cache::end_fill(d, way_, 0, st, line_ << shift_, cache::locate(d, line_), &h);
			queue_ = 0;
		}
		copy_staged(d, h);
	}

	// issue asks for the lines lane 0 reads at steps k+steps+1 to
	// k+2*steps, lane j for step k+steps+1+j, each only when that step
	// reads the line's first element.
	__device__ __noinline__ void issue(u64 k, u64 base, u64 stride) {
		const array_desc &d = *desc_;
		const u32 lane = threadIdx.x & 31u;
		const u64 s = k + steps_ + 1 + lane;  // the step this lane asks for
		const u64 i = base + (s - k) * stride;
		const u64 line = i >> shift_;
		// s * stride = i - (base - k * stride) is the first index the
		// loop reads at step s; the line's first element must be read
		// there too (it is not before: it is at most i).
		const bool want = lane < steps_ && i < count_ && (line << shift_) >= i - (base - k * stride);
		const u32 same = __match_any_sync(full_warp_mask, want ? line : ~0ull);
		const bool first = want && static_cast<u32>(__ffs(same) - 1) == lane;
		const queue_desc &q = reinterpret_cast<const queue_desc *>(d.queues)[d.nqueues + ((global_thread_id() >> 5) % queues_)];
		cache::where w{};
		u64 way = 0;
		bool mine = false;
		if (first) {
			w = cache::locate(d, line);
			mine = cache::claim_absent(d, w, i, &way, 1);
		}
		const u32 claimers = __ballot_sync(full_warp_mask, mine);
		if (claimers == 0) return;
		if (mine) {
			u64 t;
			if (!queue::try_reserve_group(q, claimers, &t)) {
				cache::unclaim(d, way);
				return;
			}
			cache::start_read(d, q, t, w, way, false);
			queue_ = reinterpret_cast<u64>(&q);
			ticket_ = t;
			way_ = way;
			line_ = line;
		}
	}

	const array_desc *desc_;
	u64 count_;
	u32 steps_;
	u32 shift_;  // log2 of elements per line
	u32 phase_;
	u32 queues_;  // read-ahead queue pairs used: 0 for none
	bool started_;
	// This lane's fill in flight: its queue (0: none), ticket, way and line.
	u64 queue_;
	u64 ticket_;
	u64 way_;
	u64 line_;
};

}  // namespace bam

#endif  // BAM_READ_AHEAD_CUH
