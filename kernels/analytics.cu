// analytics.cu: the taxi queries of examples/analytics (package taxi's doc
// defines them). Each kernel comes twice: columns on storage through the
// GPU cache (bam::array, suffix _bam) and columns in device memory (plain
// pointers, suffix _mem, the in-memory baseline). The code is one template
// over the column accessor, so both variants do the same work.
//
// Work assignment, as in BaM's port: a warp takes 512 consecutive rows, 16
// per lane, lane l reading rows base + 32j + l, so each read of a warp is
// 32 consecutive elements (one line group for the cache). The grouping
// kernels' warps stride over the table; the selective ones take their
// chunks from a counter (see selective). Dependent columns are read only by the lanes whose row
// matched; bam::array groups those lanes by line.
#include "bam/array.cuh"

using bam::i32;
using bam::u32;
using bam::u64;

namespace {

constexpr u32 rows_per_lane = 16;
constexpr u64 rows_per_warp = 32 * rows_per_lane;

template <typename T>
struct mem_col {
	const T *p;
	__device__ __forceinline__ T read(u64 i) const { return p[i]; }
};

template <typename T>
struct bam_col {
	bam::array<T> a;
	__device__ __forceinline__ T read(u64 i) const { return a.read(i); }
};

__device__ __forceinline__ u64 warp_id() { return bam::global_thread_id() / 32; }
__device__ __forceinline__ u64 warps() { return bam::grid_threads() / 32; }

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
	for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(bam::full_warp_mask, v, off);
	return v;
}

// Matching rows whose amounts a warp has yet to read: at most one entry per
// lane, so that one round of reads covers them.
constexpr u32 max_pending = 32;
constexpr u32 max_warps_per_block = 8;  // blocks of at most 256 threads

// read_amounts adds the first k amount columns (NULL = NaN adds 0) of the
// np rows in pend to the calling lane's sum. The warp calls it together;
// its lanes share out the np*k (row, column) reads, so that up to 32
// misses are in flight at once instead of one per matching lane and
// column in turn.
template <typename Col>
__device__ __forceinline__ double read_amounts(const Col &a0, const Col &a1, const Col &a2, const Col &a3,
                                               const Col &a4, u32 k, const u64 *pend, u32 np) {
	const u32 lane = threadIdx.x & 31;
	const u32 items = np * k;
	double s = 0;
	for (u32 t0 = 0; t0 < items; t0 += 32) {
		const u32 t = t0 + lane;
		if (t >= items) break;
		const u64 row = pend[t % np];
		float v;
		switch (t / np) {
			case 0: v = a0.read(row); break;
			case 1: v = a1.read(row); break;
			case 2: v = a2.read(row); break;
			case 3: v = a3.read(row); break;
			default: v = a4.read(row); break;
		}
		if (v == v) s += v;
	}
	return s;
}

