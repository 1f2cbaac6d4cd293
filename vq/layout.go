package vq

import "github.com/bam-go/bam/internal/layout"

// The metadata region of one queue pair. It is a flat array of 64-bit words
// read and written only with atomics, by Go submitters and (through the
// generated header kernels/include/bam/detail/layout.h) by CUDA threads. All
// offsets are in bytes from the start of the region, which is aligned to
// SectorBytes.
//
//	header     HeaderBytes: one hot word per SectorBytes sector
//	turns      depth words         TurnsOffset(depth)
//	markers    depth words         TailMarkersOffset(depth)
//	CIDs       depth records       CIDsOffset(depth), CIDRecordBytes each
//
// Each array starts on a sector boundary. Hot single words sit alone in
// their sector so that the ticket counter, the locks and the heads do not
// share a cache line (a 128-byte sector also defeats the adjacent-line
// prefetcher of x86 CPUs and matches the GPU's 128-byte L2 line).
const (
	// SectorBytes is the padding unit of hot atomics.
	SectorBytes = 128

	// Header words (uint64), one per sector.
	TicketOffset   = 0 * SectorBytes // next SQ ticket; fetch-add by every submitter
	SQTailOffset   = 1 * SectorBytes // virtual SQ tail; written by the tail-lock holder
	TailLockOffset = 2 * SectorBytes // tail lock: 0 free, 1 held (try-lock only)
	SQHeadOffset   = 3 * SectorBytes // virtual SQ head, learned from CQE.SQHD; written by the head-lock holder
	CQHeadOffset   = 4 * SectorBytes // virtual CQ head; written by the head-lock holder
	HeadLockOffset = 5 * SectorBytes // CQ head lock: 0 free, 1 held (try-lock only)
	PollerOffset   = 6 * SectorBytes // poller token: 0 none, 1 a waiter is polling the CQ for everyone
	HeaderBytes    = 7 * SectorBytes

	// TurnStride is the size of one per-SQ-slot turn counter (uint64): the
	// number of occupants of the slot the controller has consumed. Ticket t
	// may write slot t%depth when turns[t%depth] == t/depth.
	TurnStride = 8
	// TailMarkerStride is the size of one per-SQ-slot tail marker (uint64):
	// ticket+1 of the command written into the slot and not yet passed by
	// the SQ tail. Tagging the marker with the ticket makes a stale marker
	// of an earlier turn unequal to every later one (no ABA).
	TailMarkerStride = 8

	// CIDRecordBytes is the size of one command-identifier record: a state
	// word and a result word. Records are indexed by CID.
	CIDRecordBytes    = 16
	CIDStateOffset    = 0 // uint64 state, one of the CIDState values
	CIDResultOffset   = 8 // uint64 result word, valid once the state is CIDDone
	ResultDW0Shift    = 0 // CQE dword 0 in bits 31:0 of the result word
	ResultSQHDShift   = 32
	ResultStatusShift = 48 // 15-bit NVMe status (CQE dword 3 bits 31:17) in bits 62:48
)

// CID states (the CIDStateOffset word of a CID record).
const (
	CIDFree      = 0 // in the free pool
	CIDInFlight  = 1 // owned by a submitter polling for its completion
	CIDParked    = 2 // owned by a submitter sleeping until the harvester wakes it
	CIDDone      = 3 // completion recorded; the CQ head has passed its entry
	CIDAbandoned = 4 // submitter gave up (timeout); freed when the completion arrives
)

// TurnsOffset is the byte offset of the turn counter array for a queue of
// the given depth.
func TurnsOffset(depth uint32) uintptr { return HeaderBytes }

// TailMarkersOffset is the byte offset of the tail marker array.
func TailMarkersOffset(depth uint32) uintptr {
	return TurnsOffset(depth) + sectorAlign(uintptr(depth)*TurnStride)
}

