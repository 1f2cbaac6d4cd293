// mixed_reads asks whether the copy engines can add bandwidth beside GPU
// loads of pinned memory: GPU loads stop at about 51.4 GB/s and the copy
// engines at about 55.4 (slot_copy.cu), so a route that let the copy
// engines carry part of the bytes could only pay if the two together moved
// more than either alone.
//
// The loads: warps copying pseudo-random 4 KiB slots of a 64 MiB pinned
// ring into device memory (the fill path's pattern, 4224 warps). The
// copies: cudaMemcpyAsync of 64 MiB pieces of a separate 1 GiB pinned
// buffer into device memory, on another stream. Each line runs L bytes of
// loads and C bytes of copies started together and reports the time until
// both are done, the combined rate, and each side's own time (CUDA events;
// median of five).
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels/include -o
// mixed_reads mixed_reads.cu && ./mixed_reads (the loads are the fill
// path's own, bam::detail::ld_host16). Results:
// bench/results/logs/staging-slot-reads-H200-20261125.txt.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "bam/detail/sync.cuh"

using bam::detail::ld_host16;
#define CK(x)                                                                                  \
	do {                                                                                       \
		cudaError_t e = (x);                                                                   \
		if (e != cudaSuccess) {                                                                \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
			exit(1);                                                                           \
		}                                                                                      \
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

// copy_slots: warp w copies `per` pseudo-random 4 KiB slots into its own
// 4 KiB of dst, eight loads in flight a lane.
__global__ void copy_slots(const uint4 *ring, u64 slots, uint4 *dst, u32 per) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	uint4 *out = dst + w * 256;
	for (u32 k = 0; k < per; k++) {
		const uint4 *src = ring + (mix(w * per + k) % slots) * 256;
		uint4 v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = ld_host16(src + lane + 32 * j);
#pragma unroll
		for (int j = 0; j < 8; j++) __stcg(out + lane + 32 * j, v[j]);
	}
}

int main() {
	CK(cudaSetDevice(0));
	const size_t RING = (size_t)64 << 20, BUF = (size_t)1 << 30, PIECE = (size_t)64 << 20;
	const int warps = 4224;
	char *ring, *buf, *ringd;
	CK(cudaHostAlloc(&ring, RING, cudaHostAllocMapped));
	CK(cudaHostAlloc(&buf, BUF, cudaHostAllocDefault));
	memset(ring, 1, RING);
	memset(buf, 2, BUF);
	CK(cudaHostGetDevicePointer((void **)&ringd, ring, 0));
	uint4 *slotsOut;
	char *dmaOut;
	CK(cudaMalloc(&slotsOut, (size_t)warps * 4096));
	CK(cudaMalloc(&dmaOut, BUF));
	cudaStream_t sl, sc;
	CK(cudaStreamCreateWithFlags(&sl, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
	cudaEvent_t e0, el, ec;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&el));
	CK(cudaEventCreate(&ec));
	struct Case {
		size_t loads, copies;
	};
	const size_t G = (size_t)1 << 30;
	for (Case c : {Case{2 * G, 0}, Case{0, 2 * G}, Case{2 * G, G / 2}, Case{2 * G, G}, Case{2 * G, 2 * G}, Case{G, 2 * G}}) {
		std::vector<float> tot, tl, tc;
		for (int r = 0; r < 5; r++) {
			CK(cudaDeviceSynchronize());
			CK(cudaEventRecord(e0, sl));
			CK(cudaStreamWaitEvent(sc, e0, 0));
			const u32 per = (u32)(c.loads / 4096 / warps);
			if (per) copy_slots<<<warps / 4, 128, 0, sl>>>((const uint4 *)ringd, RING / 4096, slotsOut, per);
			CK(cudaGetLastError());
			for (size_t off = 0; off < c.copies; off += PIECE) {
				CK(cudaMemcpyAsync(dmaOut + off % BUF, buf + off % BUF, PIECE, cudaMemcpyHostToDevice, sc));
			}
			CK(cudaEventRecord(el, sl));
			CK(cudaEventRecord(ec, sc));
			CK(cudaEventSynchronize(el));
			CK(cudaEventSynchronize(ec));
			float ml, mc;
			CK(cudaEventElapsedTime(&ml, e0, el));
			CK(cudaEventElapsedTime(&mc, e0, ec));
			tl.push_back(ml);
			tc.push_back(mc);
			tot.push_back(std::max(ml, mc));
		}
		std::sort(tot.begin(), tot.end());
		std::sort(tl.begin(), tl.end());
		std::sort(tc.begin(), tc.end());
		const double loaded = (double)(c.loads / 4096 / warps) * warps * 4096;
		printf("loads %4.1f GiB + copies %4.1f GiB: together %6.2f GB/s in %7.2f ms (loads done at %7.2f ms, copies at %7.2f ms)\n",
		       c.loads / (double)G, c.copies / (double)G, (loaded + c.copies) / (tot[2] * 1e6), tot[2], tl[2], tc[2]);
	}
	return 0;
}
