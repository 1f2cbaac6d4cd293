// cq_poll_inflight asks how long a completion-queue poll over PCIe takes
// while other GPU reads of pinned memory are in flight: a reader kernel
// streams a 64 MiB pinned ring (resident in the host's last-level cache)
// with 132 blocks of 32 to 1024 threads, four 16-byte loads in flight per
// thread, while 64 pollers (one lane per warp) time reads of CQ-like
// entries in pinned memory: four 16-byte entries of one 128-byte line (as
// queue::harvest's window), four entries in four lines, one entry, 64
// bytes by one bulk copy into shared memory (cp.async.bulk, sm_90), and
// four entries of one line by ld.relaxed.sys, by ld.global.cv and by
// cp.async.cg (16 bytes each, sm_80). A host thread keeps rewriting the
// first entry of each poller's line, and the bulk copy and the last three
// modes count the polls that saw it change (a poll served from a stale
// copy would not).
// The first 200 of each poller's 2200 polls are not timed (the reader is
// launched after the pollers). The reader's rate is its bytes over its
// whole run, ramp included: a rough figure.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -o lat cq_poll_inflight.cu &&
// ./lat. Results: bench/results/logs/staging-llc-reads-H200-20261125.txt
// (the first four modes) and q2-target-side-H200-20261125.txt (the rest).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <thread>
#include <atomic>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)
typedef unsigned long long u64;

__device__ __forceinline__ u64 gt() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ uint4 ldv(const uint4 *p) {
	uint4 v; asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ uint4 ldr(const uint4 *p) {
	uint4 v; asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ uint4 ldcv(const uint4 *p) {
	uint4 v; asm volatile("ld.global.cv.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory"); return v;
}

__global__ void reader(const ulonglong2 *src, u64 n16, const volatile unsigned *stop, u64 *bytes) {
	u64 stride = (u64)gridDim.x * blockDim.x;
	u64 a = 0, b = 0, n = 0;
	for (int r = 0; r < 3000; r++) {
		u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
		for (; i + 3 * stride < n16; i += 4 * stride) {
			ulonglong2 v0, v1, v2, v3;
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v0.x), "=l"(v0.y) : "l"(src + i));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v1.x), "=l"(v1.y) : "l"(src + i + stride));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v2.x), "=l"(v2.y) : "l"(src + i + 2 * stride));
			asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(v3.x), "=l"(v3.y) : "l"(src + i + 3 * stride));
			a += v0.x + v1.x + v2.x + v3.x; b += v0.y + v1.y + v2.y + v3.y;
			n += 64;
		}
		if (*stop) break;
	}
	atomicAdd(bytes, n + ((a + b) == 1 ? 1 : 0));
}

// mode 0: 4 entries of one line; 1: 4 entries in 4 lines; 2: one entry;
// 3: 64 bytes by one bulk copy into shared memory (sm_90); 4, 5, 6: 4
// entries of one line by ld.relaxed.sys, ld.global.cv, cp.async.cg.
__global__ void poller(const uint4 *cq, int mode, int polls, u64 *ns) {
	__shared__ __align__(128) uint4 sbuf[4 * 4];
	__shared__ __align__(8) u64 bar[4];
	unsigned lane = threadIdx.x & 31, wib = threadIdx.x / 32;
	if (lane != 0) return;
	unsigned w = blockIdx.x * (blockDim.x / 32) + wib;
	const uint4 *p = cq + (size_t)w * 64;
	unsigned ba = (unsigned)__cvta_generic_to_shared(&bar[wib]);
	unsigned sa = (unsigned)__cvta_generic_to_shared(&sbuf[wib * 4]);
#if __CUDA_ARCH__ >= 900
	asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(ba));
	asm volatile("fence.mbarrier_init.release.cluster;");
#endif
#if __CUDA_ARCH__ >= 900
	unsigned phase = 0;
