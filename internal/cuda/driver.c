// Run-time binding of the CUDA driver API and NVRTC: dlopen, dlsym and one
// small trampoline per call. See driver.h.
#include "driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// ---- driver symbol table -------------------------------------------------

typedef bam_CUresult (*fn_u)(unsigned);
typedef bam_CUresult (*fn_pi)(int *);
typedef bam_CUresult (*fn_dev_get)(bam_CUdevice *, int);
typedef bam_CUresult (*fn_dev_name)(char *, int, bam_CUdevice);
typedef bam_CUresult (*fn_dev_attr)(int *, int, bam_CUdevice);
typedef bam_CUresult (*fn_dev_mem)(size_t *, bam_CUdevice);
typedef bam_CUresult (*fn_pctx_retain)(bam_CUcontext *, bam_CUdevice);
typedef bam_CUresult (*fn_dev)(bam_CUdevice);
typedef bam_CUresult (*fn_errstr)(bam_CUresult, const char **);
typedef bam_CUresult (*fn_ctx)(bam_CUcontext);
typedef bam_CUresult (*fn_void)(void);
typedef bam_CUresult (*fn_meminfo)(size_t *, size_t *);
typedef bam_CUresult (*fn_alloc)(bam_CUdeviceptr *, size_t);
typedef bam_CUresult (*fn_free)(bam_CUdeviceptr);
typedef bam_CUresult (*fn_memset8)(bam_CUdeviceptr, unsigned char, size_t);
typedef bam_CUresult (*fn_memset32)(bam_CUdeviceptr, unsigned, size_t);
typedef bam_CUresult (*fn_memset8a)(bam_CUdeviceptr, unsigned char, size_t, bam_CUstream);
typedef bam_CUresult (*fn_memset32a)(bam_CUdeviceptr, unsigned, size_t, bam_CUstream);
typedef bam_CUresult (*fn_hostalloc)(void **, size_t, unsigned);
typedef bam_CUresult (*fn_hostfree)(void *);
typedef bam_CUresult (*fn_hostdevptr)(bam_CUdeviceptr *, void *, unsigned);
typedef bam_CUresult (*fn_hostreg)(void *, size_t, unsigned);
typedef bam_CUresult (*fn_htod)(bam_CUdeviceptr, const void *, size_t);
typedef bam_CUresult (*fn_dtoh)(void *, bam_CUdeviceptr, size_t);
typedef bam_CUresult (*fn_dtod)(bam_CUdeviceptr, bam_CUdeviceptr, size_t);
typedef bam_CUresult (*fn_htoda)(bam_CUdeviceptr, const void *, size_t, bam_CUstream);
typedef bam_CUresult (*fn_dtoha)(void *, bam_CUdeviceptr, size_t, bam_CUstream);
typedef bam_CUresult (*fn_dtoda)(bam_CUdeviceptr, bam_CUdeviceptr, size_t, bam_CUstream);
typedef bam_CUresult (*fn_modload)(bam_CUmodule *, const void *, unsigned, bam_CUjit_option *, void **);
typedef bam_CUresult (*fn_modunload)(bam_CUmodule);
typedef bam_CUresult (*fn_linkcreate)(unsigned, bam_CUjit_option *, void **, void **);
typedef bam_CUresult (*fn_linkadd)(void *, int, void *, size_t, const char *, unsigned, bam_CUjit_option *, void **);
typedef bam_CUresult (*fn_linkcomplete)(void *, void **, size_t *);
typedef bam_CUresult (*fn_linkdestroy)(void *);
typedef bam_CUresult (*fn_modfunc)(bam_CUfunction *, bam_CUmodule, const char *);
typedef bam_CUresult (*fn_modglobal)(bam_CUdeviceptr *, size_t *, bam_CUmodule, const char *);
typedef bam_CUresult (*fn_funcattr)(int *, int, bam_CUfunction);
typedef bam_CUresult (*fn_paraminfo)(bam_CUfunction, size_t, size_t *, size_t *);
typedef bam_CUresult (*fn_paramcount)(bam_CUfunction, size_t *);
typedef bam_CUresult (*fn_occupancy)(int *, bam_CUfunction, int, size_t);
typedef bam_CUresult (*fn_launch)(bam_CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, bam_CUstream, void **, void **);
typedef bam_CUresult (*fn_streamcreate)(bam_CUstream *, unsigned);
typedef bam_CUresult (*fn_stream)(bam_CUstream);
typedef bam_CUresult (*fn_eventcreate)(bam_CUevent *, unsigned);
typedef bam_CUresult (*fn_event)(bam_CUevent);
typedef bam_CUresult (*fn_eventrecord)(bam_CUevent, bam_CUstream);
typedef bam_CUresult (*fn_elapsed)(float *, bam_CUevent, bam_CUevent);
typedef bam_CUresult (*fn_writevalue32)(bam_CUstream, bam_CUdeviceptr, unsigned, unsigned);

