// landing_ring asks whether a fill route in which the copy engines carry
// every byte could beat GPU loads of pinned memory, which stop at about
// 0.93 of the copy engines' rate (zero_copy_tma.cu, wc_pinned.cu,
// huge_pinned.cu) and hold the bounce route's Q2 and C1 at 0.90. The
// staging mirror (internal/gpuengine/mirror.go) lost because its copies
// are runs of one queue's consecutive slots, at most half a queue (512
// KiB), and copy engines need copies of megabytes (pcie_paths.cu: 43.5
// GB/s at 512 KiB, 53.5 at 4 MiB). Here the host side does not keep a
// command's slot: each 4 KiB item lands in the next free slot of one ring
// shared by every host thread, the ring is sealed into chunks of C bytes
// in order, each sealed chunk goes to device memory with one copy, and a
// stream write then tells the GPU (a flag in device memory) that the chunk
// is there. GPU warps take the items in ring order, wait for their
// chunk's flag, copy the item from the device ring into a destination
// buffer (device to device) and, the chunk's last item done, give the
// chunk back to the host (a word in pinned memory).
//
// The host threads model the Target: each item is a 4 KiB copy from a 1
// GiB source buffer (a memory namespace) at a pseudo-random block, 4 GiB
// a pass, every block four times. The GPU sums every word it copies; the
// pass is checked against the source. No queues, no commands: this is the
// data path's upper bound, to compare with the copy engines' own rate
// (measured in the same run, by piece size) and with GPU loads' 51.3 GB/s
// (measured by huge_pinned.cu and wc_pinned.cu). A host thread reserves
// `batch` consecutive slots at a time; one item at a time costs three
// contended atomics an item.
//
// -noise2 asks what kernels beside the copies cost them: the engine's way
// of waiting (every thread polling device-memory words, with try-locks and
// sleeps), and GPU loads of pinned memory (the bounce route's reads);
// -noise2 -poll and -poll2, polls of CQ-like lines read as the engine's
// harvest reads them and in one access.
//
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels/include -o lr
// landing_ring.cu -lcuda && ./lr [-call2 | -noise | -noise2 [-poll | -poll2]].
// Results: bench/results/logs/landing-ring-*, and for -noise2
// logs/landing-route-H200-20261126.txt.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>

#include "pinned_reads.cuh"  // CK, u64, u32

#define CU(x)                                                                                  \
	do {                                                                                       \
		CUresult r = (x);                                                                      \
		if (r != CUDA_SUCCESS) {                                                               \
			const char *s = "";                                                                \
			cuGetErrorString(r, &s);                                                           \
			printf("ERR %s at %d: %s\n", #x, __LINE__, s);                                     \
			exit(1);                                                                           \
		}                                                                                      \
	} while (0)
using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

constexpr u64 item = 4096;

__device__ __forceinline__ u64 now_ns() {
	u64 t;
	asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
	return t;
}

// consume: warps take items in ring order; each waits for its chunk's flag
// (device memory, written by the copy's stream), copies the item from the
// device ring into dst, sums its words, and the chunk's last consumer gives
// the chunk back to the host (free, pinned). Waits are bounded: a wait past
// 5 s sets *err and the kernel ends.
__global__ void consume(const uint4 *ring, u64 ring_items, u32 per_chunk, u64 items, const volatile u32 *flag, u32 *consumed,
                        volatile u32 *free_gen, uint4 *dst, u64 dst_items, u64 *next, u64 *sum, u32 *err) {
	const u32 lane = threadIdx.x & 31;
	const u64 nchunks = ring_items / per_chunk;
	u64 acc = 0;
	for (;;) {
		u64 s = 0;
		if (lane == 0) s = atomicAdd(next, 1ull);
		s = __shfl_sync(~0u, s, 0);
		if (s >= items) break;
		const u64 c = s / per_chunk, rc = c % nchunks;
		const u32 gen = static_cast<u32>(c / nchunks) + 1;
		if (lane == 0) {
			const u64 deadline = now_ns() + 5000000000ull;
			while (flag[rc] < gen) {
				if (*(volatile u32 *)err != 0 || now_ns() > deadline) {
					atomicExch(err, 1u);
					break;
				}
				__nanosleep(200);
			}
		}
		__syncwarp();
		if (*(volatile u32 *)err != 0) break;
		__threadfence();
		const uint4 *src = ring + (s % ring_items) * (item / 16);
		uint4 *out = dst + (s % dst_items) * (item / 16);
		uint4 v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) v[j] = src[lane + 32 * j];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			out[lane + 32 * j] = v[j];
			acc += (static_cast<u64>(v[j].y) << 32 | v[j].x) + (static_cast<u64>(v[j].w) << 32 | v[j].z);
		}
		__syncwarp();
		if (lane == 0) {
			__threadfence();
			if (atomicAdd(&consumed[rc], 1u) + 1 == per_chunk) {
				consumed[rc] = 0;
				__threadfence_system();
				free_gen[rc] = gen;  // the host may refill the chunk
			}
		}
	}
	atomicAdd(sum, acc);
}

