// bam/read_ahead.cuh: bam::read_ahead<T>, the read-ahead of a grid-stride
// loop of one element per thread over a bam::array<T>:
//
//	bam::read_ahead<u64> ra(a);   // or ra(a, steps)
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
// warp's index (the warps that read a run of lines at one step ask at
// different steps), the warp first completes every fill it left in
// flight, then issues the Reads of the lines read 2*steps to steps+1 steps
// later. Its first turn fills the lines of the steps in between as
// prefetch does, waiting. A Read covers up to m consecutive lines, a run
// (m = the engine's Config.ReadAheadReadBytes over the line size, at most
// 32), read into one staging slot and completed as one: with m = 1 each
// warp asks for the lines its lane 0 reads, one lane a step, and the first
// to ask fills a line; with m > 1 one warp a run and step asks for all of
// its lines whose first element that step reads, m lanes a run, the one
// whose turn comes first when the runs are aligned to the grid (owns).
// Measured (H200 host, 4 KiB lines, 64 read-ahead pairs, builds
// interleaved in each of four calls): Reads of two lines moved 46.3-48.5
// GB/s against 43.1-47.2 with one line a Read (every warp asking for its
// own lines); of four, 44.3-47.1; of eight, 35.7-40.4; one line a Read
// with one warp asking per line, 43.8-44.0: a line whose only asker found
// no entry free is filled by its readers, waiting
// (bench/results/logs/c1-read-ahead-runs-H200-20261125.txt).
//
// How far. The constructor without steps takes read_ahead_steps(a): 16
// steps for lines of 4 KiB and less, 24 for 8 and 16 KiB, 32 for 32 KiB
// and more. A grid step reads fewer lines the longer they are, and the
// longer lines wanted more steps in flight. Measured (H200 host, 64
// read-ahead pairs, medians of 3 passes, three of them for each count,
// the counts of a line size interleaved in one call): 4 KiB lines 14 steps
// 44.4-48.6 GB/s, 16 steps 42.2-48.0, 18 steps 37.4-41.9; 8 KiB lines 16
// steps 46.0-47.4, 24 steps 47.7-48.0, 32 steps 45.9-47.2; 16 KiB lines 16
// steps 39.9-46.2, 24 steps 45.3-46.0, 32 steps 40.9-43.7; 64 KiB lines 16
// steps 37.9-39.9, 24 steps 42.7-45.1, 32 steps 45.2-47.3
// (bench/results/logs/c1-read-ahead-steps-H200-20261125.txt).
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
__device__ __forceinline__ u32 read_ahead_steps(const array<T> &a);

template <typename T>
class read_ahead {
   public:
	// read_ahead prepares the read-ahead of a's grid-stride loop, asking
	// for the lines of read_ahead_steps(a) steps at a time.
	__device__ explicit read_ahead(const array<T> &a) : read_ahead(a, read_ahead_steps(a)) {}

