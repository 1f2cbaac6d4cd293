// Package nvme owns the NVMe command set as it appears on the wire and a
// software NVMe controller that serves it.
//
// # Protocol
//
// The protocol half encodes and decodes 64-byte submission queue entries
// (Command) and 16-byte completion queue entries (Completion), names the
// opcodes and status codes the project uses, builds and walks PRP entries and
// PRP lists (PRPEntries, BuildPRP, WalkPRP), and does the phase-tag and
// doorbell arithmetic of a queue pair (QueuePairMemory, ExpectedPhase, Full).
//
// # Target
//
// Target is a software NVMe controller. It serves I/O queue pairs placed in
// memory it is handed (QueuePairMemory: SQ ring, CQ ring, doorbell words),
// moves data through a DMASpace of registered regions (Go or pinned host
// memory used in place, or any RegionIO such as device memory), and runs
// commands against Namespaces: MemoryNamespace, FileNamespace (files and
// block devices, optional O_DIRECT), ThrottledNamespace (a DeviceModel with
// the latency and IOPS of a named SSD class) or any implementation of the
// interface. It executes Read, Write, Flush, Write Zeroes and Dataset
// Management (deallocate zero-fills); anything else completes with
// StatusInvalidOpcode.
//
// A configurable pool of workers polls the queue pairs; each queue pair
// belongs to one worker, which fetches its commands in order: it loads the
// SQ tail doorbell atomically, decodes the entries from its SQ head up to
// that tail, and advances the head. Commands on memory namespaces execute on
// the worker; commands on other namespaces go to a bounded pool of executor
// goroutines, so a slow file read does not stop other queues. Completions of
// one queue may therefore be posted out of submission order, as NVMe allows.
// A FaultHook can fail, delay or drop any fetched command; delayed commands
// always run off the worker.
//
// Cached file reads: a Read on a FileNamespace opened without O_DIRECT is
// first tried on the worker: copied from a read-only shared mapping of the
// file (MapMode; the default maps files up to half of the machine's
// memory), else with a read that cannot block (preadv2 with RWF_NOWAIT,
// which the kernel serves only from the page cache). Served, it completes
// there with no hand-off (TargetStats.CachedReads counts these); refused (a
// page not cached, a short read, a kernel without RWF_NOWAIT) it goes to an
// executor and is read again from the start, so a page-cache miss never
// holds up the worker for long. A mapped copy cannot refuse a page that is
// not in memory: it waits for it once, and then the namespace stops copying
// from the mapping for a while (FileNamespace.MappedReads counts stalls).
// On a page-cache hit the copy costs a fraction of the system call, which
// is most of a worker's time per small Read. Writes, Flush, O_DIRECT
// files, throttled device models and namespaces of other types keep the
// executor path. TargetConfig.NoCachedReadInline turns the worker attempt
// off. A large cached Read occupies the worker for its copy, as a Read of
// a memory namespace does.
//
// Mirrored Reads: a queue pair may have a Mirror, a second copy of its
// hosts' buffers (a GPU host's staging slots, copied into device memory).
// Reads that ask for it (MirrorHint in CDW3) and whose data lies in one
// range of the Mirror's Region are gathered, in SQ order, into runs of
// consecutive ranges; a run long enough is copied with one Mirror.Copy and
// its Reads complete, with MirroredDW0 in dword 0, once the copy is done.
// The worker that owns the queue keeps the runs and polls the copies; it
// does not park while any is pending. See Mirror for when runs end.
//
// Idle policy: a worker that finds no work keeps polling for
// TargetConfig.Spin, yielding the processor between passes, then parks on a
// wake channel with a timeout that starts at 20µs and doubles up to
// TargetConfig.IdlePoll. Kick wakes a parked worker at once (CPU submitters
// call it after ringing a doorbell); submitters that cannot call it (GPU
// threads) are found by the timeout poll. Rest, called by a host that
// knows no doorbell will ring before its next Kick (a GPU kernel has
// ended), parks idle workers at once instead of after Spin. An idle Target
// costs one timer wake-up per worker per IdlePoll.
//
// # Invariants
//
//   - Every fetched command gets exactly one completion unless a fault hook
//     drops it, its queue pair is removed or failed, or the Target closes.
//   - A completion carries the command's CID, the SQ ID, the SQ head as
//     fetched at posting time (never less than the head just after the
//     command was fetched, and never decreasing along the CQ), the phase
//     (1 on the first pass over the zeroed ring, inverted on each wrap)
//     and the status. Dwords 0-2 are written before dword 3, which holds
//     the phase and is stored with one atomic 32-bit store, so a host that
//     sees the new phase sees the whole entry; the data of a Read is in
//     place before its completion is posted (and in the mirror too, when
//     dword 0 is MirroredDW0).
//   - The CQ is never filled: while (tail+1) mod depth equals the host's CQ
//     head doorbell, posting waits and re-reads the doorbell, bounded by
//     queue removal and Close.
//   - Nothing a host writes can panic the Target. Garbage SQEs complete with
//     an error status. A doorbell value outside the ring is a host protocol
//     error: the queue pair stops, Err reports it and it is logged.
//   - Namespaces only ever see whole-block offsets and lengths inside their
//     size; a PRP layout that splits blocks across pages is bounced.
//
// The package must not know about the clients of a queue pair: ticketing,
// doorbell coalescing and CID allocation belong to package vq. It must not
// import CUDA code; the GPU engine plugs device memory in through RegionIO.
package nvme
