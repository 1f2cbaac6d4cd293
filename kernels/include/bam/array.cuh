// bam/array.cuh: the public device API. bam::array<T> is an array of T on
// storage, read and written by GPU threads through the GPU-resident cache:
//
//	__global__ void sum(bam::array<float> a, u64 n, float *out) {
//		float s = 0;
//		for (u64 i = tid; i < n; i += stride) s += a[i];   // was: const float *a
//		...
//	}
//
// A read (a[i], a.read(i)) that hits takes no reference and no atomic: the
// lane reads its element between two reads of the way's tag word, which
// holds its generation, like a sequence lock (cache::peek_begin, peek_end). Other reads, and writes
// (a.write(i, v)), group the lanes of a warp by cache line
// (bam/coalesce.cuh): the group's leader acquires the line once for the
// group, a miss is filled by NVMe commands the leader submits
// (bam/cache.cuh, bam/queue.cuh), and the leader releases it once.
// bam::array_ref<T> keeps its line referenced across consecutive accesses
// of a thread, so a thread walking a neighbour list touches the cache
// metadata once per line instead of once per element (BaM §7.2.2), and its
// span(i) returns the held line's elements (bam::line_span<T>) for a loop
// of plain loads, the fastest way to walk a run. for_range shares a pass
// over consecutive positions out to warps a line at a time, so that a cold
// pass keeps a line in flight per warp.
//
// Cold passes. The loop above is correct through any cache, but read cold
// it has in flight only the lines of one grid step, so it waits on storage
// latency: on the H200 host, 4 KiB lines, C1 measured 18 GB/s against a
// 55 GB/s copy ceiling. Adding bam::read_ahead (bam/read_ahead.cuh) to the
// same loop gave 47 GB/s; handing the range to bam::for_range (warps take
// a line at a time and fill the next ones ahead) 49-50 GB/s
// (bench/results/C1-NVIDIA-H200-20261125.json). Hits are unaffected.
//
// Requirements: T is trivially copyable of size 1, 2, 4, 8 or 16 bytes, the
// element size the host created the array with (the host checks this when
// it binds an array to a kernel). Elements never straddle lines. Compiled
// for sm_90 (the engine's build for H100 and H200), a kernel that can miss
// also takes 2.5 KiB of static shared memory a block, where the queues'
// completion entries land (bam/detail/sync.cuh, ld_cq_window).
//
// Errors: an out-of-range index, a failed NVMe status, a timeout or a cache
// too small for the live references is recorded in the array's error record
// (the first one with its index, LBA and status) and the access yields T{}
// or drops the write; the host turns the record into a Go error after the
// launch. No access waits forever: every wait is bounded by the timeout the
// host configured, and ends early when the host sets the launch's abort
// word (its context ended; recorded as ErrCodeAborted). ok() tells a kernel that no failure was recorded, so it
// can stop early.
#ifndef BAM_ARRAY_CUH
#define BAM_ARRAY_CUH

#include "bam/cache.cuh"
#include "bam/coalesce.cuh"
#include "bam/detail/desc.cuh"

// BAM_ARRAY_BOUNDS is the launch bound for kernels that access
// bam::array: blocks of at most 256 threads, four resident per
// multiprocessor. It caps registers at 64 per thread; without it the miss
// path (queue and cache protocol, called from every access) takes about 150
// and a multiprocessor runs a single block, too few warps to hide the
// latency of the cache's atomics and of storage. Use it as
// `BAM_KERNEL void BAM_ARRAY_BOUNDS name(...)` and launch with <= 256
// threads per block.
#define BAM_ARRAY_BOUNDS __launch_bounds__(256, 4)

namespace bam {
namespace detail {

// load_line loads an element of a line the caller holds (a reference
// taken with acquire ordering) without allocating it in L1: lines are
// read once per visit, and a line's bytes kept in L1 would take the room
// of the kernel's own local memory (the values it keeps across a possible
// call to the slow path). A weak load with the L1::no_allocate hint, not
// ld.global.cg (a strong load on sm_70 and later): C3's span loop moved
// 4-5 % more with it (bench/results/logs/c3-span-loads-*).
template <typename T>
__device__ __forceinline__ T load_line(const unsigned char *p) {
	static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16,
	              "bam::array<T>: sizeof(T) must be 1, 2, 4, 8 or 16 bytes");
	T v;
	if constexpr (sizeof(T) == 1) {
		unsigned short b;
		asm volatile("ld.global.L1::no_allocate.u8 %0, [%1];" : "=h"(b) : "l"(p));
		const unsigned char c = static_cast<unsigned char>(b);
		v = *reinterpret_cast<const T *>(&c);
	} else if constexpr (sizeof(T) == 2) {
		unsigned short b;
		asm volatile("ld.global.L1::no_allocate.u16 %0, [%1];" : "=h"(b) : "l"(p));
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 4) {
		unsigned int b;
		asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(b) : "l"(p));
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 8) {
		unsigned long long b;
		asm volatile("ld.global.L1::no_allocate.u64 %0, [%1];" : "=l"(b) : "l"(p));
		v = *reinterpret_cast<const T *>(&b);
	} else {
		ulonglong2 b;
		asm volatile("ld.global.L1::no_allocate.v2.u64 {%0, %1}, [%2];" : "=l"(b.x), "=l"(b.y) : "l"(p));
		v = *reinterpret_cast<const T *>(&b);
	}
	return v;
}

