// wc_pinned asks whether write-combined pinned host memory
// (cudaHostAllocWriteCombined) lifts the cap on GPU loads of host memory.
// The bounce fill route's loads of staging slots stop at about 51.3 GB/s,
// 0.93 of the copy engines' 55.4 (zero_copy_tma.cu, pcie_paths.cu), on
// memory allocated cacheable (PORTABLE | DEVICEMAP). The CUDA programming
// guide says write-combined memory is not snooped during PCIe transfers;
// if the snoop is what caps the loads, staging slots and CQ rings in
// write-combined memory would move more. The host's side changes too: its
// stores into such memory bypass its caches, and its loads from it are
// uncached (a Write command's data is read by the host from staging).
//
// For each kind of memory (cacheable, write-combined), same process:
//   - copy engine: cudaMemcpyAsync HtoD of 4 x 128 MiB;
//   - lanes: a reduction over 1 GiB with 16-byte loads (4 in flight);
//   - slots: warps copying pseudo-random 4 KiB slots of a 64 MiB ring into
//     device memory with ld.relaxed.sys 16-byte loads, 8 in flight a lane
//     (the fill route's loads), 2 GiB a pass;
//   - host stores: 16 threads copying 4 KiB chunks from ordinary memory
//     into the buffer (the Target's Read), and host loads: the reverse
//     (the Target's Write);
//   - overlap: the slots kernel running while 16 host threads keep
//     rewriting the ring (both at once, as under load).
// Every GPU pass is checked against the host's sum; the buffer is then
// rewritten by the host and checked again (no stale lines).
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o wc wc_pinned.cu -lpthread
// && ./wc. Results: bench/results/logs/wc-pinned-*.
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
using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

__device__ __forceinline__ uint4 ld_host16(const uint4 *p) {
	uint4 v;
	asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p)
	             : "memory");
	return v;
}

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

struct Buf {
	const char *name;
	char *p = nullptr;
	unsigned flags;
};

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

static double host_copy(char *dst, const char *src, size_t n, int threads, int reps) {
	const size_t chunk = 4096, chunks = n / chunk;
	auto t0 = clk::now();
	std::vector<std::thread> ts;
	for (int t = 0; t < threads; t++) {
		ts.emplace_back([=] {
			for (int r = 0; r < reps; r++)
				for (size_t c = t; c < chunks; c += threads) memcpy(dst + c * chunk, src + ((c * 7919) % chunks) * chunk, chunk);
		});
	}
	for (auto &t : ts) t.join();
	return (double)n * reps / secs(t0, clk::now()) / 1e9;
}

