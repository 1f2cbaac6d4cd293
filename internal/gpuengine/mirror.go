package gpuengine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/nvme"
)

// Defaults of Config.MirrorRun and Config.MirrorStreams.
const (
	DefaultMirrorRun     = 512 << 10
	DefaultMirrorStreams = 4
)

// The staging mirror (nvme.Mirror, Config.StagingMirror). A GPU's loads of
// pinned host memory move at most about 93 % of what its copy engines move
// on large copies (bench/experiments/zero_copy_tma.cu: 51.3 against 55.4
// GB/s on the H200 host), and copy engines reach that rate only on copies
// of 64 KiB and more (ce_small_copies.cu). So each queue pair's staging
// slots may have a mirror in device memory: under load, the Target joins
// the Reads a queue fetched in order (consecutive slots) into runs
// (Config.MirrorRun), copies each run into the mirror with one
// cuMemcpyHtoDAsync, and completes its Reads with nvme.MirroredDW0; the
// warp that asked for the line then copies it from the mirror, in device
// memory, instead of across PCIe. Kernels ask for this only when their
// queue is busy (queue::mirror_hint), so a lone Read keeps the latency of
// the staging slot.
//
// The Target learns that a copy is done without a driver call where it
// can: each copy is followed on its stream by a stream write of a sequence
// number into a word of pinned memory (cuda.Stream.CopyHtoDSignal), which
// the worker polls with a load. Drivers without stream memory operations
// get events.
//
// Measured on the H200 host (bench/results/logs/staging-mirror-H200-*),
// the mirror loses, so it is off by default:
//   - Q2 (4 KiB reads into device memory, 64 Ki threads): 9-11 GB/s with
//     the mirror against 42-46 GB/s without, whatever the run length
//     (128 or 512 KiB), the number of copy streams (1, 4 or 12) or how
//     copies are tracked (events: 19 GB/s with 256 KiB runs); cold 4 KiB
//     gathers (C1 random) 11-20 against 48-49 GB/s.
//   - With the I/O kernel running, a run's copy took 7-9 ms from start to
//     done (about 125 KiB a copy, none failed): the copy engine
//     moved 8-9 GB/s of them in all. The Reads waiting on a copy hold
//     their queue slots, so runs end idle and short, and more copies of
//     the same slow kind follow.
//   - Even alone (TestGPUMirrorCopies, no kernel, 16 workers), runs of
//     128 KiB copied at 21-26 GB/s and runs of 512 KiB at 41-43 GB/s,
//     below what the staging route already moves: a copy with a
//     completion marker of its own costs several microseconds beyond
//     its bytes, and queue depth bounds a run to half a queue's slots.
// It stays as an option for hosts whose GPU loads of pinned memory are
// much slower than their copy engines.
//
// What a copy-engine route could gain here, measured without queues
// (bench/experiments/landing_ring.cu, logs/landing-ring-H200-20261126.txt):
// host threads putting 4 KiB items into one ring shared by all of them, in
// batches, sealed into 4-8 MiB chunks, each copied with one copy and
// announced by a stream write, moved 51.1-52.6 GB/s with the host's copies
// (0.92-0.95 of the copy ceiling, against 51.3 for GPU loads) and 54.4
// without them. Such a route places a Read's data where the Target
// chooses, not where its PRP says, and must learn when the GPU has read a
// chunk before reusing it; the per-queue runs above cannot reach chunks of
// that size. Neither write-combined memory nor 2 MiB host pages moves the
// loads' cap (wc_pinned.cu, huge_pinned.cu). Built into the engine
// (bench/experiments/landing_route.patch, not applied), such a route moved
// 21-36 GB/s in Q2 against 48-50 for the staging route: beside the I/O
// kernel its copies, like this mirror's (60-85 us of GPU time for 130 KiB,
// mirror_copy_timing.patch), ran at 2-20 GB/s, and GPU loads of pinned
// memory beside copies take the link from them (landing_ring.cu -noise2:
// 4 GB/s of copies beside 43 of loads), and so does the CQ harvest's
// window, four loads of one line by one thread (copies near 30 GB/s; one
// 64-byte access by four lanes costs them 2-5 %).
// logs/landing-route-H200-20261126.txt.

// mirrorStreams are the copy streams of the staging mirror, one per Target
// worker up to maxMirrorStreams.
type mirrorStreams struct {
	ctx   *cuda.Context
	lanes []*mirrorLane
	words *cuda.HostMem // one 128-byte line per lane: the lane's done word
	event atomic.Bool   // signals unsupported: copies are tracked with events

	mu     sync.Mutex
	free   []*cuda.Event
	events []*cuda.Event // every event made, for close
}

// mirrorLane is one stream and its sequence of signalled copies.
type mirrorLane struct {
	stream *cuda.Stream
	mu     sync.Mutex // orders seq with the stream's writes
	seq    uint32     // last sequence number enqueued
	done   *uint32    // pinned word the stream writes seq into
	doneAt cuda.DevicePtr
}

// maxMirrorStreams keeps the mirror's streams, with the launch stream, the
// fill copier's and the copy-engine route's (at most 17), within the 32
// hardware queues of cuda.MaxConnectionsEnv, so that no copy waits behind a
// running kernel that waits for it.
const maxMirrorStreams = 12

