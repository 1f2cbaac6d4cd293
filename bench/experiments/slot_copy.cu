// slot_copy asks what the fill path's way of reading staging reaches:
// warps each copying 4 KiB slots of a pinned ring (copy_from_host: eight
// 16-byte relaxed.sys loads in flight per lane, stores to device memory),
// against a grid-stride stream of loads over the same ring, by ring size
// (64 MiB: the engine's queue staging at 4 KiB lines; 128 MiB: with the
// read-ahead pairs' as much again; 1 GiB: far past the host's L3) and with
// 0 or 8 host threads copying random 4 KiB pieces of a 4 GiB source into
// the ring meanwhile, as the Target does. Patterns:
//   stream     grid-stride, four loads in flight a thread (1056x256);
//   rand/seq   each warp copies pseudo-random slots / slots w, w+W, ...;
//   rand2      as rand, two slots' loads in flight together;
//   loads      rand with volatile or .cv loads instead of relaxed.sys;
//   teams      T consecutive warps read a region of T*J*512 bytes
//              together, warp t at t*512 + j*T*512 (J loads in flight).
// Each launch moves 2 GiB; GB/s are medians of five launches (CUDA
// events) of bytes actually read.
//
// It was written to check staging_llc_pipeline.cu's finding that loads
// read an L3-resident ring at 56.4 GB/s: that program's reader skipped
// the last 9 % of such rings and counted them anyway.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o slot_copy slot_copy.cu &&
// ./slot_copy. Results: bench/results/logs/staging-slot-reads-H200-20261125.txt.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <cuda_runtime.h>
#define CK(x)                                                                                                  \
	do {                                                                                                       \
		cudaError_t e = (x);                                                                                   \
		if (e != cudaSuccess) {                                                                                \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));                 \
			exit(1);                                                                                           \
		}                                                                                                      \
	} while (0)
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ u64 mix(u64 x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

template <int LD>
__device__ __forceinline__ uint4 ldk(const uint4 *p) {
	uint4 v;
	if (LD == 0) {
		asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
	} else if (LD == 1) {
		asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
	} else {
		asm volatile("ld.global.cv.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
	}
	return v;
}

// copy_var: warp w copies `per` pseudo-random slots into its own 8 KiB of
// dst with loads of kind LD (0 relaxed.sys, 1 volatile, 2 .cv); with IL,
// eight slots at a time, instruction j loading from slot j.
template <int LD, bool IL>
__global__ void copy_var(const uint4 *ring, u64 slots, uint4 *dst, u32 per) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	uint4 *out = dst + w * 256 * 2;
	if constexpr (IL) {
		for (u32 k = 0; k + 7 < per; k += 8) {
			const uint4 *s[8];
#pragma unroll
			for (int j = 0; j < 8; j++) s[j] = ring + (mix(w * per + k + j) % slots) * 256;
			for (int row = 0; row < 8; row++) {
				uint4 v[8];
#pragma unroll
				for (int j = 0; j < 8; j++) v[j] = ldk<LD>(s[j] + row * 32 + lane);
#pragma unroll
				for (int j = 0; j < 8; j++) __stcg(out + ((j * 8 + row) * 32 + lane) % 512, v[j]);
			}
		}
	} else {
		for (u32 k = 0; k < per; k++) {
			const uint4 *src = ring + (mix(w * per + k) % slots) * 256;
			uint4 v[8];
#pragma unroll
			for (int j = 0; j < 8; j++) v[j] = ldk<LD>(src + lane + 32 * j);
#pragma unroll
			for (int j = 0; j < 8; j++) __stcg(out + lane + 32 * j, v[j]);
		}
	}
}

// teams: T consecutive warps (of one block when T <= 8) form a team that at
// each step reads a region of T*J*512 bytes (a random one when rnd, else
// the next in order): warp t loads 512 bytes at t*512 + j*T*512 for j < J,
// all J loads in flight, then stores them to device memory.
template <int J>
__global__ void teams(const uint4 *ring, u64 regions, u32 T, u32 steps, bool rnd, uint4 *dst) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	const u64 W = (u64)gridDim.x * blockDim.x / 32;
	const u64 team = w / T, t = w % T, nteams = W / T;
	uint4 *out = dst + w * 256 * 2;
	for (u32 k = 0; k < steps; k++) {
		const u64 r = rnd ? mix(team * steps + k) % regions : (team + k * nteams) % regions;
		const uint4 *base = ring + r * (u64)T * J * 32 + t * 32 + lane;
		uint4 v[J];
#pragma unroll
		for (int j = 0; j < J; j++) v[j] = ldk<0>(base + (u64)j * T * 32);
#pragma unroll
		for (int j = 0; j < J; j++) __stcg(out + j * 32 + lane, v[j]);
	}
}