	// read_ahead prepares the read-ahead of a's grid-stride loop, asking
	// for the lines of `steps` steps at a time (at most 32; 0: none).
	__device__ read_ahead(const array<T> &a, u32 steps) : desc_(a.desc), count_(a.size()) {
		const array_desc &d = *desc_;
		steps_ = min(steps, 32u);
		shift_ = static_cast<u32>(d.line_shift) - detail::elem_shift<T>();
		run_shift_ = run_shift(d);
		queues_ = 0;
		if (d.ahead_queues != 0) {
			const queue_desc *qs = reinterpret_cast<const queue_desc *>(d.queues) + d.nqueues;
			// A quarter of the cache's lines in flight at most.
			queues_ = static_cast<u32>(min(d.ahead_queues, (d.sets * d.ways / 4) / (qs[0].depth << run_shift_)));
		}
		phase_ = steps_ == 0 ? 0 : static_cast<u32>(detail::turn_phase(run_warps(), steps_));
		started_ = false;
		lead_ = 0;
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
	// run_warps is the number of warps whose lane 0 reads a run's
	// elements at one step (1 when a warp reads more than a run).
	__device__ u64 run_warps() const { return max((1ull << (shift_ + run_shift_)) >> 5, 1ull); }

	// owns reports whether this warp, whose lane 0 reads index b0 + s *
	// stride at step s, asks for the run of lines its lane 0 reads in at
	// step s. Exactly one warp reading at step s does for each run: the
	// one at the run's warp offset owner(s), or, where the run begins
	// before step s's indices or ends past them, the nearest warp inside.
	__device__ bool owns(u64 b0, u64 s, u64 stride) const {
		const u64 lo = s * stride;
		if (lo >= count_) return false;
		const u64 hi = min(lo + stride, count_) - 1;
		const u64 p = b0 + lo;
		if (p > hi) return false;
		const u32 rs = shift_ + run_shift_;
		const u64 q = min(max(((p >> rs) << rs) + 32 * owner(s), lo), hi);
		return p == lo + ((q - lo) & ~31ull);
	}

	// owner is the warp offset in its run of the warp that asks for a run
	// at step s: one whose turn comes at step s - 2*steps when the runs
	// are aligned to the grid (its phase is (-s) mod steps), so that the
	// Reads go out as far ahead as the schedule allows; which one of
	// several such alternates with s.
	__device__ u64 owner(u64 s) const {
		const u64 S = steps_, G = run_warps();
		return ((S - s % S) % S) * G / S + (s / S) % max(G / S, 1ull);
	}

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
			__syncwarp();  // every lane looks after the harvest
			ready = __ballot_sync(full_warp_mask, done());
			if (ready == 0) return;
		}
		complete(((ready >> (threadIdx.x & 31u)) & 1u) != 0);
	}

	// complete ends the fills of the runs whose lead lane has mine set:
	// the lead lane waits for its Read's completion, then the warp copies
	// the lines together and each lane publishes its own (the lead lane
	// retiring the Read's entry). The lead decides for its whole run, so
	// no line of a Read outlives the entry its data sits in.
	__device__ __noinline__ void complete(bool mine) {
		const array_desc &d = *desc_;
		const u32 lane = threadIdx.x & 31u;
		const u32 asked = __ballot_sync(full_warp_mask, mine);
		mine = queue_ != 0 && ((asked >> lead_) & 1u) != 0;
		cache::handle h{0, false, 0, 0, 0};
		u32 st = 0;
		u64 data = 0;
		if (mine && lead_ == lane) {
			// end_read names a one-line slot; the run's slot holds m.
			const queue_desc &q = *reinterpret_cast<const queue_desc *>(queue_);
			st = cache::end_read(d, q, ticket_, false, detail::globaltimer() + d.timeout_ns, &h);
			if (st == 0) data = run_slot(d, q, q.staging, ticket_, run_shift_);
		}
		const u32 from = mine ? lead_ : lane;
		st = __shfl_sync(full_warp_mask, st, from);
		data = __shfl_sync(full_warp_mask, data, from);
		if (mine) {
			if (st == 0) h.staging = data + (static_cast<u64>(lane - lead_) << d.line_shift);
			cache::end_fill(d, way_, 0, st, line_ << shift_, cache::locate(d, line_), &h);
			queue_ = 0;
		}
		copy_staged(d, h);
	}

	// issue asks for lines read at steps k+steps+1 to k+2*steps (see
	// Schedule), each only at the step that reads its first element. The
	// lanes that claim consecutive lines of one run on one namespace read
	// them with one Read into one staging slot.
	__device__ __noinline__ void issue(u64 k, u64 base, u64 stride) {
		const array_desc &d = *desc_;
		const u32 lane = threadIdx.x & 31u;
		const u64 b0 = base - k * stride;  // the index lane 0 reads at step 0
		const u64 first = k + steps_ + 1;  // the first step asked for
		// The steps it asks at: with one line a Read, every step of the
		// window (each warp asks for its own lines, so a line whose first
		// asker found no entry free gets another chance at the next
		// turns); with several, those whose runs it owns.
		const u32 asked = __ballot_sync(full_warp_mask, lane < steps_ && (run_shift_ == 0 || owns(b0, first + lane, stride)));
		if (asked == 0) return;
		// m lanes per step asked at (the first 32 / m), lane r for line r
		// of the run its lane 0 reads in.
		const u32 m = 1u << run_shift_, r = lane & (m - 1), n = lane >> run_shift_;
		bool want = false;
		u64 line = 0, i = 0;
		if (n < static_cast<u32>(__popc(asked))) {
			u32 rest = asked;
			for (u32 c = 0; c < n; c++) rest &= rest - 1;
			const u64 s = first + static_cast<u32>(__ffs(rest) - 1);
			const u64 lo = s * stride;
			if (lo < count_) {
				const u64 hi = min(lo + stride, count_) - 1;
				line = (((b0 + lo) >> shift_) & ~static_cast<u64>(m - 1)) + r;
				i = line << shift_;
				want = b0 + lo <= hi && i >= lo && i <= hi;
			}
		}
		cache::where w{};
		u64 way = 0;
		bool mine = false;
		if (want) {
			w = cache::locate(d, line);
			mine = cache::claim_absent(d, w, i, &way, 1);
		}
		const u32 claimed = __ballot_sync(full_warp_mask, mine);
		if (claimed == 0) return;
		// Runs: a lane starts one unless the lane before it claimed the
		// line before its own on the same namespace, in the same run.
		const u64 blocks = 1ull << d.lba_shift;
		const u64 prev_ns = __shfl_up_sync(full_warp_mask, w.nsid, 1), prev_lba = __shfl_up_sync(full_warp_mask, w.lba, 1);
		const bool start = mine && (r == 0 || ((claimed >> (lane - 1)) & 1u) == 0 || prev_ns != w.nsid || prev_lba + blocks != w.lba);
		const u32 starts = __ballot_sync(full_warp_mask, start);
		const u32 lead = 31u - __clz(starts & (0xffffffffu >> (31u - lane)));  // for lanes that claimed
		const queue_desc &q = reinterpret_cast<const queue_desc *>(d.queues)[d.nqueues + ((global_thread_id() >> 5) % queues_)];
		u64 t = 0;
		bool got = false;
		if (start) got = queue::try_reserve_group(q, starts, &t);
		const u32 granted = __ballot_sync(full_warp_mask, got);
		t = __shfl_sync(full_warp_mask, t, mine ? lead : lane);
		if (got) {
			// The run: this lane and the claimers after it that start none.
			issue_run(d, q, t, w, static_cast<u32>(__ffs(~(((claimed & ~starts) >> lane) >> 1))));
		}
		if (mine && ((granted >> lead) & 1u) == 0) {
			cache::unclaim(d, way);  // no entry free at once: its reads fill it
		} else if (mine) {
			queue_ = reinterpret_cast<u64>(&q);
			ticket_ = t;
			way_ = way;
			line_ = line;
			lead_ = lead;
		}
	}

	const array_desc *desc_;
	u64 count_;
	u32 steps_;
	u32 shift_;      // log2 of elements per line
	u32 run_shift_;  // log2 of lines per read-ahead Read at most
	u32 phase_;
	u32 queues_;  // read-ahead queue pairs used: 0 for none
	bool started_;
	// This lane's fill in flight: its queue (0: none), the Read's ticket
	// and lead lane (which waits for it and retires it), way and line.
	u32 lead_;
	u64 queue_;
	u64 ticket_;
	u64 way_;
	u64 line_;
};

// read_ahead_steps is how many grid steps a read_ahead over a asks for at
// a time by default (see How far): 16 for lines of 4 KiB and less, 24 for
// 8 and 16 KiB, 32 for 32 KiB and more.
template <typename T>
__device__ __forceinline__ u32 read_ahead_steps(const array<T> &a) {
	const u64 shift = a.hot.line_shift;
	return shift <= 12 ? 16u : shift <= 14 ? 24u : 32u;
}

}  // namespace bam

#endif  // BAM_READ_AHEAD_CUH