static struct {
	int loaded;
	fn_u cuInit;
	fn_pi cuDriverGetVersion;
	fn_pi cuDeviceGetCount;
	fn_dev_get cuDeviceGet;
	fn_dev_name cuDeviceGetName;
	fn_dev_attr cuDeviceGetAttribute;
	fn_dev_mem cuDeviceTotalMem;
	fn_dev_name cuDeviceGetPCIBusId;
	fn_pctx_retain cuDevicePrimaryCtxRetain;
	fn_dev cuDevicePrimaryCtxRelease;
	fn_errstr cuGetErrorName;
	fn_errstr cuGetErrorString;
	fn_ctx cuCtxSetCurrent;
	fn_void cuCtxSynchronize;
	fn_meminfo cuMemGetInfo;
	fn_alloc cuMemAlloc;
	fn_free cuMemFree;
	fn_memset8 cuMemsetD8;
	fn_memset32 cuMemsetD32;
	fn_memset8a cuMemsetD8Async;
	fn_memset32a cuMemsetD32Async;
	fn_hostalloc cuMemHostAlloc;
	fn_hostfree cuMemFreeHost;
	fn_hostdevptr cuMemHostGetDevicePointer;
	fn_hostreg cuMemHostRegister;
	fn_hostfree cuMemHostUnregister;
	fn_htod cuMemcpyHtoD;
	fn_dtoh cuMemcpyDtoH;
	fn_dtod cuMemcpyDtoD;
	fn_htoda cuMemcpyHtoDAsync;
	fn_dtoha cuMemcpyDtoHAsync;
	fn_dtoda cuMemcpyDtoDAsync;
	fn_modload cuModuleLoadDataEx;
	fn_modunload cuModuleUnload;
	fn_linkcreate cuLinkCreate;
	fn_linkadd cuLinkAddData;
	fn_linkcomplete cuLinkComplete;
	fn_linkdestroy cuLinkDestroy;
	fn_modfunc cuModuleGetFunction;
	fn_modglobal cuModuleGetGlobal;
	fn_funcattr cuFuncGetAttribute;
	fn_paraminfo cuFuncGetParamInfo;   // optional: newer drivers only
	fn_paramcount cuFuncGetParamCount; // optional: newer drivers only
	fn_occupancy cuOccupancyMaxActiveBlocksPerMultiprocessor;
	fn_launch cuLaunchKernel;
	fn_streamcreate cuStreamCreate;
	fn_stream cuStreamDestroy;
	fn_stream cuStreamSynchronize;
	fn_stream cuStreamQuery;
	fn_eventcreate cuEventCreate;
	fn_event cuEventDestroy;
	fn_eventrecord cuEventRecord;
	fn_event cuEventSynchronize;
	fn_event cuEventQuery;
	fn_elapsed cuEventElapsedTime;
	fn_writevalue32 cuStreamWriteValue32; // optional
} cu;

// resolve looks up the first of up to two names that the library exports.
static void *resolve(void *lib, const char *name, const char *alt, char *err, size_t errlen, int *ok) {
	void *p = dlsym(lib, name);
	if (!p && alt) p = dlsym(lib, alt);
	if (!p && *ok) {
		snprintf(err, errlen, "symbol %s missing from the CUDA driver library", name);
		*ok = 0;
	}
	return p;
}

#define SYM(field, name, alt) cu.field = (void *)resolve(lib, name, alt, err, errlen, &ok)

