package cuda

/*
#include "driver.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Stream is a CUDA stream: work queued on it runs in order. The zero
// stream (Context.DefaultStream) is the legacy default stream.
type Stream struct {
	ctx       *Context
	h         C.bam_CUstream
	destroyed atomic.Bool
}

// NewStream creates a stream that does not synchronise with the default
// stream (CU_STREAM_NON_BLOCKING).
func (c *Context) NewStream() (*Stream, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	var s C.bam_CUstream
	if err := check("cuStreamCreate", C.bam_cuStreamCreate(h, &s, 1)); err != nil {
		return nil, err
	}
	return &Stream{ctx: c, h: s}, nil
}

// DefaultStream returns the context's legacy default stream. Destroy on it
// is a no-op.
func (c *Context) DefaultStream() *Stream { return &Stream{ctx: c} }

func (s *Stream) handles() (C.bam_CUcontext, C.bam_CUstream, error) {
	if s == nil {
		return nil, nil, errors.New("cuda: nil stream")
	}
	if s.destroyed.Load() {
		return nil, nil, ErrClosed
	}
	h, err := s.ctx.handle()
	return h, s.h, err
}

// Destroy releases the stream once its queued work completes.
func (s *Stream) Destroy() error {
	if s == nil || s.h == nil || s.destroyed.Swap(true) {
		return nil
	}
	h, err := s.ctx.handle()
	if err != nil {
		return err
	}
	return check("cuStreamDestroy_v2", C.bam_cuStreamDestroy(h, s.h))
}

// Synchronize blocks until the stream's work completes. It cannot be
// interrupted; Wait is the bounded alternative.
func (s *Stream) Synchronize() error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	return check("cuStreamSynchronize", C.bam_cuStreamSynchronize(h, sh))
}

// Done reports whether all work queued on the stream has completed.
func (s *Stream) Done() (bool, error) {
	h, sh, err := s.handles()
	if err != nil {
		return false, err
	}
	r := int(C.bam_cuStreamQuery(h, sh))
	if r == resultNotReady {
		return false, nil
	}
	return r == resultSuccess, newError("cuStreamQuery", r)
}

// Wait polls the stream until its work completes or ctx ends. On expiry it
// returns ctx's error; the work stays queued.
func (s *Stream) Wait(ctx context.Context) error {
	return pollUntil(ctx, s.Done)
}

// Waits poll: the driver's queries are cheap (about a microsecond) and a
// query, unlike a blocking synchronisation, leaves the wait free to notice
// that its context ended. How soon a wait sees that the work is done
// decides what a short kernel costs: a BFS or CC launches several kernels
// per level, many of them shorter than a millisecond.
//
// A Go timer is no use for the pauses between queries: the runtime sleeps
// in epoll with millisecond resolution, so on an otherwise idle process a
// timer of 8-50 µs fired after 0.2-1.1 ms. So a wait first queries back to
// back, yielding the processor between queries, for spinPolls; then it
// sleeps pollPause between queries in the kernel's nanosleep (sleepFor),
// which returns within the kernel's timer slack (some 50-80 µs).
const (
	spinPolls = 500 * time.Microsecond
	pollPause = 20 * time.Microsecond
)

// pollUntil calls done until it returns true or an error, or ctx ends:
// back to back for spinPolls, then every pollPause (plus the sleep's
// slack). ctx is checked between calls.
func pollUntil(ctx context.Context, done func() (bool, error)) error {
	start := time.Now()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cuda: waiting for queued work: %w", err)
		}
		if time.Since(start) < spinPolls {
			runtime.Gosched()
			continue
		}
		sleepFor(pollPause)
	}
}

// CopyHtoD enqueues a copy of n bytes from pinned memory src at srcOff to
// device address dst.
func (s *Stream) CopyHtoD(dst DevicePtr, src *HostMem, srcOff, n uint64) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	p, err := src.span(srcOff, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2", C.bam_cuMemcpyHtoDAsync(h, C.bam_CUdeviceptr(dst), p, C.size_t(n), sh))
}

// CopyHtoDSignal is CopyHtoD followed on the stream by a write of value to
// the 32-bit word at device address flag (mapped pinned memory, for a host
// to poll), ordered after the copy's data: a copy whose completion a host
// thread can see with a load instead of a driver call. It fails, having
// enqueued nothing, on drivers without stream memory operations.
func (s *Stream) CopyHtoDSignal(dst DevicePtr, src *HostMem, srcOff, n uint64, flag DevicePtr, value uint32) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	p, err := src.span(srcOff, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyHtoDAsync_v2+cuStreamWriteValue32", C.bam_copy_signal(h, C.bam_CUdeviceptr(dst), p, C.size_t(n), sh, C.bam_CUdeviceptr(flag), C.unsigned(value)))
}

// CopyDtoH enqueues a copy of n bytes from device address src into pinned
// memory dst at dstOff.
func (s *Stream) CopyDtoH(dst *HostMem, dstOff uint64, src DevicePtr, n uint64) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	p, err := dst.span(dstOff, n)
	if err != nil {
		return err
	}
	return check("cuMemcpyDtoHAsync_v2", C.bam_cuMemcpyDtoHAsync(h, p, C.bam_CUdeviceptr(src), C.size_t(n), sh))
}

// CopyDtoD enqueues a copy of n bytes between device addresses.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n uint64) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	return check("cuMemcpyDtoDAsync_v2", C.bam_cuMemcpyDtoDAsync(h, C.bam_CUdeviceptr(dst), C.bam_CUdeviceptr(src), C.size_t(n), sh))
}

// MemsetD8 enqueues setting n bytes at p to v.
func (s *Stream) MemsetD8(p DevicePtr, v byte, n uint64) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	return check("cuMemsetD8Async", C.bam_cuMemsetD8Async(h, C.bam_CUdeviceptr(p), C.uchar(v), C.size_t(n), sh))
}

// MemsetD32 enqueues setting count 32-bit words at p to v.
func (s *Stream) MemsetD32(p DevicePtr, v uint32, count uint64) error {
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	return check("cuMemsetD32Async", C.bam_cuMemsetD32Async(h, C.bam_CUdeviceptr(p), C.uint(v), C.size_t(count), sh))
}

// CopyKind is the direction of the copies of a batch.
type CopyKind int

// Copy directions.
const (
	HostToDevice CopyKind = iota
	DeviceToHost
	DeviceToDevice
)

func (k CopyKind) String() string {
	switch k {
	case HostToDevice:
		return "host-to-device"
	case DeviceToHost:
		return "device-to-host"
	case DeviceToDevice:
		return "device-to-device"
	}
	return fmt.Sprintf("CopyKind(%d)", int(k))
}

// Copy is one copy of a batch. Host addresses must lie in pinned memory
// (HostMem.Addr); device addresses are DevicePtr values.
type Copy struct {
	Dst, Src uint64
	Bytes    uint64
}

// Copy must have bam_copy's layout: both array sizes are 0 only when the
// sizes match.
var (
	_ [unsafe.Sizeof(Copy{}) - C.sizeof_bam_copy]byte
	_ [C.sizeof_bam_copy - unsafe.Sizeof(Copy{})]byte
)

// EnqueueCopies enqueues every copy of the batch on the stream in one call
// into the driver binding and returns without waiting.
func (s *Stream) EnqueueCopies(kind CopyKind, copies []Copy) error {
	return s.copyBatch(kind, copies, false)
}

// CopyBatch enqueues every copy of the batch and waits for the stream once.
func (s *Stream) CopyBatch(kind CopyKind, copies []Copy) error {
	return s.copyBatch(kind, copies, true)
}

func (s *Stream) copyBatch(kind CopyKind, copies []Copy, wait bool) error {
	if kind < HostToDevice || kind > DeviceToDevice {
		return fmt.Errorf("cuda: batch copy: invalid kind %d", int(kind))
	}
	h, sh, err := s.handles()
	if err != nil {
		return err
	}
	if len(copies) == 0 {
		if wait {
			return s.Synchronize()
		}
		return nil
	}
	sync := C.int(0)
	if wait {
		sync = 1
	}
	var failed C.size_t
	// Copy is three uint64s, laid out as bam_copy; the slice holds no Go
	// pointers, so passing it for the duration of the call is allowed.
	r := C.bam_copy_batch(h, C.int(kind), (*C.bam_copy)(unsafe.Pointer(&copies[0])), C.size_t(len(copies)), sh, sync, &failed)
	if err := check("cuMemcpyAsync batch", r); err != nil {
		if int(failed) < len(copies) {
			c := copies[failed]
			return fmt.Errorf("cuda: %s batch copy %d of %d (dst %#x, src %#x, %d bytes): %w", kind, int(failed), len(copies), c.Dst, c.Src, c.Bytes, err)
		}
		return fmt.Errorf("cuda: %s batch of %d copies: %w", kind, len(copies), err)
	}
	return nil
}

// Event marks a point in a stream; pairs of events time the work between
// them.
type Event struct {
	ctx       *Context
	h         C.bam_CUevent
	destroyed atomic.Bool
}

// NewEvent creates an event that records timing.
func (c *Context) NewEvent() (*Event, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	var e C.bam_CUevent
	if err := check("cuEventCreate", C.bam_cuEventCreate(h, &e, 0)); err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: e}, nil
}

// eventDisableTiming is CU_EVENT_DISABLE_TIMING.
const eventDisableTiming = 0x2

// NewSyncEvent creates an event that only marks completion: it records and
// queries faster than a timing event, and Elapsed fails on it.
func (c *Context) NewSyncEvent() (*Event, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	var e C.bam_CUevent
	if err := check("cuEventCreate", C.bam_cuEventCreate(h, &e, eventDisableTiming)); err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: e}, nil
}

func (e *Event) handle() (C.bam_CUcontext, error) {
	if e == nil || e.destroyed.Load() {
		return nil, ErrClosed
	}
	return e.ctx.handle()
}

// Record enqueues the event on s (nil: the default stream).
func (e *Event) Record(s *Stream) error {
	h, err := e.handle()
	if err != nil {
		return err
	}
	var sh C.bam_CUstream
	if s != nil {
		if s.destroyed.Load() {
			return ErrClosed
		}
		sh = s.h
	}
	return check("cuEventRecord", C.bam_cuEventRecord(h, e.h, sh))
}

// Synchronize blocks until the event has completed.
func (e *Event) Synchronize() error {
	h, err := e.handle()
	if err != nil {
		return err
	}
	return check("cuEventSynchronize", C.bam_cuEventSynchronize(h, e.h))
}

// Done reports whether the event has completed.
func (e *Event) Done() (bool, error) {
	h, err := e.handle()
	if err != nil {
		return false, err
	}
	r := int(C.bam_cuEventQuery(h, e.h))
	if r == resultNotReady {
		return false, nil
	}
	return r == resultSuccess, newError("cuEventQuery", r)
}

// Wait polls the event until it completes or ctx ends.
func (e *Event) Wait(ctx context.Context) error { return pollUntil(ctx, e.Done) }

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e == nil || e.destroyed.Swap(true) {
		return nil
	}
	h, err := e.ctx.handle()
	if err != nil {
		return err
	}
	return check("cuEventDestroy_v2", C.bam_cuEventDestroy(h, e.h))
}

// Elapsed returns the GPU time between two completed events (resolution
// about 0.5 µs).
func Elapsed(start, end *Event) (time.Duration, error) {
	h, err := start.handle()
	if err != nil {
		return 0, err
	}
	if _, err := end.handle(); err != nil {
		return 0, err
	}
	var ms C.float
	if err := check("cuEventElapsedTime", C.bam_cuEventElapsedTime(h, &ms, start.h, end.h)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
