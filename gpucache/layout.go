package gpucache

import (
	"fmt"

	"github.com/bam-go/bam/internal/layout"
)

// The metadata region of one cache: N sets × K ways. It is a flat block of
// memory read and written only with atomics, by the Go implementation in
// this package and (through the generated header
// kernels/include/bam/detail/layout.h) by CUDA threads. All offsets are in
// bytes from the start of the region, which is aligned to SectorBytes.
//
//	sets       N records of SetStride bytes       at SetsOffset (0)
//	tags       N*K uint64 tag words, way w of set s at s*K+w   TagsOffset(N, K)
//	wbtags     N*K uint64, same indexing           WriteBackTagsOffset(N, K)
//	ways       N*K records of WayStride bytes      WaysOffset(N, K)
//
// Each array starts on a SectorBytes boundary; the region size is
// RegionBytes(N, K). Offsets of one array = offset of the previous array +
// its size rounded up to SectorBytes.
//
// The tag words of one set are contiguous (K*8 bytes), so a lookup reads
// one or two sectors, and a warp can load them with one coalesced access.
// A tag word holds the way's tag (the low TagBits bits), its clock
// reference bit (TagWordClockBit) and its generation (the TagWordGenBits
// bits from TagWordGenShift): a hit without a reference reads the word,
// the element and the word again, and nothing else (doc.go, Reads without
// references). The hot per-way word (the state, fetch-added on every
// acquire) sits in its own WayStride record so that acquires of different
// lines of one set do not contend on one GPU sector. The per-set lock
// shares its record only with the clock hand, which is touched only by the
// lock holder.
//
// A fresh region is all zero bytes except the two tag arrays, which hold
// TagEmpty (all 0xFF bytes) in every slot: a tag word of all ones has the
// empty tag field, an odd generation and its clock bit set.
const (
	// SectorBytes is the alignment of the region and of every array in it.
	SectorBytes = 128

	// Per-set record.
	SetStride     = 64 // bytes per set record
	SetLockOffset = 0  // uint32 set lock: LockFree or LockHeld, taken with compare-and-swap
	SetHandOffset = 4  // uint32 clock hand: next way index to consider; written by the lock holder only

	// TagBytes is the size of one tag word (and of one write-back tag).
	TagBytes = 8

	// Tag word: tag | clock bit | generation.
	TagBits         = 44
	TagMask         = 1<<TagBits - 1 // the tag field; all ones (TagEmpty & TagMask) in an unused slot, which no line's tag equals
	TagWordClockBit = 44             // clock reference bit: 1 when the line was hit since the hand last passed
	TagWordClock    = 1 << TagWordClockBit
	TagWordGenShift = 45 // generation: odd while the BUSY owner installs and fills a new tag, even while the line holds its tag's data (see Peek)
	TagWordGenBits  = 64 - TagWordGenShift

	// Per-way record.
	WayStride       = 32 // bytes per way record; one GPU sector per hot state word
	WayStateOffset  = 0  // uint32 state word: StateValid|StateBusy|StateDirty + reference count
	WayStatusOffset = 4  // uint32 fill status: StatusOK or the reason the last fill failed

	// State word bits. The reference count is the low StateRefBits bits so
	// that acquiring n references is one fetch_add(n) that also returns the
	// state bits (BaM §6.4).
	StateRefBits  = 29
	StateRefMask  = 1<<StateRefBits - 1 // maximum number of live references of one way
	StateDirtyBit = 29
	StateBusyBit  = 30
	StateValidBit = 31
	StateDirty    = 1 << StateDirtyBit // line differs from storage; must be written back before it is dropped
	StateBusy     = 1 << StateBusyBit  // one owner is filling, evicting or writing back the way
	StateValid    = 1 << StateValidBit // the line holds the data of the way's tag

	// Set lock values.
	LockFree = 0
	LockHeld = 1

	// Fill status values (WayStatusOffset word).
	StatusOK          = 0 // last fill succeeded (or none failed yet)
	StatusFillFailed  = 1 // the backend failed the fill; waiters receive the error
	StatusFillAborted = 2 // the filler gave up (its context ended); waiters retry the fill themselves

	// TagEmpty marks an idle write-back slot; an unused tag word is all
	// ones too, so its tag field is TagEmpty & TagMask. Neither is a valid
	// line tag: tags are below TagMask.
	TagEmpty = ^uint64(0)

	// Tag encoding used by MakeTag: namespace in the high TagNamespaceBits
	// bits of the TagBits, line index below (2^36 lines a namespace: 32 TiB
	// in 512-byte lines, 256 TiB in 4 KiB ones). The cache itself treats
	// tags as opaque except for SetIndex.
	TagNamespaceShift = 36
	TagNamespaceBits  = 8
	TagLineMask       = 1<<TagNamespaceShift - 1

	// SetHashMul and SetSkewShift place tags in sets (SetIndex): with
	// h = (tag & TagLineMask) + (tag >> TagNamespaceShift) * SetHashMul,
	// the set of a tag in a cache of N sets is
	// (h mod N + ((h / N) * SetHashMul >> SetSkewShift) mod N) mod N,
	// in wrapping 64-bit arithmetic. The multiple of SetHashMul spreads
	// namespaces; the second term rotates each aligned block of N values of
	// h by a hash of the block's number. Consecutive lines of a block take
	// consecutive sets, so a scan uses every set, and lines a multiple of N
	// apart (the same place in arrays or per-thread runs whose sizes are
	// multiples of N lines) spread over the sets instead of sharing one.
	SetHashMul   = 0x9E3779B97F4A7C15
	SetSkewShift = 32

	// Line size bounds (bytes, powers of two).
	MinLineSize = 512
	MaxLineSize = 64 << 10

	// MaxWays bounds the associativity: a lookup scans every way of a set.
	MaxWays = 64
)

