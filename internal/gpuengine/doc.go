// Package gpuengine is the GPU engine: arrays on storage read and written by
// CUDA kernels through a set-associative cache in GPU memory, with cache
// misses turned into NVMe commands that GPU threads build and submit
// (kernels/include/bam/array.cuh, cache.cuh, queue.cuh).
//
// It owns, for one GPU: the cache (line data and gpucache metadata in device
// memory), the NVMe queue pairs of the host-proxied mode (SQ/CQ rings and
// doorbells in pinned host memory mapped into the device, vq metadata in
// device memory, one pinned staging slot per queue entry for the data), an
// nvme.Target whose host threads serve those queues against the store's
// namespaces, the per-launch error record and the statistics counters.
//
// Data route. A fill is an NVMe Read whose PRPs name the command's staging
// slot in pinned host memory; the Target reads the namespace straight into
// it, posts the completion, and the GPU thread that submitted the command
// copies the slot into the cache line (DESIGN.md §3 route (a), the bounce
// buffer). Write-backs go the other way. The Target never touches device
// memory, so its threads need no CUDA calls.
//
// Errors. Kernels never wait forever: every wait on the device is bounded by
// Config.Timeout (%globaltimer), and the first failure of a launch (a failed
// NVMe status, a timeout, an index out of range, a cache too small for the
// live references) is recorded with its element index, NSID and LBA. Launch
// turns that record into a Go error matching nvme's status sentinels,
// vq.ErrTimeout, gpucache.ErrCacheTooSmall or ErrOutOfRange. After a timeout
// the queue pairs are reset (the controller side forgets them, rings and
// metadata are zeroed), so the engine stays usable.
//
// The package must not know about stores, catalogs or element types beyond
// their size: the caller binds an array by its element size, length and
// place on the namespaces (ArraySpec).
package gpuengine
