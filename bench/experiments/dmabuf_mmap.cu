// dmabuf_mmap asks whether a Target could write fills into GPU memory with
// the host's own stores, without a kernel module beyond the driver: CUDA
// exports device memory as a dma-buf (cuMemGetHandleForAddressRange), and
// if the host could map that fd, its workers could store each line
// straight into the cache (posted writes, no GPU loads of pinned memory,
// whose rate bounds the bounce route at about 0.93 of the copy engines').
// It exports 256 MiB, maps the fd read-write (then read-only), and, where
// that works, times host stores into the mapping from 1 to 16 threads and
// reads one page back with the copy engine.
//
// Standalone: nvcc -O2 -std=c++17 -arch=sm_90 -o dmabuf_mmap
// dmabuf_mmap.cu -lcuda && ./dmabuf_mmap. Results:
// bench/results/logs/queue-depth-H200-20261125.txt (part 2).
#include <cuda.h>
#include <cstdio>
#include <cstring>
#include <cerrno>
#include <sys/mman.h>
#include <unistd.h>
#include <thread>
#include <vector>
#include <chrono>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); printf("%s: %s\n", #x, s); return 1; } } while (0)
int main() {
  CK(cuInit(0)); CUdevice d; CK(cuDeviceGet(&d, 0)); CUcontext c; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
  int sup = 0; CK(cuDeviceGetAttribute(&sup, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, d)); printf("dma-buf supported: %d\n", sup);
  size_t sz = 256ull << 20; CUdeviceptr p; CK(cuMemAlloc(&p, sz + (2 << 20)));
  CUdeviceptr a = (p + (2 << 20) - 1) & ~((CUdeviceptr)(2 << 20) - 1);
  int fd = -1; CUresult r = cuMemGetHandleForAddressRange(&fd, a, sz, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  printf("export: %d fd %d\n", (int)r, fd);
  if (r != CUDA_SUCCESS) return 0;
  void *m = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) { printf("mmap rw: %s\n", strerror(errno)); m = mmap(nullptr, sz, PROT_READ, MAP_SHARED, fd, 0); printf("mmap ro: %s\n", m == MAP_FAILED ? strerror(errno) : "ok"); return 0; }
  printf("mmap ok\n");
  std::vector<char> src(sz, 7);
  for (int th : {1, 4, 8, 16}) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts; for (int t = 0; t < th; t++) ts.emplace_back([&, t] { size_t n = sz / th; memcpy((char*)m + t * n, src.data() + t * n, n); });
    for (auto &t : ts) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("cpu stores %2d threads: %.2f GB/s\n", th, sz / s / 1e9);
  }
  std::vector<char> back(4096); CK(cuMemcpyDtoH(back.data(), a + 12345, 4096)); printf("readback ok=%d\n", back[0] == 7 && back[4095] == 7);
  return 0;
}
