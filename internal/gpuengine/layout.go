package gpuengine

import (
	"github.com/bam-go/bam/internal/layout"
	"github.com/bam-go/bam/nvme"
)

// Staging mirror protocol (mirror.go, nvme.Mirror): a kernel sets
// MirrorHint in a Read's CDW3 when its queue has at least
// MirrorHintOutstanding commands outstanding, and finds the data in the
// queue's mirror when the completion's dword 0 is MirroredDW0. Fewer
// outstanding commands could not fill a run worth a copy
// (nvme.MirrorMinRun is 16 lines of 4 KiB), and a Read alone keeps the
// staging slot's latency.
const (
	MirrorHint            = uint64(nvme.MirrorHint)
	MirroredDW0           = uint64(nvme.MirroredDW0)
	MirrorHintOutstanding = 32
)

// Descriptors the host hands to kernels. Each is a record of 64-bit words in
// device memory; the CUDA structs in kernels/include/bam/detail/desc.cuh
// are checked against these offsets with static_assert, so a change here
// that is not mirrored there fails `make kernels`.
const (
	// Array descriptor: what bam::array<T> needs to find element i.
	ArrayCacheMetaOffset   = 0   // device pointer: gpucache metadata region
	ArrayCacheDataOffset   = 8   // device pointer: cache line data, way g at g << LineShift
	ArraySetsOffset        = 16  // number of sets N
	ArrayWaysOffset        = 24  // ways per set K
	ArrayLineShiftOffset   = 32  // log2 of the line size
	ArrayTagsOffset        = 40  // byte offset of the tag array in the metadata region
	ArrayWBTagsOffset      = 48  // byte offset of the write-back tag array
	ArrayWaysRecOffset     = 56  // byte offset of the way record array
	ArrayQueuesOffset      = 64  // device pointer: QueueDescBytes records
	ArrayNQueuesOffset     = 72  // number of queue descriptors
	ArrayErrorOffset       = 80  // device pointer: ErrorRecordBytes record
	ArrayTimeoutOffset     = 88  // bound of every wait, nanoseconds of %globaltimer
	ArrayNNSOffset         = 96  // namespaces the object is striped over
	ArrayNSStartOffset     = 104 // device pointer: u64 per stripe member: first physical line of the extent
	ArrayNSIndexOffset     = 112 // device pointer: u64 per stripe member: namespace index (NSID - 1)
	ArrayLBAShiftOffset    = 120 // log2 of LBAs per line
	ArrayElemCountOffset   = 128 // elements in the array
	ArrayElemSizeOffset    = 136 // bytes per element (a power of two dividing the line size)
	ArrayStatsOffset       = 144 // device pointer: StatsSlots x StatsCounters u64 counters
	ArrayPolicyOffset      = 152 // victim choice: PolicyClock or PolicyRoundRobin
	ArrayDirectBelowOffset = 160 // fills by groups of fewer lanes than this, and all write-backs when it is not 0, go through the copy engine
	ArrayCopierOffset      = 168 // device pointer: the fill copier's ring (CopierRing*), 0 when there is none
	ArrayCopyBelowOffset   = 176 // staging copies of groups of fewer lanes than this (and of write-backs) go to the copier
	ArrayFirstTagOffset    = 184 // when nns == 1: the tag of line 0 (line l's tag is this + l), so a hit needs no stripe lookup; else 0
	ArrayAheadQueuesOffset = 192 // read-ahead queue pairs (bam::read_ahead), in the queue descriptors after the first ArrayNQueues
	ArrayAheadLinesOffset  = 200 // lines one read-ahead Read covers at most, and each staging slot of the read-ahead pairs holds (a power of two, 1 to 32)
	ArrayDescBytes         = 208

	// Array argument: the by-value kernel argument of a bam::array<T>
	// parameter. It carries the descriptor's address and, copied from the
	// descriptor, the fields a hit needs, so a kernel reads them from its
	// parameter space (the constant cache) instead of from device memory.
	ArrayArgDescOffset      = 0  // device pointer: the array descriptor
	ArrayArgTagsOffset      = 8  // device pointer: the cache's tag array
	ArrayArgRecsOffset      = 16 // device pointer: the cache's way records
	ArrayArgDataOffset      = 24 // device pointer: cache line data, way g at g << line shift
	ArrayArgSetsOffset      = 32 // number of sets N
	ArrayArgWaysOffset      = 40 // ways per set K
	ArrayArgNNSOffset       = 48 // namespaces the object is striped over
	ArrayArgFirstTagOffset  = 56 // as ArrayFirstTagOffset
	ArrayArgElemCountOffset = 64 // elements in the array
	ArrayArgStatsOffset     = 72 // device pointer: statistics counters
	ArrayArgLineShiftOffset = 80 // log2 of the line size
	ArrayArgBytes           = 88

	// Fill copier ring (device memory): bounded multi-producer,
	// multi-consumer ring of copy jobs. Threads that own a staging copy post
	// it; warps of the copier kernel take jobs and copy each with all 32
	// lanes. Header words sit on 128-byte lines of their own.
	CopierTailOffset    = 128 // u64: next ticket a poster takes
	CopierStopOffset    = 256 // u32: copier kernels of this epoch stop when it holds their epoch
	CopierWaitedOffset  = 264 // u64: posts that found their slot still taken and waited
	CopierDroppedOffset = 272 // u64: posts withdrawn because the copier stopped before taking them
	CopierJobsOffset    = 280 // u64: jobs the copier warps copied
	CopierMissedOffset  = 288 // u64: copies that found no copier running (posters copied them alone)
	CopierAliveOffset   = 384 // u32: copier warps running now
	CopierMaskOffset    = 448 // u64: slots - 1 (slots a power of two)
	CopierHeadsOffset   = 512 // CopierHeads u64 heads, one per ticket class t mod CopierHeads, CopierHeadStride apart: head r holds k, its next ticket is k*CopierHeads + r
	CopierHeadStride    = 128
	CopierHeads         = 8
	CopierSlotsOffset   = 1536 // first slot
	CopierSlotBytes     = 32   // one job
	CopierSeqOffset     = 0    // slot u64: ticket t when free for ticket t, t+1 once job t is posted
	CopierSrcOffset     = 8    // slot u64: source address (device-mapped host memory or device memory)
	CopierDstOffset     = 16   // slot u64: destination address
	CopierSizeOffset    = 24   // slot u32: bytes (a multiple of 16) | CopierToHost
	CopierClaimOffset   = 28   // slot u32: one of the Claim* values
	CopierToHost        = 1 << 31
	CopierClaimOpen     = 0 // posted, not taken
	CopierClaimTaken    = 1 // a copier warp is copying
	CopierClaimDone     = 2 // copied; the poster frees the slot
	CopierClaimDropped  = 3 // the poster copied it itself; the copier that takes the ticket frees the slot

	// Queue descriptor: one NVMe queue pair as device code sees it.
	QueueMetaOffset       = 0  // device pointer: vq metadata region
	QueueSQOffset         = 8  // device-mapped pointer: SQ ring (pinned host memory)
	QueueCQOffset         = 16 // device-mapped pointer: CQ ring (pinned host memory)
	QueueSQDoorbellOffset = 24 // device-mapped pointer: SQ tail doorbell word
	QueueCQDoorbellOffset = 32 // device-mapped pointer: CQ head doorbell word
	QueueDepthOffset      = 40 // entries per ring (power of two)
	QueueStagingOffset    = 48 // device-mapped pointer: depth staging slots of one line each
	QueueStagingDMAOffset = 56 // DMA address of the staging slots (what PRPs name)
	QueuePRPListDMAOffset = 64 // DMA address of depth PRP list pages (one 4 KiB page per slot)
	QueueIDOffset         = 72 // queue identifier
	QueuePRPListOffset    = 80 // device-mapped pointer: the PRP list pages, for kernels that write lists
	QueueMirrorOffset     = 88 // device pointer: the staging slots' mirror in device memory, 0 for none
	QueueDescBytes        = 96

	// Error record: the failure of a launch the host reports (the earliest
	// of those most likely to be the cause: bam::detail::error_rank).
	ErrorCodeOffset   = 0  // u32: one of the Err* codes; 0 = none
	ErrorStatusOffset = 4  // u32: NVMe status of an ErrCodeStatus
	ErrorIndexOffset  = 8  // u64: element index or line involved
	ErrorLBAOffset    = 16 // u64: LBA of the failed command
	ErrorNSIDOffset   = 24 // u64: NSID of the failed command
	ErrorCountOffset  = 32 // u32: number of failures recorded in the launch
	ErrorAbortOffset  = 36 // u32: set by the host to stop the launch's waits (its context ended)
	// u32: non-zero once any failure of the launch, not only the first,
	// left queue tickets, commands or copier jobs abandoned (a timeout, an
	// abort, a status the Target gives a command it gave up on).
	ErrorAbandonedOffset = 40
	ErrorRankOffset      = 44 // u32: device only: how likely the failure held is the cause of the others
	ErrorLockOffset      = 48 // u32: device only: taken while a failure is written
	ErrorRecordBytes     = 64

	// Error codes.
	ErrCodeNone          = 0
	ErrCodeStatus        = 1 // a command completed with a failing NVMe status
	ErrCodeTimeout       = 2 // a wait passed the timeout
	ErrCodeOutOfRange    = 3 // an element index at or past the length
	ErrCodeCacheTooSmall = 4 // every way of a set stayed referenced
	ErrCodeAborted       = 5 // a wait stopped because the host set the abort word

	// Timed-out waits. The status word of an ErrCodeTimeout or
	// ErrCodeAborted record is TimeoutStatus | the Wait* kind of the wait
	// that gave up (bit 15 is never set in a controller's 15-bit status).
	TimeoutStatus  = 0x8000
	WaitKindMask   = 0xff
	WaitTurn       = 1 // holding a queue ticket, waiting for its SQ slot
	WaitCompletion = 2 // a submitted command's completion
	WaitLine       = 3 // another thread's fill of the line
	WaitWay        = 4 // a way of the line's set to be released, filled or written back
	WaitSetLock    = 5 // the set lock, held by other misses of the set
	WaitCopier     = 6 // the fill copier to finish a staging copy it took
	WaitSubmit     = 7 // an issued command's submission: the SQ tail stayed behind it (an earlier ticket not issued)

	// Statistics: StatsSlots slots (by SM) of StatsCounters u64 counters.
	StatsSlots     = 64
	StatsCounters  = 8
	StatHits       = 0
	StatMisses     = 1
	StatFills      = 2
	StatWriteBacks = 3
	StatCommands   = 4
	StatRetries    = 5
	StatAcquires   = 6
	StatOffloads   = 7 // staging copies done by the fill copier

	// Victim policies.
	PolicyClock      = 0
	PolicyRoundRobin = 1
)

