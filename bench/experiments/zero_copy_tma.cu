// zero_copy_tma asks whether the bulk-copy unit (TMA, cp.async.bulk) moves
// line-sized chunks of pinned host memory into device memory faster than
// the lanes' own 16-byte loads do. The bounce fill route copies each 4 KiB
// line from its staging slot with a warp's loads, and those loads top out
// at the zero-copy read rate, about 0.92 of the copy engines' H2D rate: Q2
// and C1 cannot reach 0.90 of their ceiling through it. A bulk copy is one
// instruction per chunk, issued by one lane, and the unit makes the PCIe
// requests itself.
//
// Cases: chunks of 4 KiB and 16 KiB taken from random slots of a 1 GiB
// pinned buffer and written in order to a 1 GiB device buffer, 4 GiB moved
// per measurement, over grid shapes:
//   lanes   a warp per chunk, each lane 16-byte ld.relaxed.sys loads, 8 (or
//           16) in flight, as bam's copy_from_host;
//   tma     lane 0 of each warp keeps `depth` chunks in flight through
//           shared memory: bulk load host -> shared (mbarrier), bulk store
//           shared -> device.
// Every case is checked: one pass is verified chunk by chunk, then the
// host buffer is rewritten and the pass verified again (no stale reads).
//
// Standalone: nvcc -O2 -std=c++17 -arch=sm_90 -o zc zero_copy_tma.cu && ./zc
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>
#include <random>
#include <algorithm>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)
typedef unsigned long long u64;
typedef unsigned u32;

__device__ __forceinline__ uint4 ld_host16(const uint4 *p) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  return v;
}

template <int INFLIGHT>
__global__ void lanes_copy(const unsigned char *host, unsigned char *dev, const u32 *perm, u64 hslots, u64 dslots, u64 total, u32 chunk) {
  const u32 lane = threadIdx.x & 31;
  const u64 w = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32, nw = (gridDim.x * (u64)blockDim.x) / 32;
  const u64 n = chunk / 16;
  for (u64 i = w; i < total; i += nw) {
    const uint4 *src = reinterpret_cast<const uint4 *>(host + (u64)perm[i % hslots] * chunk);
    uint4 *dst = reinterpret_cast<uint4 *>(dev + (i % dslots) * chunk);
    for (u64 base = lane; base < n; base += INFLIGHT * 32ull) {
      uint4 v[INFLIGHT];
#pragma unroll
      for (int k = 0; k < INFLIGHT; k++) { u64 c = base + k * 32ull; if (c < n) v[k] = ld_host16(src + c); }
#pragma unroll
      for (int k = 0; k < INFLIGHT; k++) { u64 c = base + k * 32ull; if (c < n) __stcg(dst + c, v[k]); }
    }
  }
}

__device__ __forceinline__ u32 smem_addr(const void *p) { return static_cast<u32>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void bulk_load(void *dst_smem, const void *src, u32 bytes, u64 *bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_addr(dst_smem)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void bar_wait(u64 *bar, u32 phase) {
  u32 done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(phase) : "memory");
  }
}

