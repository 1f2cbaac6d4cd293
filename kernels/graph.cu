// graph.cu: breadth-first search and connected components over CSR graphs
// (examples/graph). The offsets and per-vertex arrays live in GPU memory;
// the edges array is read through an accessor, so one kernel body serves
// three placements of the edges:
//
//	_bam  bam::array<V>: on storage, through the GPU cache (lanes grouped by
//	      line, bam::array_ref holding a line across a lane's reads);
//	_mem  const V*: device memory (G1 baseline a), or pinned host memory
//	      mapped into the device (G1 baseline b, EMOGI's zero-copy).
//
// BFS is frontier based, one warp per frontier vertex, the 32 lanes reading
// consecutive neighbours (coalesced), as BaM's best variant; on undirected
// graphs the levels with large frontiers go bottom-up instead (every
// unreached vertex looks for a parent and stops at the first, among the
// graph's heads array first where it has one). CC is Afforest:
// link every vertex to two of its neighbours, a neighbour a round with a
// compress after each (its heads, from the graph's heads array, or its
// first neighbours, from the edges, for graphs without one), then link the
// remaining neighbours of vertices outside the largest component and
// compress; links hook the
// larger root under the smaller, so labels end as the smallest vertex id of
// each component.
#include "bam/array.cuh"

using bam::u32;
using bam::u64;