func sectorAlign(n uint64) uint64 { return (n + SectorBytes - 1) &^ (SectorBytes - 1) }

// SetsOffset is the byte offset of the set record array.
func SetsOffset(sets, ways uint32) uint64 { return 0 }

// TagsOffset is the byte offset of the tag array.
func TagsOffset(sets, ways uint32) uint64 {
	return SetsOffset(sets, ways) + sectorAlign(uint64(sets)*SetStride)
}

// WriteBackTagsOffset is the byte offset of the write-back tag array: slot
// s*K+w holds the tag whose write-back from way w is in flight, or TagEmpty.
func WriteBackTagsOffset(sets, ways uint32) uint64 {
	return TagsOffset(sets, ways) + sectorAlign(uint64(sets)*uint64(ways)*TagBytes)
}

// WaysOffset is the byte offset of the way record array.
func WaysOffset(sets, ways uint32) uint64 {
	return WriteBackTagsOffset(sets, ways) + sectorAlign(uint64(sets)*uint64(ways)*TagBytes)
}

// RegionBytes is the size of the metadata region of a cache of sets × ways.
func RegionBytes(sets, ways uint32) uint64 {
	return WaysOffset(sets, ways) + sectorAlign(uint64(sets)*uint64(ways)*WayStride)
}

// SetIndex returns the set that holds tag in a cache of sets sets (see
// SetHashMul for the mapping and why).
func SetIndex(tag uint64, sets uint32) uint32 {
	n := uint64(sets)
	h := setHash(tag)
	return uint32((h%n + setSkew(h/n)%n) % n)
}

// setHash is the tag's line with its namespace spread (SetHashMul).
func setHash(tag uint64) uint64 { return tag&TagLineMask + (tag>>TagNamespaceShift)*SetHashMul }

// setSkew is the rotation of the sets of block b of setHash values.
func setSkew(b uint64) uint64 { return b * SetHashMul >> SetSkewShift }

// MakeTag builds the tag of line index line of namespace ns. It fails when
// line does not fit TagLineMask or the result would be TagEmpty.
func MakeTag(ns uint8, line uint64) (uint64, error) {
	if line > TagLineMask {
		return 0, fmt.Errorf("%w: line index %d exceeds %d", ErrInvalidTag, line, uint64(TagLineMask))
	}
	t := uint64(ns)<<TagNamespaceShift | line
	if t == TagMask {
		return 0, fmt.Errorf("%w: namespace %d line %#x is the reserved empty tag", ErrInvalidTag, ns, line)
	}
	return t, nil
}

