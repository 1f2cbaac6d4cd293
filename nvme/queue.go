package nvme

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// QueuePairMemory is an I/O queue pair as it sits in memory shared by a
// host (the submitters) and a controller: the SQ ring of Depth 64-byte
// entries, the CQ ring of Depth 16-byte entries, and the two doorbell words.
//
// In host-proxied GPU mode all four live in pinned host memory mapped into
// the GPU; for CPU clients they are ordinary Go memory. The doorbells are
// accessed only with 32-bit atomic loads and stores, which on both sides
// order the ring contents written before them.
type QueuePairMemory struct {
	ID    uint16 // queue identifier (SQID = CQID), 1..65535 for I/O queues
	Depth uint32 // entries per ring, a power of two, 2..65536

	SQ []byte // Depth*SQESize bytes
	CQ []byte // Depth*CQESize bytes, zeroed before first use

	SQTail *uint32 // SQyTDBL: the host writes the new SQ tail index
	CQHead *uint32 // CQyHDBL: the host writes the new CQ head index

	// Mirror, when set, copies the data of Reads that ask for it
	// (MirrorHint) into a second place in runs of up to MirrorRun bytes
	// (default DefaultMirrorRun). See Mirror.
	Mirror    Mirror
	MirrorRun uint32
}

// Validate checks sizes, alignment and the power-of-two depth.
func (q *QueuePairMemory) Validate() error {
	switch {
	case q.ID == 0:
		return fmt.Errorf("nvme: queue pair ID 0 is the admin queue")
	case q.Depth < 2 || q.Depth > 65536 || q.Depth&(q.Depth-1) != 0:
		return fmt.Errorf("nvme: queue %d depth %d: want a power of two in 2..65536", q.ID, q.Depth)
	case len(q.SQ) < int(q.Depth)*SQESize:
		return fmt.Errorf("nvme: queue %d: SQ ring has %d bytes, needs %d", q.ID, len(q.SQ), int(q.Depth)*SQESize)
	case len(q.CQ) < int(q.Depth)*CQESize:
		return fmt.Errorf("nvme: queue %d: CQ ring has %d bytes, needs %d", q.ID, len(q.CQ), int(q.Depth)*CQESize)
	case q.SQTail == nil || q.CQHead == nil:
		return fmt.Errorf("nvme: queue %d: missing doorbell", q.ID)
	case uintptr(unsafe.Pointer(&q.CQ[0]))%CQESize != 0:
		return fmt.Errorf("nvme: queue %d: CQ ring not 16-byte aligned", q.ID)
	case q.MirrorRun != 0 && q.MirrorRun < MirrorMinRun:
		return fmt.Errorf("nvme: queue %d: mirror runs of %d bytes are below MirrorMinRun (%d)", q.ID, q.MirrorRun, MirrorMinRun)
	}
	return nil
}

// NewQueuePairMemory allocates a queue pair in Go memory with zeroed rings.
// The SQ ring starts on a 64-byte boundary, the CQ ring follows it (so it is
// 16-byte aligned) and each doorbell word sits in its own 64-byte sector.
func NewQueuePairMemory(id uint16, depth uint32) (*QueuePairMemory, error) {
	if depth < 2 || depth > 65536 || depth&(depth-1) != 0 {
		return nil, fmt.Errorf("nvme: queue %d depth %d: want a power of two in 2..65536", id, depth)
	}
	// One []uint64 backs everything; it is over-allocated by 64 bytes so
	// the start can be rounded up to a 64-byte boundary whatever size
	// class the allocator picked.
	sqEnd := int(depth) * SQESize
	cqEnd := sqEnd + int(depth)*CQESize
	total := cqEnd + 2*64
	buf := make([]uint64, (total+64)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	if mis := int(uintptr(unsafe.Pointer(&raw[0])) % 64); mis != 0 {
		raw = raw[64-mis:]
	}
	q := &QueuePairMemory{
		ID:     id,
		Depth:  depth,
		SQ:     raw[:sqEnd:sqEnd],
		CQ:     raw[sqEnd:cqEnd:cqEnd],
		SQTail: (*uint32)(unsafe.Pointer(&raw[cqEnd])),
		CQHead: (*uint32)(unsafe.Pointer(&raw[cqEnd+64])),
	}
	return q, q.Validate()
}

// SQE returns the bytes of SQ entry i (0 <= i < Depth).
func (q *QueuePairMemory) SQE(i uint32) []byte { return q.SQ[i*SQESize : (i+1)*SQESize] }

// CQE returns the bytes of CQ entry i (0 <= i < Depth).
func (q *QueuePairMemory) CQE(i uint32) []byte { return q.CQ[i*CQESize : (i+1)*CQESize] }

// CQEDW3 returns a pointer to dword 3 (CID, phase, status) of CQ entry i, for
// atomic polling of the phase tag.
func (q *QueuePairMemory) CQEDW3(i uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&q.CQ[i*CQESize+12]))
}

// RingSQTail stores a new SQ tail into the doorbell with release semantics.
func (q *QueuePairMemory) RingSQTail(tail uint32) { atomic.StoreUint32(q.SQTail, tail) }

// RingCQHead stores a new CQ head into the doorbell with release semantics.
func (q *QueuePairMemory) RingCQHead(head uint32) { atomic.StoreUint32(q.CQHead, head) }

// ExpectedPhase is the phase tag a completion at virtual CQ position p
// (counting every entry ever posted, from 0) carries: 1 on the first pass over
// the zeroed ring, inverted on each wrap.
func ExpectedPhase(p uint64, depth uint32) bool { return (p/uint64(depth))&1 == 0 }

// Full reports whether a ring with the given head and tail indices is full:
// one slot always stays empty.
func Full(head, tail, depth uint32) bool { return (tail+1)&(depth-1) == head }

// Entries returns how many entries lie between head and tail on a ring.
func Entries(head, tail, depth uint32) uint32 { return (tail - head) & (depth - 1) }