// load_line_acquire is load_line with acquire ordering (gpu scope): the
// loads after it are not satisfied before it (a read without a reference
// re-checks the way's tag and generation after its copy).
template <typename T>
__device__ __forceinline__ T load_line_acquire(const unsigned char *p) {
	T v;
	if constexpr (sizeof(T) == 1) {
		unsigned short b;
		asm volatile("ld.acquire.gpu.global.u8 %0, [%1];" : "=h"(b) : "l"(p) : "memory");
		const unsigned char c = static_cast<unsigned char>(b);
		v = *reinterpret_cast<const T *>(&c);
	} else if constexpr (sizeof(T) == 2) {
		unsigned short b;
		asm volatile("ld.acquire.gpu.global.u16 %0, [%1];" : "=h"(b) : "l"(p) : "memory");
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 4) {
		unsigned int b;
		asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(b) : "l"(p) : "memory");
		v = *reinterpret_cast<const T *>(&b);
	} else if constexpr (sizeof(T) == 8) {
		unsigned long long b;
		asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(b) : "l"(p) : "memory");
		v = *reinterpret_cast<const T *>(&b);
	} else {
		ulonglong2 b;
		asm volatile("ld.acquire.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(b.x), "=l"(b.y) : "l"(p) : "memory");
		v = *reinterpret_cast<const T *>(&b);
	}
	return v;
}

template <typename T>
__device__ __forceinline__ void store_line(unsigned char *p, const T &v) {
	if constexpr (sizeof(T) == 1) {
		unsigned char b = *reinterpret_cast<const unsigned char *>(&v);
		__stcg(p, b);
	} else if constexpr (sizeof(T) == 2) {
		unsigned short b = *reinterpret_cast<const unsigned short *>(&v);
		__stcg(reinterpret_cast<unsigned short *>(p), b);
	} else if constexpr (sizeof(T) == 4) {
		unsigned int b = *reinterpret_cast<const unsigned int *>(&v);
		__stcg(reinterpret_cast<unsigned int *>(p), b);
	} else if constexpr (sizeof(T) == 8) {
		unsigned long long b = *reinterpret_cast<const unsigned long long *>(&v);
		__stcg(reinterpret_cast<unsigned long long *>(p), b);
	} else {
		uint4 b = *reinterpret_cast<const uint4 *>(&v);
		__stcg(reinterpret_cast<uint4 *>(p), b);
	}
}

// elem_shift is log2(sizeof(T)); lines and elements are powers of two, so
// an index splits into line and byte offset with shifts, not a 64-bit
// division (tens of instructions on the GPU).
template <typename T>
__device__ __forceinline__ constexpr u32 elem_shift() {
	return sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : sizeof(T) == 8 ? 3 : 4;
}

// turn_phase is the phase of the calling warp's turns in a grid-stride
// loop's read-ahead (array<T>::prefetch_steps, bam::read_ahead): the warp
// takes its turn at the steps k with (k + phase) % steps == 0. The
// `sharing` warps that read one line (or run of lines) at each step are
// consecutive; their phases are spread evenly over the steps, so that each
// asks for as many new lines as the others.
__device__ __forceinline__ u64 turn_phase(u64 sharing, u32 steps) {
	return ((global_thread_id() >> 5) % sharing) * steps / sharing;
}

// split returns element i's line and its byte offset in the line, for
// lines of 2^line_shift bytes.
template <typename T>
__device__ __forceinline__ u64 split(u32 line_shift, u64 i, u64 *off) {
	const u32 shift = line_shift - elem_shift<T>();
	*off = (i & ((1ull << shift) - 1)) << elem_shift<T>();
	return i >> shift;
}

}  // namespace detail

// count_groups adds the warp's number of line acquisitions to the
// statistics (stats, 0 for none) with one atomic per warp access.
__device__ __forceinline__ void count_groups(u64 stats, u32 active, const coalesce::group &g) {
	const u32 leaders = __ballot_sync(active, g.is_leader());
	if ((threadIdx.x & 31) == static_cast<u32>(__ffs(active) - 1)) detail::count_at(stats, layout::engine::StatAcquires, __popc(leaders));
}

// group_fill finishes a fill the group's leader left pending: every lane
// of the group copies a share of the line from the staging slot (a lane
// alone would need 256 sequential 16-byte loads across PCIe for a 4 KiB
// line), then the leader publishes it. Only lanes of the group take part,
// and they are all waiting for their leader anyway, so the copy never waits
// on a lane that might itself wait on this line. A group of fewer lanes
// than the descriptor's copy_below hands the copy to the fill copier
// (bam/copier.cuh), whose warps copy with all 32 lanes; it copies itself
// when the copier declines.
//
// Until then the line's way stays BUSY, after every leader of the warp's
// access has returned. Leaders that finished their fills one by one, as
// soon as each completed, would keep no way waiting on the others, but
// measured slower: A1's Q1 took 0.086 s, against 0.067-0.075 s this way
// (H200).
__device__ __forceinline__ void group_fill(const array_desc &d, const coalesce::group &g, cache::handle &h) {
	const u64 staging = g.broadcast(h.staging);
	if (staging == 0) return;
	const u64 way = g.broadcast(h.way);
	unsigned char *line = cache::line_data(d, way);
	const unsigned char *slot = reinterpret_cast<const unsigned char *>(staging);
	u32 offloaded = 0;
	if (g.count < d.copy_below && d.copier != 0) {
		if (g.is_leader()) offloaded = cache::offload(d, line, slot, false, detail::globaltimer() + d.timeout_ns);
		offloaded = g.broadcast(offloaded);
	}
	if (!offloaded) {
		const u32 lane = threadIdx.x & 31;
		const u32 rank = __popc(g.mask & ((1u << lane) - 1u));
		cache::copy_part(line, slot, 1ull << d.line_shift, rank, g.count);
	}
	__syncwarp(g.mask);
	if (g.is_leader()) cache::finish_fill(d, h);
}

