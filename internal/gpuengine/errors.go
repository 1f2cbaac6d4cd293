package gpuengine

import (
	"errors"
	"fmt"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

var (
	// ErrOutOfRange is matched by the error of a launch in which a kernel
	// accessed an element index at or past the array's length.
	ErrOutOfRange = errors.New("gpuengine: element index out of range")
	// ErrUnsupported is returned for arrays the device library cannot
	// serve (an element size other than 1, 2, 4, 8 or 16 bytes).
	ErrUnsupported = errors.New("gpuengine: unsupported")
	// ErrClosed is returned by calls on a closed engine.
	ErrClosed = errors.New("gpuengine: engine closed")
	// ErrStragglers is returned, wrapped with vq.ErrTimeout, by launches
	// while commands that timed out in an earlier launch are still
	// running in storage after its queue pairs were reset: no kernel runs
	// until storage has finished them.
	ErrStragglers = errors.New("gpuengine: commands abandoned after a timeout still run in storage")
	// ErrOverrun is matched, with vq.ErrTimeout, by the error of a launch
	// whose kernel was still running at the launch's bound and was stopped
	// through its abort word. Every device wait is bounded, so it means
	// waits that followed one another without end, or lanes waiting for
	// lanes that never came: a defect, where a timeout alone may be slow
	// storage.
	ErrOverrun = errors.New("gpuengine: kernel ran past its launch's bound")
)

// WaitKind names a device wait that gave up: the Wait* constants.
type WaitKind uint32

func (k WaitKind) String() string {
	switch k {
	case WaitTurn:
		return "its queue ticket's SQ slot"
	case WaitCompletion:
		return "its command's completion"
	case WaitLine:
		return "another thread's fill of the line"
	case WaitWay:
		return "a way of the line's set"
	case WaitSetLock:
		return "the lock of the line's set"
	case WaitCopier:
		return "the fill copier"
	case WaitSubmit:
		return "its command's submission (an earlier ticket of its queue was not issued)"
	}
	return fmt.Sprintf("wait kind %d", uint32(k))
}

// DeviceError is the failure of a launch most likely to be the cause of
// its others: the earliest of the highest rank the kernel recorded (a
// failing status, an index out of range, a cache too small, a submitted
// command's completion or the fill copier overdue; then a wait for a queue
// slot; then a wait for a command's submission, another thread's fill, a
// way or a set's lock; last an aborted wait). Count says how many failures
// there were in all.
type DeviceError struct {
	Code   uint32      // one of the ErrCode* constants
	Status nvme.Status // for ErrCodeStatus
	// Wait, for ErrCodeTimeout and ErrCodeAborted, is the wait that gave
	// up (0 if the kernel did not say).
	Wait   WaitKind
	Index  uint64 // element index (or way, for write-backs)
	LBA    uint64
	NSID   uint32
	Count  uint32 // failures recorded in the launch
	Kernel string

	// abandoned: some failure of the launch, the first or a later one,
	// left tickets, commands or copier jobs abandoned.
	abandoned bool
}

func (e *DeviceError) Error() string {
	more := ""
	if e.Count > 1 {
		more = fmt.Sprintf(" (and %d more failures)", e.Count-1)
	}
	switch e.Code {
	case ErrCodeStatus:
		return fmt.Sprintf("gpuengine: %s: element %d: NVMe command on nsid %d lba %d failed: %v%s", e.Kernel, e.Index, e.NSID, e.LBA, e.Status, more)
	case ErrCodeTimeout:
		return fmt.Sprintf("gpuengine: %s: element %d: wait%s timed out (nsid %d lba %d)%s", e.Kernel, e.Index, e.waitFor(), e.NSID, e.LBA, more)
	case ErrCodeOutOfRange:
		return fmt.Sprintf("gpuengine: %s: element index %d out of range%s", e.Kernel, e.Index, more)
	case ErrCodeCacheTooSmall:
		return fmt.Sprintf("gpuengine: %s: element %d: every way of its set stayed referenced: cache too small for the number of live references%s", e.Kernel, e.Index, more)
	case ErrCodeAborted:
		return fmt.Sprintf("gpuengine: %s: element %d: wait%s stopped by the launch's abort (nsid %d lba %d)%s", e.Kernel, e.Index, e.waitFor(), e.NSID, e.LBA, more)
	}
	return fmt.Sprintf("gpuengine: %s: device error code %d%s", e.Kernel, e.Code, more)
}

func (e *DeviceError) waitFor() string {
	if e.Wait == 0 {
		return ""
	}
	return " for " + e.Wait.String()
}

// Unwrap lets errors.Is match the failure's sentinel.
func (e *DeviceError) Unwrap() error {
	switch e.Code {
	case ErrCodeStatus:
		if e.Status&TimeoutStatus != 0 {
			return vq.ErrTimeout
		}
		return &nvme.StatusError{Status: e.Status, NSID: e.NSID, SLBA: e.LBA}
	case ErrCodeTimeout:
		return vq.ErrTimeout
	case ErrCodeOutOfRange:
		return ErrOutOfRange
	case ErrCodeCacheTooSmall:
		return gpucache.ErrCacheTooSmall
	}
	return nil
}

// abandons reports whether the launch's failures left queue tickets,
// commands or copier jobs abandoned, so that the queue pairs and the copier
// ring need a reset: a timeout, an abort, or a status the Target reports
// for a command it gave up on (bit 15), whether that failure was the first
// (the one reported) or a later one (the record's abandoned word: a launch
// whose first failure was an index out of range may still have timed out).
func (e *DeviceError) abandons() bool {
	return e.abandoned || e.Code == ErrCodeTimeout || e.Code == ErrCodeAborted || (e.Code == ErrCodeStatus && e.Status&TimeoutStatus != 0)
}