int bam_cu_load(const char *path, char *err, size_t errlen) {
	if (cu.loaded) return 0;
	void *lib = NULL;
	if (path && path[0]) {
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else {
		lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen libcuda.so.1 failed");
		return -1;
	}
	int ok = 1;
	SYM(cuInit, "cuInit", NULL);
	SYM(cuDriverGetVersion, "cuDriverGetVersion", NULL);
	SYM(cuDeviceGetCount, "cuDeviceGetCount", NULL);
	SYM(cuDeviceGet, "cuDeviceGet", NULL);
	SYM(cuDeviceGetName, "cuDeviceGetName", NULL);
	SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL);
	SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL);
	SYM(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", NULL);
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM(cuGetErrorName, "cuGetErrorName", NULL);
	SYM(cuGetErrorString, "cuGetErrorString", NULL);
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent", NULL);
	SYM(cuCtxSynchronize, "cuCtxSynchronize", NULL);
	SYM(cuMemGetInfo, "cuMemGetInfo_v2", NULL);
	SYM(cuMemAlloc, "cuMemAlloc_v2", NULL);
	SYM(cuMemFree, "cuMemFree_v2", NULL);
	SYM(cuMemsetD8, "cuMemsetD8_v2", NULL);
	SYM(cuMemsetD32, "cuMemsetD32_v2", NULL);
	SYM(cuMemsetD8Async, "cuMemsetD8Async", NULL);
	SYM(cuMemsetD32Async, "cuMemsetD32Async", NULL);
	SYM(cuMemHostAlloc, "cuMemHostAlloc", NULL);
	SYM(cuMemFreeHost, "cuMemFreeHost", NULL);
	SYM(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", NULL);
	SYM(cuMemHostRegister, "cuMemHostRegister_v2", NULL);
	SYM(cuMemHostUnregister, "cuMemHostUnregister", NULL);
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL);
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL);
	SYM(cuMemcpyDtoD, "cuMemcpyDtoD_v2", NULL);
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL);
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL);
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL);
	SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx", NULL);
	SYM(cuModuleUnload, "cuModuleUnload", NULL);
	SYM(cuLinkCreate, "cuLinkCreate_v2", "cuLinkCreate");
	SYM(cuLinkAddData, "cuLinkAddData_v2", "cuLinkAddData");
	SYM(cuLinkComplete, "cuLinkComplete", NULL);
	SYM(cuLinkDestroy, "cuLinkDestroy", NULL);
	SYM(cuModuleGetFunction, "cuModuleGetFunction", NULL);
	SYM(cuModuleGetGlobal, "cuModuleGetGlobal_v2", NULL);
	SYM(cuFuncGetAttribute, "cuFuncGetAttribute", NULL);
	SYM(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", NULL);
	SYM(cuLaunchKernel, "cuLaunchKernel", NULL);
	SYM(cuStreamCreate, "cuStreamCreate", NULL);
	SYM(cuStreamDestroy, "cuStreamDestroy_v2", NULL);
	SYM(cuStreamSynchronize, "cuStreamSynchronize", NULL);
	SYM(cuStreamQuery, "cuStreamQuery", NULL);
	SYM(cuEventCreate, "cuEventCreate", NULL);
	SYM(cuEventDestroy, "cuEventDestroy_v2", NULL);
	SYM(cuEventRecord, "cuEventRecord", NULL);
	SYM(cuEventSynchronize, "cuEventSynchronize", NULL);
	SYM(cuEventQuery, "cuEventQuery", NULL);
	// The unversioned name has the same signature and exists in every driver.
	SYM(cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime_v2");
	// Optional: older drivers lack them, and launches then go unchecked.
	cu.cuFuncGetParamInfo = (fn_paraminfo)dlsym(lib, "cuFuncGetParamInfo");
	cu.cuFuncGetParamCount = (fn_paramcount)dlsym(lib, "cuFuncGetParamCount");
	// Optional: stream memory operations (CopyHtoDSignal).
	cu.cuStreamWriteValue32 = (fn_writevalue32)dlsym(lib, "cuStreamWriteValue32_v2");
	if (!cu.cuStreamWriteValue32) cu.cuStreamWriteValue32 = (fn_writevalue32)dlsym(lib, "cuStreamWriteValue32");
	if (!ok) return -1;
	cu.loaded = 1;
	return 0;
}

#define NEED_LOADED() \
	do { \
		if (!cu.loaded) return BAM_ERR_NOT_LOADED; \
	} while (0)

// WITH_CTX makes c current on this OS thread; every context-bound call
// starts with it (see driver.h).
#define WITH_CTX(c) \
	do { \
		if (!cu.loaded) return BAM_ERR_NOT_LOADED; \
		bam_CUresult r_ = cu.cuCtxSetCurrent(c); \
		if (r_ != 0) return r_; \
	} while (0)

bam_CUresult bam_cuInit(unsigned flags) { NEED_LOADED(); return cu.cuInit(flags); }
bam_CUresult bam_cuDriverGetVersion(int *v) { NEED_LOADED(); return cu.cuDriverGetVersion(v); }
bam_CUresult bam_cuDeviceGetCount(int *n) { NEED_LOADED(); return cu.cuDeviceGetCount(n); }
bam_CUresult bam_cuDeviceGet(bam_CUdevice *d, int ordinal) { NEED_LOADED(); return cu.cuDeviceGet(d, ordinal); }
bam_CUresult bam_cuDeviceGetName(char *name, int len, bam_CUdevice d) { NEED_LOADED(); return cu.cuDeviceGetName(name, len, d); }
bam_CUresult bam_cuDeviceGetAttribute(int *v, int attr, bam_CUdevice d) { NEED_LOADED(); return cu.cuDeviceGetAttribute(v, attr, d); }
bam_CUresult bam_cuDeviceTotalMem(size_t *bytes, bam_CUdevice d) { NEED_LOADED(); return cu.cuDeviceTotalMem(bytes, d); }
bam_CUresult bam_cuDeviceGetPCIBusId(char *id, int len, bam_CUdevice d) { NEED_LOADED(); return cu.cuDeviceGetPCIBusId(id, len, d); }
bam_CUresult bam_cuDevicePrimaryCtxRetain(bam_CUcontext *c, bam_CUdevice d) { NEED_LOADED(); return cu.cuDevicePrimaryCtxRetain(c, d); }
bam_CUresult bam_cuDevicePrimaryCtxRelease(bam_CUdevice d) { NEED_LOADED(); return cu.cuDevicePrimaryCtxRelease(d); }
bam_CUresult bam_cuGetErrorName(bam_CUresult r, const char **s) { NEED_LOADED(); return cu.cuGetErrorName(r, s); }
bam_CUresult bam_cuGetErrorString(bam_CUresult r, const char **s) { NEED_LOADED(); return cu.cuGetErrorString(r, s); }

bam_CUresult bam_cuCtxSynchronize(bam_CUcontext c) { WITH_CTX(c); return cu.cuCtxSynchronize(); }
bam_CUresult bam_cuMemGetInfo(bam_CUcontext c, size_t *free, size_t *total) { WITH_CTX(c); return cu.cuMemGetInfo(free, total); }
bam_CUresult bam_cuMemAlloc(bam_CUcontext c, bam_CUdeviceptr *p, size_t n) { WITH_CTX(c); return cu.cuMemAlloc(p, n); }
bam_CUresult bam_cuMemFree(bam_CUcontext c, bam_CUdeviceptr p) { WITH_CTX(c); return cu.cuMemFree(p); }
// legacy_done waits, after a call the driver ran on the legacy default
// stream, until that stream is done. The driver may return from a memset
// of device memory, a copy between device addresses or a copy from
// pageable host memory before it finishes (CUDA's API synchronisation
// behaviour), and bam's streams are non-blocking: a kernel launched on one
// right after could run before it, or during it. These calls promise to
// have finished when they return.
static bam_CUresult legacy_done(bam_CUresult r) { return r != 0 ? r : cu.cuStreamSynchronize((bam_CUstream)0); }

bam_CUresult bam_cuMemsetD8(bam_CUcontext c, bam_CUdeviceptr p, unsigned char v, size_t n) { WITH_CTX(c); return legacy_done(cu.cuMemsetD8(p, v, n)); }
bam_CUresult bam_cuMemsetD32(bam_CUcontext c, bam_CUdeviceptr p, unsigned v, size_t n) { WITH_CTX(c); return legacy_done(cu.cuMemsetD32(p, v, n)); }
bam_CUresult bam_cuMemsetD8Async(bam_CUcontext c, bam_CUdeviceptr p, unsigned char v, size_t n, bam_CUstream s) { WITH_CTX(c); return cu.cuMemsetD8Async(p, v, n, s); }
bam_CUresult bam_cuMemsetD32Async(bam_CUcontext c, bam_CUdeviceptr p, unsigned v, size_t n, bam_CUstream s) { WITH_CTX(c); return cu.cuMemsetD32Async(p, v, n, s); }
bam_CUresult bam_cuMemHostAlloc(bam_CUcontext c, void **p, size_t n, unsigned flags) { WITH_CTX(c); return cu.cuMemHostAlloc(p, n, flags); }
bam_CUresult bam_cuMemFreeHost(bam_CUcontext c, void *p) { WITH_CTX(c); return cu.cuMemFreeHost(p); }
bam_CUresult bam_cuMemHostGetDevicePointer(bam_CUcontext c, bam_CUdeviceptr *d, void *p) { WITH_CTX(c); return cu.cuMemHostGetDevicePointer(d, p, 0); }
bam_CUresult bam_cuMemHostRegister(bam_CUcontext c, void *p, size_t n, unsigned flags) { WITH_CTX(c); return cu.cuMemHostRegister(p, n, flags); }
bam_CUresult bam_cuMemHostUnregister(bam_CUcontext c, void *p) { WITH_CTX(c); return cu.cuMemHostUnregister(p); }
bam_CUresult bam_cuMemcpyHtoD(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n) { WITH_CTX(c); return legacy_done(cu.cuMemcpyHtoD(dst, src, n)); }
bam_CUresult bam_cuMemcpyDtoH(bam_CUcontext c, void *dst, bam_CUdeviceptr src, size_t n) { WITH_CTX(c); return cu.cuMemcpyDtoH(dst, src, n); }
bam_CUresult bam_cuMemcpyDtoD(bam_CUcontext c, bam_CUdeviceptr dst, bam_CUdeviceptr src, size_t n) { WITH_CTX(c); return legacy_done(cu.cuMemcpyDtoD(dst, src, n)); }
bam_CUresult bam_cuMemcpyHtoDAsync(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n, bam_CUstream s) { WITH_CTX(c); return cu.cuMemcpyHtoDAsync(dst, src, n, s); }
bam_CUresult bam_cuMemcpyDtoHAsync(bam_CUcontext c, void *dst, bam_CUdeviceptr src, size_t n, bam_CUstream s) { WITH_CTX(c); return cu.cuMemcpyDtoHAsync(dst, src, n, s); }
bam_CUresult bam_cuMemcpyDtoDAsync(bam_CUcontext c, bam_CUdeviceptr dst, bam_CUdeviceptr src, size_t n, bam_CUstream s) { WITH_CTX(c); return cu.cuMemcpyDtoDAsync(dst, src, n, s); }

bam_CUresult bam_copy_signal(bam_CUcontext c, bam_CUdeviceptr dst, const void *src, size_t n, bam_CUstream s, bam_CUdeviceptr flag, unsigned value) {
	WITH_CTX(c);
	if (!cu.cuStreamWriteValue32) return BAM_ERR_NO_SYMBOL;
	bam_CUresult r = cu.cuMemcpyHtoDAsync(dst, src, n, s);
	if (r != 0) return r;
	// Flags 0: the write waits for the copy's writes to be visible.
	return cu.cuStreamWriteValue32(s, flag, value, 0);
}

bam_CUresult bam_copy_batch(bam_CUcontext c, int kind, const bam_copy *copies, size_t n, bam_CUstream s, int sync, size_t *failed) {
	WITH_CTX(c);
	*failed = n;
	for (size_t i = 0; i < n; i++) {
		const bam_copy *k = &copies[i];
		bam_CUresult r;
		switch (kind) {
		case 0: r = cu.cuMemcpyHtoDAsync(k->dst, (const void *)(uintptr_t)k->src, k->bytes, s); break;
		case 1: r = cu.cuMemcpyDtoHAsync((void *)(uintptr_t)k->dst, k->src, k->bytes, s); break;
		default: r = cu.cuMemcpyDtoDAsync(k->dst, k->src, k->bytes, s); break;
		}
		if (r != 0) {
			*failed = i;
			return r;
		}
	}
	return sync ? cu.cuStreamSynchronize(s) : 0;
}

enum {
	JIT_INFO_LOG_BUFFER = 3,
	JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
	JIT_ERROR_LOG_BUFFER = 5,
	JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
	JIT_LOG_VERBOSE = 12,
	JIT_GENERATE_LINE_INFO = 13,
};

// jit_options fills the options both loads pass: the two logs, verbose
// (register use per function) and line info.
static unsigned jit_options(bam_CUjit_option *opts, void **vals, char *info, size_t infolen, char *errlog, size_t errlen,
                            int lineinfo) {
	opts[0] = JIT_INFO_LOG_BUFFER, vals[0] = info;
	opts[1] = JIT_INFO_LOG_BUFFER_SIZE_BYTES, vals[1] = (void *)(uintptr_t)infolen;
	opts[2] = JIT_ERROR_LOG_BUFFER, vals[2] = errlog;
	opts[3] = JIT_ERROR_LOG_BUFFER_SIZE_BYTES, vals[3] = (void *)(uintptr_t)errlen;
	opts[4] = JIT_LOG_VERBOSE, vals[4] = (void *)(uintptr_t)1;
	opts[5] = JIT_GENERATE_LINE_INFO, vals[5] = (void *)(uintptr_t)(lineinfo ? 1 : 0);
	if (infolen) info[0] = 0;
	if (errlen) errlog[0] = 0;
	return 6;
}

// terminate_logs ends both logs with a NUL: the driver writes terminated
// logs, but a full buffer is cut defensively anyway.
static void terminate_logs(char *info, size_t infolen, char *errlog, size_t errlen) {
	if (infolen) info[infolen - 1] = 0;
	if (errlen) errlog[errlen - 1] = 0;
}

bam_CUresult bam_cuModuleLoadDataEx(bam_CUcontext c, bam_CUmodule *m, const void *image,
                                     char *info, size_t infolen, char *errlog, size_t errlen, int lineinfo) {
	WITH_CTX(c);
	bam_CUjit_option opts[6];
	void *vals[6];
	const unsigned n = jit_options(opts, vals, info, infolen, errlog, errlen, lineinfo);
	bam_CUresult r = cu.cuModuleLoadDataEx(m, image, n, opts, vals);
	terminate_logs(info, infolen, errlog, errlen);
	return r;
}

enum { JIT_INPUT_PTX = 1 };

bam_CUresult bam_link_ptx(bam_CUcontext c, bam_CUmodule *m, const char *ptx, size_t size, char *info, size_t infolen,
                          char *errlog, size_t errlen, int lineinfo, int *stage) {
	WITH_CTX(c);
	bam_CUjit_option opts[6];
	void *vals[6];
	const unsigned n = jit_options(opts, vals, info, infolen, errlog, errlen, lineinfo);
	void *state = NULL, *cubin = NULL;
	size_t cubin_size = 0;
	*stage = 0;
	bam_CUresult r = cu.cuLinkCreate(n, opts, vals, &state);
	if (r != 0) goto out;
	*stage = 1;
	r = cu.cuLinkAddData(state, JIT_INPUT_PTX, (void *)ptx, size, "module.ptx", 0, NULL, NULL);
	if (r != 0) goto out;
	*stage = 2;
	r = cu.cuLinkComplete(state, &cubin, &cubin_size);
	if (r != 0) goto out;
	*stage = 3;
	// The image belongs to the link state until it is destroyed.
	r = cu.cuModuleLoadDataEx(m, cubin, 0, NULL, NULL);
out:
	if (state) {
		bam_CUresult d = cu.cuLinkDestroy(state);
		if (r == 0 && d != 0) {
			// Report the failure without leaking the module loaded.
			cu.cuModuleUnload(*m);
			*m = NULL;
			*stage = 4;
			r = d;
		}
	}
	terminate_logs(info, infolen, errlog, errlen);
	return r;
}

bam_CUresult bam_cuModuleUnload(bam_CUcontext c, bam_CUmodule m) { WITH_CTX(c); return cu.cuModuleUnload(m); }
bam_CUresult bam_cuModuleGetFunction(bam_CUcontext c, bam_CUfunction *f, bam_CUmodule m, const char *name) { WITH_CTX(c); return cu.cuModuleGetFunction(f, m, name); }
bam_CUresult bam_cuModuleGetGlobal(bam_CUcontext c, bam_CUdeviceptr *p, size_t *bytes, bam_CUmodule m, const char *name) { WITH_CTX(c); return cu.cuModuleGetGlobal(p, bytes, m, name); }
bam_CUresult bam_cuFuncGetAttribute(bam_CUcontext c, int *v, int attr, bam_CUfunction f) { WITH_CTX(c); return cu.cuFuncGetAttribute(v, attr, f); }
bam_CUresult bam_cuFuncGetParamCount(bam_CUcontext c, bam_CUfunction f, size_t *n) {
	WITH_CTX(c);
	if (!cu.cuFuncGetParamCount) return BAM_ERR_NO_SYMBOL;
	return cu.cuFuncGetParamCount(f, n);
}
bam_CUresult bam_cuFuncGetParamInfo(bam_CUcontext c, bam_CUfunction f, size_t i, size_t *off, size_t *size) {
	WITH_CTX(c);
	if (!cu.cuFuncGetParamInfo) return BAM_ERR_NO_SYMBOL;
	return cu.cuFuncGetParamInfo(f, i, off, size);
}
bam_CUresult bam_cuOccupancyMaxActiveBlocksPerMultiprocessor(bam_CUcontext c, int *n, bam_CUfunction f, int block, size_t smem) { WITH_CTX(c); return cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem); }
bam_CUresult bam_cuLaunchKernel(bam_CUcontext c, bam_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned smem, bam_CUstream s, void **params) {
	WITH_CTX(c);
	return cu.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}