// selective runs Q0–Q5: rows with dist >= D (NaN never matches) add 1 to
// the count, their distance to out[0] and the sum of their first k amount
// columns (NULL = NaN adds 0) to out[1].
//
// Warps take chunks of rows_per_warp rows from the counter *next (zero at
// launch) until the table is done, so a warp slowed by its matches' reads
// leaves more chunks to the others instead of ending the kernel late, and
// a grid larger than fits on the GPU at once leaves its later blocks no
// work rather than a wave of their own. A warp notes its matching rows
// (in shared memory) and reads the amounts of the noted rows together
// (read_amounts): when it finishes a chunk with at least batch reads
// noted (rows times the k columns), when its notes are full, and at its
// end. A small batch spreads the dependent reads over the scan, at the
// cost of a wait for storage per chunk with a match; a large one leaves
// most of them to each warp's end, where they come all at once after the
// scan (on A1, 500 M rows: batches of 2-8 rows took 0.282-0.295 s for Q1-Q5
// together, 16 or 32 rows 0.319-0.325 s, as did the earlier static
// assignment with reads at a warp's end). Either way the (row, column)
// reads of one round, up to 32, are in flight together. The
// amounts are summed per (row, column) read, not per row: the same sum up
// to floating-point rounding.
template <typename Col>
__device__ void selective(Col dist, Col a0, Col a1, Col a2, Col a3, Col a4, u32 k, float D, u64 n, u32 batch,
                          double *out, u64 *count, u64 *next) {
	__shared__ u64 pending[max_warps_per_block][max_pending];
	u64 *pend = pending[(threadIdx.x >> 5) % max_warps_per_block];
	batch = min(max(batch, 1u), max_pending);
	u32 np = 0;  // rows noted in pend, the same in every lane
	u64 c = 0;
	double sd = 0, sa = 0;
	const u32 lane = threadIdx.x & 31;
	const u64 chunks = (n + rows_per_warp - 1) / rows_per_warp;
	for (;;) {
		u64 chunk = 0;
		if (lane == 0) chunk = atomicAdd(reinterpret_cast<unsigned long long *>(next), 1ull);
		chunk = __shfl_sync(bam::full_warp_mask, chunk, 0);
		if (chunk >= chunks) break;
		const u64 base = chunk * rows_per_warp;
		for (u32 j = 0; j < rows_per_lane; j++) {
			if (base + 32 * j >= n) break;  // uniform across the warp
			const u64 i = base + 32 * j + lane;
			bool match = false;
			if (i < n) {
				const float d = dist.read(i);
				if (d >= D) {
					match = true;
					c++;
					sd += d;
				}
			}
			if (k == 0) continue;
			u32 want = __ballot_sync(bam::full_warp_mask, match);
			while (want != 0) {
				// The lowest-ranked matching lanes take the free entries.
				const u32 room = max_pending - np;
				const u32 rank = __popc(want & ((1u << lane) - 1u));
				if (((want >> lane) & 1u) && rank < room) pend[np + rank] = i;
				const u32 took = min(static_cast<u32>(__popc(want)), room);
				for (u32 t = 0; t < took; t++) want &= want - 1u;
				np += took;
				if (np == max_pending) {
					__syncwarp();
					sa += read_amounts(a0, a1, a2, a3, a4, k, pend, np);
					__syncwarp();
					np = 0;
				}
			}
		}
		if (np * k >= batch) {
			__syncwarp();
			sa += read_amounts(a0, a1, a2, a3, a4, k, pend, np);
			__syncwarp();
			np = 0;
		}
	}
	if (np > 0) {
		__syncwarp();
		sa += read_amounts(a0, a1, a2, a3, a4, k, pend, np);
	}
	__syncwarp();
	c = bam::warp_sum(c);
	sd = warp_sum_f64(sd);
	sa = warp_sum_f64(sa);
	if (lane == 0 && c > 0) {
		atomicAdd(count, c);
		atomicAdd(&out[0], sd);
		atomicAdd(&out[1], sa);
	}
}

// Group-by fields and key packing: mirrored from package taxi (query.go).
constexpr u32 group_cab = 1, group_passengers = 2, group_year = 4, group_distance = 8;
constexpr u64 empty_key = ~0ull;

// year_of returns the UTC year of t seconds since 1970 (Hinnant's
// civil_from_days).
__device__ __forceinline__ int year_of(u32 t) {
	const i32 z = static_cast<i32>(t / 86400u) + 719468;
	const i32 era = z / 146097;
	const u32 doe = static_cast<u32>(z - era * 146097);
	const u32 yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	const u32 doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	const u32 mp = (5 * doy + 2) / 153;
	const i32 y = static_cast<i32>(yoe) + era * 400;
	return mp >= 10 ? y + 1 : y;
}

__device__ __forceinline__ u64 round_distance(float d) {
	if (d != d) return 0x80000000ull;  // DistNull
	double r = round(static_cast<double>(d));
	r = fmin(fmax(r, -2147483647.0), 2147483647.0);
	return static_cast<u64>(static_cast<u32>(static_cast<i32>(r)));
}

