// Package vq is the client side of NVMe I/O queue pairs shared by many
// submitters: BaM's queue protocol (Qureshi, ch. 5) over one
// nvme.QueuePairMemory plus a metadata region whose layout (layout.go) is
// shared with the CUDA mirror in kernels/include/bam/queue.cuh through the
// generated header kernels/include/bam/detail/layout.h.
//
// It owns ticketing, CID allocation, SQ tail and CQ head movement, doorbell
// coalescing and the delivery of every completion to its submitter. It must
// not know what the commands mean (package nvme) or serve the queues (the
// controller, nvme.Target or a real SSD).
//
// # Protocol
//
// Admission. A submitter first takes a command identifier from a pool of
// depth-1 CIDs. A CID returns to the pool only after the CQ head has passed
// its command's completion. Hence at most depth-1 commands are outstanding, a
// CID is unique among them, the SQ never holds more than depth-1 entries and
// the controller never finds the CQ full.
//
// Enqueue. The submitter takes a 64-bit ticket t from the ticket counter:
// SQ position t mod depth, turn t / depth. It waits until the slot's turn
// counter equals its turn (the controller has consumed the slot's previous
// occupant, as learned from CQE.SQHD), writes its SQE and stores t+1 in the
// slot's tail marker. It then tries the tail lock; the holder moves the SQ
// tail over every slot whose marker equals its virtual position + 1, rings
// the SQ doorbell once for the batch, unlocks, calls Options.Notify, and
// goes round again if the marker at the new tail is set, so a submitter that
// failed the try-lock is never stranded. Markers carry the ticket, so a
// stale marker never matches a later turn. (With CID admission at depth-1,
// the turn wait provably never blocks when the controller reports SQHD
// monotonically; it stays as the ordering rule shared with the GPU mirror.)
//
// Completion. The CQ is read in order from the head by whoever holds the
// head lock (a try-lock taken only when the entry at the head carries the
// expected phase, !((p / depth) & 1) for virtual position p). The holder
// copies every valid entry's status, DW0 and SQHD into the CID record named
// by the entry, publishes the new head, rings the CQ doorbell once, moves the
// virtual SQ head to the last entry's SQHD (opening the next turn of every
// slot passed), and only then marks the CIDs done, so a CID is reused only
// after the head has passed its entry. Because entries are consumed strictly
// in order by one holder, BaM's per-entry CQ locks and head markers are not
// needed. Every status reaches its submitter: a non-success status is
// returned as status.Err(cmd), errors.Is-able against nvme.ErrUnrecoveredRead
// and the other sentinels.
//
// Waiting (CPU). BaM's threads each poll the CQ; thousands of goroutines
// polling on two cores starve the controller, and runtime.Gosched loops on
// many cores contend on the scheduler's global lock. A waiter spins briefly
// (Options.Spin), yields a few times where processors are scarce
// (Options.Yield), then either takes the poller token and harvests for
// everyone until its own command completes (a yield every few empty polls,
// 50µs sleeps when the controller has been idle for long), or parks on its
// CID's channel, which the harvester signals. The poller, on leaving, wakes a
// parked waiter to take over. The defaults were measured with vqbench.
//
// # Bounded waits and dropped commands
//
// Every wait of a Submit ends at Options.Timeout (or the context's
// deadline) with a *WaitError matching ErrTimeout; context cancellation
// returns the context's error. What happens to the command depends on where
// it was:
//
//   - waiting for a CID: nothing was queued;
//   - holding a ticket, waiting for its turn: the ticket cannot be skipped
//     (the tail would stop at its slot), so a Flush with the command's NSID
//     and CID takes its place when the turn opens, written by the abandoning
//     submitter or by the head-lock holder that opens the turn; the data
//     command never runs;
//   - submitted: the CID is quarantined (state CIDAbandoned). Its SQ slot is
//     not blocked, since turns advance on SQHD, which later completions
//     carry even when this command is dropped. If its completion ever
//     arrives, the harvester consumes it like any other, discards it and
//     returns the CID to the pool (Stats.LateCompletions). Until then the
//     queue runs with one CID fewer (Stats.Quarantined); the controller may
//     still read or write the command's data buffer. When every CID is
//     quarantined, Submit times out at admission: the controller needs a
//     reset, which is outside this package.
//
// # Memory ordering
//
// Every metadata word is accessed with sync/atomic (sequentially
// consistent). SQE bytes are written before the release store of the tail
// marker; the tail holder's doorbell store orders them before the
// controller's doorbell load. CQE dwords 0-2 are read after the atomic load
// of dword 3 that shows the expected phase, which the controller writes
// last.
//
// Locked is the single-lock baseline with the same admission and waiting;
// Mapper spreads submitters over queue pairs.
package vq
