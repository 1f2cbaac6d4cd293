// ce_small_copies measures the GPU copy engines on many small host-to-device
// copies: the question is whether the Target could move 4 KiB lines into the
// cache with the copy engine (the copy-engine fill route) at the PCIe rate,
// if it issued the copies in batches instead of one synchronised copy per
// command. Pinned host slots are copied to random line-sized slots of a
// 1 GiB device buffer, 2 GiB per case, from 4 or 16 host threads with a
// stream each, one copy per call (batch 1) or cudaMemcpyBatchAsync batches
// of 32 to 1024 copies, at most four batches in flight per thread.
//
// Standalone (not part of the build): nvcc -O2 -std=c++17 -arch=sm_90 -o ce
// ce_small_copies.cu && ./ce. Results: bench/results/logs/ce-small-copies-*.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <thread>
#include <chrono>
#include <atomic>
#include <algorithm>
#include <random>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1);} } while (0)
using clk = std::chrono::steady_clock;
static double secs(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int main() {
  const size_t devBytes = 1ull << 30, hostBytes = 256ull << 20;
  char *dev, *host;
  CK(cudaMalloc(&dev, devBytes));
  CK(cudaMallocHost(&host, hostBytes));
  memset(host, 1, hostBytes);
  // ceiling
  {
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMemcpyAsync(dev, host, hostBytes, cudaMemcpyHostToDevice, s)); CK(cudaStreamSynchronize(s));
    auto t0 = clk::now();
    for (int r = 0; r < 4; r++) CK(cudaMemcpyAsync(dev, host, hostBytes, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
    printf("big H2D: %.2f GB/s\n", 4.0 * hostBytes / secs(t0, clk::now()) / 1e9);
  }
  for (size_t chunk : {4096ul, 8192ul, 16384ul, 65536ul}) {
    const size_t slots = devBytes / chunk, hslots = hostBytes / chunk;
    std::vector<size_t> perm(slots); for (size_t i = 0; i < slots; i++) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(1));
    const size_t total = std::min<size_t>(slots, (size_t)(2ull << 30) / chunk);  // 2 GiB moved per test, capped by slots
    for (int threads : {4, 16}) {
      for (int batch : {1, 32, 256, 1024}) {
        std::vector<std::thread> th; std::atomic<size_t> next{0};
        std::vector<cudaStream_t> st(threads);
        for (auto &s : st) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        std::atomic<long> lat_ns{0}; std::atomic<long> lat_n{0};
        auto t0 = clk::now();
        for (int t = 0; t < threads; t++) th.emplace_back([&, t] {
          cudaStream_t s = st[t];
          std::vector<void*> d(batch), sr(batch); std::vector<size_t> sz(batch, chunk);
#if CUDART_VERSION >= 12080
          cudaMemcpyAttributes attr = {}; attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
          size_t aidx = 0;
#endif
          cudaEvent_t ev[4]; for (auto &evx : ev) CK(cudaEventCreateWithFlags(&evx, cudaEventDisableTiming));
          clk::time_point sub[4]; int k = 0; bool used[4] = {};
          for (;;) {
            size_t i0 = next.fetch_add(batch); if (i0 >= total) break;
            int n = (int)std::min<size_t>(batch, total - i0);
            if (used[k]) { CK(cudaEventSynchronize(ev[k])); lat_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now() - sub[k]).count(); lat_n++; }
            for (int j = 0; j < n; j++) { d[j] = dev + perm[(i0 + j) % slots] * chunk; sr[j] = host + ((i0 + j) % hslots) * chunk; }
            sub[k] = clk::now();
            if (batch == 1) CK(cudaMemcpyAsync(d[0], sr[0], chunk, cudaMemcpyHostToDevice, s));
            else {
#if CUDART_VERSION < 12080
              for (int j = 0; j < n; j++) CK(cudaMemcpyAsync(d[j], sr[j], chunk, cudaMemcpyHostToDevice, s));
#elif CUDART_VERSION >= 13000
              CK(cudaMemcpyBatchAsync(d.data(), sr.data(), sz.data(), n, &attr, &aidx, 1, s));
#else
              size_t fail; CK(cudaMemcpyBatchAsync(d.data(), sr.data(), sz.data(), n, &attr, &aidx, 1, &fail, s));
#endif
            }
            CK(cudaEventRecord(ev[k], s)); used[k] = true; k = (k + 1) & 3;
          }
          CK(cudaStreamSynchronize(s));
        });
        for (auto &x : th) x.join();
        double dt = secs(t0, clk::now());
        printf("chunk %6zu threads %2d batch %4d: %6.2f GB/s  (%.2f M copies/s)  batch latency %.1f us\n", chunk, threads, batch,
               total * chunk / dt / 1e9, total / dt / 1e6, lat_n ? lat_ns / 1e3 / lat_n : 0.0);
        for (auto &s : st) CK(cudaStreamDestroy(s));
      }
    }
  }
  return 0;
}