__device__ __forceinline__ u64 hash_key(u64 k) {
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

// table_add adds (c, nn, s) to the slot of key in an open-addressing table
// of cap (a power of two) slots; a full table sets *overflow.
__device__ void table_add(u64 key, u64 c, u64 nn, double s, bool avg, u64 *keys, u64 *counts, u64 *nns,
                          double *sums, u64 cap, u32 *overflow) {
	u64 h = hash_key(key) & (cap - 1);
	for (u64 probe = 0; probe < cap; probe++, h = (h + 1) & (cap - 1)) {
		u64 cur = *reinterpret_cast<volatile u64 *>(&keys[h]);
		if (cur == empty_key) cur = atomicCAS(&keys[h], empty_key, key);
		if (cur == empty_key || cur == key) {
			atomicAdd(&counts[h], c);
			if (avg) {
				atomicAdd(&nns[h], nn);
				atomicAdd(&sums[h], s);
			}
			return;
		}
	}
	atomicOr(overflow, 1u);
}

// group_sum returns the sum of v over the lanes of same, the calling
// lane's group (__match_any_sync); the whole warp calls it together.
//
// The loop stays rolled. Unrolled, ptxas (11.8 and the CUDA 13 JIT, sm_90)
// tested the 32 constant bits of same through bulk predicate writes (R2P
// into P1-P6), and the code it emits for shuffles of a diverged warp uses
// P6 as scratch: a warp that reached the loop diverged, which calls in the
// loop above make possible, added lane 6's value to every group
// (bench/results/logs/p6-shuffle-H200-20261126.txt).
__device__ __forceinline__ double group_sum(double v, u32 same) {
	double s = 0;
#pragma unroll 1
	for (u32 l = 0; l < 32; l++) {
		const double x = __shfl_sync(bam::full_warp_mask, v, l);
		if ((same >> l) & 1u) s += x;
	}
	return s;
}

// grouped runs B1–B4: the key of each row from the columns mask names,
// lanes with equal keys aggregated by their lowest lane, which adds the
// group to the hash table.
template <typename U8, typename I8, typename U32, typename F32>
__device__ void grouped(U8 cab, I8 pc, U32 pickup, F32 dist, F32 total, u32 mask, u32 avg, u64 n, u64 *keys,
                        u64 *counts, u64 *nns, double *sums, u64 cap, u32 *overflow) {
	const u32 lane = threadIdx.x & 31;
	for (u64 base = warp_id() * rows_per_warp; base < n; base += warps() * rows_per_warp) {
		for (u32 j = 0; j < rows_per_lane; j++) {
			const u64 i = base + 32 * j + lane;
			if (base + 32 * j >= n) break;  // uniform across the warp
			const bool live = i < n;
			u64 key = empty_key;
			double v = 0;
			bool nonnull = false;
			if (live) {
				key = 0;
				if (mask & group_cab) key |= static_cast<u64>(cab.read(i)) << 56;
				if (mask & group_passengers) key |= static_cast<u64>(static_cast<unsigned char>(pc.read(i))) << 48;
				if (mask & group_year) {
					const u32 t = pickup.read(i);
					if (t != 0) key |= static_cast<u64>(year_of(t) - 1899) << 32;
				}
				if (mask & group_distance) key |= round_distance(dist.read(i));
				if (avg) {
					const float t = total.read(i);
					nonnull = t == t;
					if (nonnull) v = t;
				}
			}
			const u32 same = __match_any_sync(bam::full_warp_mask, key);
			const u32 leader = __ffs(same) - 1;
			const double s = avg ? group_sum(v, same) : 0.0;
			const u32 nn = __popc(__ballot_sync(bam::full_warp_mask, nonnull) & same);
			if (live && lane == leader) {
				table_add(key, __popc(same), nn, s, avg != 0, keys, counts, nns, sums, cap, overflow);
			}
		}
	}
}

}  // namespace

BAM_KERNEL void BAM_ARRAY_BOUNDS bam_taxi_select_bam(bam::array<float> dist, bam::array<float> a0, bam::array<float> a1,
                                    bam::array<float> a2, bam::array<float> a3, bam::array<float> a4, u32 k,
                                    float D, u64 n, u32 batch, double *out, u64 *count, u64 *next) {
	selective<bam_col<float>>({dist}, {a0}, {a1}, {a2}, {a3}, {a4}, k, D, n, batch, out, count, next);
}

BAM_KERNEL void __launch_bounds__(256) bam_taxi_select_mem(const float *dist, const float *a0, const float *a1,
                                    const float *a2, const float *a3, const float *a4, u32 k, float D, u64 n,
                                    u32 batch, double *out, u64 *count, u64 *next) {
	selective<mem_col<float>>({dist}, {a0}, {a1}, {a2}, {a3}, {a4}, k, D, n, batch, out, count, next);
}

BAM_KERNEL void BAM_ARRAY_BOUNDS bam_taxi_group_bam(bam::array<unsigned char> cab, bam::array<signed char> pc,
                                   bam::array<u32> pickup, bam::array<float> dist, bam::array<float> total,
                                   u32 mask, u32 avg, u64 n, u64 *keys, u64 *counts, u64 *nns, double *sums,
                                   u64 cap, u32 *overflow) {
	grouped(bam_col<unsigned char>{cab}, bam_col<signed char>{pc}, bam_col<u32>{pickup}, bam_col<float>{dist},
	        bam_col<float>{total}, mask, avg, n, keys, counts, nns, sums, cap, overflow);
}

BAM_KERNEL void bam_taxi_group_mem(const unsigned char *cab, const signed char *pc, const u32 *pickup,
                                   const float *dist, const float *total, u32 mask, u32 avg, u64 n, u64 *keys,
                                   u64 *counts, u64 *nns, double *sums, u64 cap, u32 *overflow) {
	grouped(mem_col<unsigned char>{cab}, mem_col<signed char>{pc}, mem_col<u32>{pickup}, mem_col<float>{dist},
	        mem_col<float>{total}, mask, avg, n, keys, counts, nns, sums, cap, overflow);
}