namespace {

// window is a run of elements a lane reads with plain loads: element i,
// first <= i < end, is p[i - first].
template <typename V>
struct window {
	const V *p;
	u64 first, end;
	__device__ __forceinline__ bool contains(u64 a, u64 b) const { return a >= first && b <= end; }  // [a, b)
	__device__ __forceinline__ V operator[](u64 i) const { return p[i - first]; }
};

// Accessors: a reader per lane, created once per kernel thread. load
// reads the elements i, i+32, ..., i+32(U-1) below end into u, or reports
// (false, for the whole warp) that they are not in reach of plain loads;
// the warp's lanes call it together, with consecutive i.
template <typename V>
struct mem_reader {
	using vertex = V;
	const V *p;
	__device__ explicit mem_reader(const V *q) : p(q) {}
	__device__ __forceinline__ V operator[](u64 i) { return p[i]; }
	template <u32 U>
	__device__ __forceinline__ bool load(u64 i, u64 end, V (&u)[U]) {
#pragma unroll
		for (u32 k = 0; k < U; k++)
			if (i + 32 * k < end) u[k] = p[i + 32 * k];
		return true;
	}
	// window(i): every element (the warp's lanes call it together, as
	// bam_reader's).
	__device__ __forceinline__ window<V> window_at(u64) { return window<V>{p, 0, ~0ull}; }
	__device__ __forceinline__ void release() {}
};

// bam_reader's load takes the lane's line (array_ref::span) and, when every
// lane's elements lie in its line, reads them with plain loads, which the
// compiler can overlap.
template <typename V>
struct bam_reader {
	using vertex = V;
	bam::array_ref<V> ref;
	__device__ explicit bam_reader(bam::array<V> a) : ref(a) {}
	__device__ __forceinline__ V operator[](u64 i) { return ref[i]; }
	template <u32 U>
	__device__ __forceinline__ bool load(u64 i, u64 end, V (&u)[U]) {
		const u64 first = i < end ? i : end - 1;
		const u64 last = i + 32 * (U - 1) < end ? i + 32 * (U - 1) : end - 1;
		const bam::line_span<V> s = ref.span(first);
		if (!__all_sync(bam::full_warp_mask, s.contains(last))) return false;
#pragma unroll
		for (u32 k = 0; k < U; k++)
			if (i + 32 * k < end) u[k] = s[i + 32 * k];
		return true;
	}
	// window_at holds element i's line and returns its elements (none
	// where the access failed, recorded as for operator[]); the warp's
	// lanes call it together, with the same i: one acquire.
	__device__ __forceinline__ window<V> window_at(u64 i) {
		const bam::line_span<V> s = ref.span(i);
		return window<V>{reinterpret_cast<const V *>(s.bytes), s.first, s.end};
	}
	__device__ __forceinline__ void release() { ref.release(); }
};

template <typename E>
struct reader_of;
template <typename V>
struct reader_of<const V *> {
	using type = mem_reader<V>;
	using vertex = V;
};
template <typename V>
struct reader_of<bam::array<V>> {
	using type = bam_reader<V>;
	using vertex = V;
};

// Single reads (no reuse expected): plain loads or a coalesced array read.
template <typename V>
__device__ __forceinline__ V read_one(const V *p, u64 i) { return p[i]; }
template <typename V>
__device__ __forceinline__ V read_one(bam::array<V> a, u64 i) { return a.read(i); }

constexpr u32 unreached = 0xffffffffu;

__device__ __forceinline__ u64 warp_id() { return bam::global_thread_id() / 32; }
__device__ __forceinline__ u64 grid_warps() { return bam::grid_threads() / 32; }

// Top-down levels give a warp to each frontier vertex, except the vertices
// whose lists are longer than big_list: one warp would walk such a list
// alone long after the others finished (a Kronecker graph's hubs hold
// lists of a hundred thousand edges and more). bfs_list_long lists them
// first, and bfs_expand then shares their edges among all the grid's warps
// in segments of big_segment, after the rest of the frontier. Segments are
// aligned to multiples of big_segment edges, not to the list's start, so
// that a segment spans whole cache lines (4 KiB of 32-bit ids) and no two
// warps wait for the same line's fill.
//
// The list: one 64-bit counter, the vertices listed in its high 32 bits
// and their segments in its low 32 (a graph of fewer than 2^42 edges), so
// that one atomicAdd gives a vertex both its place k and the number of
// segments listed before it, big_first[k]: ascending in k, the table
// bfs_expand searches to find the vertex of a segment.
constexpr u64 big_list = 4096;
constexpr u64 big_segment = 1024;
constexpr u32 big_count_shift = 32;
constexpr u64 big_segs_mask = (1ull << big_count_shift) - 1;

// append_found appends u to next for the lanes of the (whole) warp whose
// found is set, with one atomicAdd for the warp.
template <typename V>
__device__ __forceinline__ void append_found(bool found, V u, V *__restrict__ next, unsigned long long *__restrict__ next_len) {
	const u32 lane = threadIdx.x & 31;
	const u32 mask = __ballot_sync(bam::full_warp_mask, found);
	if (mask) {
		unsigned long long at = 0;
		if (lane == 0) at = atomicAdd(next_len, (unsigned long long)__popc(mask));
		at = __shfl_sync(bam::full_warp_mask, at, 0);
		if (found) next[at + __popc(mask & ((1u << lane) - 1))] = u;
	}
}

// warp_total adds the (whole) warp's x to *total with one atomicAdd.
__device__ __forceinline__ void warp_total(u64 x, unsigned long long *total) {
	for (u32 d = 16; d > 0; d /= 2) x += __shfl_down_sync(bam::full_warp_mask, x, d);
	if ((threadIdx.x & 31) == 0 && x != 0) atomicAdd(total, (unsigned long long)x);
}

// expand_segment reads neighbours start..end-1 of a frontier vertex with the
// warp's lanes (consecutive neighbours, coalesced) and claims the unreached
// ones for the next level. It takes expand_rounds rounds of 32 neighbours
// at a time: their loads, then their depths, then their claims, each step's
// memory accesses in flight together, where a round at a time waited for
// each in turn; a warp then holds its line for a few latencies, not dozens,
// and goes on to its next line sooner. The batch's appends to next take one
// atomicAdd for the warp. A batch whose elements do not all lie in the
// lines its lanes start in (edges on storage: a batch across a line's end)
// goes a round at a time. The degrees of the vertices a lane claims add up
// in scout (the level's scout count, which direction reads: the edges of
// the next frontier's lists).
constexpr u32 expand_rounds = 4;

template <typename R>
__device__ __forceinline__ void expand_segment(R &rd, const u64 *__restrict__ offsets, u64 start, u64 end, u32 *__restrict__ depth,
                                               u32 level, typename R::vertex *__restrict__ next,
                                               unsigned long long *__restrict__ next_len, u64 &scout, u64 &top) {
	using V = typename R::vertex;
	constexpr u32 U = expand_rounds;
	const u32 lane = threadIdx.x & 31;
	const u32 below = (1u << lane) - 1;  // the lanes before this one
	for (u64 base = start; base < end; base += 32 * U) {
		const u64 i = base + lane;
		const u64 stop = min(base + 32 * U, end);
		V u[U];
		if (!rd.load(i, stop, u)) {
			// The batch spans lines: a round at a time (warp-uniform).
			for (u64 b = base; b < stop; b += 32) {
				bool claimed = false;
				V w = 0;
				if (b + lane < stop) {
					w = rd[b + lane];
					if (depth[w] == unreached) claimed = atomicCAS(&depth[w], unreached, level + 1) == unreached;
				}
				if (claimed) {
					const u64 deg = offsets[w + 1] - offsets[w];
					scout += deg;
					top = max(top, deg);
				}
				append_found(claimed, w, next, next_len);
			}
			continue;
		}
		u32 d[U];
#pragma unroll
		for (u32 k = 0; k < U; k++) d[k] = i + 32 * k < stop ? depth[u[k]] : 0;
		bool claimed[U];
#pragma unroll
		for (u32 k = 0; k < U; k++)
			claimed[k] = i + 32 * k < stop && d[k] == unreached && atomicCAS(&depth[u[k]], unreached, level + 1) == unreached;
		u32 mask[U], total = 0;
#pragma unroll
		for (u32 k = 0; k < U; k++) {
			mask[k] = __ballot_sync(bam::full_warp_mask, claimed[k]);
			total += __popc(mask[k]);
			if (claimed[k]) {
				const u64 deg = offsets[u[k] + 1] - offsets[u[k]];
				scout += deg;
				top = max(top, deg);
			}
		}
		if (total == 0) continue;  // warp-uniform
		unsigned long long at = 0;
		if (lane == 0) at = atomicAdd(next_len, (unsigned long long)total);
		at = __shfl_sync(bam::full_warp_mask, at, 0);
#pragma unroll
		for (u32 k = 0; k < U; k++) {
			if (claimed[k]) next[at + __popc(mask[k] & below)] = u[k];
			at += __popc(mask[k]);
		}
	}
}

// bfs_list_long: a thread per frontier vertex; the vertices with lists
// longer than big_list go to big, with their first segment's number in
// big_first (big_count is the packed counter above).
template <typename V>
__device__ void bfs_list_long(const u64 *__restrict__ offsets, const V *__restrict__ frontier, u64 n_frontier,
                              V *__restrict__ big, u64 *__restrict__ big_first, unsigned long long *__restrict__ big_count) {
	for (u64 w = bam::global_thread_id(); w < n_frontier; w += bam::grid_threads()) {
		const u64 v = frontier[w];
		const u64 start = offsets[v], end = offsets[v + 1];
		if (end - start <= big_list) continue;
		const u64 segs = (end + big_segment - 1) / big_segment - start / big_segment;
		const u64 old = atomicAdd(big_count, (1ull << big_count_shift) | segs);
		const u64 k = old >> big_count_shift;
		big[k] = frontier[w];
		big_first[k] = old & big_segs_mask;
	}
}

// bfs_expand: a top-down level. Its items are the n_frontier frontier
// vertices (a warp reads a list of at most big_list edges whole; longer
// ones are skipped) and then the n_segs segments of the n_big long lists,
// which bfs_list_long listed; a warp takes the next item from the counter
// work when it is done with its last, so the warps that drew short lists
// go on with the next ones and every warp stays busy until the level's
// last segments. A warp finds the vertex of segment g by a binary search
// of big_first (small, and read by every warp: it stays in the L2).
template <typename E>
__device__ void bfs_expand(const u64 *__restrict__ offsets, E edges, const typename reader_of<E>::vertex *__restrict__ frontier,
                           u64 n_frontier, u32 *__restrict__ depth, u32 level, typename reader_of<E>::vertex *__restrict__ next,
                           unsigned long long *__restrict__ next_len, const typename reader_of<E>::vertex *__restrict__ big,
                           const u64 *__restrict__ big_first, u64 n_big, u64 n_segs, unsigned long long *__restrict__ work,
                           unsigned long long *__restrict__ scout_total) {
	const u32 lane = threadIdx.x & 31;
	typename reader_of<E>::type rd(edges);
	const u64 items = n_frontier + n_segs;
	u64 scout = 0, top = 0;  // top: unused here
	while (true) {
		unsigned long long item = 0;
		if (lane == 0) item = atomicAdd(work, 1ull);
		item = __shfl_sync(bam::full_warp_mask, item, 0);
		if (item >= items) break;  // warp-uniform
		u64 start, end;
		if (item < n_frontier) {
			const u64 v = frontier[item];
			start = offsets[v];
			end = offsets[v + 1];
			if (end - start > big_list) continue;  // listed; read in segments
		} else {
			// The last k with big_first[k] <= g (big_first[0] is 0).
			const u64 g = item - n_frontier;
			u64 lo = 0, hi = n_big;
			while (hi - lo > 1) {
				const u64 mid = (lo + hi) / 2;
				if (big_first[mid] <= g) lo = mid; else hi = mid;
			}
			const u64 v = big[lo];
			const u64 first = offsets[v], a = (first / big_segment + (g - big_first[lo])) * big_segment;
			start = max(a, first);
			end = min(a + big_segment, offsets[v + 1]);
		}
		expand_segment(rd, offsets, start, end, depth, level, next, next_len, scout, top);
		rd.release();  // hold no line while idle: live references stay bounded by the active lists
	}
	warp_total(scout, scout_total);
}

// Small levels. A level run by the kernels above costs the host a few
// launches and reads of its counters, a few hundred microseconds, which a
// graph of thousands of levels (a road network, a mesh) pays thousands of
// times while each level reads a few lines. bfs_small_levels runs
// consecutive top-down levels in one launch instead: a grid of at most
// as many blocks as are resident at once, a warp per frontier vertex, a
// grid barrier between levels. It goes on while a level stays small and
// top-down: its frontier at most frontier_cap vertices, their lists at
// most edge_cap edges in all and none longer than big_list (one warp reads
// a list alone here), Beamer's rule (direction in bfs.go, alpha mirrored
// as bfs_alpha) keeping it top-down on undirected graphs, and at most
// max_levels levels. Then it stops and leaves the next level to the host.
//
// state (small_state_words, zeroed by the host) holds the level counters,
// three of each used in turn so that a level's counters are zeroed while
// the level before the last one is long done with them (a level's are
// read after its barrier, before the next barrier); the barrier; and
// what the launch did, for the host. record gets, per level run, the
// vertices it found, their lists' edges and the %globaltimer at its end.
constexpr u64 bfs_alpha = 14;
constexpr u64 small_state_words = 16;
constexpr u64 small_record_words = 3;
constexpr u64 small_found = 0;     // [3] the next frontier's length
constexpr u64 small_scout = 3;     // [3] its lists' edges
constexpr u64 small_top = 6;       // [3] its longest list
constexpr u64 small_arrived = 9;   // blocks at the barrier
constexpr u64 small_gen = 10;      // barriers passed
constexpr u64 small_failed = 11;   // nonzero: a barrier timed out
constexpr u64 small_levels = 12;   // out: levels run
constexpr u64 small_unchecked = 13;  // out: edges of lists no top-down level has read
static_assert(small_unchecked < small_state_words, "bfs_small_levels' state outgrew its words");

// grid_barrier returns once every block of the grid has called it, or
// false once deadline (%globaltimer) has passed or another block gave up:
// the blocks are all resident (the host sizes the grid), yet a wait is
// bounded like every other. Writes before it are visible after it to the
// whole grid (a fence on each side of the arrival, as cooperative groups).
__device__ bool grid_barrier(unsigned long long *state, u64 deadline) {
	__shared__ int ok;
	__syncthreads();
	if (threadIdx.x == 0) {
		ok = 1;
		volatile unsigned long long *gen = state + small_gen;
		volatile unsigned long long *failed = state + small_failed;
		const u64 g = *gen;
		__threadfence();
		if (atomicAdd(state + small_arrived, 1ull) == gridDim.x - 1) {
			state[small_arrived] = 0;
			__threadfence();
			atomicAdd(state + small_gen, 1ull);
		} else {
			u32 ns = 32;
			while (*gen == g) {
				if (*failed != 0 || bam::detail::globaltimer() > deadline) {
					atomicExch(state + small_failed, 1ull);
					ok = 0;
					break;
				}
				__nanosleep(ns);
				ns = min(ns * 2, 1024u);
			}
		}
		__threadfence();
	}
	__syncthreads();
	return ok != 0;
}

template <typename E>
__device__ void bfs_small_levels(const u64 *__restrict__ offsets, E edges, typename reader_of<E>::vertex *fa,
                                 typename reader_of<E>::vertex *fb, u64 nf, u32 *__restrict__ depth, u32 level,
                                 u64 unchecked, u32 undirected, u64 frontier_cap, u64 edge_cap, u32 max_levels,
                                 unsigned long long *state, unsigned long long *record, u64 timeout_ns) {
	using V = typename reader_of<E>::vertex;
	typename reader_of<E>::type rd(edges);
	V *cur = fa, *nxt = fb;
	const bool first = bam::global_thread_id() == 0;
	for (u32 t = 0;; t++) {
		if (first) {
			const u32 z = (t + 1) % 3;
			state[small_found + z] = state[small_scout + z] = state[small_top + z] = 0;
		}
		const u32 c = t % 3;
		u64 scout = 0, top = 0;
		for (u64 i = warp_id(); i < nf; i += grid_warps()) {
			const u64 v = __ldcg(cur + i);
			expand_segment(rd, offsets, offsets[v], offsets[v + 1], depth, level, nxt, state + small_found + c, scout, top);
			rd.release();
		}
		warp_total(scout, state + small_scout + c);
		for (u32 d = 16; d > 0; d /= 2) top = max(top, __shfl_down_sync(bam::full_warp_mask, top, d));
		if ((threadIdx.x & 31) == 0 && top != 0) atomicMax(state + small_top + c, (unsigned long long)top);
		if (!grid_barrier(state, bam::detail::globaltimer() + timeout_ns)) return;
		volatile unsigned long long *vs = state;
		const u64 found = vs[small_found + c], edges_next = vs[small_scout + c], longest = vs[small_top + c];
		if (first) {
			record[small_record_words * t] = found;
			record[small_record_words * t + 1] = edges_next;
			record[small_record_words * t + 2] = bam::detail::globaltimer();
		}
		level++;
		const bool go = found > 0 && found <= frontier_cap && edges_next <= edge_cap && longest <= big_list &&
		                t + 1 < max_levels && !(undirected && edges_next * bfs_alpha > unchecked);
		if (!go) {
			if (first) {
				state[small_levels] = t + 1;
				state[small_unchecked] = unchecked;
			}
			return;
		}
		unchecked -= min(edges_next, unchecked);
		nf = found;
		V *const done = cur;
		cur = nxt;
		nxt = done;
	}
}

// bfs_claim_parents is BFS's bottom-up step (Beamer's direction-optimizing
// BFS): every unreached vertex looks for a neighbour on the current level
// and, once one is found, stops reading its list. A warp takes the vertices
// whose lists start in one chunk of a cache line's edges (chunk_first, as
// cc_link_first), so the lists it reads share one line; the lanes read
// consecutive neighbours (coalesced). The vertices it reaches are appended
// to next, so the following level may go top-down again. It needs the
// reverse of every edge (an undirected graph): the parent found is an
// in-neighbour.
//
// With settled > 0 the graph's heads were checked first (bfs_claim_heads):
// a vertex of at most settled neighbours had its whole list among them and
// reads nothing; the others read their lists from the start (the heads are
// any of a vertex's neighbours, HeadsOf: its hubs).
//
// The warp looks at its chunk's vertices 32 at a time, a lane each. A
// lane whose vertex is unreached and whose list of at most lane_list
// neighbours lies in the chunk's line reads it alone, four neighbours at a
// time with plain loads from the line, which the warp holds for them
// (window_at): a line of a Kronecker graph holds up to hundreds of short
// lists, which one after the other would keep the warp, and its line, for
// hundreds of latencies. The lists left (longer, or running into the next
// line) are read by the whole warp one after the other, its lanes on
// consecutive neighbours. Reached and isolated vertices (half of a
// Kronecker graph's) cost a lane's loads, not a round of the warp. The
// degrees of the vertices found add up in scout_total, as top-down levels
// count them (expand_segment).
constexpr u64 lane_list = 32;

template <typename E>
__device__ void bfs_claim_parents(const u64 *__restrict__ offsets, const u64 *__restrict__ chunk_first, u64 chunks,
                                  u64 chunk_edges, E edges, u32 settled, u32 *__restrict__ depth, u32 level,
                                  typename reader_of<E>::vertex *__restrict__ next,
                                  unsigned long long *__restrict__ next_len, unsigned long long *__restrict__ scout_total) {
	using V = typename reader_of<E>::vertex;
	const u32 lane = threadIdx.x & 31;
	typename reader_of<E>::type rd(edges);
	u64 scout = 0;  // the degrees of the vertices this lane found
	for (u64 c = warp_id(); c < chunks; c += grid_warps()) {
		const u64 v1 = chunk_first[c + 1];
		const u64 line_first = c * chunk_edges, line_end = line_first + chunk_edges;
		for (u64 vb = chunk_first[c]; vb < v1; vb += 32) {
			const u64 u = vb + lane;
			u64 my_start = 0, my_end = 0;
			if (u < v1 && depth[u] == unreached) {
				my_start = offsets[u];
				my_end = offsets[u + 1];
				if (my_end - my_start <= settled) my_start = my_end;
			}
			bool alone = my_start < my_end && my_end - my_start <= lane_list && my_start >= line_first && my_end <= line_end;
			bool found = false;
			if (__any_sync(bam::full_warp_mask, alone)) {  // warp-uniform
				const window<V> w = rd.window_at(line_first);
				alone = alone && w.contains(my_start, my_end);
				for (u64 i = my_start; alone && i < my_end && !found; i += 4) {
					V x[4];
#pragma unroll
					for (u32 k = 0; k < 4; k++) x[k] = w[i + k < my_end ? i + k : i];
#pragma unroll
					for (u32 k = 0; k < 4; k++) found = found || (i + k < my_end && depth[x[k]] == level);
				}
				if (found) {
					depth[u] = level + 1;
					scout += my_end - my_start;
				}
			}
			append_found(found, static_cast<V>(u), next, next_len);
			for (u32 todo = __ballot_sync(bam::full_warp_mask, my_start < my_end && !alone); todo != 0; todo &= todo - 1) {
				const u32 k = __ffs(todo) - 1;
				const u64 start = __shfl_sync(bam::full_warp_mask, my_start, k);
				const u64 end = __shfl_sync(bam::full_warp_mask, my_end, k);
				bool hit = false;
				for (u64 base = start; base < end && !hit; base += 32) {
					const u64 i = base + lane;
					const bool parent = i < end && depth[rd[i]] == level;
					hit = __any_sync(bam::full_warp_mask, parent);
				}
				if (hit && lane == 0) {
					depth[vb + k] = level + 1;
					next[atomicAdd(next_len, 1ull)] = static_cast<V>(vb + k);
					scout += end - start;
				}
			}
		}
		rd.release();  // hold no line between chunks
	}
	warp_total(scout, scout_total);
}

// bfs_claim_heads is the first half of a bottom-up step on a graph with a
// heads array (per entries a vertex, in blocks of heads_block: its
// neighbours of the highest degree, padded with its own id, in GPU or
// pinned memory): every unreached vertex looks for a parent among its
// heads from..per-1 (the runner checks the first block of the heads, then
// the rest), and bfs_claim_parents then
// reads the lists of only the vertices left with more than per neighbours.
// On a Kronecker graph the large bottom-up levels find the parent of nearly
// every vertex among its heads, the hubs, which hold the frontier: the
// level then reads the heads instead of most lines of the edges.
// The degrees of the vertices found add up in scout_total.
//
// With lines set (two bitmaps, lines and lines_all, of the chunks of
// line_edges edges, zeroed), it also measures what bfs_claim_parents would
// read next, into probe's four counters (bfs_probe_*): the vertices
// left with more than per neighbours mark the chunk their list starts in
// lines, and those with more than all (the heads a vertex has, per of them
// checked) mark it in lines_all too; the chunks marked and the vertices
// that marked them are counted. The runner compares the chunks with the
// lines a top-down step would read and takes the cheaper for the vertices
// the heads did not settle, and estimates from the rest whether reading
// the heads past per would pay.
// The heads array's blocks (graph.HeadsPerVertex): head r of vertex v of n
// is at (r / heads_block) * heads_block * n + v * heads_block + r % heads_block.
constexpr u64 heads_block = 2;

// The probe's counters (mirrored in the runner, gpu.go): the chunks marked
// in lines and in lines_all, and the vertices that marked them.
constexpr u64 bfs_probe_lines = 0;
constexpr u64 bfs_probe_lines_all = 1;
constexpr u64 bfs_probe_left = 2;
constexpr u64 bfs_probe_left_all = 3;

// A head's pair of a block in one load: heads_block entries of a vertex.
template <typename V>
struct head_pair;
template <>
struct head_pair<unsigned int> {
	using type = uint2;
};
template <>
struct head_pair<unsigned long long> {
	using type = ulonglong2;
};

// bfs_claim_heads runs far below the memory's bandwidth. The vertices
// found are appended to next with one atomicAdd a block a round
// (block_append): with one a warp, the warps of a level that finds
// millions of vertices all over the graph queued on next_len, and that,
// not bytes, set the kernel's time. A thread takes claim_batch vertices a
// round (lane + 32 j of its warp's tile, each load coalesced) and issues
// each step's loads for all of them together: their depths, then the heads
// of the unreached (a block's pair in one load), then the heads' depths.
// (The batch alone, with a warp's append, was no faster; with the block's
// append the two took a third off the kernel. The append alone was not
// measured.)
constexpr u32 claim_batch = 4;
constexpr u64 heads_max = 4;  // graph.HeadsPerVertex

// block_append appends v[j] to next for every found[j] of the block's
// threads, in one atomicAdd on next_len for the block. Every thread of the
// block calls it (it synchronizes the block).
template <typename V, u32 K>
__device__ __forceinline__ void block_append(const bool (&found)[K], const u64 (&v)[K], V *__restrict__ next,
                                             unsigned long long *__restrict__ next_len) {
	__shared__ u32 block_count;
	__shared__ unsigned long long block_at;
	const u32 lane = threadIdx.x & 31;
	u32 mask[K], count = 0;
#pragma unroll
	for (u32 j = 0; j < K; j++) {
		mask[j] = __ballot_sync(bam::full_warp_mask, found[j]);
		count += __popc(mask[j]);
	}
	if (threadIdx.x == 0) block_count = 0;
	__syncthreads();
	u32 at = 0;  // the warp's place in the block's run
	if (lane == 0 && count != 0) at = atomicAdd(&block_count, count);
	at = __shfl_sync(bam::full_warp_mask, at, 0);
	__syncthreads();
	if (threadIdx.x == 0 && block_count != 0) block_at = atomicAdd(next_len, (unsigned long long)block_count);
	__syncthreads();
	if (count == 0) return;
	const u64 base = block_at + at;
	u32 before = 0;
#pragma unroll
	for (u32 j = 0; j < K; j++) {
		if (found[j]) next[base + before + __popc(mask[j] & ((1u << lane) - 1))] = static_cast<V>(v[j]);
		before += __popc(mask[j]);
	}
}

template <typename V>
__device__ void bfs_claim_heads(const V *__restrict__ heads, const u64 *__restrict__ offsets, u64 n, u32 from, u32 per,
                                u32 *__restrict__ depth, u32 level, V *__restrict__ next,
                                unsigned long long *__restrict__ next_len, unsigned long long *__restrict__ scout_total,
                                u64 line_edges, u32 *__restrict__ lines, u32 *__restrict__ lines_all, u32 all,
                                unsigned long long *__restrict__ probe) {
	using P = typename head_pair<V>::type;
	const u32 lane = threadIdx.x & 31;
	u64 scout = 0, marked = 0, marked_all = 0, left = 0, left_all = 0;
	const u64 tile = 32 * claim_batch;                 // a warp's vertices a round
	const u64 block_tile = tile * (blockDim.x / 32);  // the block's
	// The loop is block-uniform: block_append synchronizes the block.
	for (u64 b = blockIdx.x; b * block_tile < n; b += gridDim.x) {
		u64 v[claim_batch];
		bool open[claim_batch];
#pragma unroll
		for (u32 j = 0; j < claim_batch; j++) {
			v[j] = b * block_tile + (threadIdx.x / 32) * tile + 32 * j + lane;
			open[j] = v[j] < n && depth[v[j]] == unreached;
		}
		V h[claim_batch][heads_max];
#pragma unroll
		for (u32 j = 0; j < claim_batch; j++) {
#pragma unroll
			for (u32 r = 0; r < heads_max; r += heads_block) {
				if (open[j] && r >= from && r < per) {
					// Head r of v is at r * n + v * heads_block (r even).
					const P p = *reinterpret_cast<const P *>(heads + r * n + v[j] * heads_block);
					h[j][r] = p.x;
					h[j][r + 1] = p.y;
				}
			}
		}
		bool found[claim_batch];
#pragma unroll
		for (u32 j = 0; j < claim_batch; j++) {
			found[j] = false;
#pragma unroll
			for (u32 r = 0; r < heads_max; r++)
				if (open[j] && r >= from && r < per) found[j] |= depth[h[j][r]] == level;
		}
		u64 start[claim_batch], degree[claim_batch];
#pragma unroll
		for (u32 j = 0; j < claim_batch; j++) {
			start[j] = degree[j] = 0;
			if (found[j] || (open[j] && lines != nullptr)) {
				start[j] = offsets[v[j]];
				degree[j] = offsets[v[j] + 1] - start[j];
			}
		}
#pragma unroll
		for (u32 j = 0; j < claim_batch; j++) {
			if (found[j]) {
				depth[v[j]] = level + 1;
				scout += degree[j];
			} else if (open[j] && lines != nullptr && degree[j] > per) {
				const u64 c = start[j] / line_edges;
				const u32 bit = 1u << (c & 31);
				if (!(atomicOr(&lines[c / 32], bit) & bit)) marked++;
				left++;
				if (degree[j] > all) {
					if (!(atomicOr(&lines_all[c / 32], bit) & bit)) marked_all++;
					left_all++;
				}
			}
		}
		block_append(found, v, next, next_len);
	}
	warp_total(scout, scout_total);
	if (lines != nullptr) {
		warp_total(marked, probe + bfs_probe_lines);
		warp_total(marked_all, probe + bfs_probe_lines_all);
		warp_total(left, probe + bfs_probe_left);
		warp_total(left_all, probe + bfs_probe_left_all);
	}
}

// CC (Afforest) on labels of the vertex type. A label never exceeds its
// vertex id and only decreases: roots (label = id) are hooked under smaller
// roots by a compare-and-swap, and cc_find shortens the paths it walks
// (path halving, as ECL-CC), storing into vertices that are no longer
// roots an ancestor farther up. Labels are read with volatile loads: other
// threads hook roots and halve paths while a link walks them.
template <typename V>
__device__ u64 cc_find(V *comp, u64 x) {
	volatile V *vc = comp;
	u64 cur = vc[x];
	if (cur == x) return x;
	u64 prev = x;
	for (u64 next; cur > (next = vc[cur]);) {
		vc[prev] = (V)next;
		prev = cur;
		cur = next;
	}
	return cur;
}

template <typename V>
__device__ void cc_link(V *comp, u64 u, u64 v) {
	u64 ru = cc_find(comp, u), rv = cc_find(comp, v);
	while (ru != rv) {
		const u64 high = ru > rv ? ru : rv;
		const u64 low = ru + rv - high;
		const u64 prev = (u64)atomicCAS(&comp[high], (V)high, (V)low);
		if (prev == high) return;
		// high was hooked meanwhile (or is no root): go on from its parent.
		if (high == ru) ru = prev; else rv = prev;
	}
}

// cc_link_first: a warp per chunk of the edges array (a cache line of
// edges, for edges on storage); its lanes take the vertices whose lists
// start in the chunk, chunk_first[c] up to chunk_first[c + 1], and link each
// to its neighbours 0..rounds-1. A warp's reads then fall in one line, filled
// once and copied by the whole warp, where the first edges of 32 consecutive
// vertices straddle two lines and split the warp into two fills.
template <typename E>
__device__ void cc_link_first(const u64 *__restrict__ offsets, const u64 *__restrict__ chunk_first, u64 chunks, E edges,
                              u32 rounds, typename reader_of<E>::vertex *comp) {
	const u32 lane = threadIdx.x & 31;
	for (u64 c = warp_id(); c < chunks; c += grid_warps()) {
		const u64 v0 = chunk_first[c], v1 = chunk_first[c + 1];
		for (u64 v = v0 + lane; v < v1; v += 32) {
			const u64 start = offsets[v], end = offsets[v + 1];
			for (u32 r = 0; r < rounds && start + r < end; r++) {
				cc_link(comp, v, (u64)read_one(edges, start + r));
			}
		}
	}
}

// cc_link_heads is the first round of cc_link_first over the first block
// of the heads array (per = heads_block entries a vertex: its neighbours of
// the highest degree, padded with its own id) of vertices v0 up to v0+n,
// heads pointing at v0's entries: a thread per vertex links it to its first
// head and keeps the second in second
// (when per > 1) for cc_link_column's round after a compress, as Afforest
// links one neighbour of every vertex per round. The heads are in GPU or
// pinned memory: for a graph on storage the runner reads them through the
// cache in bulk first (bam_array_read_range, a line per warp at a time,
// then heads_expand for a packed array), a piece at a time, so no lane
// holds a line while it links. The pass reads the heads (at most 2N ids)
// instead of every line of the edges.
template <typename V>
__device__ void cc_link_heads(const V *__restrict__ heads, u64 v0, u64 n, u32 per, V *comp, V *__restrict__ second) {
	for (u64 i = bam::global_thread_id(); i < n; i += bam::grid_threads()) {
		const u64 v = v0 + i;
		const u64 h = heads[i * per];
		if (per > 1) second[v] = heads[i * per + 1];
		if (h != v) cc_link(comp, v, h);
	}
}

// The tiles of a packed heads array's index (graph.headsTile): base[t]
// counts the vertices a block holds before vertex t * heads_tile.
constexpr u64 heads_tile = 64;

// heads_expand writes block b of the heads array full (cols entries a
// vertex, head r of vertex v at v * cols + r, as bfs_claim_heads and
// cc_link_heads read it) from the block as a graph saves it, packed: only
// the vertices of more than min_degree = b * heads_block neighbours, in
// order (the others' heads in the block are all padding, their own id).
// It does vertices v0 up to v0+n, v0 a multiple of heads_tile: out
// points at v0's entries, packed at those of the first vertex held from
// v0 on, and base is the block's index (graph.headsIndex). A warp takes a
// tile at a time, each lane a vertex; a ballot of the lanes holding one
// numbers their entries.
template <typename V>
__device__ void heads_expand(const V *__restrict__ packed, V *__restrict__ out, const u64 *__restrict__ offsets, u64 v0,
                             u64 n, const u64 *__restrict__ base, u64 min_degree, u32 cols) {
	const u32 lane = threadIdx.x & 31;
	const u64 tiles = (n + heads_tile - 1) / heads_tile;
	const u64 t0 = v0 / heads_tile;
	for (u64 t = warp_id(); t < tiles; t += grid_warps()) {
		u64 k = base[t0 + t] - base[t0];  // vertices held from v0 to the tile
		for (u64 i = t * heads_tile; i < (t + 1) * heads_tile; i += 32) {
			const u64 at = i + lane;
			const bool in = at < n;
			const u64 v = v0 + at;
			const bool held = in && offsets[v + 1] - offsets[v] > min_degree;
			const u32 mask = __ballot_sync(bam::full_warp_mask, held);
			const u64 mine = k + __popc(mask & ((1u << lane) - 1));
			if (in) {
				for (u32 r = 0; r < cols; r++) out[at * cols + r] = held ? packed[mine * cols + r] : (V)v;
			}
			k += __popc(mask);
		}
	}
}

// cc_link_column links every vertex v to col[v] (itself: nothing to do).
template <typename V>
__device__ void cc_link_column(const V *__restrict__ col, u64 n, V *comp) {
	for (u64 v = bam::global_thread_id(); v < n; v += bam::grid_threads()) {
		const u64 h = col[v];
		if (h != v) cc_link(comp, v, h);
	}
}

// cc_snapshot copies the labels into snap and gathers the k labels at idx
// into out (for sampling the largest component on the host).
template <typename V>
__device__ void cc_snapshot(const V *__restrict__ comp, u64 n, V *__restrict__ snap, const u64 *__restrict__ idx, u64 k,
                            V *__restrict__ out) {
	for (u64 v = bam::global_thread_id(); v < n; v += bam::grid_threads()) snap[v] = comp[v];
	for (u64 i = bam::global_thread_id(); i < k; i += bam::grid_threads()) out[i] = comp[idx[i]];
}

// cc_link_rest links neighbours from..degree-1 of every vertex of more than
// done neighbours whose label is not skip (skip = ~0: no vertex skipped):
// after a first pass over the first neighbours, from = done = 2; after one
// over the heads, which are any two neighbours (all of a vertex of at most
// two), from = 0 and done = 2. A warp takes 32 consecutive
// vertices at a time, each lane checking one (label and degree), then
// reads the lists of those left one after the other, its lanes on
// consecutive neighbours: the vertices skipped cost a load per lane.
template <typename E>
__device__ void cc_link_rest(const u64 *__restrict__ offsets, E edges, u64 n, u32 from, u32 done, u64 skip,
                             typename reader_of<E>::vertex *comp) {
	const u32 lane = threadIdx.x & 31;
	typename reader_of<E>::type rd(edges);
	for (u64 base = warp_id() * 32; base < n; base += grid_warps() * 32) {
		const u64 u = base + lane;
		bool work = false;
		if (u < n) {
			work = offsets[u + 1] - offsets[u] > done &&
			       (u64) static_cast<const volatile typename reader_of<E>::vertex *>(comp)[u] != skip;
		}
		for (u32 todo = __ballot_sync(bam::full_warp_mask, work); todo != 0; todo &= todo - 1) {
			const u64 v = base + (__ffs(todo) - 1);
			const u64 start = offsets[v] + from, end = offsets[v + 1];
			for (u64 i = start + lane; i < end; i += 32) {
				cc_link(comp, v, (u64)rd[i]);
			}
			rd.release();
		}
	}
}

template <typename V>
__device__ void cc_compress(V *comp, u64 n) {
	for (u64 v = bam::global_thread_id(); v < n; v += bam::grid_threads()) {
		V c = comp[v];
		while (true) {
			const V cc = comp[c];
			if (cc == c) break;
			c = cc;
		}
		comp[v] = c;
	}
}

}  // namespace