// copy_staged ends the fills the lanes of a warp hold (h.staging != 0 in
// those lanes; all 32 lanes call it together): the warp copies each line
// from its staging slot with all its lanes, then each holder publishes its
// line and retires its slot.
__device__ __noinline__ void copy_staged(const array_desc &d, cache::handle &h) {
	constexpr u32 all = ~0u;
	const u32 lane = threadIdx.x & 31;
	const u64 bytes = 1ull << d.line_shift;
	for (u32 m = __ballot_sync(all, h.staging != 0); m != 0; m &= m - 1) {
		const int j = __ffs(m) - 1;
		const u64 to = __shfl_sync(all, h.way, j), from = __shfl_sync(all, h.staging, j);
		cache::copy_part(cache::line_data(d, to), reinterpret_cast<const unsigned char *>(from), bytes, lane, 32);
	}
	// The copies' stores before any holder publishes its line.
	__syncwarp();
	cache::finish_fill(d, h);
}

// run_shift is log2 of the most lines one Read on d's read-ahead pairs
// covers (their staging slots' size in lines).
__device__ __forceinline__ u32 run_shift(const array_desc &d) {
	return d.ahead_lines > 1 ? static_cast<u32>(__ffsll(static_cast<long long>(min(d.ahead_lines, 32ull)))) - 1 : 0;
}

// run_slot is the staging slot of ticket t of read-ahead pair q: 2^rs
// lines (rs = run_shift), at base (q.staging, or q.staging_dma for the
// Target).
__device__ __forceinline__ u64 run_slot(const array_desc &d, const queue_desc &q, u64 base, u64 t, u32 rs) {
	return base + ((t & (q.depth - 1)) << (d.line_shift + rs));
}

// issue_run issues, at ticket t of read-ahead pair q, the Read of len
// consecutive lines of one namespace, the first at w, into t's staging
// slot.
__device__ __forceinline__ void issue_run(const array_desc &d, const queue_desc &q, u64 t, const cache::where &w, u32 len) {
	const u64 blocks = 1ull << d.lba_shift;
	u64 prp1, prp2;
	queue::prps_bytes(q, t, static_cast<u64>(len) << d.line_shift, run_slot(d, q, q.staging_dma, t, run_shift(d)), &prp1, &prp2);
	const nvme_command cmd = nvme_command::read_write(nvme_op_read, static_cast<u32>(w.nsid), w.lba, static_cast<u32>(len * blocks), prp1, prp2);
	queue::issue(q, t, cmd);
	detail::count(d, L::StatCommands, 1);
}

// fill_runs is fill_lines' merging of consecutive lines, called by all 32
// lanes (claimers: the lanes that claimed the line at w). Lanes that
// claimed consecutive lines of one namespace, lane after lane, within one
// aligned group of 2^run_shift lanes, form a run, and each run of two or
// more lines is read with one Read into one staging slot of a read-ahead
// pair (Config.ReadAheadQueuePairs, slots of Config.ReadAheadReadBytes):
// the Target then decodes, copies and completes, and the warp harvests,
// one command for the run instead of one a line. Entries of those pairs
// are taken only when free at once (queue::try_reserve_group), so no fill
// ever waits for one. Not on the copy-engine route (the Target copies each
// line into the cache itself). Returns true in the lanes of a run whose
// Read went out: *lead is the run's first lane, *q and *t its queue and
// ticket. The other claimers read their lines one Read each. A cold range
// pass (for_range with ahead 3, 4 KiB lines, two lines a Read) moved
// 49.8-50.0 GB/s against 48.3-49.1 with one Read a line on one H200 host,
// and about 50 both ways on another, whose Target kept up with one Read a
// line; the Target then fetched a quarter of the commands
// (bench/results/logs/c1-range-runs-H200-20261125.txt). Passes whose
// lines are not consecutive (a random line order, striped namespaces)
// form no runs and are unchanged.
__device__ __noinline__ bool fill_runs(const array_desc &d, u32 claimers, const cache::where &w, u32 *lead, const queue_desc **q, u64 *t) {
	constexpr u32 all = ~0u;
	const u32 lane = threadIdx.x & 31;
	const u32 rs = run_shift(d);
	if (d.ahead_queues == 0 || rs == 0 || 32 < d.direct_below) return false;  // none, or the copy-engine route
	const bool mine = ((claimers >> lane) & 1u) != 0;
	const u64 blocks = 1ull << d.lba_shift;
	const u64 prev_ns = __shfl_up_sync(all, w.nsid, 1), prev_lba = __shfl_up_sync(all, w.lba, 1);
	const bool cont = mine && (lane & ((1u << rs) - 1)) != 0 && ((claimers >> (lane - 1)) & 1u) != 0 && prev_ns == w.nsid &&
	                  prev_lba + blocks == w.lba;
	const u32 conts = __ballot_sync(all, cont);
	const bool start = mine && !cont;
	const u32 len = start ? static_cast<u32>(__ffs(~(conts >> lane >> 1))) : 0;
	const u32 multis = __ballot_sync(all, start && len > 1);
	if (multis == 0) return false;
	const u32 starts = __ballot_sync(all, start);
	*lead = 31u - __clz(starts & (0xffffffffu >> (31u - lane)));
	const queue_desc &aq = reinterpret_cast<const queue_desc *>(d.queues)[d.nqueues + ((global_thread_id() >> 5) % d.ahead_queues)];
	u64 tk = 0;
	bool got = false;
	if ((multis >> lane) & 1u) got = queue::try_reserve_group(aq, multis, &tk);
	const u32 granted = __ballot_sync(all, got);
	if (got) issue_run(d, aq, tk, w, len);
	*t = __shfl_sync(all, tk, *lead);
	*q = &aq;
	return mine && ((granted >> *lead) & 1u) != 0;
}

