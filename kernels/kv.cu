// kv.cu: batch lookups in kv tables (package kv) through the GPU-resident
// cache. A table is an object of bucket lines (kv/bucket.go has the layout:
// a 16-byte header, one control byte per slot, then keys, then values); the
// host passes the geometry as arguments, so nothing here depends on the
// key or value size at compile time.
//
// bam_kv_get: each warp takes 32 keys at a time. Every lane hashes its key
// and the lanes acquire their home buckets together (lanes with the same
// bucket share one acquisition, bam/coalesce.cuh), so a warp has up to 32
// misses in flight. Then the warp probes the 32 buckets one after another,
// all lanes scanning the control bytes of one bucket line in parallel
// (cooperative probing); a match is confirmed by comparing the key bytes,
// and the value is copied out by all lanes. A key whose home bucket is full
// and has no empty slot continues into the next buckets (acquired by lane
// 0 one at a time; rare at the loads the host allows). Errors (I/O,
// timeouts, a cache too small) are recorded in the descriptor's error
// record, as for arrays.
#include "bam/array.cuh"

using bam::u32;
using bam::u64;

namespace {

// Control byte values and the hash mirror kv.CtrlEmpty, kv.CtrlFull and
// kv.hashKey; the differential GPU test compares results with the CPU.
constexpr unsigned char ctrl_empty = 0x00;
constexpr unsigned char ctrl_full = 0x80;
constexpr u64 bucket_header = 16;

__device__ __forceinline__ u64 load_le(const unsigned char *p, u32 n) {
	u64 w = 0;
	for (u32 j = 0; j < n; j++) w |= static_cast<u64>(p[j]) << (8 * j);
	return w;
}

__device__ __forceinline__ u64 hash_key(const unsigned char *k, u32 ks) {
	u64 h = static_cast<u64>(ks) * 0x9e3779b97f4a7c15ull;
	u32 i = 0;
	for (; i + 8 <= ks; i += 8) h = bam::mix64(h ^ load_le(k + i, 8));
	if (i < ks) h = bam::mix64(h ^ load_le(k + i, ks - i));
	return bam::mix64(h + 0x632be59bd9b4e019ull);
}

struct geometry {
	u64 buckets;  // a power of two
	u32 ks, vs, slots, key_off, val_off;
};

// probe scans one bucket line with the whole warp for key (fingerprint
// fp). Returns the slot of the key or -1; *empty says whether the line has
// an empty slot (the end of the probe sequence).
__device__ __forceinline__ int probe(const unsigned char *line, const geometry &g, const unsigned char *key,
                                     unsigned char fp, bool *empty) {
	const u32 lane = threadIdx.x & 31;
	int hit = -1;
	bool has_empty = false;
	for (u32 base = 0; base < g.slots; base += 32) {
		const u32 s = base + lane;
		bool match = false;
		if (s < g.slots) {
			const unsigned char c = __ldcg(line + bucket_header + s);
			has_empty |= c == ctrl_empty;
			if (c == fp) {
				const unsigned char *k = line + g.key_off + static_cast<u64>(s) * g.ks;
				match = true;
				for (u32 j = 0; j < g.ks && match; j++) match = __ldcg(k + j) == key[j];
			}
		}
		const u32 m = __ballot_sync(bam::full_warp_mask, match);
		if (m) {
			hit = static_cast<int>(base + __ffs(m) - 1);
			break;
		}
	}
	*empty = __any_sync(bam::full_warp_mask, has_empty);
	return hit;
}

__device__ __forceinline__ void copy_value(unsigned char *out, const unsigned char *line, const geometry &g, int slot) {
	const unsigned char *v = line + g.val_off + static_cast<u64>(slot) * g.vs;
	for (u32 o = threadIdx.x & 31; o < g.vs; o += 32) out[o] = __ldcg(v + o);
}

}  // namespace