#define GRAPH_KERNELS(VS, V)                                                                                        \
	BAM_KERNEL void graph_bfs_list_long_##VS(const u64 *offsets, const V *frontier, u64 nf, V *big, u64 *big_first,   \
	                                         unsigned long long *big_count) {                                      \
		bfs_list_long(offsets, frontier, nf, big, big_first, big_count);                                             \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_bfs_expand_##VS##_bam(const u64 *offsets, bam::array<V> edges, const V *frontier, u64 nf,  \
	                                            u32 *depth, u32 level, V *next, unsigned long long *next_len,          \
	                                            const V *big, const u64 *big_first, u64 n_big, u64 n_segs,             \
	                                            unsigned long long *work, unsigned long long *scout) {               \
		bfs_expand(offsets, edges, frontier, nf, depth, level, next, next_len, big, big_first, n_big, n_segs, work,  \
		           scout);                                                                                           \
	}                                                                                                                \
	BAM_KERNEL void graph_bfs_expand_##VS##_mem(const u64 *offsets, const V *edges, const V *frontier, u64 nf,       \
	                                            u32 *depth, u32 level, V *next, unsigned long long *next_len,          \
	                                            const V *big, const u64 *big_first, u64 n_big, u64 n_segs,             \
	                                            unsigned long long *work, unsigned long long *scout) {               \
		bfs_expand(offsets, edges, frontier, nf, depth, level, next, next_len, big, big_first, n_big, n_segs, work,  \
		           scout);                                                                                           \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_bfs_claim_parents_##VS##_bam(const u64 *offsets, const u64 *chunk_first, u64 chunks,       \
	                                                    u64 chunk_edges, bam::array<V> edges, u32 settled, u32 *depth, \
	                                                    u32 level, V *next, unsigned long long *next_len,          \
	                                                    unsigned long long *scout) {                                \
		bfs_claim_parents(offsets, chunk_first, chunks, chunk_edges, edges, settled, depth, level, next, next_len,    \
		                  scout);                                                                                    \
	}                                                                                                                \
	BAM_KERNEL void graph_bfs_claim_parents_##VS##_mem(const u64 *offsets, const u64 *chunk_first, u64 chunks,        \
	                                                   u64 chunk_edges, const V *edges, u32 settled, u32 *depth,     \
	                                                   u32 level, V *next, unsigned long long *next_len,           \
	                                                   unsigned long long *scout) {                                 \
		bfs_claim_parents(offsets, chunk_first, chunks, chunk_edges, edges, settled, depth, level, next, next_len,    \
		                  scout);                                                                                    \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_bfs_small_levels_##VS##_bam(const u64 *offsets, bam::array<V> edges, V *fa, V *fb,   \
	                                                   u64 nf, u32 *depth, u32 level, u64 unchecked, u32 undirected,  \
	                                                   u64 frontier_cap, u64 edge_cap, u32 max_levels,               \
	                                                   unsigned long long *state, unsigned long long *record,        \
	                                                   u64 timeout_ns) {                                             \
		bfs_small_levels(offsets, edges, fa, fb, nf, depth, level, unchecked, undirected, frontier_cap, edge_cap,    \
		                 max_levels, state, record, timeout_ns);                                                     \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_bfs_small_levels_##VS##_mem(const u64 *offsets, const V *edges, V *fa, V *fb,        \
	                                                   u64 nf, u32 *depth, u32 level, u64 unchecked, u32 undirected,  \
	                                                   u64 frontier_cap, u64 edge_cap, u32 max_levels,               \
	                                                   unsigned long long *state, unsigned long long *record,        \
	                                                   u64 timeout_ns) {                                             \
		bfs_small_levels(offsets, edges, fa, fb, nf, depth, level, unchecked, undirected, frontier_cap, edge_cap,    \
		                 max_levels, state, record, timeout_ns);                                                     \
	}                                                                                                                \
	BAM_KERNEL void graph_bfs_claim_heads_##VS(const V *heads, const u64 *offsets, u64 n, u32 from, u32 per,         \
	                                           u32 *depth, u32 level, V *next,                      \
	                                           unsigned long long *next_len, unsigned long long *scout,             \
	                                           u64 line_edges, u32 *lines, u32 *lines_all, u32 all,                 \
	                                           unsigned long long *probe) {                                         \
		bfs_claim_heads(heads, offsets, n, from, per, depth, level, next, next_len, scout, line_edges, lines,        \
		                lines_all, all, probe);                                                                      \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_cc_link_first_##VS##_bam(const u64 *offsets, const u64 *chunk_first, u64 chunks,           \
	                                               bam::array<V> edges, u32 rounds, V *comp) {                       \
		cc_link_first(offsets, chunk_first, chunks, edges, rounds, comp);                                            \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_link_first_##VS##_mem(const u64 *offsets, const u64 *chunk_first, u64 chunks,            \
	                                               const V *edges, u32 rounds, V *comp) {                            \
		cc_link_first(offsets, chunk_first, chunks, edges, rounds, comp);                                            \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_link_heads_##VS(const V *heads, u64 v0, u64 n, u32 per, V *comp, V *second) {       \
		cc_link_heads(heads, v0, n, per, comp, second);                                                              \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_link_column_##VS(const V *col, u64 n, V *comp) { cc_link_column(col, n, comp); }        \
	BAM_KERNEL void graph_heads_expand_##VS(const V *packed, V *out, const u64 *offsets, u64 v0, u64 n, const u64 *base, \
	                                        u64 min_degree, u32 cols) {                                              \
		heads_expand(packed, out, offsets, v0, n, base, min_degree, cols);                                           \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_snapshot_##VS(const V *comp, u64 n, V *snap, const u64 *idx, u64 k, V *out) {          \
		cc_snapshot(comp, n, snap, idx, k, out);                                                                     \
	}                                                                                                                \
	BAM_KERNEL void BAM_ARRAY_BOUNDS graph_cc_link_rest_##VS##_bam(const u64 *offsets, bam::array<V> edges, u64 n, u32 from,          \
	                                              u32 done, u64 skip, V *comp) {                                     \
		cc_link_rest(offsets, edges, n, from, done, skip, comp);                                                     \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_link_rest_##VS##_mem(const u64 *offsets, const V *edges, u64 n, u32 from, u32 done,     \
	                                              u64 skip, V *comp) {                                               \
		cc_link_rest(offsets, edges, n, from, done, skip, comp);                                                     \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_init_##VS(V *comp, u64 n) {                                                             \
		for (u64 v = bam::global_thread_id(); v < n; v += bam::grid_threads()) comp[v] = (V)v;                       \
	}                                                                                                                \
	BAM_KERNEL void graph_cc_compress_##VS(V *comp, u64 n) { cc_compress(comp, n); }