// fill_lines is array<T>::prefetch, called by all 32 lanes of a warp
// together: each lane with want names line (element index's). One lane per
// distinct line, at most one fewer than the warp's queue has entries,
// claims it when it is absent (cache::claim_absent); claimers of
// consecutive lines read them with one Read where the cache has read-ahead
// pairs (fill_runs), the others take consecutive tickets of the warp's
// queue at once (queue::reserve_group) and issue their Reads, one a line;
// and once every one has completed, the warp copies
// each line from its staging slot with all its lanes and the line's
// claimer publishes it. No claimed way waits on another warp, and the warp
// holds nothing when it returns.
__device__ __noinline__ void fill_lines(const array_desc *desc, u64 line, bool want, u64 index) {
	const array_desc &d = *desc;
	constexpr u32 all = ~0u;
	__syncwarp();
	const u32 lane = threadIdx.x & 31;
	const u32 below = (1u << lane) - 1u;
	const u32 same = __match_any_sync(all, want ? line : ~0ull);
	const bool first = want && static_cast<u32>(__ffs(same) - 1) == lane;
	const u32 firsts = __ballot_sync(all, first);
	const queue_desc &q = cache::pick_queue(d);
	cache::where w{};
	u64 way = 0;
	bool mine = false;
	if (first && static_cast<u64>(__popc(firsts & below)) + 1 < q.depth) {
		w = cache::locate(d, line);
		mine = cache::claim_absent(d, w, index, &way);
	}
	const u32 claimers = __ballot_sync(all, mine);
	if (claimers == 0) return;
	cache::handle h{0, false, 0, 0, 0};
	u32 lead = lane;
	const queue_desc *rq = nullptr;
	u64 rt = 0;
	const bool run = fill_runs(d, claimers, w, &lead, &rq, &rt);
	const u32 singles = __ballot_sync(all, mine && !run);
	if (mine && !run) {
		const u64 deadline = detail::globaltimer() + d.timeout_ns;
		u64 t;
		u32 st = cache::timed_out(L::WaitTurn);
		if (queue::reserve_group(q, singles, deadline, &t, detail::abort_word(d))) {
			st = cache::read_at(d, q, t, w, way, 32 < d.direct_below, deadline, &h);
		}
		cache::end_fill(d, way, 0, st, index, w, &h);
	}
	if (__ballot_sync(all, run) != 0) {
		// Each run's lead waits for its Read; the run's lanes take their
		// lines from its staging slot, the lead retiring the entry.
		u32 st = 0;
		u64 data = 0;
		if (run && lead == lane) {
			st = cache::end_read(d, *rq, rt, false, detail::globaltimer() + d.timeout_ns, &h);
			if (st == 0) data = run_slot(d, *rq, rq->staging, rt, run_shift(d));
		}
		const u32 from = run ? lead : lane;
		st = __shfl_sync(all, st, from);
		data = __shfl_sync(all, data, from);
		if (run) {
			if (st == 0) h.staging = data + (static_cast<u64>(lane - lead) << d.line_shift);
			cache::end_fill(d, way, 0, st, index, w, &h);
		}
	}
	copy_staged(d, h);
}

// hit_fields are the fields of the hit path: the part of a bam::array<T>
// kernel argument after the descriptor's address (layout::engine::ArrayArg*,
// filled by the host from the descriptor), so a kernel reads them from its
// parameter space (the constant cache) and no access waits on a load of
// the descriptor. Code that has only the descriptor loads them with
// load_hit_fields, all at once: the cache protocol's asm statements clobber
// memory, so a field read through the descriptor at each use would be
// loaded again after every one of them.
struct hit_fields {
	u64 *tags;
	unsigned char *recs;
	unsigned char *data;
	u64 sets;
	u64 ways;
	u64 nns;
	u64 first_tag;
	u64 count;
	u64 stats;
	u64 line_shift;

	__device__ __forceinline__ unsigned char *line(u64 way) const { return data + (way << line_shift); }
};

__device__ __forceinline__ hit_fields load_hit_fields(const array_desc &d) {
	unsigned char *meta = reinterpret_cast<unsigned char *>(d.cache_meta);
	return hit_fields{reinterpret_cast<u64 *>(meta + d.tags_off),
	                  meta + d.ways_off,
	                  reinterpret_cast<unsigned char *>(d.cache_data),
	                  d.sets,
	                  d.ways,
	                  d.nns,
	                  d.first_tag,
	                  d.elem_count,
	                  d.stats,
	                  d.line_shift};
}

// slot is the way a group holds and whether it holds one.
struct slot {
	u64 way;
	u32 ok;
};

// probe_group has the leader of group g (lanes wanting line) probe the
// cache for a hit (cache::probe_hit), with no call and no wait beyond the
// probe's own loads and fetch_add.
__device__ __forceinline__ cache::probe probe_group(const array_desc &d, const hit_fields &f, const coalesce::group &g, u64 line, u64 *tag) {
	cache::probe p{~0ull, 0, 0};
	if (g.is_leader()) {
		// One namespace: the tag without the stripe arrays' round trip.
		*tag = f.nns == 1 ? f.first_tag + line : cache::locate(d, line).tag;
		p = cache::probe_hit(f.tags, f.recs, f.sets, f.ways, *tag, g.count);
	}
	return p;
}

// settle_probe ends the leader's probe: a confirmed hit is marked for the
// clock, anything else gives back the references the probe took.
__device__ __forceinline__ void settle_probe(const hit_fields &f, const coalesce::group &g, const cache::probe &p, u32 ok, u64 way) {
	if (!g.is_leader()) return;
	if (ok) {
		if (!(p.tag_after & cache::word_clock)) cache::mark_hit(f.tags, way);
	} else {
		cache::unprobe(f.recs, p, g.count);
	}
}