bam_CUresult bam_cuStreamCreate(bam_CUcontext c, bam_CUstream *s, unsigned flags) { WITH_CTX(c); return cu.cuStreamCreate(s, flags); }
bam_CUresult bam_cuStreamDestroy(bam_CUcontext c, bam_CUstream s) { WITH_CTX(c); return cu.cuStreamDestroy(s); }
bam_CUresult bam_cuStreamSynchronize(bam_CUcontext c, bam_CUstream s) { WITH_CTX(c); return cu.cuStreamSynchronize(s); }
bam_CUresult bam_cuStreamQuery(bam_CUcontext c, bam_CUstream s) { WITH_CTX(c); return cu.cuStreamQuery(s); }
bam_CUresult bam_cuEventCreate(bam_CUcontext c, bam_CUevent *e, unsigned flags) { WITH_CTX(c); return cu.cuEventCreate(e, flags); }
bam_CUresult bam_cuEventDestroy(bam_CUcontext c, bam_CUevent e) { WITH_CTX(c); return cu.cuEventDestroy(e); }
bam_CUresult bam_cuEventRecord(bam_CUcontext c, bam_CUevent e, bam_CUstream s) { WITH_CTX(c); return cu.cuEventRecord(e, s); }
bam_CUresult bam_cuEventSynchronize(bam_CUcontext c, bam_CUevent e) { WITH_CTX(c); return cu.cuEventSynchronize(e); }
bam_CUresult bam_cuEventQuery(bam_CUcontext c, bam_CUevent e) { WITH_CTX(c); return cu.cuEventQuery(e); }
bam_CUresult bam_cuEventElapsedTime(bam_CUcontext c, float *ms, bam_CUevent start, bam_CUevent end) { WITH_CTX(c); return cu.cuEventElapsedTime(ms, start, end); }