// noise makes the GPU's own host-memory traffic of an I/O kernel beside
// the copies, for -noise: kind bit 1, one lane of each of 64 warps polling
// a line of pinned memory of its own (as CQ harvesters do); bit 2, warps
// writing a 64-byte entry into pinned memory and a 4-byte doorbell with a
// system-scope release (as submitters do); bit 4, lanes issuing system-scope
// fences (as harvesters' acquires do). It runs for dur ns and counts its operations into *ops.
// Kinds added for -noise2: bit 8, every thread waits as the engine's
// waiters do (its own word and one of 64 shared lock words in device
// memory, a try-lock by compare-and-swap when the lock is free, a sleep
// doubling from 32 to 2048 ns); bit 16, warps copy 4 KiB items out of a 1
// GiB pinned buffer with 16-byte loads (the bounce route's reads), pausing
// pause_ns after each; bit 32, one lane of each of 64 warps reading four
// consecutive 16-byte entries of a line of pinned memory of its own, one
// load each (as a CQ harvest's window does); bit 64, lanes 0-3 of each of
// 64 warps reading the same four entries with one load instruction (one
// 64-byte access).
__global__ void noise(u32 kind, u64 dur, u32 *host, u32 pause_ns, u64 *ops, unsigned long long *dwords, const uint4 *bulk, u64 bulk_items,
                      uint4 *sink) {
	const u64 end = now_ns() + dur;
	const u32 lane = threadIdx.x & 31;
	const u64 tid = blockIdx.x * (u64)blockDim.x + threadIdx.x;
	const u64 w = tid / 32;
	u64 n = 0, x = 0;
	u32 sleep = 32;
	while (now_ns() < end) {
		if (kind & 8) {
			unsigned long long own, hot;
			asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(own) : "l"(dwords + 64 + tid) : "memory");
			asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(hot) : "l"(dwords + (w % 64) * 16) : "memory");
			if (hot == 0 && atomicCAS(dwords + (w % 64) * 16, 0ull, 1ull) == 0ull) atomicExch(dwords + (w % 64) * 16, 0ull);
			x += own;
			n++;
			__nanosleep(sleep);
			sleep = sleep < 2048 ? sleep * 2 : 32;
			continue;
		}
		if ((kind & 32) && w < 64 && lane == 0) {
			const uint4 *cq = reinterpret_cast<const uint4 *>(host + w * 32);
			uint4 v[4];
#pragma unroll
			for (int k = 0; k < 4; k++)
				asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[k].x), "=r"(v[k].y), "=r"(v[k].z), "=r"(v[k].w) : "l"(cq + k) : "memory");
			x += v[0].x + v[1].x + v[2].x + v[3].x;
			n++;
			if (pause_ns) __nanosleep(pause_ns);
			continue;
		}
		if ((kind & 64) && w < 64) {
			if (lane < 4) {
				const uint4 *cq = reinterpret_cast<const uint4 *>(host + w * 32);
				uint4 v;
				asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(cq + lane) : "memory");
				x += v.x;
			}
			__syncwarp();
			if (lane == 0) n++;
			if (pause_ns) __nanosleep(pause_ns);
			continue;
		}
		if (kind & 16) {
			const u64 it = (w * 7919 + n * 104729) % bulk_items;
			const uint4 *src = bulk + it * 256;
			uint4 v[8];
#pragma unroll
			for (int j = 0; j < 8; j++)
				asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w) : "l"(src + lane + 32 * j) : "memory");
			uint4 *out = sink + (w % 4096) * 256;
