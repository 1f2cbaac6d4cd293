// c2_hit_chain measures what C2's all-hit lookups through bam::array gain
// from a way's generation and clock bit living in its tag word: a hit loads
// the set's tag words, the element and the tag word again (three dependent
// loads) instead of the tags, the way record (generation and clock bit),
// the element, the tag and the generation (five), as it did up to 5ed278e.
//
// It builds an all-hit cache by hand (4 KiB lines, 8 ways, a cache twice
// the 256 MiB array, as in C2) and times, in interleaved rounds, random
// 8-byte lookups:
//   plain          a plain device array (C2's baseline);
//   record         the hit path of 5ed278e, copied here: the generation and
//                  clock bit in the way record, count_groups, the clock bit;
//   record-nostats the same without count_groups;
//   word           bam::cache::peek_begin, load_line_acquire, peek_end,
//                  count_groups and the clock bit, as bam::array::read does;
//   word-nostats   the same without count_groups;
//   word-clockrec  the word's generation, with the clock bit loaded from
//                  the way record beside the element (a relaxed load);
//   word-stats32   word, with the groups counted by a 32-bit key (the
//                  line's low half) instead of the 64-bit line;
//   word-statslanes word, counting the warp's active lanes instead of its
//                  groups (no __match_any_sync: a bound, not the statistic).
// Every kernel's sum is checked against the plain kernel's.
//
// Standalone (not part of the build): nvcc -O2 -std=c++17 -arch=sm_90
// -I../../kernels/include -o c2 c2_hit_chain.cu && ./c2. Results:
// bench/results/logs/c2-hit-chain-*.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bam/array.cuh"

#define CK(x)                                                                        \
	do {                                                                             \
		cudaError_t e = (x);                                                         \
		if (e != cudaSuccess) {                                                      \
			printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
			exit(1);                                                                 \
		}                                                                            \
	} while (0)

using bam::u32;
using bam::u64;
namespace C = bam::layout::gpucache;
namespace D = bam::detail;

constexpr u32 kLineShift = 12;
constexpr u64 kElems = (256ull << 20) / 8;
constexpr u64 kLines = (kElems * 8) >> kLineShift;
constexpr u64 kWays = 8;
constexpr u64 kSets = 2 * kLines / kWays;
constexpr u64 kLookups = 64ull << 20;
// The way record of 5ed278e: state, clock bit, status, generation.
constexpr u64 kRecClock = 4;
constexpr u64 kRecGen = 12;

__device__ __forceinline__ u64 value_of(u64 i) { return bam::mix64(i + 12345); }

// setup places line l in the next free way of its set and fills it.
__global__ void setup(u64 *tags, u64 *packed, unsigned char *recs, u64 *data, u32 *fill) {
	const u64 l = blockIdx.x;
	__shared__ u64 way;
	if (threadIdx.x == 0) {
		const u64 set = bam::cache::set_of(l, kSets);
		const u32 k = atomicAdd(fill + set, 1u);
		way = k < kWays ? set * kWays + k : ~0ull;
		if (way != ~0ull) {
			tags[way] = l;
			// Generation 2, clock bit set: hits store nothing.
			packed[way] = (2ull << C::TagWordGenShift) | bam::cache::word_clock | l;
			u32 *r = reinterpret_cast<u32 *>(recs + way * C::WayStride);
			r[0] = 1u << C::StateValidBit;
			r[kRecClock / 4] = 1;
			r[kRecGen / 4] = 2;
		}
	}
	__syncthreads();
	if (way == ~0ull) return;
	const u64 per = (1ull << kLineShift) / 8;
	for (u64 j = threadIdx.x; j < per; j += blockDim.x) data[way * per + j] = value_of(l * per + j);
}

__device__ __forceinline__ void add_sum(u64 *out, u64 s) {
	s = bam::warp_sum(s);
	if ((threadIdx.x & 31) == 0) atomicAdd(reinterpret_cast<unsigned long long *>(out), s);
}

__global__ void k_plain(const u64 *__restrict__ a, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) s += a[bam::mix64(seed + i) & mask];
	add_sum(out, s);
}

// One probe of a failing lookup counts as a miss (there are none when the
// set-up placed every line).
__device__ u64 misses_seen;

// find_tags, record_begin and record_end are 5ed278e's find_way,
// peek_begin and peek_end.
__device__ __forceinline__ u64 find_tags(const u64 *tags, u64 base, u64 tag) {
	u64 t[8];
#pragma unroll
	for (u32 j = 0; j < 8; j += 2) D::ld_relaxed_gpu_v2(tags + base + j, &t[j], &t[j + 1]);
#pragma unroll
	for (u32 j = 0; j < 8; j++) {
		if (t[j] == tag) return base + j;
	}
	return ~0ull;
}

