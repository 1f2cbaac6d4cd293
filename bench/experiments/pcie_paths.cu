// pcie_paths measures, on one machine and in one process, the ways data in
// pinned host memory reaches the GPU, and what GPU reads of host memory do
// to the copy engines:
//   - cudaMemcpyAsync HtoD of 128 MiB, 4 MiB and 512 KiB pieces;
//   - zero-copy reads by the lanes (16-byte loads, a reduction, and a
//     warp-per-chunk copy of 4 or 8 KiB chunks into device memory);
//   - the bulk-copy unit (cp.async.bulk, one lane per block) loading 4-64
//     KiB chunks into shared memory, alone or stored on to device memory;
//   - 4 MiB copy-engine copies while 1 K-64 K GPU threads poll one word
//     of pinned host memory (as CQ pollers would), with and without a
//     1 us pause between polls;
//   - copy-engine copies beside a zero-copy reading kernel.
// The zero-copy and bulk-copy cases repeat zero_copy_tma.cu's question
// over more shapes; the polling and side-by-side cases are new.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o pp pcie_paths.cu && ./pp.
// Results: bench/results/logs/pcie-paths-H200-20261124.txt.
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("ERR %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
typedef unsigned long long u64;

__device__ __forceinline__ uint32_t smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64 *b, uint32_t n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(b)), "r"(n)); }
__device__ __forceinline__ void mbar_expect(u64 *b, uint32_t bytes) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(b)), "r"(bytes) : "memory"); }
__device__ __forceinline__ void tma_load(void *dst, const void *src, uint32_t bytes, u64 *b) {
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem(dst)), "l"(src), "r"(bytes), "r"(smem(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64 *b, uint32_t phase) {
	asm volatile("{\n .reg .pred p;\n W%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W%=;\n}\n" ::"r"(smem(b)), "r"(phase) : "memory");
}
__device__ __forceinline__ void tma_store(void *dst, const void *src, uint32_t bytes) {
	asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem(src)), "r"(bytes) : "memory");
	asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void tma_store_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Reading sum, 16-byte loads, 4 in flight (the repo's kernel).
__global__ void lsu_sum(const ulonglong2 *src, u64 n16, u64 *sum) {
	const u64 stride = (u64)gridDim.x * blockDim.x;
	u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	u64 a = 0;
	for (; i + 3 * stride < n16; i += 4 * stride) {
		ulonglong2 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
		a += v0.x + v1.y + v2.x + v3.y;
	}
	for (; i < n16; i += stride) a += src[i].x;
	atomicAdd(sum, a);
}

// Warp copies chunks of C bytes: 16-byte loads, all of a chunk's loads in flight, then stores.
template <int C>
__global__ void lsu_copy(const ulonglong2 *src, ulonglong2 *dst, u64 chunks, u64 dst_chunks) {
	constexpr int per = C / 512;
	const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
	const u64 w = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const int lane = threadIdx.x & 31;
	for (u64 c = w; c < chunks; c += warps) {
		const ulonglong2 *s = src + c * (C / 16);
		ulonglong2 *d = dst + (c % dst_chunks) * (C / 16);
		ulonglong2 v[per];
#pragma unroll
		for (int j = 0; j < per; j++) v[j] = __ldcv(s + j * 32 + lane);
#pragma unroll
		for (int j = 0; j < per; j++) d[j * 32 + lane] = v[j];
	}
}

// One thread per block runs S stages of C-byte TMA loads from host memory into
// shared memory; with store, each stage goes on to device memory by a TMA store.
template <int C, int S>
__global__ void tma_copy(const unsigned char *src, unsigned char *dst, u64 chunks, u64 dst_chunks, int store, u64 *sum) {
	extern __shared__ __align__(128) unsigned char sm[];
	__shared__ u64 bar[S];
	if (threadIdx.x != 0) return;
	for (int s = 0; s < S; s++) mbar_init(&bar[s], 1);
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	u64 c = blockIdx.x;
	u64 issued[S];
	int n = 0;
	for (int s = 0; s < S; s++) {
		issued[s] = ~0ull;
		if (c < chunks) {
			mbar_expect(&bar[s], C);
			tma_load(sm + s * C, src + c * C, C, &bar[s]);
			issued[s] = c;
			c += gridDim.x;
		}
	}
	uint32_t phase[S];
	for (int s = 0; s < S; s++) phase[s] = 0;
	u64 acc = 0;
	for (;;) {
		bool any = false;
		for (int s = 0; s < S; s++) {
			if (issued[s] == ~0ull) continue;
			any = true;
			mbar_wait(&bar[s], phase[s]);
			phase[s] ^= 1;
			acc += *(volatile u64 *)(sm + s * C);
			if (store) {
				asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
				tma_store(dst + (issued[s] % dst_chunks) * C, sm + s * C, C);
				tma_store_wait_read();
			}
			issued[s] = ~0ull;
			if (c < chunks) {
				mbar_expect(&bar[s], C);
				tma_load(sm + s * C, src + c * C, C, &bar[s]);
				issued[s] = c;
				c += gridDim.x;
			}
			n++;
		}
		if (!any) break;
	}
	if (store) tma_store_wait();
	atomicAdd(sum, acc);
}

// Polls a host word (as CQ polling does) until *stop is set.
__global__ void poller(volatile u64 *host_word, volatile u64 *stop, int sleep_ns, u64 *count) {
	u64 n = 0, x = 0;
	while (*stop == 0) {
		x += *host_word;
		n++;
		if (sleep_ns) __nanosleep(sleep_ns);
	}
	if ((threadIdx.x & 31) == 0) atomicAdd(count, n + (x & 1));
}

static double now_s() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main() {
	const u64 N = 1ull << 30;  // 1 GiB of pinned host memory
	unsigned char *h;
	CK(cudaHostAlloc(&h, N, cudaHostAllocMapped));
	for (u64 i = 0; i < N / 8; i++) ((u64 *)h)[i] = i * 0x9E3779B97F4A7C15ull;
	unsigned char *hd;
	CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
	unsigned char *d;
	const u64 D = 256ull << 20;
	CK(cudaMalloc(&d, D));
	u64 *sum;
	CK(cudaMalloc(&sum, 64));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	cudaStream_t st, st2;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking));
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	auto timeit = [&](const char *name, u64 bytes, auto launch) {
		std::vector<double> r;
		for (int k = 0; k < 7; k++) {
			CK(cudaEventRecord(e0, st));
			launch();
			CK(cudaEventRecord(e1, st));
			CK(cudaEventSynchronize(e1));
			CK(cudaGetLastError());
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			if (k >= 2) r.push_back(bytes / (ms * 1e-3) / 1e9);
		}
		std::sort(r.begin(), r.end());
		printf("%-44s median %6.2f GB/s  (min %.2f max %.2f)\n", name, r[r.size() / 2], r.front(), r.back());
		fflush(stdout);
		return r[r.size() / 2];
	};
	const u64 B = 512ull << 20;  // bytes per timed pass
	double ce = timeit("cudaMemcpyAsync HtoD 512 MiB (4 x 128 MiB)", B, [&] {
		for (int i = 0; i < 4; i++) CK(cudaMemcpyAsync(d, h + i * (128ull << 20), 128ull << 20, cudaMemcpyHostToDevice, st));
	});
	timeit("cudaMemcpyAsync HtoD 4 MiB pieces", B, [&] {
		for (u64 o = 0; o < B; o += 4 << 20) CK(cudaMemcpyAsync(d + (o % D), h + o, 4 << 20, cudaMemcpyHostToDevice, st));
	});
	timeit("cudaMemcpyAsync HtoD 512 KiB pieces", B, [&] {
		for (u64 o = 0; o < B; o += 512 << 10) CK(cudaMemcpyAsync(d + (o % D), h + o, 512 << 10, cudaMemcpyHostToDevice, st));
	});
	for (int blk : {512}) {
		for (int per : {4}) {
			int grid = sms * per * 1024 / blk / 2;
			char nm[96];
			snprintf(nm, sizeof nm, "lsu_sum grid %d x %d", grid, blk);
			timeit(nm, B, [&] { lsu_sum<<<grid, blk, 0, st>>>((const ulonglong2 *)hd, B / 16, sum); });
		}
	}
	for (int wpb : {8}) {
		for (int bps : {2, 4, 8}) {
			int blk = wpb * 32;
			if (blk * bps > 2048) continue;
			int grid = sms * bps;
			char nm[96];
			snprintf(nm, sizeof nm, "lsu_copy 4K grid %d x %d", grid, blk);
			timeit(nm, B, [&] { lsu_copy<4096><<<grid, blk, 0, st>>>((const ulonglong2 *)hd, (ulonglong2 *)d, B / 4096, D / 4096); });
			snprintf(nm, sizeof nm, "lsu_copy 8K grid %d x %d", grid, blk);
			timeit(nm, B, [&] { lsu_copy<8192><<<grid, blk, 0, st>>>((const ulonglong2 *)hd, (ulonglong2 *)d, B / 8192, D / 8192); });
		}
	}