// bam_kv_get looks up n keys of ks bytes (keys, packed) in the table whose
// lines the array descriptor names. vals receives n values of vs bytes
// (zero for absent keys), found[i] is 1 for present keys and 0 otherwise.
// Any grid of whole warps is correct (block size a multiple of 32).
BAM_KERNEL void BAM_ARRAY_BOUNDS bam_kv_get(bam::array<uint4> table, const unsigned char *keys, u64 n, u64 buckets, u32 ks, u32 vs,
                           u32 slots, u32 key_off, u32 val_off, unsigned char *vals, unsigned char *found) {
	const bam::array_desc &d = *table.desc;
	const geometry g{buckets, ks, vs, slots, key_off, val_off};
	const u32 lane = threadIdx.x & 31;
	const u64 warp = bam::global_thread_id() >> 5;
	const u64 warps = bam::grid_threads() >> 5;
	for (u64 tile = warp * 32; tile < n; tile += warps * 32) {
		const u64 i = tile + lane;
		const bool mine = i < n;
		u64 h = 0;
		if (mine) h = hash_key(keys + i * ks, ks);
		const u64 home = h & (buckets - 1);
		// Acquire the home buckets of the warp's keys together.
		const u32 active = __ballot_sync(bam::full_warp_mask, mine);
		u64 way = 0;
		u32 ok = 0, later = 0;
		bam::coalesce::group grp{};
		if (mine) {
			grp = bam::coalesce::by(active, home);
			const u32 leaders = __ballot_sync(active, grp.is_leader());
			if (grp.is_leader()) {
				// The warp holds its buckets until it has probed them all,
				// so it must never want every way of a set for itself: it
				// would wait for its own references. Leaders beyond half
				// a set's ways (all of them when a set has one way) leave
				// their bucket to the probe loop, which holds one line at
				// a time besides the warp's.
				const bam::cache::where w = bam::cache::locate(d, home);
				const u32 same = __match_any_sync(leaders, bam::cache::set_of(w.tag, d.sets));
				if (__popc(same & ((1u << lane) - 1)) >= d.ways / 2) {
					later = 1;
				} else {
					const bam::cache::handle hd = bam::cache::acquire(d, w, grp.count, i);
					way = hd.way;
					ok = hd.ok;
				}
			}
			way = grp.broadcast(way);
			ok = grp.broadcast(ok);
			later = grp.broadcast(later);
		}
		__syncwarp();
		// Probe the 32 keys one by one with the whole warp.
		for (u32 j = 0; j < 32; j++) {
			if (!(active & (1u << j))) continue;
			const u64 kj = tile + j;
			const u64 hj = __shfl_sync(bam::full_warp_mask, h, j);
			u64 wj = __shfl_sync(bam::full_warp_mask, way, j);
			u32 okj = __shfl_sync(bam::full_warp_mask, ok, j);
			const u32 laterj = __shfl_sync(bam::full_warp_mask, later, j);
			if (laterj) {  // a bucket left by its leader: lane 0 holds it for this key alone
				if (lane == 0) {
					const bam::cache::handle hd = bam::cache::acquire(d, bam::cache::locate(d, hj & (buckets - 1)), 1, kj);
					wj = hd.way;
					okj = hd.ok;
				}
				wj = __shfl_sync(bam::full_warp_mask, wj, 0);
				okj = __shfl_sync(bam::full_warp_mask, okj, 0);
			}
			const unsigned char fp = static_cast<unsigned char>(ctrl_full | (hj >> 57));
			const unsigned char *key = keys + kj * ks;
			unsigned char *out = vals + kj * vs;
			bool hit = false;
			if (okj) {
				bool empty = false;
				const unsigned char *line = bam::cache::line_data(d, wj);
				int s = probe(line, g, key, fp, &empty);
				if (s >= 0) {
					copy_value(out, line, g, s);
					hit = true;
				}
				if (laterj) {  // done with it before the next buckets
					__syncwarp();
					if (lane == 0) bam::cache::release(d, wj, 1, false);
				}
				u64 b = hj & (buckets - 1);
				for (u64 step = 1; !hit && !empty && step < buckets; step++) {
					b = (b + 1) & (buckets - 1);
					u64 w2 = 0;
					u32 ok2 = 0;
					if (lane == 0) {
						const bam::cache::handle hd = bam::cache::acquire(d, bam::cache::locate(d, b), 1, kj);
						w2 = hd.way;
						ok2 = hd.ok;
					}
					w2 = __shfl_sync(bam::full_warp_mask, w2, 0);
					ok2 = __shfl_sync(bam::full_warp_mask, ok2, 0);
					if (!ok2) break;
					const unsigned char *l2 = bam::cache::line_data(d, w2);
					s = probe(l2, g, key, fp, &empty);
					if (s >= 0) {
						copy_value(out, l2, g, s);
						hit = true;
					}
					__syncwarp();
					if (lane == 0) bam::cache::release(d, w2, 1, false);
				}
			}
			if (!hit) {
				for (u32 o = lane; o < vs; o += 32) out[o] = 0;
			}
			if (lane == 0) found[kj] = hit ? 1 : 0;
		}
		__syncwarp();
		if (mine && ok && grp.is_leader()) bam::cache::release(d, way, grp.count, false);
	}
}