GRAPH_KERNELS(u32, unsigned int)
GRAPH_KERNELS(u64, unsigned long long)

// graph_bfs_late_depths finishes BFS's early read back (gpu.go: the
// depths are read back while the last levels run): it lists, as
// (vertex, depth) pairs in out, the vertices whose depth is above after,
// the deepest level reached when the read back began, at most cap of them.
// count gets how many there are, all of them, so that the host sees an
// overflow and reads the depths back whole instead.
BAM_KERNEL void graph_bfs_late_depths(const u32 *depth, u64 n, u32 after, unsigned long long *out, u64 cap,
                                      unsigned long long *count) {
	const u32 lane = threadIdx.x & 31;
	const u64 stride = bam::grid_threads();
	// Warp-uniform trip count: the ballot below needs every lane.
	for (u64 base = bam::global_thread_id() - lane; base < n; base += stride) {
		const u64 v = base + lane;
		const u32 d = v < n ? depth[v] : unreached;
		const bool late = d != unreached && d > after;
		const u32 mask = __ballot_sync(bam::full_warp_mask, late);
		if (mask == 0) continue;
		unsigned long long at = 0;
		if (lane == 0) at = atomicAdd(count, (unsigned long long)__popc(mask));
		at = __shfl_sync(bam::full_warp_mask, at, 0) + __popc(mask & ((1u << lane) - 1));
		if (late && at < cap) {
			out[2 * at] = v;
			out[2 * at + 1] = d;
		}
	}
}
