// racecheck_bulk_modes asks which ways of reusing one shared-memory slot
// for bulk copies (cp.async.bulk, sm_90) compute-sanitizer's racecheck
// reports. Modes: 0 one thread, two copies, the barrier initialised
// afresh for each; 1 lanes 0 and 1 in turn through an atomic claim word,
// barrier afresh; 2 the same with __syncwarp between; 3 two lanes, each its
// own slot, barrier afresh; 4 two warps through a claim word, barrier
// afresh; 5-7 one thread, two copies on one barrier initialised once
// (phase parity, phase token, a proxy fence after the wait); 8 one thread,
// two slots; 9 one copy; 10 two warps with __syncthreads between, one
// barrier; 11 and 12 lanes (11) or warps (12) in turn through a claim
// word, one barrier initialised by the first; 13 one thread three copies,
// then another lane after __syncwarp.
//
// Standalone (sm_90, CUDA 12 or later):
//   nvcc -O2 -std=c++17 -arch=sm_90 -lineinfo -o rc bench/experiments/racecheck_bulk_modes.cu
//   for m in $(seq 0 13); do ./rc $m; compute-sanitizer --tool racecheck ./rc $m; done
// Results: bench/results/logs/bulk-cq-reads-H200-20261126.txt.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
typedef unsigned long long u64;
struct __align__(16) slot { uint4 e[4]; u64 bar; unsigned claim; unsigned pad; };
__device__ __forceinline__ void bulk(slot *s, const uint4 *src, uint4 *out) {
	unsigned bar = (unsigned)__cvta_generic_to_shared(&s->bar), dst = (unsigned)__cvta_generic_to_shared(&s->e[0]);
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 64;" ::"r"(bar) : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(dst), "l"(src), "r"(bar) : "memory");
	unsigned done = 0;
	while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar) : "memory");
	for (int k = 0; k < 4; k++) out[k] = s->e[k];
	asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void bulk_persist(slot *s, const uint4 *src, uint4 *out, unsigned phase, bool fence_after, bool token) {
	unsigned bar = (unsigned)__cvta_generic_to_shared(&s->bar), dst = (unsigned)__cvta_generic_to_shared(&s->e[0]);
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	u64 st;
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], 64;" : "=l"(st) : "r"(bar) : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(dst), "l"(src), "r"(bar) : "memory");
	unsigned done = 0;
	if (token) {
		while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "l"(st) : "memory");
	} else {
		while (!done) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(bar), "r"(phase) : "memory");
	}
	if (fence_after) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
	for (int k = 0; k < 4; k++) out[k] = s->e[k];
}
__device__ __forceinline__ void bar_init(slot *s) {
	unsigned bar = (unsigned)__cvta_generic_to_shared(&s->bar);
	asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
	asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__global__ void k(int mode, const uint4 *src, unsigned *sum) {
	__shared__ slot s[32];
	unsigned lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	uint4 e[4]; unsigned acc = 0;
	if (threadIdx.x == 0) s[0].claim = 0;
	__syncthreads();
	if (mode == 0) { // one thread, two copies
		if (lane == 0) { bulk(&s[w], src, e); acc += e[0].x; bulk(&s[w], src + 4, e); acc += e[1].x; }
	} else if (mode == 1) { // lanes 0 and 1 in turn, handed over by an atomic claim word
		for (int r = 0; r < 2; r++) if (lane == (unsigned)r) {
			while (atomicExch(&s[w].claim, 1u) == 1u) {}
			__threadfence_block();
			bulk(&s[w], src + 4 * r, e); acc += e[0].x;
			__threadfence_block();
			atomicExch(&s[w].claim, 0u);
		}
	} else if (mode == 2) { // lanes 0 and 1 in turn, __syncwarp between
		if (lane == 0) { bulk(&s[w], src, e); acc += e[0].x; }
		__syncwarp();
		if (lane == 1) { bulk(&s[w], src + 4, e); acc += e[0].x; }
	} else if (mode == 3) { // each lane its own slot (32 threads, one warp): lane 0 in slot 0 twice, lane 1 in slot 1
		if (lane < 2) { bulk(&s[lane], src, e); acc += e[0].x; bulk(&s[lane], src + 4, e); acc += e[0].x; }
	} else if (mode == 4) { // threads of two warps on one slot, handed over by claim word
		for (int r = 0; r < 2; r++) if (threadIdx.x == (unsigned)(32 * r)) {
			while (atomicExch(&s[0].claim, 1u) == 1u) {}
			__threadfence_block();
			bulk(&s[0], src + 4 * r, e); acc += e[0].x;
			__threadfence_block();
			atomicExch(&s[0].claim, 0u);
		}
	}
	else if (mode == 5) { if (threadIdx.x == 0) { bar_init(&s[0]); bulk_persist(&s[0], src, e, 0, false, false); acc += e[0].x; bulk_persist(&s[0], src + 4, e, 1, false, false); acc += e[0].x; } }
	else if (mode == 6) { if (threadIdx.x == 0) { bar_init(&s[0]); bulk_persist(&s[0], src, e, 0, false, true); acc += e[0].x; bulk_persist(&s[0], src + 4, e, 1, false, true); acc += e[0].x; } }
	else if (mode == 7) { if (threadIdx.x == 0) { bar_init(&s[0]); bulk_persist(&s[0], src, e, 0, true, false); acc += e[0].x; bulk_persist(&s[0], src + 4, e, 1, true, false); acc += e[0].x; } }
	else if (mode == 8) { if (threadIdx.x == 0) { bulk(&s[0], src, e); acc += e[0].x; bulk(&s[1], src + 4, e); acc += e[0].x; } }
	else if (mode == 9) { if (threadIdx.x == 0) { bulk(&s[0], src, e); acc += e[0].x; } }
	else if (mode == 10) { if (threadIdx.x == 0) bar_init(&s[0]); __syncthreads(); for (int r = 0; r < 2; r++) { if (threadIdx.x == 32u * r) { bulk_persist(&s[0], src + 4 * r, e, r, true, false); acc += e[0].x; } __syncthreads(); } }
	else if (mode == 11 || mode == 12) { // lanes (11) or warps (12) in turn, persistent barrier initialised by the first, handed over by the claim word
		for (int r = 0; r < 2; r++) if (threadIdx.x == (unsigned)(mode == 11 ? r : 32 * r)) {
			while (atomicExch(&s[0].claim, 1u) == 1u) {}
			__threadfence_block();
			if (r == 0) { bar_init(&s[0]); s[0].pad = 0; }
			unsigned ph = s[0].pad;
			bulk_persist(&s[0], src + 4 * r, e, ph, false, false); acc += e[0].x;
			s[0].pad = ph ^ 1;
			__threadfence_block();
			atomicExch(&s[0].claim, 0u);
		}
	}
	else if (mode == 13) { // one thread, slot used 3 times; then lane 1 uses it after __syncwarp
		if (threadIdx.x == 0) { bar_init(&s[0]); for (int r = 0; r < 3; r++) { bulk_persist(&s[0], src + 4 * r, e, r & 1, false, false); acc += e[0].x; } }
		__syncwarp();
		if (threadIdx.x == 1) { bulk_persist(&s[0], src, e, 1, false, false); acc += e[0].x; }
	}
	atomicAdd(sum, acc);
}
int main(int argc, char **argv) {
	int mode = atoi(argv[1]);
	uint4 *h; cudaHostAlloc(&h, 4096, cudaHostAllocMapped); for (int i = 0; i < 256; i++) h[i] = make_uint4(i, i, i, i);
	uint4 *d; cudaHostGetDevicePointer((void **)&d, h, 0);
	unsigned *sum; cudaMalloc(&sum, 4); cudaMemset(sum, 0, 4);
	k<<<1, (mode == 4 || mode == 10 || mode == 12) ? 64 : 32>>>(mode, d, sum);
	cudaError_t err = cudaDeviceSynchronize();
	unsigned r = 0; cudaMemcpy(&r, sum, 4, cudaMemcpyDeviceToHost);
	printf("mode %d: %s sum %u\n", mode, cudaGetErrorString(err), r);
	return err != cudaSuccess;
}
