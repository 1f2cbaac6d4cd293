// Declarations of the CUDA driver API subset this package calls, written
// here so the package builds without CUDA headers or libraries. Every call
// goes through a function pointer resolved with dlsym from libcuda.so.1 at
// run time.
//
// Calls that need a context take it as their first argument: the trampoline
// makes it current on the calling OS thread before the call, inside the same
// cgo call, so the goroutine scheduler moving goroutines between threads can
// never leave a call without its context.
#ifndef BAM_CUDA_DRIVER_H
#define BAM_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int bam_CUresult;
typedef int bam_CUdevice;
typedef void *bam_CUcontext;
typedef unsigned long long bam_CUdeviceptr;
typedef void *bam_CUmodule;
typedef void *bam_CUfunction;
typedef void *bam_CUstream;
typedef void *bam_CUevent;
typedef int bam_CUjit_option;

// Result codes the package produces itself (outside the driver's range).
#define BAM_ERR_NOT_LOADED 100000 // the symbol table is not loaded
#define BAM_ERR_NO_SYMBOL 100001  // a required symbol is missing

// bam_cu_load dlopens the driver (path, or libcuda.so.1 when path is empty)
// and resolves every symbol. It returns 0 on success; on failure it writes
// a message into err (of errlen bytes).
int bam_cu_load(const char *path, char *err, size_t errlen);

bam_CUresult bam_cuInit(unsigned flags);
bam_CUresult bam_cuDriverGetVersion(int *v);
bam_CUresult bam_cuDeviceGetCount(int *n);
bam_CUresult bam_cuDeviceGet(bam_CUdevice *d, int ordinal);
bam_CUresult bam_cuDeviceGetName(char *name, int len, bam_CUdevice d);
bam_CUresult bam_cuDeviceGetAttribute(int *v, int attr, bam_CUdevice d);
bam_CUresult bam_cuDeviceTotalMem(size_t *bytes, bam_CUdevice d);
bam_CUresult bam_cuDeviceGetPCIBusId(char *id, int len, bam_CUdevice d);
bam_CUresult bam_cuDevicePrimaryCtxRetain(bam_CUcontext *c, bam_CUdevice d);
bam_CUresult bam_cuDevicePrimaryCtxRelease(bam_CUdevice d);
bam_CUresult bam_cuGetErrorName(bam_CUresult r, const char **s);
bam_CUresult bam_cuGetErrorString(bam_CUresult r, const char **s);

bam_CUresult bam_cuCtxSynchronize(bam_CUcontext c);
bam_CUresult bam_cuMemGetInfo(bam_CUcontext c, size_t *free, size_t *total);
bam_CUresult bam_cuMemAlloc(bam_CUcontext c, bam_CUdeviceptr *p, size_t n);
bam_CUresult bam_cuMemFree(bam_CUcontext c, bam_CUdeviceptr p);
bam_CUresult bam_cuMemsetD8(bam_CUcontext c, bam_CUdeviceptr p, unsigned char v, size_t n);
bam_CUresult bam_cuMemsetD32(bam_CUcontext c, bam_CUdeviceptr p, unsigned v, size_t n);
bam_CUresult bam_cuMemsetD8Async(bam_CUcontext c, bam_CUdeviceptr p, unsigned char v, size_t n, bam_CUstream s);
bam_CUresult bam_cuMemsetD32Async(bam_CUcontext c, bam_CUdeviceptr p, unsigned v, size_t n, bam_CUstream s);
bam_CUresult bam_cuMemHostAlloc(bam_CUcontext c, void **p, size_t n, unsigned flags);
bam_CUresult bam_cuMemFreeHost(bam_CUcontext c, void *p);
bam_CUresult bam_cuMemHostGetDevicePointer(bam_CUcontext c, bam_CUdeviceptr *d, void *p);
bam_CUresult bam_cuMemHostRegister(bam_CUcontext c, void *p, size_t n, unsigned flags);
bam_CUresult bam_cuMemHostUnregister(bam_CUcontext c, void *p);
bam_CUresult bam_cuMemcpyHtoD(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n);
bam_CUresult bam_cuMemcpyDtoH(bam_CUcontext c, void *dst, bam_CUdeviceptr src, size_t n);
bam_CUresult bam_cuMemcpyDtoD(bam_CUcontext c, bam_CUdeviceptr dst, bam_CUdeviceptr src, size_t n);
bam_CUresult bam_cuMemcpyHtoDAsync(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n, bam_CUstream s);
bam_CUresult bam_cuMemcpyDtoHAsync(bam_CUcontext c, void *dst, bam_CUdeviceptr src, size_t n, bam_CUstream s);
bam_CUresult bam_cuMemcpyDtoDAsync(bam_CUcontext c, bam_CUdeviceptr dst, bam_CUdeviceptr src, size_t n, bam_CUstream s);

// One entry of a batched copy: addresses are device pointers or host
// addresses of pinned memory, by the batch's kind.
typedef struct {
	uint64_t dst;
	uint64_t src;
	uint64_t bytes;
} bam_copy;