// acquire_slow is the rest of an access whose group's probe found no
// plain hit: the leader runs the full protocol (a miss, a fill in flight, a
// tag changing under it), the group copies a fill left pending, and every
// lane learns the way. Lanes of groups that hit pass through with s. All
// lanes of the access call it together; it is out of line so that the hit
// path keeps few registers.
__device__ __noinline__ slot acquire_slow(const array_desc &d, coalesce::group g, u64 line, u64 index, slot s) {
	if (s.ok) return s;
	cache::handle h{0, false, 0, 0, 0};
	if (g.is_leader()) h = cache::acquire_deferred(d, cache::locate(d, line), g.count, index);
	group_fill(d, g, h);
	return slot{g.broadcast(h.way), g.broadcast(static_cast<u32>(h.ok))};
}

// take_line has the lanes of mask that want line take it: grouped by
// line (*g is the calling lane's group), one probe by each group's leader,
// and the full protocol for groups whose probe found no plain hit. A lane
// may use the line only once it holds it: the probe's hit is confirmed
// before the way is handed out.
__device__ __forceinline__ slot take_line(const array_desc &d, const hit_fields &f, u32 mask, u64 line, u64 index, coalesce::group *g) {
	*g = coalesce::by(mask, reinterpret_cast<u64>(&d), line);
	count_groups(f.stats, mask, *g);
	u64 tag = 0;
	const cache::probe p = probe_group(d, f, *g, line, &tag);
	slot s{g->broadcast(p.way), g->broadcast(static_cast<u32>(p.confirmed(tag)))};
	settle_probe(f, *g, p, s.ok, s.way);
	if (__any_sync(mask, !s.ok)) s = acquire_slow(d, *g, line, index, s);
	return s;
}

// array is passed to kernels by value: the host fills it
// (layout::engine::ArrayArg*) with the descriptor's address and the hit
// path's fields.
template <typename T>
class array {
   public:
	// The descriptor the host built.
	const array_desc *desc;
	// Its hit path's fields.
	hit_fields hot;

	__device__ __forceinline__ u64 size() const { return hot.count; }

	// ok reports that no access of this launch has failed yet.
	__device__ __forceinline__ bool ok() const { return !detail::failed(*desc); }

	// elems_per_line is how many elements one cache line holds.
	__device__ __forceinline__ u64 elems_per_line() const { return (1ull << hot.line_shift) / sizeof(T); }

	// lines_in_flight is how many of this array's lines a pass should read
	// at once: half of its cache's lines. Reads hold no reference between
	// them, so a pass with as many lines in flight as the cache holds has
	// lines evicted while they are still being read (for_range follows it).
	__device__ __forceinline__ u64 lines_in_flight() const { return max(hot.sets * hot.ways / 2, 1ull); }

	__device__ __forceinline__ T operator[](u64 i) const { return read(i); }

	// prefetch brings the line of element i into the cache ahead of its
	// reads; all 32 lanes of a warp call it together (i >= size() for a
	// lane with nothing to fetch). The warp fills several lines at once,
	// one NVMe Read each in flight together, and copies each with all its
	// lanes, the pattern that moved data fastest (queue.cuh). It waits for
	// nothing but its own fills: a line already resident or being filled,
	// one whose set has no way free now, and lanes past one fewer than the
	// queue's entries are skipped, and their reads fill them as usual.
	// Lines it fills stay unreferenced, so reads should follow soon
	// (for_range keeps the lines in flight within half the cache). A pass
	// of one element per thread, grid-stride, reads ahead with
	// prefetch_steps.
	__device__ __forceinline__ void prefetch(u64 i) const {
		const bool want = i < hot.count;
		const u64 line = want ? i >> (hot.line_shift - detail::elem_shift<T>()) : 0;
		fill_lines(desc, line, want, i);
	}

	// prefetch_steps is the read-ahead of a grid-stride loop whose warp
	// reads the elements from base (lane 0's index) at its step k, base
	// growing by stride a step: all 32 lanes call it at the top of every
	// step, and once every `steps` steps (1 to 32), at a phase set by the
	// warp's index, the warp prefetches the lines of its next `steps`
	// steps. The warps that share a line ask for it at different steps:
	// the first to ask fills it, the others find it claimed. Staggered so,
	// the fills are spread over the steps; when every warp asked at the
	// same steps, the path sat idle while they all read. A cold pass of
	// one element per thread over 4 KiB lines (H200) moved 44.6-46.6
	// GB/s so with 16 or 24 steps, 41.2-41.4 GB/s with every warp at the
	// same 16 steps, and 16.6-16.9 GB/s without read-ahead
	// (kernels/bench.cu bam_bench_sum_seq_ahead). Only for loops over the
	// array's own indices: an index list's next steps are not the lines
	// it reads.
	__device__ __forceinline__ void prefetch_steps(u64 k, u64 base, u64 stride, u32 steps) const {
		steps = min(steps, 32u);
		if (steps == 0) return;
		// The warps whose 32 elements share a line at each step.
		const u32 shift = static_cast<u32>(hot.line_shift) - detail::elem_shift<T>();
		const u64 sharing = shift > 5 ? 1ull << (shift - 5) : 1ull;
		if ((k + detail::turn_phase(sharing, steps)) % steps != 0) return;
		const u32 lane = threadIdx.x & 31u;
		prefetch(lane < steps ? base + (lane + 1) * stride : ~0ull);
	}