#pragma unroll
			for (int j = 0; j < 8; j++) out[lane + 32 * j] = v[j];
			if (lane == 0) n++;
			if (pause_ns) __nanosleep(pause_ns);
			continue;
		}
		if ((kind & 1) && w < 64 && lane == 0) {
			const uint4 *cq = reinterpret_cast<const uint4 *>(host + w * 32);
			uint4 v;
			asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(cq) : "memory");
			x += v.x;
			n++;
		}
		if (kind & 2) {
			uint4 *sqe = reinterpret_cast<uint4 *>(host + 4096 + (w % 1024) * 16);
			if (lane < 4) {
				asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(sqe + lane), "r"(lane), "r"((u32)n), "r"(0u), "r"(0u) : "memory");
			}
			__syncwarp();
			if (lane == 0) {
				asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(host + 2048 + (w % 64) * 32), "r"((u32)n) : "memory");
				n++;
			}
		}
		if ((kind & 4) && lane == 0) {
			__threadfence_system();
			n++;
		}
		__nanosleep(pause_ns);
	}
	if (lane == 0) atomicAdd(ops, n + (x & 1));
}

struct Pass {
	u64 ring_bytes, chunk_bytes;
	int producers, streams;
	u32 batch;  // items a host thread takes (and slots it reserves) at once
	bool copy;  // false: the host threads only reserve and seal (no 4 KiB copies)
};