struct record_peek {
	u64 way;
	u32 gen;
	u32 clock;
	__device__ __forceinline__ bool ok() const { return way != ~0ull && (gen & 1u) == 0; }
};

__device__ __forceinline__ record_peek record_begin(const u64 *tags, const unsigned char *recs, u64 tag) {
	record_peek p{find_tags(tags, bam::cache::set_of(tag, kSets) * kWays, tag), 1u, 1u};
	if (p.way != ~0ull) {
		const uint4 w = D::ld_acquire_gpu_v4(reinterpret_cast<const u32 *>(recs + p.way * C::WayStride));
		p.clock = w.y;
		p.gen = w.w;
	}
	return p;
}

__device__ __forceinline__ bool record_end(const u64 *tags, const unsigned char *recs, const record_peek &p, u64 tag) {
	const u64 t = D::ld_acquire_gpu(tags + p.way);
	const u32 g = D::ld_relaxed_gpu(reinterpret_cast<const u32 *>(recs + p.way * C::WayStride + kRecGen));
	return t == tag && g == p.gen;
}

template <bool Stats>
__global__ void __launch_bounds__(256, 4) k_record(const u64 *tags, unsigned char *recs, unsigned char *data, u64 stats, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		const u64 e = bam::mix64(seed + i) & mask;
		const u64 line = e >> (kLineShift - 3);
		const u64 off = (e & ((1ull << (kLineShift - 3)) - 1)) << 3;
		const record_peek p = record_begin(tags, recs, line);
		u64 v = 0;
		bool hit = false;
		if (p.ok()) {
			v = D::load_line_acquire<u64>(data + (p.way << kLineShift) + off);
			hit = record_end(tags, recs, p, line);
		}
		if (Stats) {
			const u32 active = __activemask();
			bam::count_groups(stats, active, bam::coalesce::by(active, line));
		}
		if (hit && p.clock == 0) D::st_relaxed_gpu(reinterpret_cast<u32 *>(recs + p.way * C::WayStride + kRecClock), 1u);
		if (!hit) atomicAdd(reinterpret_cast<unsigned long long *>(&misses_seen), 1ull);
		s += v;
	}
	add_sum(out, s);
}

// k_word is bam::array::read's hit path (ClockInRecord: with the clock bit
// loaded from the way record instead, beside the element).
template <bool Stats, bool ClockInRecord, int Key = 64>
__global__ void __launch_bounds__(256, 4) k_word(u64 *words, unsigned char *recs, unsigned char *data, u64 stats, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		const u64 e = bam::mix64(seed + i) & mask;
		const u64 line = e >> (kLineShift - 3);
		const u64 off = (e & ((1ull << (kLineShift - 3)) - 1)) << 3;
		const bam::cache::peek p = bam::cache::peek_begin(words, kSets, kWays, line);
		u64 v = 0;
		bool hit = false;
		bool referenced = p.referenced();
		if (p.ok()) {
			if (ClockInRecord) referenced = D::ld_relaxed_gpu(reinterpret_cast<const u32 *>(recs + p.way * C::WayStride + kRecClock)) != 0;
			v = D::load_line_acquire<u64>(data + (p.way << kLineShift) + off);
			hit = bam::cache::peek_end(words, p);
		}
		if (Stats) {
			const u32 active = __activemask();
			if (Key == 64) {
				bam::count_groups(stats, active, bam::coalesce::by(active, line));
			} else if (Key == 32) {
				bam::coalesce::group g;
				g.mask = __match_any_sync(active, static_cast<u32>(line));
				g.leader = __ffs(g.mask) - 1;
				g.count = __popc(g.mask);
				bam::count_groups(stats, active, g);
			} else if ((threadIdx.x & 31) == static_cast<u32>(__ffs(active) - 1)) {
				D::count_at(stats, bam::layout::engine::StatAcquires, __popc(active));
			}
		}
		if (hit && !referenced) bam::cache::mark_hit(words, p.way);
		if (!hit) atomicAdd(reinterpret_cast<unsigned long long *>(&misses_seen), 1ull);
		s += v;
	}
	add_sum(out, s);
}

template <typename K>
int grid_for(K k) {
	int dev = 0, sms = 0, per = 0;
	CK(cudaGetDevice(&dev));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, 256, 0));
	return std::max(per, 1) * sms;
}

