// staging_llc_pipeline asks what the GPU's reads of pinned staging reach
// when, as in the fill path, host threads are writing that staging at the
// same time: the Target copies random 4 KiB pieces of its namespace (here
// a 4 GiB malloc'ed source) into slots of a pinned ring, and GPU lanes
// (16-byte volatile loads, each pass over the whole ring) or the copy
// engine (the ring copied to device memory) read the ring meanwhile.
// Rings of 16 MiB, 64 MiB (the engine's default staging of 4 KiB lines:
// 64 queue pairs x 256 entries) and 1 GiB; 0, 8, 12 and 16 host threads.
// Each line gives the host threads' copy rate over the measurement and the
// GPU side's median of five 2 GiB passes.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o pipe staging_llc_pipeline.cu
// && ./pipe. Results: bench/results/logs/staging-llc-reads-H200-20261125.txt; with
// the rest loop of rd_ring (added later: the first results miscounted small
// rings), bench/results/logs/staging-slot-reads-H200-20261125.txt.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <thread>
#include <atomic>
#include <chrono>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)
typedef unsigned long long u64;

__global__ void rd_ring(const ulonglong2 *__restrict__ src, u64 n16, int reps, u64 *sum) {
	u64 stride = (u64)gridDim.x * blockDim.x;
	u64 a = 0, b = 0;
	for (int r = 0; r < reps; r++) {
		u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
		for (; i + 3 * stride < n16; i += 4 * stride) {
			ulonglong2 v0, v1, v2, v3;
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v0.x), "=l"(v0.y) : "l"(src + i));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v1.x), "=l"(v1.y) : "l"(src + i + stride));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v2.x), "=l"(v2.y) : "l"(src + i + 2 * stride));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v3.x), "=l"(v3.y) : "l"(src + i + 3 * stride));
			a += v0.x + v1.x + v2.x + v3.x; b += v0.y + v1.y + v2.y + v3.y;
		}
		// The rest of the ring: without this loop a pass read only 91 % of
		// a 16-128 MiB ring (up to 4 x 4.3 MB short) while the rate
		// counted all of it (fixed after the first results; see the log).
		for (; i < n16; i += stride) {
			ulonglong2 v;
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(src + i));
			a += v.x; b += v.y;
		}
	}
	atomicAdd(sum, a + b);
}

int main() {
	CK(cudaSetDevice(0));
	const size_t SRC = (size_t)4 << 30, TOTAL = (size_t)2 << 30;
	char *src = (char *)aligned_alloc(4096, SRC); memset(src, 2, SRC);
	char *d; CK(cudaMalloc(&d, TOTAL));
	u64 *sum; CK(cudaMalloc(&sum, 8));
	cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
	for (size_t ring : {(size_t)16 << 20, (size_t)64 << 20, (size_t)1 << 30}) {
		char *h; CK(cudaHostAlloc(&h, ring, cudaHostAllocMapped)); memset(h, 1, ring);
		char *hd; CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
		int reps = TOTAL / ring;
		for (int threads : {0, 8, 12, 16}) {
			for (int mode = 0; mode < 2; mode++) {
				std::atomic<bool> stop{false}, go{false};
				std::atomic<u64> copied{0};
				std::vector<std::thread> ws;
				for (int t = 0; t < threads; t++) ws.emplace_back([&, t] {
					u64 x = 88172645463325252ull * (t + 1), n = 0;
					size_t slots = ring / 4096, per = slots / threads, lo = t * per;
					while (!go.load()) {}
					while (!stop.load(std::memory_order_relaxed)) {
						for (int k = 0; k < 64; k++) {
							x ^= x << 13; x ^= x >> 7; x ^= x << 17;
							memcpy(h + (lo + (n + k) % per) * 4096, src + (x % (SRC / 4096)) * 4096, 4096);
						}
						n += 64;
					}
					copied += n;
				});
				go = true;
				std::this_thread::sleep_for(std::chrono::milliseconds(100));
				std::vector<float> ts;
				auto t0 = std::chrono::steady_clock::now();
				for (int r = 0; r < 5; r++) {
					CK(cudaEventRecord(e0));
					if (mode == 0) rd_ring<<<1056, 256>>>((const ulonglong2 *)hd, ring / 16, reps, sum);
					else for (int k = 0; k < reps; k++) CK(cudaMemcpyAsync(d + (size_t)k * ring, h, ring, cudaMemcpyHostToDevice));
					CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
					float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms);
				}
				double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
				stop = true;
				for (auto &w : ws) w.join();
				std::sort(ts.begin(), ts.end());
				double host = copied * 4096.0 / (sec + 0.1) / 1e9;
				printf("ring %5zu MiB host threads %2d: host 4 KiB copies %6.1f GB/s while %s %6.2f GB/s\n", ring >> 20, threads, host, mode ? "DMA copies ring " : "GPU loads read ring", TOTAL / (ts[2] * 1e6));
			}
		}
		CK(cudaFreeHost(h));
	}
	return 0;
}
