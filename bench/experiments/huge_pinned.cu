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
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernels/include -o hp
// huge_pinned.cu && ./hp (kernels and helpers in pinned_reads.cuh).
// Results: bench/results/logs/huge-pinned-*.
#include "pinned_reads.cuh"

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
