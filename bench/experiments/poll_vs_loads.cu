// poll_vs_loads asks whether the CQ harvest's way of reading its window
// (one thread, four 16-byte loads of one line of pinned memory, back to
// back) slows the bounce route's own reads, GPU loads of 4 KiB items of
// pinned memory, as it slows copy engines (landing_ring.cu -noise2 -poll:
// copies from 51 to 28-30 GB/s). A reader kernel copies 8 GiB of 4 KiB
// items from a 1 GiB pinned buffer into device memory with 16-byte loads
// (all 32 lanes, eight loads in flight a lane), timed with events, while a
// poller kernel on another stream has one lane of each of 64 warps poll a
// line of its own: not at all, one 16-byte load a poll, four loads a poll
// (the harvest), or four lanes reading the line in one access. The reader
// checks a sum of what it read against the host's.
//
// The reader uses the fill route's loads (bam::detail::ld_host16), the
// pollers the harvest's (bam::detail::ld_cqe).
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels/include -o pvl
// poll_vs_loads.cu && ./pvl
// Results: bench/results/logs/landing-route-H200-20261126.txt.
#include "pinned_reads.cuh"

using bam::detail::ld_cqe;

__device__ __forceinline__ uint4 ldv16(const uint4 *p) { return ld_cqe(reinterpret_cast<const u32 *>(p)); }

// read copies items (4 KiB each) chosen by a stride walk of the source into
// dst, summing every word; *next hands out items to warps.
__global__ void read(const uint4 *src, u64 src_items, uint4 *dst, u64 dst_items, u64 items, u64 *next, u64 *sum) {
	const u32 lane = threadIdx.x & 31;
	u64 acc = 0;
	for (;;) {
		u64 s = 0;
		if (lane == 0) s = atomicAdd(next, 1ull);
		s = __shfl_sync(~0u, s, 0);
		if (s >= items) break;
		const uint4 *from = src + ((s * 7919) % src_items) * 256;
		uint4 *to = dst + (s % dst_items) * 256;
		uint4 v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = ld_host16(from + lane + 32 * j);
#pragma unroll
		for (int j = 0; j < 8; j++) {
			to[lane + 32 * j] = v[j];
			acc += v[j].x + (u64)v[j].y + v[j].z + (u64)v[j].w;
		}
	}
	atomicAdd(sum, acc);
}

// poll runs until *stop: kind 1, lane 0 of warps 0-63 loads 16 bytes of a
// line of its own; kind 4, it loads the line's four 16-byte entries one
// after the other; kind 5, lanes 0-3 load them in one instruction.
__global__ void poll(u32 kind, const uint4 *lines, const volatile u32 *stop, u64 *ops) {
	const u32 lane = threadIdx.x & 31;
	const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
	if (w >= 64) return;
	const uint4 *line = lines + w * 8;  // 128 bytes apart
	u64 n = 0, x = 0;
	for (;;) {
		// The stop word every 64 polls, by one lane: its own loads cross
		// PCIe too.
		if ((n & 63) == 0) {
			u32 s = lane == 0 ? *stop : 0u;
			if (__shfl_sync(~0u, s, 0) != 0) break;
		}
		if (kind == 1 && lane == 0) {
			x += ldv16(line).x;
		} else if (kind == 4 && lane == 0) {
			uint4 v[4];
#pragma unroll
			for (int k = 0; k < 4; k++) v[k] = ldv16(line + k);
			x += v[0].x + v[1].x + v[2].x + v[3].x;
		} else if (kind == 5 && lane < 4) {
			x += ldv16(line + lane).x;
		}
		__syncwarp();
		n++;
	}
	if (lane == 0) atomicAdd(ops, n + (x & 1));
}

int main() {
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	const u64 src_bytes = 1ull << 30, src_items = src_bytes / 4096, dst_bytes = 256ull << 20;
	const u64 items = (8ull << 30) / 4096;
	uint4 *src, *dsrc, *dst, *lines, *dlines;
	CK(cudaHostAlloc((void **)&src, src_bytes, cudaHostAllocPortable | cudaHostAllocMapped));
	for (u64 i = 0; i < src_bytes / 4; i++) reinterpret_cast<u32 *>(src)[i] = static_cast<u32>(i * 2654435761u);
	CK(cudaHostGetDevicePointer((void **)&dsrc, src, 0));
	CK(cudaHostAlloc((void **)&lines, 64 * 128, cudaHostAllocPortable | cudaHostAllocMapped));
	memset(lines, 0, 64 * 128);
	CK(cudaHostGetDevicePointer((void **)&dlines, lines, 0));
	CK(cudaMalloc(&dst, dst_bytes));
	u32 *stop, *dstop;
	CK(cudaHostAlloc((void **)&stop, 4, cudaHostAllocPortable | cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer((void **)&dstop, stop, 0));
	u64 *dnext, *dsum, *dops;
	CK(cudaMalloc(&dnext, 8));
	CK(cudaMalloc(&dsum, 8));
	CK(cudaMalloc(&dops, 8));
	// The expected sum: every item is read items/src_items times.
	u64 want = 0;
	{
		const u32 *w = reinterpret_cast<const u32 *>(src);
		std::vector<u64> per(src_items, 0);
		for (u64 it = 0; it < src_items; it++) {
			u64 a = 0;
			for (u64 k = 0; k < 1024; k++) a += w[it * 1024 + k];
			per[it] = a;
		}
		for (u64 s = 0; s < items; s++) want += per[(s * 7919) % src_items];
	}
	cudaStream_t rs, ps;
	CK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
	const char *names[] = {"no poller"};
	const u32 kinds[] = {0, 1, 4, 5, 4, 0};
	for (int rep = 0; rep < 2; rep++) {
		for (u32 k : kinds) {
			*(volatile u32 *)stop = 0;
			CK(cudaMemset(dnext, 0, 8));
			CK(cudaMemset(dsum, 0, 8));
			CK(cudaMemset(dops, 0, 8));
			CK(cudaDeviceSynchronize());
			if (k != 0) poll<<<16, 128, 0, ps>>>(k, dlines, dstop, dops);
			CK(cudaEventRecord(e0, rs));
			read<<<prop.multiProcessorCount * 4, 256, 0, rs>>>(dsrc, src_items, dst, dst_bytes / 4096, items, dnext, dsum);
			CK(cudaEventRecord(e1, rs));
			CK(cudaEventSynchronize(e1));
			*(volatile u32 *)stop = 1;
			CK(cudaDeviceSynchronize());
			float ms;
			CK(cudaEventElapsedTime(&ms, e0, e1));
			u64 got, ops;
			CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(&ops, dops, 8, cudaMemcpyDeviceToHost));
			const char *what = k == 0 ? names[0] : k == 1 ? "one 16-byte load a poll" : k == 4 ? "four loads of one line a poll (the harvest)" : "four lanes, one access a poll";
			printf("GPU loads of 4 KiB items, 8 GiB: %6.2f GB/s beside %-44s (%6.1f M polls/s) %s\n", items * 4096.0 / (ms / 1e3) / 1e9, what,
			       k == 0 ? 0.0 : ops / (ms / 1e3) / 1e6, got == want ? "sum ok" : "SUM WRONG");
			fflush(stdout);
		}
	}
	return 0;
}