// mirrorCopyTimeout bounds a mirror copy: one not done by then counts as
// failed, and its Reads complete from the staging slots, whose data is
// intact (a stalled stream must not stall the queues).
const mirrorCopyTimeout = time.Second

func newMirrorStreams(ctx *cuda.Context, workers int) (*mirrorStreams, error) {
	m := &mirrorStreams{ctx: ctx}
	n := max(1, min(workers, maxMirrorStreams))
	var err error
	if m.words, err = ctx.AllocPinned(uint64(n) * 128); err != nil {
		return nil, err
	}
	clear(m.words.Bytes())
	base, err := m.words.DevicePtr()
	if err != nil {
		return nil, errors.Join(err, m.close())
	}
	for i := range n {
		s, err := ctx.NewStream()
		if err != nil {
			return nil, errors.Join(err, m.close())
		}
		m.lanes = append(m.lanes, &mirrorLane{
			stream: s,
			done:   (*uint32)(unsafe.Add(m.words.Ptr(), i*128)),
			doneAt: base.Add(uint64(i) * 128),
		})
	}
	return m, nil
}

func (m *mirrorStreams) eventFromPool() (*cuda.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := len(m.free); n > 0 {
		e := m.free[n-1]
		m.free = m.free[:n-1]
		return e, nil
	}
	e, err := m.ctx.NewSyncEvent()
	if err != nil {
		return nil, err
	}
	m.events = append(m.events, e)
	return e, nil
}

func (m *mirrorStreams) put(e *cuda.Event) {
	m.mu.Lock()
	m.free = append(m.free, e)
	m.mu.Unlock()
}

// close waits for every copy and releases streams, events and words. The
// Target must be closed: no copy starts any more.
func (m *mirrorStreams) close() error {
	var errs []error
	for _, l := range m.lanes {
		errs = append(errs, l.stream.Synchronize(), l.stream.Destroy())
	}
	for _, e := range m.events {
		errs = append(errs, e.Destroy())
	}
	if m.words != nil {
		errs = append(errs, m.words.Free())
	}
	m.lanes, m.events, m.free, m.words = nil, nil, nil, nil
	return errors.Join(errs...)
}

// stagingMirror is one queue pair's staging slots and their mirror in
// device memory, as an nvme.Mirror.
type stagingMirror struct {
	q       *queuePair
	streams *mirrorStreams
}

func (s *stagingMirror) Region() (uint64, uint64) {
	return uint64(s.q.stagingDev), uint64(s.q.depth) * uint64(s.q.lineSize)
}

func (s *stagingMirror) Copy(lane int, off, n uint64) (nvme.MirrorCopy, error) {
	size := uint64(s.q.depth) * uint64(s.q.lineSize)
	if off > size || n > size-off {
		return nil, fmt.Errorf("gpuengine: mirror copy of %d bytes at %d beyond %d staging bytes", n, off, size)
	}
	m := s.streams
	l := m.lanes[lane%len(m.lanes)]
	dst, srcOff := s.q.mirror.Ptr().Add(off), s.q.stagingSkip+off
	if !m.event.Load() {
		l.mu.Lock()
		seq := l.seq + 1
		err := l.stream.CopyHtoDSignal(dst, s.q.staging, srcOff, n, l.doneAt, seq)
		if err == nil {
			l.seq = seq
		}
		l.mu.Unlock()
		if err == nil {
			return &signalCopy{done: l.done, seq: seq, start: time.Now()}, nil
		}
		// No stream memory operations here: events from now on.
		m.event.Store(true)
	}
	if err := l.stream.CopyHtoD(dst, s.q.staging, srcOff, n); err != nil {
		return nil, err
	}
	ev, err := m.eventFromPool()
	if err != nil {
		// The copy is queued; wait for it here rather than lose track.
		return nil, errors.Join(err, l.stream.Synchronize())
	}
	if err := ev.Record(l.stream); err != nil {
		m.put(ev)
		return nil, errors.Join(err, l.stream.Synchronize())
	}
	return &eventCopy{ev: ev, streams: m, start: time.Now()}, nil
}

// signalCopy is a copy whose stream writes seq into *done after it.
type signalCopy struct {
	done  *uint32
	seq   uint32
	start time.Time
}

func (c *signalCopy) Done() (bool, error) {
	if int32(atomic.LoadUint32(c.done)-c.seq) >= 0 {
		return true, nil
	}
	if time.Since(c.start) > mirrorCopyTimeout {
		return true, fmt.Errorf("gpuengine: mirror copy not done after %v", mirrorCopyTimeout)
	}
	return false, nil
}

// eventCopy is a copy followed by an event; the event goes back to the
// pool once the copy is seen done.
type eventCopy struct {
	ev      *cuda.Event
	streams *mirrorStreams
	start   time.Time
}

func (c *eventCopy) Done() (bool, error) {
	if c.ev == nil {
		return true, nil
	}
	done, err := c.ev.Done()
	if !done && err == nil {
		if time.Since(c.start) > mirrorCopyTimeout {
			// The event stays out of the pool: its copy may still run.
			c.ev = nil
			return true, fmt.Errorf("gpuengine: mirror copy not done after %v", mirrorCopyTimeout)
		}
		return false, nil
	}
	c.streams.put(c.ev)
	c.ev = nil
	return true, err
}
