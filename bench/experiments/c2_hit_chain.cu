// c2_hit_chain measures what C2's all-hit lookups through bam::array would
// gain if a way's generation lived in its tag word: a hit would then load
// the set's tag words, the element and the tag word again (three dependent
// loads) instead of the tags, the way record, the element, the tag and the
// generation (five).
//
// It builds an all-hit cache by hand (4 KiB lines, 8 ways, a cache twice
// the 256 MiB array, as in C2) and times, in interleaved rounds, random
// 8-byte lookups:
//   plain         a plain device array (C2's baseline);
//   current       cache::peek_begin, load_line_acquire, cache::peek_end,
//                 count_groups and the clock bit, as bam::array::read does;
//   current-nostats   the same without count_groups;
//   packed        generation in the tag word: find the way by the tag bits,
//                 load the clock bit (relaxed, beside the element), the
//                 element (acquire) and the tag word again (acquire);
//   packed-nostats    the same without count_groups;
//   packed-noclock    packed without the clock bit's load.
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
constexpr u64 kTagBits = 40;
constexpr u64 kTagMask = (1ull << kTagBits) - 1;

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
			packed[way] = (2ull << kTagBits) | l;
			u32 *r = reinterpret_cast<u32 *>(recs + way * C::WayStride);
			r[0] = 1u << C::StateValidBit;
			r[1] = 1;  // clock bit set: hits store nothing
			r[2] = 0;
			r[3] = 2;  // generation
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

template <bool Stats>
__global__ void __launch_bounds__(256, 4) k_current(const u64 *tags, unsigned char *recs, unsigned char *data, u64 stats, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		const u64 e = bam::mix64(seed + i) & mask;
		const u64 line = e >> (kLineShift - 3);
		const u64 off = (e & ((1ull << (kLineShift - 3)) - 1)) << 3;
		const bam::cache::peek p = bam::cache::peek_begin(tags, recs, kSets, kWays, line);
		u64 v = 0;
		bool hit = false;
		if (p.ok()) {
			v = D::load_line_acquire<u64>(data + (p.way << kLineShift) + off);
			hit = bam::cache::peek_end(tags, recs, p, line);
		}
		if (Stats) {
			const u32 active = __activemask();
			bam::count_groups(stats, active, bam::coalesce::by(active, line));
		}
		if (hit && p.clock == 0) bam::cache::mark_hit(recs, p.way);
		if (!hit) atomicAdd(reinterpret_cast<unsigned long long *>(&misses_seen), 1ull);
		s += v;
	}
	add_sum(out, s);
}

// find_packed is cache::find_way over tag words that carry a generation in
// their bits above kTagBits; it returns the way and its word.
__device__ __forceinline__ u64 find_packed(const u64 *words, u64 base, u64 tag, u64 *word) {
	u64 t[8];
#pragma unroll
	for (u32 j = 0; j < 8; j += 2) D::ld_relaxed_gpu_v2(words + base + j, &t[j], &t[j + 1]);
	u64 way = ~0ull;
#pragma unroll
	for (u32 j = 0; j < 8; j++) {
		if ((t[j] & kTagMask) == tag) {
			way = base + j;
			*word = t[j];
		}
	}
	return way;
}

template <bool Stats, bool Clock>
__global__ void __launch_bounds__(256, 4) k_packed(const u64 *words, unsigned char *recs, unsigned char *data, u64 stats, u64 mask, u64 count, u64 seed, u64 *out) {
	u64 s = 0;
	for (u64 i = bam::global_thread_id(); i < count; i += bam::grid_threads()) {
		const u64 e = bam::mix64(seed + i) & mask;
		const u64 line = e >> (kLineShift - 3);
		const u64 off = (e & ((1ull << (kLineShift - 3)) - 1)) << 3;
		u64 word = 0;
		const u64 way = find_packed(words, bam::cache::set_of(line, kSets) * kWays, line, &word);
		u64 v = 0;
		bool hit = false;
		u32 clock = 1;
		if (way != ~0ull && ((word >> kTagBits) & 1) == 0) {
			if (Clock) clock = D::ld_relaxed_gpu(reinterpret_cast<const u32 *>(recs + way * C::WayStride + C::WayClockOffset));
			v = D::load_line_acquire<u64>(data + (way << kLineShift) + off);
			hit = D::ld_acquire_gpu(words + way) == word;
		}
		if (Stats) {
			const u32 active = __activemask();
			bam::count_groups(stats, active, bam::coalesce::by(active, line));
		}
		if (hit && clock == 0) bam::cache::mark_hit(recs, way);
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
	    {"current", grid_for(k_current<true>), {}},
	    {"current-nostats", grid_for(k_current<false>), {}},
	    {"packed", grid_for(k_packed<true, true>), {}},
	    {"packed-nostats", grid_for(k_packed<false, true>), {}},
	    {"packed-noclock", grid_for(k_packed<true, false>), {}},
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
				case 1: k_current<true><<<g, 256>>>(tags, recs, d8, st, mask, kLookups, seed, out); break;
				case 2: k_current<false><<<g, 256>>>(tags, recs, d8, st, mask, kLookups, seed, out); break;
				case 3: k_packed<true, true><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 4: k_packed<false, true><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
				case 5: k_packed<true, false><<<g, 256>>>(packed, recs, d8, st, mask, kLookups, seed, out); break;
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
		printf("%-16s grid %5d  median %6.2f G lookups/s (%.3f of plain)  range %.2f-%.2f\n", v.name, v.grid, med, med / plainMed, s.front(),
		       s.back());
	}
	return 0;
}