// CIDsOffset is the byte offset of the CID record array.
func CIDsOffset(depth uint32) uintptr {
	return TailMarkersOffset(depth) + sectorAlign(uintptr(depth)*TailMarkerStride)
}

// RegionBytes is the size of the metadata region of a queue of the given
// depth.
func RegionBytes(depth uint32) uintptr {
	return CIDsOffset(depth) + sectorAlign(uintptr(depth)*CIDRecordBytes)
}

func sectorAlign(n uintptr) uintptr { return (n + SectorBytes - 1) &^ (SectorBytes - 1) }

// Layout returns the region's constants for the CUDA header generator.
func Layout() layout.Group {
	return layout.Group{
		Name: "vq",
		Doc: "Queue-pair metadata region of package vq (one per NVMe queue pair), 64-bit words accessed with " +
			"atomics. Header words at the *Offset constants; then, each starting on a SectorBytes boundary: " +
			"depth turn counters (TurnStride), depth tail markers (TailMarkerStride), depth CID records " +
			"(CIDRecordBytes). Array offset = HeaderBytes + sum of the preceding arrays, each rounded up to SectorBytes.",
		Consts: []layout.Const{
			k("SectorBytes", SectorBytes, "Padding unit of hot atomics; the region is aligned to it."),
			k("TicketOffset", TicketOffset, "Next SQ ticket (fetch-add); position = ticket % depth, turn = ticket / depth."),
			k("SQTailOffset", SQTailOffset, "Virtual SQ tail, written only by the tail-lock holder."),
			k("TailLockOffset", TailLockOffset, "Tail lock word: 0 free, 1 held; taken with compare-and-swap, never waited on."),
			k("SQHeadOffset", SQHeadOffset, "Virtual SQ head learned from CQE.SQHD, written only by the head-lock holder."),
			k("CQHeadOffset", CQHeadOffset, "Virtual CQ head, written only by the head-lock holder; expected phase at p is !((p / depth) & 1)."),
			k("HeadLockOffset", HeadLockOffset, "CQ head lock word: 0 free, 1 held; taken with compare-and-swap, never waited on."),
			k("PollerOffset", PollerOffset, "Poller token: 0 none, 1 one waiter polls the CQ on behalf of sleeping waiters."),
			k("HeaderBytes", HeaderBytes, "Size of the header; the turn counter array starts here."),
			k("TurnStride", TurnStride, "Bytes per SQ slot turn counter (occupants of the slot consumed by the controller)."),
			k("TailMarkerStride", TailMarkerStride, "Bytes per SQ slot tail marker (ticket + 1 of the command written there)."),
			k("CIDRecordBytes", CIDRecordBytes, "Bytes per CID record (state word, result word)."),
			k("CIDStateOffset", CIDStateOffset, "Offset of the state word within a CID record."),
			k("CIDResultOffset", CIDResultOffset, "Offset of the result word within a CID record."),
			k("ResultDW0Shift", ResultDW0Shift, "Bit position of CQE dword 0 (32 bits) in the result word."),
			k("ResultSQHDShift", ResultSQHDShift, "Bit position of CQE SQHD (16 bits) in the result word."),
			k("ResultStatusShift", ResultStatusShift, "Bit position of the 15-bit NVMe status in the result word."),
			k("CIDFree", CIDFree, "CID state: in the free pool."),
			k("CIDInFlight", CIDInFlight, "CID state: owned by a submitter that polls for its completion."),
			k("CIDParked", CIDParked, "CID state: owned by a submitter sleeping until woken by the harvester."),
			k("CIDDone", CIDDone, "CID state: completion recorded and the CQ head has passed its entry."),
			k("CIDAbandoned", CIDAbandoned, "CID state: submitter timed out; the CID is quarantined until its completion arrives."),
		},
	}
}

func k(name string, value uint64, doc string) layout.Const {
	return layout.Const{Name: name, Value: value, Doc: doc}
}
