// pinned_reads.cuh: what wc_pinned.cu and huge_pinned.cu share (and
// landing_ring.cu and poll_vs_loads.cu take their checks and loads from): the GPU
// loads of pinned host memory they time (a lanes reduction; warps copying
// pseudo-random 4 KiB slots with the fill route's own loads), the host's
// fill of a buffer with a pattern, and the sums a checked pass must give.
// Standalone experiments only; nothing in the build includes it.
#ifndef BAM_EXPERIMENTS_PINNED_READS_CUH
#define BAM_EXPERIMENTS_PINNED_READS_CUH

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#include "bam/detail/sync.cuh"

#define CK(x)                                                                              \
	do {                                                                                   \
		cudaError_t e = (x);                                                               \
		if (e != cudaSuccess) {                                                            \
			printf("ERR %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e));             \
			exit(1);                                                                       \
		}                                                                                  \
	} while (0)
typedef unsigned long long u64;
typedef unsigned int u32;

using bam::detail::ld_host16;  // the fill route's loads of staging

__device__ __forceinline__ u64 mix(u64 x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

// lanes_sum: every 16 bytes of src read once, summed as 64-bit words.
__global__ void lanes_sum(const ulonglong2 *src, u64 n16, u64 *sum) {
	const u64 stride = (u64)gridDim.x * blockDim.x;
	u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	u64 a = 0;
	for (; i + 3 * stride < n16; i += 4 * stride) {
		ulonglong2 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
		a += v0.x + v0.y + v1.x + v1.y + v2.x + v2.y + v3.x + v3.y;
	}
	for (; i < n16; i += stride) a += src[i].x + src[i].y;
	atomicAdd(sum, a);
}

// copy_slots: warp w copies `per` pseudo-random 4 KiB slots of ring into
// its own 4 KiB of dst and adds the slot's first word of each lane's
// 16 bytes to sum (so the pass can be checked).
__global__ void copy_slots(const uint4 *ring, u64 slots, uint4 *dst, u32 per, u64 *sum) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	uint4 *out = dst + w * 256;
	u64 a = 0;
	for (u32 k = 0; k < per; k++) {
		const uint4 *src = ring + (mix(w * per + k) % slots) * 256;
		uint4 v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = ld_host16(src + lane + 32 * j);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			out[lane + 32 * j] = v[j];
			a += v[j].x;
		}
	}
	atomicAdd(sum, a);
}

static const int grid_slots = 4224, block_slots = 128;  // 16896 warps, twice what 132 SMs keep resident

static void fill(char *p, size_t n, u64 seed, int threads) {
	std::vector<std::thread> ts;
	const size_t words = n / 8, per = (words + threads - 1) / threads;
	for (int t = 0; t < threads; t++) {
		ts.emplace_back([=] {
			std::vector<u64> tmp(512);
			for (size_t i = t * per; i < std::min(words, (t + 1) * per); i += 512) {
				const size_t m = std::min<size_t>(512, std::min(words, (t + 1) * per) - i);
				for (size_t j = 0; j < m; j++) tmp[j] = (i + j) * 0x9e3779b97f4a7c15ull + seed;
				memcpy(p + i * 8, tmp.data(), m * 8);
			}
		});
	}
	for (auto &t : ts) t.join();
}

static u64 expect_sum(size_t n, u64 seed) {
	u64 s = 0;
	for (size_t i = 0; i < n / 8; i++) s += i * 0x9e3779b97f4a7c15ull + seed;
	return s;
}

// Sum the first u32 of every 16 bytes of the slots copy_slots picks.
static u64 expect_slots(size_t slots, u32 per, u64 warps, u64 seed) {
	std::vector<u64> slot_sum(slots);
	for (size_t s = 0; s < slots; s++) {
		u64 a = 0;
		for (size_t q = 0; q < 256; q++) {
			const size_t word = s * 512 + q * 2;  // 8-byte word index of the 16-byte unit
			const u64 v = word * 0x9e3779b97f4a7c15ull + seed;
			a += (u32)v;
		}
		slot_sum[s] = a;
	}
	auto mixh = [](u64 x) {
		x ^= x >> 33;
		x *= 0xff51afd7ed558ccdull;
		x ^= x >> 33;
		x *= 0xc4ceb9fe1a85ec53ull;
		return x ^ (x >> 33);
	};
	u64 s = 0;
	for (u64 w = 0; w < warps; w++)
		for (u32 k = 0; k < per; k++) s += slot_sum[mixh(w * per + k) % slots];
	return s;
}

#endif  // BAM_EXPERIMENTS_PINNED_READS_CUH