// Layout returns the region's constants for the CUDA header generator
// (package internal/layout).
func Layout() layout.Group {
	return layout.Group{
		Name: "gpucache",
		Doc: "Metadata region of package gpucache (one per cache of N sets x K ways), accessed with atomics. " +
			"Arrays, each starting on a SectorBytes boundary: N set records (SetStride) at 0; N*K tag words (TagBytes, " +
			"way w of set s at index s*K+w: tag | clock bit | generation); N*K write-back tags; N*K way records (WayStride). Array offset = " +
			"offset of the previous array + its size rounded up to SectorBytes. A fresh region is zero except both " +
			"tag arrays, which are all 0xFF bytes (TagEmpty). Line data of way index g lives at g*LineSize in a " +
			"separate data region. The protocol is described in gpucache/doc.go.",
		Consts: []layout.Const{
			{Name: "SectorBytes", Value: SectorBytes, Doc: "Alignment of the region and of each array in it."},
			{Name: "SetStride", Value: SetStride, Doc: "Bytes per set record."},
			{Name: "SetLockOffset", Value: SetLockOffset, Doc: "uint32 set lock within a set record: LockFree or LockHeld; compare-and-swap try-lock, never held across I/O."},
			{Name: "SetHandOffset", Value: SetHandOffset, Doc: "uint32 clock hand within a set record (next way to consider); written by the lock holder only."},
			{Name: "TagBytes", Value: TagBytes, Doc: "Bytes per tag word and per write-back tag."},
			{Name: "TagBits", Value: TagBits, Doc: "Width of the tag field in the low bits of a tag word."},
			{Name: "TagMask", Value: TagMask, Doc: "Mask of the tag field of a tag word; all ones in an unused slot, which no line's tag equals."},
			{Name: "TagWordClockBit", Value: TagWordClockBit, Doc: "Bit position of the clock reference bit in a tag word: set by hits (atomic or), cleared by the passing hand (atomic and)."},
			{Name: "TagWordGenShift", Value: TagWordGenShift, Doc: "Bit position of the generation in a tag word (the bits above it): made odd by the BUSY owner when it installs a new tag, in the same store, and even once the line holds the tag's complete data, so a reader that takes no reference can tell whether the line was complete and unchanged while it copied."},
			{Name: "TagWordGenBits", Value: TagWordGenBits, Doc: "Width of the generation in a tag word; it wraps."},
			{Name: "WayStride", Value: WayStride, Doc: "Bytes per way record; the hot state word gets a 32-byte sector of its own."},
			{Name: "WayStateOffset", Value: WayStateOffset, Doc: "uint32 state word within a way record: VALID|BUSY|DIRTY bits and the reference count."},
			{Name: "WayStatusOffset", Value: WayStatusOffset, Doc: "uint32 fill status within a way record: StatusOK, StatusFillFailed or StatusFillAborted."},
			{Name: "StateRefBits", Value: StateRefBits, Doc: "Width of the reference count in the low bits of the state word."},
			{Name: "StateRefMask", Value: StateRefMask, Doc: "Mask of the reference count; acquire n references with fetch_add(n)."},
			{Name: "StateDirtyBit", Value: StateDirtyBit, Doc: "Bit position of DIRTY: the line must be written back before it is dropped."},
			{Name: "StateBusyBit", Value: StateBusyBit, Doc: "Bit position of BUSY: one owner is filling, evicting or writing back the way."},
			{Name: "StateValidBit", Value: StateValidBit, Doc: "Bit position of VALID: the line holds the data of the way's tag."},
			{Name: "LockFree", Value: LockFree, Doc: "Set lock value: free."},
			{Name: "LockHeld", Value: LockHeld, Doc: "Set lock value: held."},
			{Name: "StatusOK", Value: StatusOK, Doc: "Fill status: no failed fill."},
			{Name: "StatusFillFailed", Value: StatusFillFailed, Doc: "Fill status: storage failed the fill; waiters on the tag receive the error."},
			{Name: "StatusFillAborted", Value: StatusFillAborted, Doc: "Fill status: the filler gave up (cancelled or timed out); waiters retry the miss themselves."},
			{Name: "TagEmpty", Value: TagEmpty, Doc: "Idle write-back slot; an unused tag word is all ones too (tag field TagMask)."},
			{Name: "TagNamespaceShift", Value: TagNamespaceShift, Doc: "Bit position of the namespace in a tag; the line index is below it."},
			{Name: "TagLineMask", Value: TagLineMask, Doc: "Mask of the line index in a tag."},
			{Name: "SetHashMul", Value: SetHashMul, Doc: "h = (tag & TagLineMask) + (tag >> TagNamespaceShift) * SetHashMul; set = (h mod N + ((h / N) * SetHashMul >> SetSkewShift) mod N) mod N, wrapping 64-bit arithmetic."},
			{Name: "SetSkewShift", Value: SetSkewShift, Doc: "Shift of the block rotation in the set of a tag (see SetHashMul)."},
			{Name: "MinLineSize", Value: MinLineSize, Doc: "Smallest line size in bytes (power of two)."},
			{Name: "MaxLineSize", Value: MaxLineSize, Doc: "Largest line size in bytes (power of two)."},
			{Name: "MaxWays", Value: MaxWays, Doc: "Largest associativity K."},
		},
	}
}
