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
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels/include -o wc
// wc_pinned.cu && ./wc (kernels and helpers in pinned_reads.cuh).
// Results: bench/results/logs/wc-pinned-*.
#include <atomic>
#include <chrono>

#include "pinned_reads.cuh"

using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Buf {
	const char *name;
	char *p = nullptr;
	unsigned flags;
};

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