// Layout returns the descriptor constants for the CUDA header generator.
func Layout() layout.Group {
	c := func(name string, v uint64, doc string) layout.Const {
		return layout.Const{Name: name, Value: v, Doc: doc}
	}
	return layout.Group{
		Name: "engine",
		Doc:  "Descriptors of package internal/gpuengine passed to kernels: records of 64-bit words in device memory.",
		Consts: []layout.Const{
			c("ArrayCacheMetaOffset", ArrayCacheMetaOffset, "Array descriptor: gpucache metadata region."),
			c("ArrayCacheDataOffset", ArrayCacheDataOffset, "Array descriptor: cache line data."),
			c("ArraySetsOffset", ArraySetsOffset, "Array descriptor: sets N."),
			c("ArrayWaysOffset", ArrayWaysOffset, "Array descriptor: ways K."),
			c("ArrayLineShiftOffset", ArrayLineShiftOffset, "Array descriptor: log2 line size."),
			c("ArrayTagsOffset", ArrayTagsOffset, "Array descriptor: tag array offset in the metadata region."),
			c("ArrayWBTagsOffset", ArrayWBTagsOffset, "Array descriptor: write-back tag array offset."),
			c("ArrayWaysRecOffset", ArrayWaysRecOffset, "Array descriptor: way record array offset."),
			c("ArrayQueuesOffset", ArrayQueuesOffset, "Array descriptor: queue descriptors."),
			c("ArrayNQueuesOffset", ArrayNQueuesOffset, "Array descriptor: number of queues."),
			c("ArrayErrorOffset", ArrayErrorOffset, "Array descriptor: error record."),
			c("ArrayTimeoutOffset", ArrayTimeoutOffset, "Array descriptor: wait bound in nanoseconds."),
			c("ArrayNNSOffset", ArrayNNSOffset, "Array descriptor: stripe width."),
			c("ArrayNSStartOffset", ArrayNSStartOffset, "Array descriptor: first physical line per stripe member."),
			c("ArrayNSIndexOffset", ArrayNSIndexOffset, "Array descriptor: namespace index per stripe member."),
			c("ArrayLBAShiftOffset", ArrayLBAShiftOffset, "Array descriptor: log2 LBAs per line."),
			c("ArrayElemCountOffset", ArrayElemCountOffset, "Array descriptor: element count."),
			c("ArrayElemSizeOffset", ArrayElemSizeOffset, "Array descriptor: element size."),
			c("ArrayStatsOffset", ArrayStatsOffset, "Array descriptor: statistics counters."),
			c("ArrayPolicyOffset", ArrayPolicyOffset, "Array descriptor: victim policy."),
			c("ArrayDirectBelowOffset", ArrayDirectBelowOffset, "Array descriptor: copy-engine route below this group size."),
			c("ArrayCopierOffset", ArrayCopierOffset, "Array descriptor: fill copier ring, 0 for none."),
			c("ArrayCopyBelowOffset", ArrayCopyBelowOffset, "Array descriptor: copier for groups smaller than this."),
			c("ArrayFirstTagOffset", ArrayFirstTagOffset, "Array descriptor: tag of line 0 when the object lies on one namespace (line l's tag is this + l); 0 otherwise."),
			c("ArrayAheadQueuesOffset", ArrayAheadQueuesOffset, "Array descriptor: read-ahead queue pairs, after the others."),
			c("ArrayAheadLinesOffset", ArrayAheadLinesOffset, "Array descriptor: lines per read-ahead Read and per read-ahead staging slot."),
			c("ArrayDescBytes", ArrayDescBytes, "Size of the array descriptor."),
			c("ArrayArgDescOffset", ArrayArgDescOffset, "Array argument (bam::array<T> by value): the array descriptor."),
			c("ArrayArgTagsOffset", ArrayArgTagsOffset, "Array argument: the cache's tag array."),
			c("ArrayArgRecsOffset", ArrayArgRecsOffset, "Array argument: the cache's way records."),
			c("ArrayArgDataOffset", ArrayArgDataOffset, "Array argument: cache line data."),
			c("ArrayArgSetsOffset", ArrayArgSetsOffset, "Array argument: sets N."),
			c("ArrayArgWaysOffset", ArrayArgWaysOffset, "Array argument: ways K."),
			c("ArrayArgNNSOffset", ArrayArgNNSOffset, "Array argument: stripe width."),
			c("ArrayArgFirstTagOffset", ArrayArgFirstTagOffset, "Array argument: tag of line 0 when the stripe width is 1."),
			c("ArrayArgElemCountOffset", ArrayArgElemCountOffset, "Array argument: element count."),
			c("ArrayArgStatsOffset", ArrayArgStatsOffset, "Array argument: statistics counters."),
			c("ArrayArgLineShiftOffset", ArrayArgLineShiftOffset, "Array argument: log2 line size."),
			c("ArrayArgBytes", ArrayArgBytes, "Size of the array argument."),
			c("CopierTailOffset", CopierTailOffset, "Copier ring: u64 next ticket to post."),
			c("CopierStopOffset", CopierStopOffset, "Copier ring: u32 stop epoch."),
			c("CopierWaitedOffset", CopierWaitedOffset, "Copier ring: u64 posts that waited for their slot."),
			c("CopierDroppedOffset", CopierDroppedOffset, "Copier ring: u64 posts withdrawn untaken."),
			c("CopierJobsOffset", CopierJobsOffset, "Copier ring: u64 jobs copied."),
			c("CopierMissedOffset", CopierMissedOffset, "Copier ring: u64 copies that found no copier running."),
			c("CopierAliveOffset", CopierAliveOffset, "Copier ring: u32 running copier warps."),
			c("CopierMaskOffset", CopierMaskOffset, "Copier ring: u64 slots - 1."),
			c("CopierHeadsOffset", CopierHeadsOffset, "Copier ring: first of CopierHeads u64 heads, one per ticket class."),
			c("CopierHeadStride", CopierHeadStride, "Copier ring: bytes between heads."),
			c("CopierHeads", CopierHeads, "Copier ring: ticket classes (a power of two)."),
			c("CopierSlotsOffset", CopierSlotsOffset, "Copier ring: first slot."),
			c("CopierSlotBytes", CopierSlotBytes, "Copier ring: bytes per slot."),
			c("CopierSeqOffset", CopierSeqOffset, "Copier slot: u64 sequence."),
			c("CopierSrcOffset", CopierSrcOffset, "Copier slot: u64 source."),
			c("CopierDstOffset", CopierDstOffset, "Copier slot: u64 destination."),
			c("CopierSizeOffset", CopierSizeOffset, "Copier slot: u32 bytes | CopierToHost."),
			c("CopierClaimOffset", CopierClaimOffset, "Copier slot: u32 claim."),
			c("CopierToHost", CopierToHost, "Copier size flag: device memory to host memory."),
			c("CopierClaimOpen", CopierClaimOpen, "Copier claim: posted."),
			c("CopierClaimTaken", CopierClaimTaken, "Copier claim: being copied."),
			c("CopierClaimDone", CopierClaimDone, "Copier claim: copied."),
			c("CopierClaimDropped", CopierClaimDropped, "Copier claim: withdrawn by its poster."),
			c("QueueMetaOffset", QueueMetaOffset, "Queue descriptor: vq metadata region."),
			c("QueueSQOffset", QueueSQOffset, "Queue descriptor: SQ ring."),
			c("QueueCQOffset", QueueCQOffset, "Queue descriptor: CQ ring."),
			c("QueueSQDoorbellOffset", QueueSQDoorbellOffset, "Queue descriptor: SQ tail doorbell."),
			c("QueueCQDoorbellOffset", QueueCQDoorbellOffset, "Queue descriptor: CQ head doorbell."),
			c("QueueDepthOffset", QueueDepthOffset, "Queue descriptor: depth."),
			c("QueueStagingOffset", QueueStagingOffset, "Queue descriptor: staging slots (device-mapped)."),
			c("QueueStagingDMAOffset", QueueStagingDMAOffset, "Queue descriptor: staging DMA address."),
			c("QueuePRPListDMAOffset", QueuePRPListDMAOffset, "Queue descriptor: PRP list pages DMA address."),
			c("QueueIDOffset", QueueIDOffset, "Queue descriptor: queue identifier."),
			c("QueuePRPListOffset", QueuePRPListOffset, "Queue descriptor: PRP list pages (device-mapped)."),
			c("QueueMirrorOffset", QueueMirrorOffset, "Queue descriptor: staging mirror in device memory (0: none)."),
			c("MirrorHint", MirrorHint, "Read CDW3 bit: a mirrored completion is welcome."),
			c("MirroredDW0", MirroredDW0, "Completion dword 0 of a Read whose data is in the staging mirror."),
			c("MirrorHintOutstanding", MirrorHintOutstanding, "Outstanding commands of a queue from which kernels ask for the mirror."),
			c("QueueDescBytes", QueueDescBytes, "Size of the queue descriptor."),
			c("ErrorCodeOffset", ErrorCodeOffset, "Error record: code."),
			c("ErrorStatusOffset", ErrorStatusOffset, "Error record: NVMe status."),
			c("ErrorIndexOffset", ErrorIndexOffset, "Error record: element index or line."),
			c("ErrorLBAOffset", ErrorLBAOffset, "Error record: LBA."),
			c("ErrorNSIDOffset", ErrorNSIDOffset, "Error record: NSID."),
			c("ErrorCountOffset", ErrorCountOffset, "Error record: failures recorded."),
			c("ErrorAbortOffset", ErrorAbortOffset, "Error record: abort word, set by the host to stop every wait of the launch."),
			c("ErrorAbandonedOffset", ErrorAbandonedOffset, "Error record: non-zero once any failure of the launch abandoned tickets, commands or copier jobs."),
			c("ErrorRankOffset", ErrorRankOffset, "Error record: rank of the failure held (bam::detail::error_rank)."),
			c("ErrorLockOffset", ErrorLockOffset, "Error record: lock taken while a failure is written."),
			c("ErrorRecordBytes", ErrorRecordBytes, "Size of the error record."),
			c("ErrCodeNone", ErrCodeNone, "Error code: none."),
			c("ErrCodeStatus", ErrCodeStatus, "Error code: failing NVMe status."),
			c("ErrCodeTimeout", ErrCodeTimeout, "Error code: wait timed out."),
			c("ErrCodeOutOfRange", ErrCodeOutOfRange, "Error code: index out of range."),
			c("ErrCodeCacheTooSmall", ErrCodeCacheTooSmall, "Error code: every way of a set referenced."),
			c("ErrCodeAborted", ErrCodeAborted, "Error code: a wait stopped by the host's abort word."),
			c("TimeoutStatus", TimeoutStatus, "Status of a timed-out or aborted wait: this bit | its Wait* kind."),
			c("WaitKindMask", WaitKindMask, "The Wait* kind's bits in a timeout status."),
			c("WaitTurn", WaitTurn, "Wait kind: a queue ticket's SQ slot."),
			c("WaitCompletion", WaitCompletion, "Wait kind: a submitted command's completion."),
			c("WaitLine", WaitLine, "Wait kind: another thread's fill of the line."),
			c("WaitWay", WaitWay, "Wait kind: a way of the set to be released, filled or written back."),
			c("WaitSetLock", WaitSetLock, "Wait kind: the set lock."),
			c("WaitCopier", WaitCopier, "Wait kind: the fill copier's staging copy."),
			c("WaitSubmit", WaitSubmit, "Wait kind: an issued command's submission (the SQ tail stayed behind it)."),
			c("StatsSlots", StatsSlots, "Statistics slots (by SM)."),
			c("StatsCounters", StatsCounters, "Counters per statistics slot."),
			c("StatHits", StatHits, "Counter: hits."),
			c("StatMisses", StatMisses, "Counter: misses."),
			c("StatFills", StatFills, "Counter: lines filled."),
			c("StatWriteBacks", StatWriteBacks, "Counter: lines written back."),
			c("StatCommands", StatCommands, "Counter: NVMe commands."),
			c("StatRetries", StatRetries, "Counter: acquire retries."),
			c("StatAcquires", StatAcquires, "Counter: line acquisitions (one per coalesced group)."),
			c("StatOffloads", StatOffloads, "Counter: staging copies done by the fill copier."),
			c("PolicyClock", PolicyClock, "Victim policy: clock."),
			c("PolicyRoundRobin", PolicyRoundRobin, "Victim policy: round robin."),
		},
	}
}