// bam_copy_signal enqueues a host-to-device copy of n bytes and then a
// stream write of value to the 32-bit word at flag (cuStreamWriteValue32),
// ordered after the copy's writes. BAM_ERR_NO_SYMBOL when the driver lacks
// stream memory operations.
bam_CUresult bam_copy_signal(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n, bam_CUstream s, bam_CUdeviceptr flag, unsigned value);
// bam_copy_batch enqueues n copies of one kind (0 H2D, 1 D2H, 2 D2D) on s
// and, if sync is non-zero, waits for the stream. *failed receives the index
// of the first copy that failed to enqueue (or n).
bam_CUresult bam_copy_batch(bam_CUcontext c, int kind, const bam_copy *copies, size_t n, bam_CUstream s, int sync, size_t *failed);

bam_CUresult bam_cuModuleLoadDataEx(bam_CUcontext c, bam_CUmodule *m, const void *image,
                                     char *info, size_t infolen, char *errlog, size_t errlen, int lineinfo);
// bam_link_ptx JIT-compiles PTX through the driver's linker (cuLinkCreate,
// cuLinkAddData, cuLinkComplete) and loads the image: each function is
// compiled on its own, as a relocatable object, so calls follow the ABI
// (cuda.Context.LinkPTX).
// *stage tells which call failed: 0 cuLinkCreate, 1 cuLinkAddData, 2
// cuLinkComplete, 3 cuModuleLoadDataEx, 4 cuLinkDestroy.
bam_CUresult bam_link_ptx(bam_CUcontext c, bam_CUmodule *m, const char *ptx, size_t size, char *info, size_t infolen,
                          char *errlog, size_t errlen, int lineinfo, int *stage);
bam_CUresult bam_cuModuleUnload(bam_CUcontext c, bam_CUmodule m);
bam_CUresult bam_cuModuleGetFunction(bam_CUcontext c, bam_CUfunction *f, bam_CUmodule m, const char *name);
bam_CUresult bam_cuModuleGetGlobal(bam_CUcontext c, bam_CUdeviceptr *p, size_t *bytes, bam_CUmodule m, const char *name);
bam_CUresult bam_cuFuncGetAttribute(bam_CUcontext c, int *v, int attr, bam_CUfunction f);
// Each BAM_ERR_NO_SYMBOL where the driver lacks the function.
bam_CUresult bam_cuFuncGetParamCount(bam_CUcontext c, bam_CUfunction f, size_t *n);
bam_CUresult bam_cuFuncGetParamInfo(bam_CUcontext c, bam_CUfunction f, size_t i, size_t *off, size_t *size);
bam_CUresult bam_cuOccupancyMaxActiveBlocksPerMultiprocessor(bam_CUcontext c, int *n, bam_CUfunction f, int block, size_t smem);
bam_CUresult bam_cuLaunchKernel(bam_CUcontext c, bam_CUfunction f,
                                unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz,
                                unsigned smem, bam_CUstream s, void **params);

bam_CUresult bam_cuStreamCreate(bam_CUcontext c, bam_CUstream *s, unsigned flags);
bam_CUresult bam_cuStreamDestroy(bam_CUcontext c, bam_CUstream s);
bam_CUresult bam_cuStreamSynchronize(bam_CUcontext c, bam_CUstream s);
bam_CUresult bam_cuStreamQuery(bam_CUcontext c, bam_CUstream s);
bam_CUresult bam_cuEventCreate(bam_CUcontext c, bam_CUevent *e, unsigned flags);
bam_CUresult bam_cuEventDestroy(bam_CUcontext c, bam_CUevent e);
bam_CUresult bam_cuEventRecord(bam_CUcontext c, bam_CUevent e, bam_CUstream s);
bam_CUresult bam_cuEventSynchronize(bam_CUcontext c, bam_CUevent e);
bam_CUresult bam_cuEventQuery(bam_CUcontext c, bam_CUevent e);
bam_CUresult bam_cuEventElapsedTime(bam_CUcontext c, float *ms, bam_CUevent start, bam_CUevent end);

// NVRTC, loaded separately (bam_nvrtc_load) from libnvrtc.
typedef int bam_nvrtcResult;
typedef void *bam_nvrtcProgram;

// bam_nvrtc_load tries each of the n library names in turn; it returns the
// index of the one loaded, or -1 with a message in err.
int bam_nvrtc_load(const char **names, int n, char *err, size_t errlen);
bam_nvrtcResult bam_nvrtcVersion(int *major, int *minor);
const char *bam_nvrtcGetErrorString(bam_nvrtcResult r);
bam_nvrtcResult bam_nvrtcCreateProgram(bam_nvrtcProgram *p, const char *src, const char *name,
                                       int nheaders, const char **headers, const char **names);
bam_nvrtcResult bam_nvrtcDestroyProgram(bam_nvrtcProgram *p);
bam_nvrtcResult bam_nvrtcCompileProgram(bam_nvrtcProgram p, int nopts, const char **opts);
bam_nvrtcResult bam_nvrtcGetPTXSize(bam_nvrtcProgram p, size_t *n);
bam_nvrtcResult bam_nvrtcGetPTX(bam_nvrtcProgram p, char *ptx);
bam_nvrtcResult bam_nvrtcGetProgramLogSize(bam_nvrtcProgram p, size_t *n);
bam_nvrtcResult bam_nvrtcGetProgramLog(bam_nvrtcProgram p, char *log);

#endif
