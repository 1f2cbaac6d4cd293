package gpuengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/nvme"
)

// Hooks for the data-path benchmarks (internal/gpubench): access to the
// queue pairs and the Target below the cache, a launch timed with device
// events, and switching an array's victim policy. They change nothing the
// rest of the engine relies on.

// QueueDescs returns the device address of the engine's queue descriptors
// (QueueDescBytes each, the layout of bam::queue_desc) and their number.
func (e *Engine) QueueDescs() (cuda.DevicePtr, int) { return e.queueDescs.Ptr(), len(e.queues) }

// TargetStats returns the counters of the engine's NVMe Target.
func (e *Engine) TargetStats() nvme.TargetStats { return e.target.Stats() }

// ResetQueues resets every queue pair as after a timeout: the Target forgets
// them, their rings and metadata are zeroed and they are served again. A
// benchmark that drives the queue memory with another protocol calls it
// before and after.
func (e *Engine) ResetQueues(ctx context.Context) error {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	if err := e.stream.Synchronize(); err != nil {
		return err
	}
	return e.resetQueues(ctx)
}

// LaunchTimed is Launch with the kernel's device time measured by events
// recorded on the engine's stream just before and after it.
func (e *Engine) LaunchTimed(ctx context.Context, fn *cuda.Function, cfg cuda.LaunchConfig, args ...cuda.Arg) (time.Duration, error) {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	start, err := e.ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := e.ctx.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := e.stream.MemsetD8(e.errRec.Ptr(), 0, ErrorRecordBytes); err != nil {
		return 0, err
	}
	for _, q := range e.queues {
		e.target.Kick(q.id)
	}
	cfg.Stream = e.stream
	if err := start.Record(e.stream); err != nil {
		return 0, err
	}
	if err := fn.Launch(cfg, args...); err != nil {
		return 0, fmt.Errorf("gpuengine: launch %s: %w", fn.Name(), err)
	}
	if err := end.Record(e.stream); err != nil {
		return 0, err
	}
	bound := 4*e.cfg.Timeout + 30*time.Second
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := e.stream.Wait(wctx); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("gpuengine: %s did not finish within %v although every device wait is bounded by %v: %w", fn.Name(), bound, e.cfg.Timeout, err)
		}
		return 0, fmt.Errorf("gpuengine: %s: %w", fn.Name(), err)
	}
	d, err := cuda.Elapsed(start, end)
	if err != nil {
		return 0, err
	}
	rec := make([]byte, ErrorRecordBytes)
	if err := e.errRec.Read(0, rec); err != nil {
		return 0, err
	}
	de := decodeError(rec)
	if de == nil {
		return d, nil
	}
	de.Kernel = fn.Name()
	if de.Code == ErrCodeTimeout || (de.Code == ErrCodeStatus && de.Status&0x8000 != 0) {
		if err := e.resetQueues(ctx); err != nil {
			return 0, errors.Join(de, fmt.Errorf("gpuengine: reset queues after timeout: %w", err))
		}
	}
	return 0, de
}

// SetRoundRobin switches the victim choice of a's descriptor between clock
// (false) and round robin (true), whatever Config.RoundRobin says; it
// affects launches that start afterwards.
func (a *Array) SetRoundRobin(roundRobin bool) error {
	policy := uint64(PolicyClock)
	if roundRobin {
		policy = PolicyRoundRobin
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], policy)
	return a.desc.Write(ArrayPolicyOffset, b[:])
}

// SetFillRoute switches the fill route of a's descriptor, whatever
// Config.FillRoute says; it affects launches that start afterwards.
func (a *Array) SetFillRoute(r FillRoute) error {
	below, err := r.directBelow()
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], below)
	return a.desc.Write(ArrayDirectBelowOffset, b[:])
}

// RegisterDeviceMemory makes m addressable by the Target at its device
// address, served by the copy engine like the cache's lines, so that
// benchmark kernels can name it in PRPs. release unregisters it; call it
// before freeing m.
func (e *Engine) RegisterDeviceMemory(m *cuda.DeviceMem) (release func() error, err error) {
	if m.Ptr()%pageSize != 0 {
		return nil, fmt.Errorf("gpuengine: device memory at %#x is not page aligned", uint64(m.Ptr()))
	}
	r := &lineRegion{base: m.Ptr(), size: m.Size(), pool: e.copiers}
	if err := e.dma.Register(uint64(m.Ptr()), m.Size(), r); err != nil {
		return nil, err
	}
	return func() error { return e.dma.Unregister(uint64(m.Ptr())) }, nil
}