int main() {
	const size_t big = 1ull << 30, ring = 64ull << 20;
	const u64 ring_slots = ring / 4096;
	int dev = 0;
	CK(cudaSetDevice(dev));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, dev));
	printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
	char *dbuf;
	CK(cudaMalloc(&dbuf, big));
	u64 *dsum;
	CK(cudaMalloc(&dsum, 8));
	char *plain = (char *)aligned_alloc(4096, big);
	fill(plain, big, 7, 16);
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	Buf bufs[2] = {{"cacheable     ", nullptr, cudaHostAllocPortable | cudaHostAllocMapped},
	               {"write-combined", nullptr, cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined}};
	for (auto &b : bufs) CK(cudaHostAlloc((void **)&b.p, big, b.flags));

	const u32 per = 16;
	const u64 warps = (u64)grid_slots * block_slots / 32;
	const double slot_bytes = (double)warps * per * 4096;
	for (int round = 0; round < 2; round++) {
		for (auto &b : bufs) {
			const u64 seed = 11 + round * 2 + (&b - bufs);
			auto t0 = clk::now();
			fill(b.p, big, seed, 16);
			const double fill_s = secs(t0, clk::now());
			const u64 want = expect_sum(big, seed);
			void *dp;
			CK(cudaHostGetDevicePointer(&dp, b.p, 0));
			// copy engine
			std::vector<float> ce, ln, sl;
			for (int r = 0; r < 5; r++) {
				CK(cudaEventRecord(e0, s));
				for (int k = 0; k < 4; k++) CK(cudaMemcpyAsync(dbuf, b.p + k * (128ull << 20), 128ull << 20, cudaMemcpyHostToDevice, s));
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				ce.push_back(4.0 * (128 << 20) / (ms * 1e6));
			}
			for (int r = 0; r < 5; r++) {
				CK(cudaMemsetAsync(dsum, 0, 8, s));
				CK(cudaEventRecord(e0, s));
				lanes_sum<<<prop.multiProcessorCount * 4, 512, 0, s>>>((const ulonglong2 *)dp, big / 16, dsum);
				CK(cudaGetLastError());
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				u64 got;
				CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
				if (got != want) {
					printf("%s lanes sum WRONG: %llu want %llu\n", b.name, got, want);
					return 1;
				}
				ln.push_back(big / (ms * 1e6));
			}
			const u64 want_slots = expect_slots(ring_slots, per, warps, seed);
			for (int r = 0; r < 5; r++) {
				CK(cudaMemsetAsync(dsum, 0, 8, s));
				CK(cudaEventRecord(e0, s));
				copy_slots<<<grid_slots, block_slots, 0, s>>>((const uint4 *)dp, ring_slots, (uint4 *)dbuf, per, dsum);
				CK(cudaGetLastError());
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				float ms;
				CK(cudaEventElapsedTime(&ms, e0, e1));
				u64 got;
				CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
				if (got != want_slots) {
					printf("%s slots sum WRONG: %llu want %llu\n", b.name, got, want_slots);
					return 1;
				}
				sl.push_back(slot_bytes / (ms * 1e6));
			}
			std::sort(ce.begin(), ce.end());
			std::sort(ln.begin(), ln.end());
			std::sort(sl.begin(), sl.end());
			const double hs = host_copy(b.p, plain, ring * 4, 16, 8);
			const double hl = host_copy(plain, b.p, ring, 16, 2);
			printf("round %d %s: copy engine %.2f GB/s (min %.2f max %.2f); lanes sum %.2f (%.2f-%.2f); 4 KiB slots %.2f (%.2f-%.2f); "
			       "host stores 16 thr %.1f GB/s, host loads %.2f GB/s, fill 1 GiB %.2f s; sums checked\n",
			       round, b.name, ce[2], ce[0], ce[4], ln[2], ln[0], ln[4], sl[2], sl[0], sl[4], hs, hl, fill_s);
			fflush(stdout);
		}
	}
	// Overlap: host threads rewrite the ring while the slots kernel reads it.
	for (auto &b : bufs) {
		void *dp;
		CK(cudaHostGetDevicePointer(&dp, b.p, 0));
		std::atomic<bool> stop{false};
		std::atomic<u64> bytes{0};
		std::vector<std::thread> ts;
		for (int t = 0; t < 16; t++) {
			ts.emplace_back([&, t] {
				u64 n = 0;
				for (u64 c = t; !stop.load(std::memory_order_relaxed); c += 16) {
					memcpy(b.p + (c % ring_slots) * 4096, plain + ((c * 7919) % (big / 4096)) * 4096, 4096);
					n += 4096;
				}
				bytes += n;
			});
		}
		std::vector<float> sl;
		auto t0 = clk::now();
		for (int r = 0; r < 5; r++) {
			CK(cudaEventRecord(e0, s));
			copy_slots<<<grid_slots, block_slots, 0, s>>>((const uint4 *)dp, ring_slots, (uint4 *)dbuf, per, dsum);
			CK(cudaGetLastError());
			CK(cudaEventRecord(e1, s));
			CK(cudaEventSynchronize(e1));
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			sl.push_back(slot_bytes / (ms * 1e6));
		}
		stop = true;
		for (auto &t : ts) t.join();
		const double el = secs(t0, clk::now());
		std::sort(sl.begin(), sl.end());
		printf("overlap %s: 4 KiB slots %.2f GB/s (%.2f-%.2f) while 16 host threads stored %.1f GB/s into the ring\n", b.name, sl[2], sl[0],
		       sl[4], bytes.load() / el / 1e9);
		fflush(stdout);
	}
	return 0;
}