	// read returns element i (T{} after a recorded failure).
	//
	// A hit takes no reference and no atomic: each lane finds its line's
	// way, loads its element between two reads of the way's tag word, and
	// keeps it when the tag and generation are unchanged (cache::peek_begin,
	// peek_end). Lanes that miss, or whose line was being filled or changed
	// under them, take the full protocol together (read_slow).
	__device__ T read(u64 i) const {
		const hit_fields &f = hot;
		if (i >= f.count) {
			detail::record_error(*desc, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return T{};
		}
		u64 off;
		const u64 line = detail::split<T>(static_cast<u32>(f.line_shift), i, &off);
		// One namespace: the tag without the stripe arrays' round trip.
		const u64 tag = f.nns == 1 ? f.first_tag + line : cache::locate(*desc, line).tag;
		const cache::peek p = cache::peek_begin(f.tags, f.sets, f.ways, tag);
		T v{};
		bool hit = false;
		if (p.ok()) {
			v = detail::load_line_acquire<T>(f.line(p.way) + off);
			hit = cache::peek_end(f.tags, p);
		}
		const u32 active = __activemask();
		count_groups(f.stats, active, coalesce::by(active, line));
		if (hit && !p.referenced()) cache::mark_hit(f.tags, p.way);
		if (!hit) v = read_slow(desc, line, i, off);
		return v;
	}

	// read_slow is read's full protocol, for the lanes that call it together
	// (those whose peek failed): grouped by array and line, the group's leader takes
	// references (filling the line on a miss), the group loads its elements
	// and the leader releases the line. It is out of line so that the hit
	// path keeps few registers, and nothing of the caller lives across the
	// call but the result.
	__device__ __noinline__ static T read_slow(const array_desc *desc, u64 line, u64 i, u64 off) {
		const array_desc &d = *desc;
		// Lanes of other calls of read_slow (other arrays of T) may run
		// converged with these: group by array and line.
		const coalesce::group g = coalesce::by(__activemask(), reinterpret_cast<u64>(desc), line);
		cache::handle h{0, false, 0, 0, 0};
		if (g.is_leader()) h = cache::acquire_deferred(d, cache::locate(d, line), g.count, i);
		group_fill(d, g, h);
		const u64 way = g.broadcast(h.way);
		const u32 ok = g.broadcast(static_cast<u32>(h.ok));
		T v{};
		if (ok) v = detail::load_line<T>(cache::line_data(d, way) + off);
		__syncwarp(g.mask);
		if (ok && g.is_leader()) cache::release(d, way, g.count, false);
		return v;
	}

	// write stores v at element i; the line is marked dirty and reaches
	// storage on eviction or Flush.
	__device__ void write(u64 i, const T &v) const {
		const array_desc &d = *desc;
		const hit_fields &f = hot;
		if (i >= f.count) {
			detail::record_error(d, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return;
		}
		u64 off;
		const u64 line = detail::split<T>(static_cast<u32>(f.line_shift), i, &off);
		// Unlike a read, a store waits for the confirmed hit: it must not
		// land in a line that is not the tag's.
		coalesce::group g;
		const slot s = take_line(d, f, __activemask(), line, i, &g);
		if (s.ok) detail::store_line<T>(f.line(s.way) + off, v);
		__syncwarp(g.mask);
		if (s.ok && g.is_leader()) cache::release(f.recs, s.way, g.count, true);
	}
};

// fill_ahead is the ahead of the engine's passes over an array's own
// elements (kernels/array.cu: read and write ranges, sums). On an H200
// with 4 KiB lines, each warp filling two lines at once moved 1.5-2.8 %
// more than one at a time, three up to another 1 % through a 1 GiB cache
// (50.0-50.05 GB/s, with the least spread), four or six less
// (bench/results/logs/c1-balanced-*.txt, parts 3-6).
constexpr u32 fill_ahead = 3;

// for_chunks is for_range's schedule without its inner loop: f(lo, hi,
// lane, step) gets each chunk [lo, hi) (within one line), called by the
// warp's lanes together, each to take positions lo+lane, lo+lane+step, ...
// (step 32, or 1 and lane 0 for a partial warp, whose threads get chunks
// of one position). A pass that holds a chunk's line with an array_ref and
// reads it through span(lo) touches the cache's metadata once a line, not
// once per element (bam_array_read_range). next and ahead are for_range's.
template <typename T, typename F>
__device__ __forceinline__ void for_chunks(const array<T> &a, u64 start, u64 n, F f, u64 *next = nullptr, u32 ahead = 1) {
	if (n == 0) return;
	// Partial warps: every thread a "warp" of one lane, chunks of one
	// position. One loop serves every case, so f is inlined once.
	const bool whole = (blockDim.x & 31) == 0;
	const u64 warps = whole ? grid_threads() >> 5 : grid_threads();
	const u32 lane = whole ? threadIdx.x & 31 : 0;
	const u32 step = whole ? 32 : 1;
	u32 sh = 0;
	if (ahead == 0 || !whole) ahead = 1;
	u64 busy = warps;  // warps that take chunks
	if (whole) {
		const u64 want = (n + warps - 1) / warps;  // positions per warp
		const u64 per = a.elems_per_line();
		sh = 5;
		while ((1ull << sh) < want && (1ull << sh) < per) sh++;
		// A warp's chunk is 2^sh / per of a line; warps share the lines
		// of chunks smaller than a line, and leave their fills to f.
		// Filling ahead takes room in the cache that warps of the grid
		// would otherwise use: only as far as every warp stays busy.
		const u64 room = (a.lines_in_flight() * per) >> sh;  // chunks in flight
		if ((1ull << sh) < per) ahead = 1;
		ahead = static_cast<u32>(min(static_cast<u64>(ahead), max(room / warps, 1ull)));
		busy = min(warps, max(room / ahead, 1ull));
	}
	const u64 end = start + n;
	const u64 first = start >> sh;
	const u64 chunks = ((end - 1) >> sh) - first + 1;
	const u64 self = whole ? global_thread_id() >> 5 : global_thread_id();
	if (self >= busy) return;
	// The warp's groups of ahead chunks: taken from *next, consecutive, or
	// every busy-th from its own, grid-stride.
	const u64 stride = next != nullptr ? 1 : busy;
	for (u64 g = 0;; g++) {
		u64 base = self + g * ahead * busy;
		if (next != nullptr) {
			if (lane == 0) base = atomicAdd(reinterpret_cast<unsigned long long *>(next), static_cast<unsigned long long>(ahead));
			if (whole) base = __shfl_sync(~0u, base, 0);
		}
		if (base >= chunks) break;
		if (ahead > 1) {
			const u64 k = base + lane * stride;
			a.prefetch(lane < ahead && k < chunks ? (first + k) << sh : ~0ull);
		}
		for (u32 j = 0; j < ahead; j++) {
			const u64 k = base + j * stride;
			if (k >= chunks) break;
			const u64 lo = max((first + k) << sh, start);
			const u64 hi = min((first + k + 1) << sh, end);
			f(lo, hi, lane, step);
		}
	}
}

// for_range calls f(i) for every i in [start, start + n), the positions
// of a pass over array a (its indices, or the positions of an index list
// whose elements a holds). Every thread of the launch calls it with the
// same arguments; the grid's warps share the range out in chunks: runs of
// consecutive positions, a power of two between 32 and a's elements per
// line, aligned so that a chunk never straddles a line. A warp's lanes
// call f together with 32 consecutive positions at a time, so f may be a
// warp-coalesced access such as a.read(i).
//
// Use it, rather than one position per thread grid-stride, for passes
// over consecutive elements that may miss: each warp then fills a line of
// its own, and the lines in flight are as many as the warps. A pass of
// one position per thread has in flight only the lines of one grid step,
// each filled by one warp while the other warps that share it wait (on an
// H200, 8-byte elements and 4 KiB lines: 264 lines, about 1 MiB, 16
// warps per line; a cold sequential read then moved 12 GB/s). Chunks
// shrink for ranges shorter than a line per warp, so every warp has work.
// The lines in flight are kept to half of a's cache: a grid with more
// warps than that leaves the rest idle. A warp holds no reference between
// its reads, so with as many lines in flight as the cache holds, other
// warps' misses evicted lines that were still being read, and each was
// filled about twice (C1 with 64 KiB lines: 4224 warps, 4096 lines, 2.05-2.15
// fills per line). The grid is one-dimensional (global_thread_id); blocks whose size is not
// a multiple of 32 have partial warps, and get one position per thread,
// grid-stride.
//
// Chunks are handed out grid-stride, each warp's fixed in advance, unless
// next is given: a u64 in device memory, zero before the launch and used
// by this one call (from Go, an 8-byte gpu.Buffer written with zeros
// before each launch), from which warps take chunks as they finish them, so
// that all finish together. A cold pass of fixed shares ends with the
// warps whose fills happened to be slowest: on an H200, 4 KiB lines, a
// 1 GiB pass through a 256 MiB cache moved 47.2-47.3 GB/s with fixed
// shares, 48.3-48.5 taking chunks and 49.2-49.5 taking chunks and filling
// two lines ahead (bench/results/logs/c1-balanced-*.txt, part 3).
//
// ahead > 1, for passes over a's own indices, has each warp fill the
// lines of its next ahead chunks at once (array<T>::prefetch) before f
// reads them, as far as half the cache holds ahead lines for every warp
// of the grid (no further: with fewer warps busy, 64 KiB lines moved
// less). Keep it 1 when the positions index something else (a gather's
// index list): the lines it would fill are not the ones f reads.
template <typename T, typename F>
__device__ __forceinline__ void for_range(const array<T> &a, u64 start, u64 n, F f, u64 *next = nullptr, u32 ahead = 1) {
	for_chunks(
	    a, start, n,
	    [&](u64 lo, u64 hi, u32 lane, u32 step) {
		    for (u64 i = lo + lane; i < hi; i += step) f(i);
	    },
	    next, ahead);
}

// ref_drop gives back the lines the lanes of mask hold (held, way): the
// lanes holding the same way release it with one atomic.
__device__ __noinline__ void ref_drop(const array_desc *desc, u32 mask, bool held, u64 way) {
	const coalesce::group g = coalesce::by(mask, reinterpret_cast<u64>(desc), held ? way : ~0ull);
	if (held && g.is_leader()) cache::release(*desc, way, g.count, false);
}

// ref_move moves the array_refs of the lanes that call it together to
// line (element index's): the lines they held are given back (grouped by
// way), and the lanes wanting the same line take it with one probe, or the
// full protocol when the probe finds no plain hit.
__device__ __noinline__ slot ref_move(const array_desc *desc, u64 line, u64 index, bool held, u64 way) {
	const array_desc &d = *desc;
	const hit_fields f = load_hit_fields(d);
	const u32 movers = __activemask();
	if (__any_sync(movers, held)) ref_drop(desc, movers, held, way);
	coalesce::group g;
	return take_line(d, f, movers, line, index, &g);
}

// line_span is the part of an array that one line held by an array_ref
// covers: elements [first, end), read with sp[i] (a plain load). It stays
// valid while the array_ref that returned it holds the line, that is until
// that array_ref's next access, span or release. An empty span (end <=
// first) means the access failed; the failure is recorded as for
// operator[].
template <typename T>
struct line_span {
	const unsigned char *bytes;  // element first's
	u64 first;
	u64 end;

	__device__ __forceinline__ bool contains(u64 i) const { return i >= first && i < end; }
	// operator[] reads element i, first <= i < end, with a plain load.
	__device__ __forceinline__ T operator[](u64 i) const { return detail::load_line<T>(bytes + ((i - first) << detail::elem_shift<T>())); }
};

// array_ref keeps one line referenced across a thread's consecutive reads.
// Lanes that move to a new line at the same call are grouped: one release
// per old line, one acquire per new line. Call release() (or let the
// destructor run) before the kernel ends; all lanes of a warp that use
// array_refs should call operator[] and release() together for the
// grouping to pay.
//
// Held lines count against their set's ways until released, and so do the
// lines of lanes whose warp is still waiting for its other lanes' lines. An
// access that finds every way of its set held waits for one to be
// released; when the references held at once outnumber a set's ways and
// none is released within the engine's timeout, it fails with
// ErrCacheTooSmall. Sets spread lines that are a multiple of the set count
// apart (gpucache.SetIndex), so warps walking equal runs in step do not
// crowd one set.
template <typename T>
class array_ref {
	const array_desc *desc_;
	const unsigned char *base_;  // the held line's bytes
	u64 line_;                   // the held line
	u64 way_;                    // its way
	u64 count_;                  // elements in the array
	u32 shift_;                  // log2 of elements per line
	bool held_;

	// drop gives back the held lines of the lanes of mask, one atomic per
	// line for the lanes holding the same one.
	__device__ __forceinline__ void drop(u32 mask) {
		ref_drop(desc_, mask, held_, way_);
		held_ = false;
	}

	// hold moves the reference to line (element i's) as operator[] does and
	// reports whether the line is held.
	__device__ __forceinline__ bool hold(u64 line, u64 i) {
		const slot s = ref_move(desc_, line, i, held_, way_);
		held_ = s.ok;
		if (!held_) return false;
		line_ = line;
		way_ = s.way;
		base_ = reinterpret_cast<const unsigned char *>(desc_->cache_data) + (s.way << desc_->line_shift);
		return true;
	}

   public:
	__device__ explicit array_ref(array<T> a)
	    : desc_(a.desc),
	      base_(nullptr),
	      line_(~0ull),
	      way_(0),
	      count_(a.hot.count),
	      shift_(static_cast<u32>(a.hot.line_shift) - detail::elem_shift<T>()),
	      held_(false) {}
	__device__ ~array_ref() { release(); }
	array_ref(const array_ref &) = delete;
	array_ref &operator=(const array_ref &) = delete;

	__device__ __forceinline__ T operator[](u64 i) {
		if (i >= count_) {
			detail::record_error(*desc_, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return T{};
		}
		const u64 line = i >> shift_;
		const u64 off = (i & ((1ull << shift_) - 1)) << detail::elem_shift<T>();
		// The held line: no warp-wide work, no metadata, one load.
		if (!(held_ && line == line_)) {
			// Out of line, with the ref's fields passed by value, so that
			// they can stay in registers on the held path. (Measured on
			// C3: inlining it cut the kernel's spills by two thirds but
			// lowered its rate from 88 to 74 G/s, and from 110 to 89 G/s
			// at 6b67b29.)
			const slot s = ref_move(desc_, line, i, held_, way_);
			held_ = s.ok;
			if (!held_) return T{};
			line_ = line;
			way_ = s.way;
			base_ = reinterpret_cast<const unsigned char *>(desc_->cache_data) + (s.way << desc_->line_shift);
		}
		return detail::load_line<T>(base_ + off);
	}

	// span holds element i's line and returns the elements it covers, so
	// that a thread walking a run reads them with plain loads and no
	// per-element check, and the compiler can overlap those loads: a loop
	// of operator[] keeps its values in local memory around the possible
	// move at every element (bench/results/logs/c2-c3-profile-*). Lanes
	// that call it together are grouped as for operator[].
	__device__ __forceinline__ line_span<T> span(u64 i) {
		if (i >= count_) {
			detail::record_error(*desc_, layout::engine::ErrCodeOutOfRange, 0, i, 0, 0);
			return line_span<T>{nullptr, i, i};
		}
		const u64 line = i >> shift_;
		if (!(held_ && line == line_) && !hold(line, i)) return line_span<T>{nullptr, i, i};
		const u64 first = line << shift_;
		const u64 end = first + (1ull << shift_);
		return line_span<T>{base_, first, end < count_ ? end : count_};
	}

	// release drops the held line: the lanes that call it together and
	// hold the same line give it back with one atomic.
	__device__ __forceinline__ void release() {
		const u32 mask = __activemask();
		if (__any_sync(mask, held_)) drop(mask);
	}
};

#ifndef __CUDACC_RTC__
// The kernel argument's layout is the host's (internal/gpuengine/layout.go).
#define BAM_CHECK_ARG(field, value) \
	static_assert(__builtin_offsetof(array<u64>, field) == (value), "bam::array." #field " disagrees with internal/gpuengine/layout.go")
BAM_CHECK_ARG(desc, layout::engine::ArrayArgDescOffset);
BAM_CHECK_ARG(hot.tags, layout::engine::ArrayArgTagsOffset);
BAM_CHECK_ARG(hot.recs, layout::engine::ArrayArgRecsOffset);
BAM_CHECK_ARG(hot.data, layout::engine::ArrayArgDataOffset);
BAM_CHECK_ARG(hot.sets, layout::engine::ArrayArgSetsOffset);
BAM_CHECK_ARG(hot.ways, layout::engine::ArrayArgWaysOffset);
BAM_CHECK_ARG(hot.nns, layout::engine::ArrayArgNNSOffset);
BAM_CHECK_ARG(hot.first_tag, layout::engine::ArrayArgFirstTagOffset);
BAM_CHECK_ARG(hot.count, layout::engine::ArrayArgElemCountOffset);
BAM_CHECK_ARG(hot.stats, layout::engine::ArrayArgStatsOffset);
BAM_CHECK_ARG(hot.line_shift, layout::engine::ArrayArgLineShiftOffset);
static_assert(sizeof(array<u64>) == layout::engine::ArrayArgBytes, "bam::array size disagrees with internal/gpuengine/layout.go");
#undef BAM_CHECK_ARG
#endif

}  // namespace bam

#endif  // BAM_ARRAY_CUH