// ---- NVRTC ---------------------------------------------------------------

typedef bam_nvrtcResult (*fn_nv_version)(int *, int *);
typedef const char *(*fn_nv_errstr)(bam_nvrtcResult);
typedef bam_nvrtcResult (*fn_nv_create)(bam_nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
typedef bam_nvrtcResult (*fn_nv_destroy)(bam_nvrtcProgram *);
typedef bam_nvrtcResult (*fn_nv_compile)(bam_nvrtcProgram, int, const char *const *);
typedef bam_nvrtcResult (*fn_nv_size)(bam_nvrtcProgram, size_t *);
typedef bam_nvrtcResult (*fn_nv_get)(bam_nvrtcProgram, char *);

static struct {
	int loaded;
	fn_nv_version nvrtcVersion;
	fn_nv_errstr nvrtcGetErrorString;
	fn_nv_create nvrtcCreateProgram;
	fn_nv_destroy nvrtcDestroyProgram;
	fn_nv_compile nvrtcCompileProgram;
	fn_nv_size nvrtcGetPTXSize;
	fn_nv_get nvrtcGetPTX;
	fn_nv_size nvrtcGetProgramLogSize;
	fn_nv_get nvrtcGetProgramLog;
} nv;

int bam_nvrtc_load(const char **names, int n, char *err, size_t errlen) {
	if (errlen) err[0] = 0;
	for (int i = 0; i < n; i++) {
		void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			const char *e = dlerror();
			if (errlen && e) snprintf(err, errlen, "%s", e);
			continue;
		}
		nv.nvrtcVersion = (fn_nv_version)dlsym(lib, "nvrtcVersion");
		nv.nvrtcGetErrorString = (fn_nv_errstr)dlsym(lib, "nvrtcGetErrorString");
		nv.nvrtcCreateProgram = (fn_nv_create)dlsym(lib, "nvrtcCreateProgram");
		nv.nvrtcDestroyProgram = (fn_nv_destroy)dlsym(lib, "nvrtcDestroyProgram");
		nv.nvrtcCompileProgram = (fn_nv_compile)dlsym(lib, "nvrtcCompileProgram");
		nv.nvrtcGetPTXSize = (fn_nv_size)dlsym(lib, "nvrtcGetPTXSize");
		nv.nvrtcGetPTX = (fn_nv_get)dlsym(lib, "nvrtcGetPTX");
		nv.nvrtcGetProgramLogSize = (fn_nv_size)dlsym(lib, "nvrtcGetProgramLogSize");
		nv.nvrtcGetProgramLog = (fn_nv_get)dlsym(lib, "nvrtcGetProgramLog");
		if (nv.nvrtcVersion && nv.nvrtcGetErrorString && nv.nvrtcCreateProgram && nv.nvrtcDestroyProgram &&
		    nv.nvrtcCompileProgram && nv.nvrtcGetPTXSize && nv.nvrtcGetPTX && nv.nvrtcGetProgramLogSize &&
		    nv.nvrtcGetProgramLog) {
			nv.loaded = 1;
			return i;
		}
		if (errlen) snprintf(err, errlen, "%s lacks an NVRTC entry point", names[i]);
	}
	return -1;
}

