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
// Caches of several line sizes (Config.MoreCaches). Each has its own line
// data, metadata, counters and queue pairs (staging slots are one line of
// their cache), so the device code needs nothing new: an array's descriptor
// names its cache and queues, and one kernel may read arrays of several
// caches. ArraySpec.LineSize picks the cache. A scan reads fastest with
// large lines, a read of a few scattered elements wastes least with small
// ones; the analytics example puts a table's scanned columns in one and
// the columns it reads at matching rows only in the other.
//
// Read-ahead pairs (Config.ReadAheadQueuePairs, 64 by default): more queue
// pairs per cache, whose staging slots hold Config.ReadAheadReadBytes, for
// Reads of several consecutive lines: bam::read_ahead's, left in flight
// while its warp goes on, and a warp's fills of consecutive lines
// (fill_runs in bam/array.cuh; bam::for_range's lines ahead, the engine's
// range passes). Their entries are taken only when free at once, so no
// fill ever waits for one.
//
// Data routes (DESIGN.md §3, Config.FillRoute). Bounce, the default: a fill
// is an NVMe Read whose PRPs name the command's staging slot in pinned host
// memory; the Target reads the namespace straight into it, posts the
// completion, and the lanes of the warp group that asked for the line copy
// the slot into the cache line. Write-backs go the other way. A lane with
// too few others to share its copy posts it to the fill copier instead: a
// ring in device memory served by a few warps of a kernel the engine runs
// beside every kernel that wants one (copier.go,
// kernels/include/bam/copier.cuh), which copy each line with 32 lanes; a
// lane alone needs a PCIe request per 16 bytes. Copy engine:
// the PRPs name the cache line itself (lines are page aligned and
// registered in the Target's DMA space at their device addresses); a Target
// thread copies the data in or out with cuMemcpy*Async on one of a few
// streams of its own and completes the command after a stream
// synchronisation. It wins at queue depth 1 and loses under load (see
// FillRoute), so it is an option, not the default. cuda.Open raises
// CUDA_DEVICE_MAX_CONNECTIONS so that the copies' streams do not share a
// hardware queue with a running kernel that waits for them.
//
// Errors. Kernels never wait forever: every wait on the device is bounded by
// Config.Timeout (%globaltimer), and a launch's failures (a failed NVMe
// status, a timeout, an index out of range, a cache too small for the live
// references) are counted, the one most likely to be the cause of the
// others kept with its element index, NSID and LBA (DeviceError). Launch
// turns that record into a Go error matching nvme's status sentinels,
// vq.ErrTimeout, gpucache.ErrCacheTooSmall or ErrOutOfRange; a timeout's
// DeviceError also names the wait that gave up (DeviceError.Wait: an SQ
// slot, a completion, another thread's fill, a way or the lock of a set,
// the fill copier). A launch also
// ends with its context: Launch then sets the record's abort word, which
// every device wait reads with its deadline, waits (bounded) until the
// kernel has stopped and returns an error wrapping ctx.Err(), so a stalled
// namespace holds a cancelled call for about a millisecond, not the
// timeout. Once a launch has recorded a failure, its misses start no
// more reads, so its threads unwind within about one timeout. A kernel
// still running at the launch's bound (four timeouts and 30 s) is stopped
// the same way, and the call fails with ErrOverrun and the failure
// recorded; one that does not stop even then leaves the engine failing
// every call, and Close then frees no device memory rather than wait for
// it. After a timeout or an abort the queue pairs are reset (the
// controller side forgets them, rings and metadata are zeroed), so the
// engine stays usable; write-backs a timeout or an abort stopped leave
// their lines dirty.
//
// A command given up on may still run. A Write that timed out leaves its
// line's way BUSY (the device's quarantine, bam/cache.cuh), so that the
// launch can neither change the line nor write it back again, and the
// older Write cannot land over a newer one; so does a Read on the
// copy-engine route, which may still copy into the line. The reset waits
// (bounded) for the commands the Target is still executing; those it did
// not finish are stragglers (nvme.Target.Stragglers). Before every launch
// the engine waits up to Config.Timeout for stragglers to finish, then
// fails the call with ErrStragglers; with none left, it clears BUSY on the
// quarantined ways (bam_cache_release_quarantine) and the lines, still
// dirty, are written back as usual.
//
// The package must not know about stores, catalogs or element types beyond
// their size: the caller binds an array by its element size, length and
// place on the namespaces (ArraySpec).
package gpuengine
