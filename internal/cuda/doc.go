// Package cuda binds the CUDA driver API and NVRTC at run time.
//
// It owns: loading libcuda.so.1 (and libnvrtc) with dlopen, device
// enumeration and attributes, primary contexts, device and pinned host
// memory (allocation and registration, including I/O memory), synchronous,
// asynchronous and batched copies, PTX modules and kernel launches, streams,
// events and run-time compilation of CUDA C++ to PTX.
//
// Invariants:
//
//   - No CUDA header or library is needed to build: the C types this package
//     uses are declared in driver.h and every driver entry point is resolved
//     with dlsym. A binary built without NVIDIA software runs; Open returns an
//     error wrapping ErrNoDriver (or ErrNoDevice) and the caller falls back
//     to the CPU engine.
//   - Versioned entry points (cuMemAlloc_v2, cuMemcpyHtoD_v2, ...) are
//     resolved by their versioned names, the ABI the headers select.
//   - Each driver call that needs a context makes the Context current on the
//     OS thread that runs it, inside the same cgo call. Goroutines may move
//     between threads freely; no runtime.LockOSThread is needed and any
//     goroutine may use any Context.
//   - Memory handed to the driver beyond one call (pinned buffers, async
//     copy sources and destinations, kernel parameters during a launch) is C
//     memory, never the Go heap, as the cgo pointer rules require.
//     Synchronous copies may use Go slices of plain values.
//   - Every failed call returns an *Error naming the entry point, its
//     CUresult, the driver's name and description; errors.Is matches it
//     against ErrOutOfMemory, ErrNoDevice and ErrNoDriver. A PTX load that
//     fails carries the JIT's error log in its message.
//   - Blocking waits come in two forms: Synchronize (the driver's own
//     uninterruptible wait) and Wait(ctx) (polls, bounded by ctx).
//
// The package knows nothing about caches, queues or arrays; those build on
// it. It must not call the CUDA runtime API (libcudart): the driver API is
// all a user's machine is guaranteed to have.
package cuda