#define NV_LOADED() \
	do { \
		if (!nv.loaded) return BAM_ERR_NOT_LOADED; \
	} while (0)

bam_nvrtcResult bam_nvrtcVersion(int *major, int *minor) { NV_LOADED(); return nv.nvrtcVersion(major, minor); }
const char *bam_nvrtcGetErrorString(bam_nvrtcResult r) { return nv.loaded ? nv.nvrtcGetErrorString(r) : "NVRTC not loaded"; }
bam_nvrtcResult bam_nvrtcCreateProgram(bam_nvrtcProgram *p, const char *src, const char *name,
                                       int nheaders, const char **headers, const char **names) {
	NV_LOADED();
	return nv.nvrtcCreateProgram(p, src, name, nheaders, headers, names);
}
bam_nvrtcResult bam_nvrtcDestroyProgram(bam_nvrtcProgram *p) { NV_LOADED(); return nv.nvrtcDestroyProgram(p); }
bam_nvrtcResult bam_nvrtcCompileProgram(bam_nvrtcProgram p, int nopts, const char **opts) { NV_LOADED(); return nv.nvrtcCompileProgram(p, nopts, opts); }
bam_nvrtcResult bam_nvrtcGetPTXSize(bam_nvrtcProgram p, size_t *n) { NV_LOADED(); return nv.nvrtcGetPTXSize(p, n); }
bam_nvrtcResult bam_nvrtcGetPTX(bam_nvrtcProgram p, char *ptx) { NV_LOADED(); return nv.nvrtcGetPTX(p, ptx); }
bam_nvrtcResult bam_nvrtcGetProgramLogSize(bam_nvrtcProgram p, size_t *n) { NV_LOADED(); return nv.nvrtcGetProgramLogSize(p, n); }
bam_nvrtcResult bam_nvrtcGetProgramLog(bam_nvrtcProgram p, char *log) { NV_LOADED(); return nv.nvrtcGetProgramLog(p, log); }
