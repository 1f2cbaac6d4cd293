package gpuengine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// queuePair is one host-proxied NVMe queue pair: rings, doorbells, staging
// slots and PRP lists in pinned host memory mapped into the device, the vq
// metadata in device memory.
type queuePair struct {
	id       uint16
	depth    uint32
	ring     *cuda.HostMem // SQ | CQ | SQ doorbell | CQ doorbell
	staging  *cuda.HostMem // depth slots of one line
	prpLists *cuda.HostMem // depth pages of 4 KiB
	meta     *cuda.DeviceMem
	mirror   *cuda.DeviceMem // the staging slots' mirror (mirror.go); nil when off
	mem      *nvme.QueuePairMemory

	stagingSkip uint64 // offset of the first aligned staging slot in staging
	mirrorOn    bool   // kernels are told about the mirror (encode)

	ringDev, stagingDev, prpDev cuda.DevicePtr
	prpHost                     []byte
	lineSize                    int
	sqBytes, cqBytes            uint64
}

const (
	doorbellStride = 128 // each doorbell on its own 128-byte sector
	pageSize       = 4096
)

// pageAligned returns the first page-aligned device address of h and the
// host bytes of n bytes from there. Host and device addresses of mapped
// pinned memory share their offset within a page.
func pageAligned(h *cuda.HostMem, n uint64) (cuda.DevicePtr, []byte, error) {
	dev, err := h.DevicePtr()
	if err != nil {
		return 0, nil, err
	}
	skip := (pageSize - uint64(dev)%pageSize) % pageSize
	if skip+n > h.Size() {
		return 0, nil, fmt.Errorf("gpuengine: pinned buffer of %d bytes too small for %d aligned bytes", h.Size(), n)
	}
	host := uint64(uintptr(h.Ptr())) + skip
	if host%pageSize != 0 {
		return 0, nil, fmt.Errorf("gpuengine: pinned host address %#x and device address %#x differ within a page", host, uint64(dev)+skip)
	}
	return dev.Add(skip), h.Bytes()[skip : skip+n : skip+n], nil
}

// newQueuePair makes queue pair id of depth entries with staging slots of
// lineSize bytes (a read-ahead pair's slots hold several lines), and a
// staging mirror when mirror is set and the engine keeps mirrors.
func newQueuePair(e *Engine, id uint16, lineSize, queueDepth int, mirror bool) (*queuePair, error) {
	depth := uint32(queueDepth)
	q := &queuePair{id: id, depth: depth, lineSize: lineSize,
		sqBytes: uint64(depth) * nvme.SQESize, cqBytes: uint64(depth) * nvme.CQESize}
	var err error
	if q.ring, err = e.ctx.AllocPinned(q.sqBytes + q.cqBytes + 2*doorbellStride); err != nil {
		return nil, fmt.Errorf("gpuengine: queue %d rings: %w", id, err)
	}
	// Staging slots and PRP lists must be page aligned (PRP rules); the
	// driver's pinned allocations need not be, so allocate a page more and
	// use the aligned part.
	if q.staging, err = e.ctx.AllocPinned(uint64(depth)*uint64(lineSize) + pageSize); err != nil {
		return nil, fmt.Errorf("gpuengine: queue %d staging: %w", id, err)
	}
	if q.prpLists, err = e.ctx.AllocPinned(uint64(depth)*pageSize + pageSize); err != nil {
		return nil, fmt.Errorf("gpuengine: queue %d PRP lists: %w", id, err)
	}
	if q.meta, err = e.ctx.Alloc(uint64(vq.RegionBytes(depth))); err != nil {
		return nil, fmt.Errorf("gpuengine: queue %d metadata: %w", id, err)
	}
	if q.ringDev, err = q.ring.DevicePtr(); err != nil {
		return nil, err
	}
	var stagingHost, prpHost []byte
	if q.stagingDev, stagingHost, err = pageAligned(q.staging, uint64(depth)*uint64(lineSize)); err != nil {
		return nil, err
	}
	if base, err := q.staging.DevicePtr(); err == nil {
		q.stagingSkip = uint64(q.stagingDev - base)
	} else {
		return nil, err
	}
	if q.prpDev, prpHost, err = pageAligned(q.prpLists, uint64(depth)*pageSize); err != nil {
		return nil, err
	}
	q.prpHost = prpHost
	// The Target addresses staging slots and PRP lists by the device
	// addresses the GPU writes into PRPs; both are host memory it can touch.
	if err := e.dma.Register(uint64(q.stagingDev), uint64(len(stagingHost)), nvme.HostRegion(stagingHost)); err != nil {
		return nil, err
	}
	if err := e.dma.Register(uint64(q.prpDev), uint64(len(prpHost)), nvme.HostRegion(prpHost)); err != nil {
		return nil, err
	}
	b := q.ring.Bytes()
	q.mem = &nvme.QueuePairMemory{
		ID:     id,
		Depth:  depth,
		SQ:     b[:q.sqBytes:q.sqBytes],
		CQ:     b[q.sqBytes : q.sqBytes+q.cqBytes : q.sqBytes+q.cqBytes],
		SQTail: (*uint32)(unsafe.Pointer(&b[q.sqBytes+q.cqBytes])),
		CQHead: (*uint32)(unsafe.Pointer(&b[q.sqBytes+q.cqBytes+doorbellStride])),
	}
	if run := mirrorRun(e.cfg.MirrorRun, depth, lineSize); mirror && e.mirrors != nil && run != 0 {
		if q.mirror, err = e.ctx.Alloc(uint64(depth) * uint64(lineSize)); err != nil {
			return nil, fmt.Errorf("gpuengine: queue %d staging mirror: %w", id, err)
		}
		q.mem.Mirror = &stagingMirror{q: q, streams: e.mirrors}
		q.mem.MirrorRun = run
		q.mirrorOn = true
	}
	if err := q.mem.Validate(); err != nil {
		return nil, err
	}
	q.writePRPLists()
	return q, q.reset()
}