int main() {
	u64 *tags, *packed, *data, *plain, *out, *stats;
	unsigned char *recs;
	u32 *fill;
	const u64 ways = kSets * kWays;
	CK(cudaMalloc(&tags, ways * 8));
	CK(cudaMalloc(&packed, ways * 8));
	CK(cudaMalloc(&recs, ways * C::WayStride));
	CK(cudaMalloc(&data, ways << kLineShift));
	CK(cudaMalloc(&plain, kElems * 8));
	CK(cudaMalloc(&fill, kSets * 4));
	CK(cudaMalloc(&out, 8));
	CK(cudaMalloc(&stats, C::WayStride * 1024 * 8));
	CK(cudaMemset(tags, 0xff, ways * 8));
	CK(cudaMemset(packed, 0xff, ways * 8));
	CK(cudaMemset(recs, 0, ways * C::WayStride));
	CK(cudaMemset(fill, 0, kSets * 4));
	CK(cudaMemset(stats, 0, C::WayStride * 1024 * 8));
	setup<<<kLines, 256>>>(tags, packed, recs, data, fill);
	CK(cudaGetLastError());
	std::vector<u64> host(kElems);
	for (u64 i = 0; i < kElems; i++) host[i] = bam::mix64(i + 12345);
	CK(cudaMemcpy(plain, host.data(), kElems * 8, cudaMemcpyHostToDevice));
	std::vector<u32> f(kSets);
	CK(cudaMemcpy(f.data(), fill, kSets * 4, cudaMemcpyDeviceToHost));
	u64 over = 0;
	for (u32 c : f) over += c > kWays ? c - kWays : 0;
	printf("c2_hit_chain: %llu lines in %llu sets x %llu ways, %llu not placed, %llu lookups a run\n", (unsigned long long)kLines,
	       (unsigned long long)kSets, (unsigned long long)kWays, (unsigned long long)over, (unsigned long long)kLookups);

	const u64 mask = kElems - 1;
	const u64 st = reinterpret_cast<u64>(stats);
	unsigned char *d8 = reinterpret_cast<unsigned char *>(data);
	struct variant {
		const char *name;
		int grid;
		std::vector<double> rates;
	};
	std::vector<variant> vs = {
	    {"plain", grid_for(k_plain), {}},
	    {"record", grid_for(k_record<true>), {}},
	    {"record-nostats", grid_for(k_record<false>), {}},
	    {"word", grid_for(k_word<true, false>), {}},
	    {"word-nostats", grid_for(k_word<false, false>), {}},
	    {"word-clockrec", grid_for(k_word<true, true>), {}},
	    {"word-stats32", grid_for(k_word<true, false, 32>), {}},
	    {"word-statslanes", grid_for(k_word<true, false, 0>), {}},
	};
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	const int rounds = 7;
	for (int r = 0; r < rounds + 1; r++) {
		const u64 seed = 0x1000 + (r % 3) * 0x9e3779b9ull;
		u64 want = 0;
		for (size_t k = 0; k < vs.size(); k++) {
			CK(cudaMemset(out, 0, 8));
			const int g = vs[k].grid;
			CK(cudaEventRecord(e0));
			switch (k) {
				case 0: k_plain<<<g, 256>>>(plain, mask, kLookups, seed, out); break;
				case 1: k_record<true><<<g, 256>>>(tags, recs, d8, st, mask, kLookups, seed, out); break;
				case 2: k_record<false><<<g, 256>>>(tags, recs, d8, st, mask, kLookups, seed, out); break;
				case 3: k_word<true, false><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 4: k_word<false, false><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 5: k_word<true, true><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 6: k_word<true, false, 32><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 7: k_word<true, false, 0><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
			}
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			CK(cudaGetLastError());
			float ms = 0;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			u64 got = 0;
			CK(cudaMemcpy(&got, out, 8, cudaMemcpyDeviceToHost));
			if (k == 0) want = got;
			if (got != want) {
				printf("%s: sum %llx, plain %llx\n", vs[k].name, (unsigned long long)got, (unsigned long long)want);
				return 1;
			}
			if (r > 0) vs[k].rates.push_back(kLookups / (ms * 1e-3) / 1e9);
		}
	}
	u64 miss = 0;
	CK(cudaMemcpyFromSymbol(&miss, misses_seen, 8));
	printf("misses seen: %llu (every sum checked against plain)\n", (unsigned long long)miss);
	double plainMed = 0;
	for (auto &v : vs) {
		std::vector<double> s = v.rates;
		std::sort(s.begin(), s.end());
		const double med = s[s.size() / 2];
		if (plainMed == 0) plainMed = med;
		printf("%-17s grid %5d  median %6.2f G lookups/s (%.3f of plain)  range %.2f-%.2f\n", v.name, v.grid, med, med / plainMed, s.front(),
		       s.back());
	}
	return 0;
}
