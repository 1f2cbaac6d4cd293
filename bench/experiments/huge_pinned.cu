// huge_pinned asks whether the page size behind pinned host memory caps
// GPU loads of it. GPU loads of pinned memory stop at about 51.3 GB/s, 0.93
// of the copy engines' 55.4 (zero_copy_tma.cu, pcie_paths.cu, wc_pinned.cu),
// whatever issues them; write-combined memory changed nothing. One cause
// left to rule out is address translation: the GPU reaches host memory
// through its own page tables, and memory made of 4 KiB host pages may be
// mapped with 4 KiB GPU pages, one translation per 4 KiB line. Memory
// backed by transparent 2 MiB pages and registered with cudaHostRegister
// may be mapped with larger ones.
//
// Kinds of 1 GiB buffers, same process: cudaHostAlloc (the engine's
// staging and rings today); anonymous memory with MADV_NOHUGEPAGE then
// registered; anonymous memory aligned to 2 MiB with MADV_HUGEPAGE then
// registered (AnonHugePages reported before registering). For each:
// the copy engine (4 x 128 MiB), a lanes reduction over 1 GiB, and warps
// copying pseudo-random 4 KiB slots of the whole 1 GiB into device memory
// with ld.relaxed.sys loads (the fill route's loads), each checked.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o hp huge_pinned.cu && ./hp.
// Results: bench/results/logs/huge-pinned-*.
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


#include <sys/mman.h>

static long anon_huge_kb() {
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f) return -1;
	char line[256];
	long kb = -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
	fclose(f);
	return kb;
}

int main() {
	const size_t big = 1ull << 30;
	const u64 slots = big / 4096;
	CK(cudaSetDevice(0));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
	{
		FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
		char b[256] = {0};
		if (f) { if (!fgets(b, sizeof b, f)) b[0] = 0; fclose(f); }
		printf("transparent_hugepage/enabled: %s", b[0] ? b : "(unreadable)\n");
	}
	char *dbuf;
	CK(cudaMalloc(&dbuf, big));
	u64 *dsum;
	CK(cudaMalloc(&dsum, 8));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	struct Kind { const char *name; char *p; };
	Kind kinds[3];
	kinds[0].name = "cudaHostAlloc         ";
	CK(cudaHostAlloc((void **)&kinds[0].p, big, cudaHostAllocPortable | cudaHostAllocMapped));
	for (int k = 1; k < 3; k++) {
		const bool huge = k == 2;
		kinds[k].name = huge ? "mmap 2M THP, registered" : "mmap 4K, registered   ";
		const long before = anon_huge_kb();
		char *raw = (char *)mmap(nullptr, big + (2 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (raw == MAP_FAILED) { perror("mmap"); return 1; }
		char *p = (char *)(((uintptr_t)raw + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
		if (madvise(p, big, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) perror("madvise");
		memset(p, 0, big);
		printf("%s: AnonHugePages +%ld MiB after touching\n", kinds[k].name, (anon_huge_kb() - before) / 1024);
		CK(cudaHostRegister(p, big, cudaHostRegisterPortable | cudaHostRegisterMapped));
		kinds[k].p = p;
	}
	const u32 per = 16;
	const u64 warps = (u64)grid_slots * block_slots / 32;
	const double slot_bytes = (double)warps * per * 4096;
	for (int round = 0; round < 2; round++) {
		for (int k = 0; k < 3; k++) {
			Kind &b = kinds[k];
			const u64 seed = 101 + round * 3 + k;
			fill(b.p, big, seed, 16);
			const u64 want = expect_sum(big, seed), want_slots = expect_slots(slots, per, warps, seed);
			void *dp;
			CK(cudaHostGetDevicePointer(&dp, b.p, 0));
			std::vector<float> ce, ln, sl;
			for (int r = 0; r < 5; r++) {
				float ms;
				CK(cudaEventRecord(e0, s));
				for (int c = 0; c < 4; c++) CK(cudaMemcpyAsync(dbuf, b.p + c * (128ull << 20), 128ull << 20, cudaMemcpyHostToDevice, s));
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms, e0, e1));
				ce.push_back(4.0 * (128 << 20) / (ms * 1e6));

				u64 got;
				CK(cudaMemsetAsync(dsum, 0, 8, s));
				CK(cudaEventRecord(e0, s));
				lanes_sum<<<prop.multiProcessorCount * 4, 512, 0, s>>>((const ulonglong2 *)dp, big / 16, dsum);
				CK(cudaGetLastError());
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms, e0, e1));
				CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
				if (got != want) { printf("%s lanes sum WRONG\n", b.name); return 1; }
				ln.push_back(big / (ms * 1e6));

				CK(cudaMemsetAsync(dsum, 0, 8, s));
				CK(cudaEventRecord(e0, s));
				copy_slots<<<grid_slots, block_slots, 0, s>>>((const uint4 *)dp, slots, (uint4 *)dbuf, per, dsum);
				CK(cudaGetLastError());
				CK(cudaEventRecord(e1, s));
				CK(cudaEventSynchronize(e1));
				CK(cudaEventElapsedTime(&ms, e0, e1));
				CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
				if (got != want_slots) { printf("%s slots sum WRONG\n", b.name); return 1; }
				sl.push_back(slot_bytes / (ms * 1e6));
			}
			std::sort(ce.begin(), ce.end());
			std::sort(ln.begin(), ln.end());
			std::sort(sl.begin(), sl.end());
			printf("round %d %s: copy engine %.2f GB/s (%.2f-%.2f); lanes sum %.2f (%.2f-%.2f); 4 KiB slots of 1 GiB %.2f (%.2f-%.2f); sums checked\n",
			       round, b.name, ce[2], ce[0], ce[4], ln[2], ln[0], ln[4], sl[2], sl[0], sl[4]);
			fflush(stdout);
		}
	}
	return 0;
}