__device__ __forceinline__ void bulk_store(void *dst, const void *src_smem, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(smem_addr(src_smem)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// tma_copy: lane 0 of each warp keeps depth chunks in flight. Shared memory:
// warps * depth * chunk bytes of buffers, then warps * 8 barriers.
__global__ void tma_copy(const unsigned char *host, unsigned char *dev, const u32 *perm, u64 hslots, u64 dslots, u64 total, u32 chunk, u32 depth) {
  extern __shared__ __align__(128) unsigned char smem[];
  const u32 warp = threadIdx.x / 32, lane = threadIdx.x & 31, wpb = blockDim.x / 32;
  unsigned char *buf = smem + (u64)warp * depth * chunk;
  u64 *bar = reinterpret_cast<u64 *>(smem + (u64)wpb * depth * chunk) + warp * 8;
  if (lane != 0) return;
  const u64 w = blockIdx.x * (u64)wpb + warp, nw = gridDim.x * (u64)wpb;
  for (u32 d = 0; d < depth; d++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar + d)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  u32 phase = 0;  // bit d: parity to wait for on barrier d
  for (u32 d = 0; d < depth; d++) {
    const u64 i = w + d * nw;
    if (i < total) bulk_load(buf + (u64)d * chunk, host + (u64)perm[i % hslots] * chunk, chunk, bar + d);
  }
  u32 d = 0;
  for (u64 i = w; i < total; i += nw) {
    bar_wait(bar + d, (phase >> d) & 1);
    phase ^= 1u << d;
    bulk_store(dev + (i % dslots) * chunk, buf + (u64)d * chunk, chunk);
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    const u64 next = i + depth * nw;
    if (next < total) bulk_load(buf + (u64)d * chunk, host + (u64)perm[next % hslots] * chunk, chunk, bar + d);
    d = (d + 1 == depth) ? 0 : d + 1;
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

static void fill(u32 *h, u64 words, u32 salt) {
  for (u64 i = 0; i < words; i++) h[i] = (u32)(i * 2654435761u) ^ salt;
}

static bool verify(const unsigned char *host, const unsigned char *dev, const std::vector<u32> &perm, u64 slots, u32 chunk, std::vector<unsigned char> &tmp) {
  CK(cudaMemcpy(tmp.data(), dev, slots * chunk, cudaMemcpyDeviceToHost));
  for (u64 i = 0; i < slots; i++)
    if (memcmp(tmp.data() + i * chunk, host + (u64)perm[i] * chunk, chunk) != 0) { printf("  MISMATCH at chunk %llu\n", i); return false; }
  return true;
}

int main() {
  const u64 bytes = 1ull << 30, moved = 4ull << 30;
  unsigned char *host, *dev;
  CK(cudaHostAlloc(&host, bytes, cudaHostAllocMapped));
  CK(cudaMalloc(&dev, bytes));
  std::vector<unsigned char> tmp(bytes);
  fill(reinterpret_cast<u32 *>(host), bytes / 4, 0);
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  {
    CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e0));
    for (int r = 0; r < 4; r++) CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("big H2D copy: %.2f GB/s\n", 4.0 * bytes / ms / 1e6);
  }
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(tma_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  u32 salt = 1;
  for (u32 chunk : {4096u, 16384u}) {
    const u64 slots = bytes / chunk, total = moved / chunk;
    std::vector<u32> perm(slots);
    for (u64 i = 0; i < slots; i++) perm[i] = (u32)i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(chunk));
    u32 *dperm; CK(cudaMalloc(&dperm, slots * 4));
    CK(cudaMemcpy(dperm, perm.data(), slots * 4, cudaMemcpyHostToDevice));
    struct Case { const char *name; int kind; int blocksPerSM; int threads; u32 depth; };
    std::vector<Case> cases = {
      {"lanes8", 0, 4, 256, 0}, {"lanes8", 0, 8, 256, 0}, {"lanes8", 0, 16, 128, 0},
      {"lanes16", 1, 4, 256, 0}, {"lanes16", 1, 8, 256, 0},
      {"tma", 2, 1, 32, 4}, {"tma", 2, 2, 128, 2}, {"tma", 2, 4, 128, 2}, {"tma", 2, 2, 256, 2},
      {"tma", 2, 4, 64, 4}, {"tma", 2, 8, 64, 2}, {"tma", 2, 8, 32, 4}, {"tma", 2, 16, 32, 2},
    };
    for (const Case &c : cases) {
      const size_t shm = c.kind == 2 ? (size_t)(c.threads / 32) * c.depth * chunk + (c.threads / 32) * 64 : 0;
      if (shm > 200 * 1024 || (size_t)c.blocksPerSM * shm > 227 * 1024) { printf("chunk %5u %-8s skip (shared memory)\n", chunk, c.name); continue; }
      const int blocks = sms * c.blocksPerSM;
      auto launch = [&](u64 n) {
        if (c.kind == 0) lanes_copy<8><<<blocks, c.threads>>>(host, dev, dperm, slots, slots, n, chunk);
        else if (c.kind == 1) lanes_copy<16><<<blocks, c.threads>>>(host, dev, dperm, slots, slots, n, chunk);
        else tma_copy<<<blocks, c.threads, shm>>>(host, dev, dperm, slots, slots, n, chunk, c.depth);
      };
      // correctness: one pass, then rewrite the host buffer and check again
      bool ok = true;
      for (int rep = 0; rep < 2 && ok; rep++) {
        fill(reinterpret_cast<u32 *>(host), bytes / 4, salt++);
        CK(cudaMemset(dev, 0, bytes));
        launch(slots);
        CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
        ok = verify(host, dev, perm, slots, chunk, tmp);
      }
      launch(total); CK(cudaDeviceSynchronize());
      float best = 1e30f;
      for (int r = 0; r < 3; r++) {
        CK(cudaEventRecord(e0)); launch(total); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); best = std::min(best, ms);
      }
      printf("chunk %5u %-8s blocks/SM %2d threads %3d depth %u: %6.2f GB/s  %s\n", chunk, c.name, c.blocksPerSM, c.threads, c.depth,
             (double)moved / best / 1e6, ok ? "verified" : "WRONG DATA");
    }
    CK(cudaFree(dperm));
  }
  return 0;
}
