// racecheck_slots asks what compute-sanitizer's racecheck reports for the
// completion-window slots of bam/detail/sync.cuh: 64 blocks of 256
// threads, lanes 0-4 of each warp reading 50 windows of a pinned ring by
// bulk copies into shared memory, each slot handed between threads of
// different warps. v0 is the library's ld_cq_window (state word, claim by
// compare-and-swap); v1 a 32-bit claim word taken by atomicExch (a thread
// that finds it taken reads by loads) with the token and the barrier's
// phase in plain shared words; v2 is v1 spinning for the claim. The sums
// of two launches are compared (host data: word i = i).
//
// Standalone (sm_90, CUDA 12 or later):
//   nvcc -O2 -std=c++17 -arch=sm_90 -lineinfo -DBAM_BULK_CQ_READS=1 \
//     -I kernels/include -o win bench/experiments/racecheck_slots.cu
//   for v in 0 1 2; do ./win $v; compute-sanitizer --tool racecheck ./win $v; done
// Results: bench/results/logs/bulk-cq-reads-H200-20261126.txt.
#include <cstdio>
#include <cstdlib>
#include "bam/detail/sync.cuh"
using namespace bam;
using namespace bam::detail;
// v1: a 32-bit claim word taken by atomicExch (fail: loads), token word read after claiming.
struct __align__(16) slot1 { uint4 e[4]; unsigned long long bar; unsigned long long token; unsigned claim; unsigned phase; unsigned pad[2]; };
__device__ __forceinline__ void win_v1(const u32 *p, uint4 e[4], bool spin) {
	__shared__ slot1 slots[32];
	const u32 tid = threadIdx.x;
	slot1 *s = slots + (((tid & 31) + (tid >> 5)) & 31);
	const unsigned long long token = cq_window_token();
	const u32 bar = static_cast<u32>(__cvta_generic_to_shared(&s->bar));
	bool claimed;
	if (spin) { u32 n = 0; while (atomicExch(&s->claim, 1u) == 1u && ++n < 100000) {} claimed = n < 100000; }
	else claimed = atomicExch(&s->claim, 1u) != 1u;
	if (claimed) {
		__threadfence_block();
		if (s->token != token) {
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
			asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
			s->token = token; s->phase = 0;
		}
		const u32 phase = s->phase;
		const u32 dst = static_cast<u32>(__cvta_generic_to_shared(&s->e[0]));
		asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
		asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 64;" ::"r"(bar) : "memory");
		asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(dst), "l"(p), "r"(bar) : "memory");
		u32 done = 0;
		while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
		for (int k = 0; k < 4; k++) e[k] = s->e[k];
		s->phase = phase ^ 1;
		__threadfence_block();
		atomicExch(&s->claim, 0u);
		return;
	}
	for (int k = 0; k < 4; k++) e[k] = ld_cqe(p + 4 * k);
}
__global__ void poll(int v, const u32 *cq, int polls, unsigned long long *sum) {
	unsigned long long acc = 0;
	const u32 lane = threadIdx.x & 31;
	if (lane < 5) {
		for (int i = 0; i < polls; i++) {
			uint4 e[4];
			const u32 *p = cq + 16 * ((blockIdx.x * 7 + threadIdx.x + i) & 255);
			if (v == 0) ld_cq_window(p, e); else win_v1(p, e, v == 2);
			acc += e[0].x + e[3].w;
		}
	}
	atomicAdd(sum, acc);
}
int main(int argc, char **argv) {
	int v = atoi(argv[1]);
	u32 *h; cudaHostAlloc(&h, 1 << 16, cudaHostAllocMapped); for (int i = 0; i < (1 << 14); i++) h[i] = i;
	u32 *d; cudaHostGetDevicePointer((void **)&d, h, 0);
	unsigned long long *sum; cudaMalloc(&sum, 8);
	unsigned long long r[2];
	for (int rep = 0; rep < 2; rep++) {
		cudaMemset(sum, 0, 8);
		poll<<<64, 256>>>(v, d, 50, sum);
		cudaError_t err = cudaDeviceSynchronize();
		cudaMemcpy(&r[rep], sum, 8, cudaMemcpyDeviceToHost);
		printf("v%d rep %d: %s sum %llu\n", v, rep, cudaGetErrorString(err), r[rep]);
	}
	return 0;
}