#define TMA(C, S)                                                                                                      \
	do {                                                                                                               \
		auto k = tma_copy<C, S>;                                                                                       \
		CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C * S));                               \
		for (int bps : {1, 2, 4, 8}) {                                                                                 \
			if ((u64)C * S * bps > 200 * 1024) continue;                                                               \
			for (int store : {0, 1}) {                                                                                 \
				char nm[96];                                                                                           \
				snprintf(nm, sizeof nm, "tma %s C=%d S=%d grid %d", store ? "copy" : "load", C, S, sms * bps);        \
				timeit(nm, B, [&] { k<<<sms * bps, 32, C * S, st>>>(hd, d, B / C, D / C, store, sum); });              \
			}                                                                                                          \
		}                                                                                                              \
	} while (0)
	TMA(4096, 4);
	TMA(4096, 8);
	TMA(4096, 16);
	TMA(16384, 4);
	TMA(16384, 8);
	TMA(65536, 2);
	TMA(65536, 3);
	// Copy engine while a kernel polls a host word.
	u64 *hw, *stopw;
	CK(cudaHostAlloc(&hw, 4096, cudaHostAllocMapped));
	CK(cudaHostAlloc(&stopw, 4096, cudaHostAllocMapped));
	u64 *cnt;
	CK(cudaMalloc(&cnt, 8));
	for (int pollers : {0, 1024, 8192, 65536}) {
		for (int sl : {0, 1000}) {
			if (pollers == 0 && sl) continue;
			*stopw = 0;
			CK(cudaMemset(cnt, 0, 8));
			if (pollers) poller<<<pollers / 256, 256, 0, st2>>>(hw, stopw, sl, cnt);
			double t0 = now_s();
			while (now_s() - t0 < 0.05) {}
			std::vector<double> r;
			for (int k = 0; k < 5; k++) {
				double a = now_s();
				for (u64 o = 0; o < B; o += 4 << 20) CK(cudaMemcpyAsync(d + (o % D), h + o, 4 << 20, cudaMemcpyHostToDevice, st));
				CK(cudaStreamSynchronize(st));
				r.push_back(B / (now_s() - a) / 1e9);
			}
			double t1 = now_s();
			*stopw = 1;
			CK(cudaStreamSynchronize(st2));
			u64 c;
			CK(cudaMemcpy(&c, cnt, 8, cudaMemcpyDeviceToHost));
			std::sort(r.begin(), r.end());
			printf("CE 4 MiB pieces with %6d pollers sleep %4d ns: median %6.2f GB/s; polls %.1f M/s\n", pollers, sl, r[2],
			       c * 32.0 / (t1 - t0) / 1e6);
			fflush(stdout);
		}
	}
	// Copy engine beside a zero-copy reading kernel.
	{
		int grid = sms * 4;
		CK(cudaEventRecord(e0, st));
		for (int rep = 0; rep < 4; rep++) lsu_sum<<<grid, 512, 0, st2>>>((const ulonglong2 *)(hd + (512ull << 20)), B / 16, sum);
		for (int rep = 0; rep < 4; rep++)
			for (u64 o = 0; o < B; o += 4 << 20) CK(cudaMemcpyAsync(d + (o % D), h + o, 4 << 20, cudaMemcpyHostToDevice, st));
		CK(cudaEventRecord(e1, st));
		cudaEvent_t e2;
		CK(cudaEventCreate(&e2));
		CK(cudaEventRecord(e2, st2));
		CK(cudaEventSynchronize(e1));
		CK(cudaEventSynchronize(e2));
		float m1, m2;
		CK(cudaEventElapsedTime(&m1, e0, e1));
		CK(cudaEventElapsedTime(&m2, e0, e2));
		printf("CE and lsu_sum together: CE 2 GiB done at %.1f ms, kernel 2 GiB at %.1f ms: %.2f GB/s together\n", m1, m2,
		       4.0 * B * 2 / (std::max(m1, m2) * 1e-3) / 1e9);
	}
	printf("ce ceiling %.2f\n", ce);
	return 0;
}