int main(int argc, char **argv) {
	const u64 src_bytes = 1ull << 30, src_blocks = src_bytes / item;
	const u64 pass_bytes = 4ull << 30, items = pass_bytes / item;
	CU(cuInit(0));
	CK(cudaSetDevice(0));
	CK(cudaFree(0));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("device %s, %d SMs, %u host threads\n", prop.name, prop.multiProcessorCount, std::thread::hardware_concurrency());

	u64 *src = (u64 *)aligned_alloc(4096, src_bytes);
	for (u64 i = 0; i < src_bytes / 8; i++) src[i] = i * 0x9e3779b97f4a7c15ull + 17;
	std::vector<u64> block_sum(src_blocks);
	u64 want = 0;
	for (u64 b = 0; b < src_blocks; b++) {
		u64 a = 0;
		for (u64 k = 0; k < item / 8; k++) a += src[b * item / 8 + k];
		block_sum[b] = a;
		want += 4 * a;  // items visit every block four times
	}

	const u64 max_ring = 256ull << 20;
	char *landing;
	CK(cudaHostAlloc((void **)&landing, max_ring, cudaHostAllocPortable | cudaHostAllocMapped));
	char *dring, *dst;
	CK(cudaMalloc(&dring, max_ring));
	const u64 dst_bytes = 1ull << 30;
	CK(cudaMalloc(&dst, dst_bytes));
	const u64 max_chunks = 1024;
	u32 *dflag, *dconsumed, *derr;
	u64 *dnext, *dsum;
	CK(cudaMalloc(&dflag, max_chunks * 4));
	CK(cudaMalloc(&dconsumed, max_chunks * 4));
	CK(cudaMalloc(&derr, 4));
	CK(cudaMalloc(&dnext, 8));
	CK(cudaMalloc(&dsum, 8));
	u32 *free_gen;
	CK(cudaHostAlloc((void **)&free_gen, max_chunks * 4, cudaHostAllocPortable | cudaHostAllocMapped));
	u32 *dfree_gen;
	CK(cudaHostGetDevicePointer((void **)&dfree_gen, free_gen, 0));

	cudaStream_t ks;
	CK(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
	// The copy engines' own rate, same run.
	{
		cudaEvent_t a, b;
		CK(cudaEventCreate(&a));
		CK(cudaEventCreate(&b));
		for (u64 piece : {128ull << 20, 16ull << 20, 8ull << 20, 4ull << 20, 1ull << 20}) {
			std::vector<float> r;
			for (int k = 0; k < 5; k++) {
				CK(cudaEventRecord(a, ks));
				for (u64 off = 0; off < max_ring; off += piece) CK(cudaMemcpyAsync(dring + off, landing + off, piece, cudaMemcpyHostToDevice, ks));
				CK(cudaEventRecord(b, ks));
				CK(cudaEventSynchronize(b));
				float ms;
				CK(cudaEventElapsedTime(&ms, a, b));
				r.push_back(max_ring / (ms * 1e6));
			}
			std::sort(r.begin(), r.end());
			printf("copy engine, %4llu KiB pieces: %.2f GB/s (%.2f-%.2f)\n", piece >> 10, r[2], r[0], r[4]);
		}
	}

	const int grid = prop.multiProcessorCount * (argc > 1 && strcmp(argv[1], "-noise") == 0 ? 4 : 8), block = 256;
	// Call 1 of the log ran the first eight; call 2 the rest, and the
	// copy-engine rates for 8 and 16 MiB pieces.
	std::vector<Pass> passes = {
	    {64ull << 20, 4ull << 20, 15, 4, 1, true},    {64ull << 20, 4ull << 20, 15, 4, 1, false},
	    {64ull << 20, 4ull << 20, 15, 4, 16, true},   {64ull << 20, 4ull << 20, 15, 4, 16, false},
	    {64ull << 20, 2ull << 20, 15, 4, 16, true},   {32ull << 20, 2ull << 20, 15, 4, 16, true},
	    {128ull << 20, 4ull << 20, 15, 4, 16, true},  {64ull << 20, 4ull << 20, 15, 4, 64, true},
	    {128ull << 20, 8ull << 20, 15, 4, 16, true},  {256ull << 20, 16ull << 20, 15, 4, 16, true},
	    {256ull << 20, 16ull << 20, 15, 4, 64, true}, {256ull << 20, 16ull << 20, 15, 4, 64, false},
	    {256ull << 20, 8ull << 20, 15, 8, 64, true},  {256ull << 20, 32ull << 20, 15, 4, 64, true},
	};
	if (argc > 1 && strcmp(argv[1], "-call2") == 0) passes.erase(passes.begin(), passes.begin() + 8);
	// -noise: one shape, without and with host copies, beside each kind of
	// noise (call 3 of the log).
	struct Noise {
		u32 kind, pause;
	};
	std::vector<Noise> noises = {{0, 0}};
	const bool with_noise = argc > 1 && strcmp(argv[1], "-noise") == 0;
	const bool noise2 = argc > 1 && strcmp(argv[1], "-noise2") == 0;
	if (noise2) {
		passes = {{64ull << 20, 4ull << 20, 15, 4, 16, true}};
		noises = {{0, 0}, {8, 0}, {16, 0}, {16, 20000}, {16, 80000}, {0, 0}};
		if (argc > 2 && strcmp(argv[2], "-poll") == 0) noises = {{0, 0}, {1, 0}, {32, 0}, {2, 0}, {4, 0}, {34, 0}, {38, 0}, {0, 0}};
		if (argc > 2 && strcmp(argv[2], "-poll2") == 0) noises = {{0, 0}, {64, 0}, {32, 0}, {32, 2000}, {32, 10000}, {64, 0}, {0, 0}};
	}
	if (with_noise) {
		passes = {{64ull << 20, 4ull << 20, 15, 4, 16, false}, {64ull << 20, 4ull << 20, 15, 4, 16, true}};
		noises = {{0, 0}, {1, 500}, {2, 10000}, {2, 1000}, {4, 10000}, {4, 1000}, {7, 1000}};
	}
	u32 *noise_host;
	CK(cudaHostAlloc((void **)&noise_host, 1 << 20, cudaHostAllocPortable | cudaHostAllocMapped));
	memset(noise_host, 0, 1 << 20);
	u32 *dnoise_host;
	CK(cudaHostGetDevicePointer((void **)&dnoise_host, noise_host, 0));
	u64 *dops;
	CK(cudaMalloc(&dops, 8));
	unsigned long long *ddwords = nullptr;
	uint4 *bulk = nullptr, *dbulk = nullptr, *sink = nullptr;
	const u64 bulk_bytes = noise2 ? 1ull << 30 : 0;
	if (noise2) {
		CK(cudaMalloc(&ddwords, (64 + (1 << 20)) * 8));
		CK(cudaMemset(ddwords, 0, (64 + (1 << 20)) * 8));
		CK(cudaHostAlloc((void **)&bulk, bulk_bytes, cudaHostAllocPortable | cudaHostAllocMapped));
		memset(bulk, 1, bulk_bytes);
		CK(cudaHostGetDevicePointer((void **)&dbulk, bulk, 0));
		CK(cudaMalloc(&sink, 4096ull * 4096));
	}
	cudaStream_t nstream;
	CK(cudaStreamCreateWithFlags(&nstream, cudaStreamNonBlocking));
	for (int rep = 0; rep < 2; rep++) {
		for (const Noise &nz : noises)
		for (const Pass &p : passes) {
			const u64 ring_items = p.ring_bytes / item;
			const u32 per_chunk = static_cast<u32>(p.chunk_bytes / item);
			const u64 nchunks = p.ring_bytes / p.chunk_bytes;
			CK(cudaMemset(dflag, 0, max_chunks * 4));
			CK(cudaMemset(dconsumed, 0, max_chunks * 4));
			CK(cudaMemset(derr, 0, 4));
			CK(cudaMemset(dnext, 0, 8));
			CK(cudaMemset(dsum, 0, 8));
			memset(free_gen, 0, max_chunks * 4);
			std::vector<cudaStream_t> cs(p.streams);
			for (auto &s : cs) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
			std::vector<std::mutex> locks(p.streams);
			std::vector<std::atomic<u32>> filled(nchunks);
			for (auto &f : filled) f = 0;
			std::atomic<u64> next_item{0}, next_slot{0};
			std::atomic<bool> fail{false};
			CK(cudaDeviceSynchronize());

			CK(cudaMemset(dops, 0, 8));
			CK(cudaDeviceSynchronize());
			if (nz.kind != 0) {
				const int nb = prop.multiProcessorCount * ((nz.kind & 8) ? 4 : (nz.kind & 16) ? 2 : 1);
				noise<<<nb, 128, 0, nstream>>>(nz.kind, 150000000ull, dnoise_host, nz.pause, dops, ddwords, dbulk, bulk_bytes / 4096, sink);
				CK(cudaGetLastError());
			}
			const auto t0 = clk::now();
			consume<<<grid, block, 0, ks>>>((const uint4 *)dring, ring_items, per_chunk, items, dflag, dconsumed, dfree_gen, (uint4 *)dst,
			                                dst_bytes / item, dnext, dsum, derr);
			CK(cudaGetLastError());
			std::vector<std::thread> ts;
			for (int t = 0; t < p.producers; t++) {
				ts.emplace_back([&] {
					const u32 n = p.batch;  // divides per_chunk: a batch never straddles chunks
					for (;;) {
						const u64 i = next_item.fetch_add(n);
						if (i >= items) return;
						const u64 s = next_slot.fetch_add(n);
						const u64 c = s / per_chunk, rc = c % nchunks;
						const u32 gen = static_cast<u32>(c / nchunks);  // the GPU gave back generation gen-1
						const auto w0 = clk::now();
						while (__atomic_load_n(&free_gen[rc], __ATOMIC_ACQUIRE) < gen) {
							if (fail.load() || secs(w0, clk::now()) > 5) {
								fail = true;
								return;
							}
						}
						for (u32 k = 0; k < n; k++) {
							const u64 b = ((i + k) * 7919) % src_blocks;
							if (p.copy) memcpy(landing + ((s + k) % ring_items) * item, (const char *)src + b * item, item);
						}
						if (filled[rc].fetch_add(n, std::memory_order_acq_rel) + n == per_chunk) {
							filled[rc].store(0, std::memory_order_relaxed);
							const int k = static_cast<int>(c % p.streams);
							std::lock_guard<std::mutex> g(locks[k]);
							CU(cuMemcpyHtoDAsync((CUdeviceptr)(dring + rc * p.chunk_bytes), landing + rc * p.chunk_bytes, p.chunk_bytes,
							                     (CUstream)cs[k]));
							CU(cuStreamWriteValue32((CUstream)cs[k], (CUdeviceptr)(dflag + rc), gen + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
						}
					}
				});
			}
			for (auto &t : ts) t.join();
			const double host_done = secs(t0, clk::now());
			CK(cudaStreamSynchronize(ks));
			const double el = secs(t0, clk::now());
			CK(cudaStreamSynchronize(nstream));
			u64 ops = 0;
			CK(cudaMemcpy(&ops, dops, 8, cudaMemcpyDeviceToHost));
			if (nz.kind & 16) {
				printf("noise %u (pause %5u ns, GPU loads of pinned memory %5.1f GB/s over its 150 ms) beside: ", nz.kind, nz.pause, ops * 4096.0 / 0.15 / 1e9);
			} else if (nz.kind != 0) {
				printf("noise %u (pause %5u ns, %6.1f M ops/s) beside: ", nz.kind, nz.pause, ops / 0.15 / 1e6);
			}
			u64 got;
			u32 err;
			CK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
			CK(cudaMemcpy(&err, derr, 4, cudaMemcpyDeviceToHost));
			printf("ring %4llu MiB, chunk %5llu KiB, %2d host threads, %d streams, batch %2u%s: %6.2f GB/s (4 GiB in %.1f ms, host done at %.1f) %s\n",
			       p.ring_bytes >> 20, p.chunk_bytes >> 10, p.producers, p.streams, p.batch, p.copy ? "" : ", no host copies",
			       pass_bytes / el / 1e9, el * 1e3, host_done * 1e3,
			       fail || err ? "FAILED (a wait expired)" : !p.copy ? "(sum not checked)" : got == want ? "sum ok" : "SUM WRONG");
			fflush(stdout);
			for (auto &s : cs) CK(cudaStreamDestroy(s));
			if (fail || err) return 1;
		}
	}
	return 0;
}