// writePRPLists fills slot i's list page with the addresses of its staging
// slot's pages after the first (lines over 8 KiB). Kernels rewrite the page
// for every command they build (queue::prps_to names the staging slot or
// the cache line), so this only gives the pages a defined start.
func (q *queuePair) writePRPLists() {
	b := q.prpHost
	pages := q.lineSize / 4096
	for i := 0; i < int(q.depth); i++ {
		base := uint64(q.stagingDev) + uint64(i*q.lineSize)
		for k := 1; k < pages; k++ {
			binary.LittleEndian.PutUint64(b[i*4096+(k-1)*8:], base+uint64(k*4096))
		}
	}
}

// reset zeroes the rings, doorbells and vq metadata: a queue pair as new.
func (q *queuePair) reset() error {
	b := q.ring.Bytes()
	clear(b)
	return q.meta.Memset8(0)
}

// encode writes the queue descriptor (layout.go) into b.
func (q *queuePair) encode(b []byte) {
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	put(QueueMetaOffset, uint64(q.meta.Ptr()))
	put(QueueSQOffset, uint64(q.ringDev))
	put(QueueCQOffset, uint64(q.ringDev)+q.sqBytes)
	put(QueueSQDoorbellOffset, uint64(q.ringDev)+q.sqBytes+q.cqBytes)
	put(QueueCQDoorbellOffset, uint64(q.ringDev)+q.sqBytes+q.cqBytes+doorbellStride)
	put(QueueDepthOffset, uint64(q.depth))
	put(QueueStagingOffset, uint64(q.stagingDev))
	put(QueueStagingDMAOffset, uint64(q.stagingDev))
	put(QueuePRPListDMAOffset, uint64(q.prpDev))
	put(QueueIDOffset, uint64(q.id))
	put(QueuePRPListOffset, uint64(q.prpDev))
	if q.mirror != nil && q.mirrorOn {
		put(QueueMirrorOffset, uint64(q.mirror.Ptr()))
	}
}

// mirrorRun is the longest run the Target copies into a queue's staging
// mirror: want, but at most half of the queue's staging slots, so that the
// GPU has slots to submit into while a run gathers; 0 (no mirror) when
// that is below nvme.MirrorMinRun.
func mirrorRun(want int, depth uint32, lineSize int) uint32 {
	run := min(uint64(want), uint64(depth)*uint64(lineSize)/2)
	if run < nvme.MirrorMinRun {
		return 0
	}
	return uint32(run)
}

func (q *queuePair) free() error {
	var errs []error
	for _, h := range []*cuda.HostMem{q.ring, q.staging, q.prpLists} {
		if h != nil {
			errs = append(errs, h.Free())
		}
	}
	for _, m := range []*cuda.DeviceMem{q.meta, q.mirror} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	return errors.Join(errs...)
}
