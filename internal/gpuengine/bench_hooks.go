package gpuengine

import (
	"context"
	"encoding/binary"
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
func (e *Engine) QueueDescs() (cuda.DevicePtr, int) {
	return e.caches[0].queueDescs.Ptr(), e.caches[0].queuePairs
}

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
	return e.launch(ctx, true, false, fn, cfg, args...)
}

// FillCopierRing is the fill copier's ring for benchmark kernels that post
// copies themselves; 0 when the engine runs no copier.
func (e *Engine) FillCopierRing() cuda.DevicePtr {
	if e.fillCopier == nil {
		return 0
	}
	return e.fillCopier.ptr()
}

// SetCopyBelow sets the group size under which a's fills hand their
// staging copy to the fill copier (0: never, whatever the engine runs),
// for ablations; it affects launches that start afterwards.
func (a *Array) SetCopyBelow(n uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], n)
	return a.desc.Write(ArrayCopyBelowOffset, b[:])
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

// SetStagingMirror tells kernels of launches that start afterwards whether
// their queues' staging mirrors exist (mirror.go), for A/B runs in one
// process: off, kernels never ask the Target for a mirrored completion.
// It changes nothing when the engine was made without Config.StagingMirror.
func (e *Engine) SetStagingMirror(on bool) error {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	for _, c := range e.caches {
		descs := make([]byte, len(c.queues)*QueueDescBytes)
		for i, q := range c.queues {
			q.mirrorOn = on
			q.encode(descs[i*QueueDescBytes:])
		}
		if err := c.queueDescs.Write(0, descs); err != nil {
			return err
		}
	}
	return nil
}