// rd_stream reads the whole ring reps times, grid-stride, four volatile
// loads in flight a thread (staging_llc_pipeline.cu's reader with the rest
// of each pass read too). Volatile: relaxed.sys loads whose values only
// feed a checksum ran at half the rate, an artifact of this loop.
__global__ void rd_stream(const uint4 *__restrict__ src, u64 n16, int reps, u64 *sum) {
	const u64 stride = (u64)gridDim.x * blockDim.x;
	u32 a = 0;
	for (int r = 0; r < reps; r++) {
		u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
		for (; i + 3 * stride < n16; i += 4 * stride) {
			uint4 v[4];
#pragma unroll
			for (int j = 0; j < 4; j++) v[j] = ldk<1>(src + i + j * stride);
#pragma unroll
			for (int j = 0; j < 4; j++) a ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
		}
		for (; i < n16; i += stride) {
			const uint4 v = ldk<1>(src + i);
			a ^= v.x ^ v.y ^ v.z ^ v.w;
		}
	}
	if (a == 0x12345) atomicAdd(sum, 1);
}

// copy_slots: warp w copies `per` slots of 4 KiB (256 16-byte chunks, eight
// loads per lane in flight) into its own 4 KiB of dst. mode 0: random
// slots; 1: slots w + k*W; 2: random, two slots in flight together.
__global__ void copy_slots(const uint4 *ring, u64 slots, uint4 *dst, u32 per, int mode) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	const u64 W = (u64)gridDim.x * blockDim.x / 32;
	uint4 *out = dst + w * 256 * 2;
	if (mode == 2) {
		for (u32 k = 0; k + 1 < per; k += 2) {
			const uint4 *s0 = ring + (mix(w * per + k) % slots) * 256;
			const uint4 *s1 = ring + (mix(w * per + k + 1) % slots) * 256;
			uint4 a[8], b[8];
#pragma unroll
			for (int j = 0; j < 8; j++) {
				a[j] = ldk<0>(s0 + lane + 32 * j);
				b[j] = ldk<0>(s1 + lane + 32 * j);
			}
#pragma unroll
			for (int j = 0; j < 8; j++) {
				__stcg(out + lane + 32 * j, a[j]);
				__stcg(out + 256 + lane + 32 * j, b[j]);
			}
		}
		return;
	}
	for (u32 k = 0; k < per; k++) {
		const u64 s = mode == 0 ? mix(w * per + k) % slots : (w + (u64)k * W) % slots;
		const uint4 *src = ring + s * 256;
		uint4 v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = ldk<0>(src + lane + 32 * j);
#pragma unroll
		for (int j = 0; j < 8; j++) __stcg(out + lane + 32 * j, v[j]);
	}
}

