package gpuengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/internal/cuda"
)

// DefaultCopyBelow is the group size under which a fill's staging copy
// goes to the fill copier: a group of 16 lanes loads 256 bytes per
// instruction, a copier warp 512.
const DefaultCopyBelow = 16

// copierIdle is how long a copier warp waits for a job before it decides
// the kernel it serves is not running beside it (kernels serialised by a
// tool) and exits; posters then copy for themselves. Normally the copier
// stops when its kernel ends (stopAfter). Shorter waits made the copier
// leave during lulls of a kernel's misses (1 ms did, with a million
// threads), and the rest of the kernel copied alone.
const copierIdle = 50 * time.Millisecond

// copierStartWait bounds how long a launch waits for the copier's warps to
// run before it launches the kernel anyway (the GPU busy with another
// program's work, say); posters then copy for themselves until they run.
const copierStartWait = 10 * time.Millisecond

// fillCopier owns the fill copier (kernels/include/bam/copier.cuh): a ring
// of copy jobs in device memory and the kernel whose warps serve it, which
// the engine launches on a stream of its own beside the kernels it runs.
// A lane that owns a staging copy it cannot share with its warp posts it to
// the ring, and a copier warp copies it with 32 lanes.
//
// The copier costs a kernel that never posts: its blocks hold registers and
// thread slots on some multiprocessors, so a kernel whose grid is sized to
// fill the GPU runs an extra, partial wave (an all-hit lookup kernel lost
// 30%). So it runs beside a kernel only while that kernel wants it: on its
// first launch, and after a launch in which it posted copies or in which
// lanes found no copier to post to (want, note).
type fillCopier struct {
	ring       *cuda.DeviceMem
	started    *cuda.HostMem // u32 the copier's last warp to start sets to its epoch
	startedDev cuda.DevicePtr
	slots      uint64
	stream     *cuda.Stream
	fn         *cuda.Function
	launch     cuda.LaunchConfig
	epoch      uint32

	mu      sync.Mutex
	skip    map[*cuda.Function]bool // kernels whose last launch neither posted nor missed a copier
	counted [2]uint64               // jobs and missed at the last note
}

// newFillCopier builds the ring (slots jobs, a power of two) and the launch
// of warps copier warps.
func newFillCopier(ctx *cuda.Context, mod *cuda.Module, slots uint64, warps int) (*fillCopier, error) {
	fn, err := mod.Function("bam_fill_copier")
	if err != nil {
		return nil, err
	}
	c := &fillCopier{slots: slots, fn: fn, skip: map[*cuda.Function]bool{}}
	if c.ring, err = ctx.Alloc(CopierSlotsOffset + slots*CopierSlotBytes); err != nil {
		return nil, fmt.Errorf("fill copier ring: %w", err)
	}
	if c.stream, err = ctx.NewStream(); err != nil {
		c.close()
		return nil, err
	}
	if c.started, err = ctx.AllocPinned(64); err != nil {
		c.close()
		return nil, err
	}
	if c.startedDev, err = c.started.DevicePtr(); err != nil {
		c.close()
		return nil, err
	}
	const block = 128
	blocks := (warps*32 + block - 1) / block
	c.launch = cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(blocks), Y: 1, Z: 1}, Block: cuda.Dim3{X: block, Y: 1, Z: 1}, Stream: c.stream}
	if err := c.reset(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// reset empties the ring: head and tail 0, slot t free for ticket t. Only
// while no copier kernel and no kernel that posts runs.
func (c *fillCopier) reset() error {
	c.mu.Lock()
	c.counted = [2]uint64{}
	c.mu.Unlock()
	b := make([]byte, CopierSlotsOffset+c.slots*CopierSlotBytes)
	le := binary.LittleEndian
	le.PutUint64(b[CopierMaskOffset:], c.slots-1)
	le.PutUint32(b[CopierStopOffset:], c.epoch)
	for t := uint64(0); t < c.slots; t++ {
		le.PutUint64(b[CopierSlotsOffset+t*CopierSlotBytes+CopierSeqOffset:], t)
	}
	return c.ring.Write(0, b)
}

// want reports whether fn's next launch should have the copier beside it.
func (c *fillCopier) want(fn *cuda.Function) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.skip[fn]
}

// note takes the ring's job and missed counts after a launch of fn (b,
// the 16 bytes at CopierJobsOffset, copied back behind the launch) and
// decides whether fn's next launch gets the copier.
func (c *fillCopier) note(fn *cuda.Function, b []byte) {
	jobs, missed := binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:])
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skip[fn] = jobs == c.counted[0] && missed == c.counted[1]
	c.counted = [2]uint64{jobs, missed}
}

// counts reads, since the ring was reset, how many posts waited for their
// slot and how many were withdrawn untaken.
func (c *fillCopier) counts() (waited, dropped uint64, err error) {
	var b [16]byte
	if err := c.ring.Read(CopierWaitedOffset, b[:]); err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), nil
}

// ptr is the ring's address for descriptors.
func (c *fillCopier) ptr() cuda.DevicePtr { return c.ring.Ptr() }

// start launches the copier warps for the next kernel and waits (a
// bounded while) until all of them run, so that the kernel launched next
// cannot fill the GPU before them. It returns the epoch that stops them.
func (c *fillCopier) start() (uint32, error) {
	c.epoch++
	if c.epoch == 0 {
		c.epoch = 1
	}
	err := c.fn.Launch(c.launch, cuda.Ptr(c.ring.Ptr()), cuda.U64(uint64(c.epoch)), cuda.U64(uint64(copierIdle.Nanoseconds())), cuda.Ptr(c.startedDev))
	if err != nil {
		return 0, fmt.Errorf("gpuengine: launch fill copier: %w", err)
	}
	word := (*uint32)(c.started.Ptr())
	deadline := time.Now().Add(copierStartWait)
	for atomic.LoadUint32(word) != c.epoch && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	return c.epoch, nil
}

// stopAfter enqueues the stop of epoch's copier warps on s, behind the
// kernel they serve: the warps exit as soon as that kernel has ended.
func (c *fillCopier) stopAfter(s *cuda.Stream, epoch uint32) error {
	return s.MemsetD32(c.ring.Ptr().Add(CopierStopOffset), epoch, 1)
}

// wait waits for the copier warps to exit (bounded by ctx).
func (c *fillCopier) wait(ctx context.Context) error {
	if err := c.stream.Wait(ctx); err != nil {
		return fmt.Errorf("gpuengine: fill copier: %w", err)
	}
	return nil
}

func (c *fillCopier) close() error {
	var errs []error
	if c.stream != nil {
		errs = append(errs, c.stream.Destroy())
	}
	if c.ring != nil {
		errs = append(errs, c.ring.Free())
	}
	if c.started != nil {
		errs = append(errs, c.started.Free())
	}
	return errors.Join(errs...)
}