#endif
	u64 acc = 0, tot = 0;
	unsigned seen = 0, last = 0, changes = 0;
	for (int k = 0; k < polls; k++) {
		u64 t0 = gt();
		if (mode == 0) { uint4 e0 = ldv(p), e1 = ldv(p + 1), e2 = ldv(p + 2), e3 = ldv(p + 3); acc += e0.w + e1.w + e2.w + e3.w; }
		else if (mode == 1) { uint4 e0 = ldv(p), e1 = ldv(p + 8), e2 = ldv(p + 16), e3 = ldv(p + 24); acc += e0.w + e1.w + e2.w + e3.w; }
		else if (mode == 2) { uint4 e0 = ldv(p); acc += e0.w; }
		else if (mode == 4) { uint4 e0 = ldr(p), e1 = ldr(p + 1), e2 = ldr(p + 2), e3 = ldr(p + 3); acc += e0.w + e1.w + e2.w + e3.w; seen = e0.w; }
		else if (mode == 5) { uint4 e0 = ldcv(p), e1 = ldcv(p + 1), e2 = ldcv(p + 2), e3 = ldcv(p + 3); acc += e0.w + e1.w + e2.w + e3.w; seen = e0.w; }
		else if (mode == 6) {
			unsigned sa16 = (unsigned)__cvta_generic_to_shared(&sbuf[wib * 4]);
#pragma unroll
			for (int k = 0; k < 4; k++) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa16 + 16 * k), "l"(p + k) : "memory");
			asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
			acc += sbuf[wib * 4].w + sbuf[wib * 4 + 3].w; seen = sbuf[wib * 4].w;
		}
		else {
#if __CUDA_ARCH__ >= 900
			asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], 64;" ::"r"(ba));
			asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 64, [%2];" ::"r"(sa), "l"(p), "r"(ba) : "memory");
			unsigned done = 0;
			while (!done) asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }" : "=r"(done) : "r"(ba), "r"(phase) : "memory");
			phase ^= 1;
			acc += sbuf[wib * 4].w + sbuf[wib * 4 + 3].w;
			seen = sbuf[wib * 4].w;
#endif
		}
		if (k >= 200) tot += gt() - t0;
		if (mode >= 3 && mode <= 6) { if (seen != last) changes++; last = seen; }
		__nanosleep(500);
	}
	atomicAdd(ns, tot + (acc == 7 ? 1 : 0));
	atomicAdd(ns + 1, (u64)changes);
}

int main() {
	setvbuf(stdout, NULL, _IOLBF, 0);
	CK(cudaSetDevice(0));
	size_t ring = (size_t)64 << 20;
	char *h; CK(cudaHostAlloc(&h, ring, cudaHostAllocMapped)); memset(h, 1, ring);
	char *hd; CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
	uint4 *cq; CK(cudaHostAlloc(&cq, 1 << 20, cudaHostAllocMapped)); memset(cq, 0, 1 << 20);
	uint4 *cqd; CK(cudaHostGetDevicePointer((void **)&cqd, cq, 0));
	unsigned *stop; CK(cudaHostAlloc(&stop, 64, cudaHostAllocMapped));
	u64 *bytes, *ns; CK(cudaMalloc(&bytes, 8)); CK(cudaMalloc(&ns, 16));
	cudaStream_t sa, sb; CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
	cudaEvent_t r0, r1; CK(cudaEventCreate(&r0)); CK(cudaEventCreate(&r1));
	const char *names[] = {"4 entries, one line", "4 entries, 4 lines", "1 entry", "64 B bulk copy", "4 relaxed.sys, 1 line", "4 ld.cv, 1 line", "4 cp.async.cg, 1 line"};
	// A host thread keeps changing the first entry of every poller's line
	// (its dword 3, as a controller posting), so that a poll that returns a
	// stale copy shows as polls that saw no change.
	std::atomic<bool> quit{false};
	std::thread writer([&] {
		for (unsigned v = 1; !quit.load(std::memory_order_relaxed); v++) {
			for (int w = 0; w < 64; w++) __atomic_store_n(&cq[(size_t)w * 64].w, v, __ATOMIC_RELEASE);
			for (volatile int d = 0; d < 200; d++) {}
		}
	});
	const int polls = 2200;
	for (int tpb : {0, 32, 64, 128, 256, 1024}) {
		for (int mode = 0; mode < 7; mode++) {
			*stop = 0; CK(cudaMemset(bytes, 0, 8)); CK(cudaMemset(ns, 0, 16)); CK(cudaDeviceSynchronize());
			poller<<<16, 128, 0, sb>>>(cqd, mode, polls, ns);
			if (tpb) { CK(cudaEventRecord(r0, sa)); reader<<<132, tpb, 0, sa>>>((const ulonglong2 *)hd, ring / 16, stop, bytes); CK(cudaEventRecord(r1, sa)); }
			CK(cudaStreamSynchronize(sb));
			*stop = 1;
			CK(cudaDeviceSynchronize());
			CK(cudaGetLastError());
			u64 b = 0, t = 0, ch = 0; CK(cudaMemcpy(&b, bytes, 8, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&t, ns, 8, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&ch, ns + 1, 8, cudaMemcpyDeviceToHost));
			float ms = 1; if (tpb) CK(cudaEventElapsedTime(&ms, r0, r1));
			printf("reader 132x%4d (%6.0f KiB in flight): %6.2f GB/s; poll %-22s %7.2f us; saw a change in %5.1f %% of polls\n", tpb, 132.0 * tpb * 64 / 1024, tpb ? b / (ms * 1e6) : 0.0, names[mode], t / 1e3 / (64.0 * (polls - 200)), 100.0 * ch / (64.0 * polls));
		}
	}
	quit = true;
	writer.join();
	return 0;
}