int main() {
	CK(cudaSetDevice(0));
	const size_t SRC = (size_t)4 << 30, TOTAL = (size_t)2 << 30;
	char *src = (char *)aligned_alloc(4096, SRC);
	memset(src, 2, SRC);
	const int maxWarps = 16896;
	uint4 *d;
	CK(cudaMalloc(&d, (size_t)maxWarps * 8192));
	u64 *sum;
	CK(cudaMalloc(&sum, 8));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	auto time5 = [&](auto launch) {
		std::vector<float> ts;
		for (int r = 0; r < 5; r++) {
			CK(cudaEventRecord(e0));
			launch();
			CK(cudaGetLastError());
			CK(cudaEventRecord(e1));
			CK(cudaEventSynchronize(e1));
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			ts.push_back(ms);
		}
		std::sort(ts.begin(), ts.end());
		return ts[2];
	};
	for (size_t ring : {(size_t)64 << 20, (size_t)128 << 20, (size_t)1 << 30}) {
		char *h;
		CK(cudaHostAlloc(&h, ring, cudaHostAllocMapped));
		memset(h, 1, ring);
		char *hd;
		CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
		const uint4 *r4 = (const uint4 *)hd;
		const u64 slots = ring / 4096;
		for (int threads : {0, 8}) {
			std::atomic<bool> stop{false}, go{false};
			std::atomic<u64> copied{0};
			std::vector<std::thread> ws;
			for (int t = 0; t < threads; t++)
				ws.emplace_back([&, t] {
					u64 x = 88172645463325252ull * (t + 1), n = 0;
					size_t per = slots / threads, lo = t * per;
					while (!go.load()) {
					}
					while (!stop.load(std::memory_order_relaxed)) {
						for (int k = 0; k < 64; k++) {
							x ^= x << 13;
							x ^= x >> 7;
							x ^= x << 17;
							memcpy(h + (lo + (n + k) % per) * 4096, src + (x % (SRC / 4096)) * 4096, 4096);
						}
						n += 64;
					}
					copied += n;
				});
			go = true;
			std::this_thread::sleep_for(std::chrono::milliseconds(50));
			auto t0 = std::chrono::steady_clock::now();
			auto report = [&](const char *name, int warps, double bytes, float ms) {
				printf("ring %5zu MiB writers %d: %-24s %5d warps %6.2f GB/s\n", ring >> 20, threads, name, warps, bytes / (ms * 1e6));
			};
			const int reps = (int)(TOTAL / ring);
			report("stream", 8448, (double)reps * ring, time5([&] { rd_stream<<<1056, 256>>>(r4, ring / 16, reps, sum); }));
			const char *names[] = {"rand", "seq", "rand2"};
			for (int mode = 0; mode < 3; mode++) {
				for (int warps : {528, 2112, 8448, 16896}) {
					u32 per = (u32)(TOTAL / 4096 / warps) & ~1u;
					report(names[mode], warps, (double)per * warps * 4096,
					       time5([&] { copy_slots<<<warps / 4, 128>>>(r4, slots, d, per, mode); }));
				}
			}
#define LOADS_(LD, IL, name)                                                                                     \
	for (int warps : {4224, 16896}) {                                                                           \
		u32 per = (u32)(TOTAL / 4096 / warps) & ~7u;                                                            \
		report(name, warps, (double)per * warps * 4096,                                                          \
		       time5([&] { copy_var<LD, IL><<<warps / 4, 128>>>(r4, slots, d, per); }));                        \
	}
			LOADS_(1, false, "rand volatile")
			LOADS_(2, false, "rand .cv")
			LOADS_(0, true, "rand 8 slots at once")
#define TEAMS_(J)                                                                                                \
	{                                                                                                           \
		const int warps = 4224;                                                                                 \
		const u64 regions = ring / ((u64)T * J * 512);                                                          \
		const u32 steps = (u32)(TOTAL / ((u64)warps * J * 512));                                                \
		char name[64];                                                                                          \
		snprintf(name, sizeof name, "teams %s T %u J %d", rnd ? "random" : "seq", T, J);                        \
		report(name, warps, (double)steps * warps * J * 512,                                                    \
		       time5([&] { teams<J><<<warps / 8, 256>>>(r4, regions, T, steps, rnd, d); }));                    \
	}
			for (int rnd = 1; rnd >= 0; rnd--) {
				for (u32 T : {1u, 8u, 256u, 4224u}) {
					TEAMS_(4)
					TEAMS_(8)
				}
			}
			double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
			stop = true;
			for (auto &w : ws) w.join();
			if (threads) printf("ring %5zu MiB writers %d: host 4 KiB copies %.1f GB/s\n", ring >> 20, threads, copied * 4096.0 / sec / 1e9);
		}
		CK(cudaFreeHost(h));
	}
	return 0;
}
