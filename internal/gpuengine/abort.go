package gpuengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/vq"
)

// aborter stops a running launch when its context ends. It writes 1 into
// the launch's abort word (the error record's word at ErrorAbortOffset)
// with a copy on a stream of its own, which a copy engine runs beside the
// kernel. Every bounded wait of the device library reads that word with
// its deadline (bam::detail::expired), so the kernel's waits give up as
// at their deadlines and record ErrCodeAborted, and its other accesses
// then fail fast. Launch clears the word with the rest of the record.
type aborter struct {
	stream *cuda.Stream
	one    *cuda.HostMem // a pinned u32 holding 1
}

func newAborter(c *cuda.Context) (_ *aborter, err error) {
	a := &aborter{}
	defer func() {
		if err != nil {
			err = errors.Join(err, a.close())
		}
	}()
	if a.stream, err = c.NewStream(); err != nil {
		return nil, fmt.Errorf("gpuengine: abort stream: %w", err)
	}
	if a.one, err = c.AllocPinned(4); err != nil {
		return nil, fmt.Errorf("gpuengine: abort word: %w", err)
	}
	a.one.Bytes()[0] = 1
	return a, nil
}

// abort sets the abort word at word and waits, at most bound, until the
// copy has landed.
func (a *aborter) abort(word cuda.DevicePtr, bound time.Duration) error {
	if err := a.stream.CopyHtoD(word, a.one, 0, 4); err != nil {
		return fmt.Errorf("gpuengine: set the abort word: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := a.stream.Wait(ctx); err != nil {
		return fmt.Errorf("gpuengine: set the abort word: %w", err)
	}
	return nil
}

func (a *aborter) close() error {
	var errs []error
	if a.stream != nil {
		errs = append(errs, a.stream.Destroy())
	}
	if a.one != nil {
		errs = append(errs, a.one.Free())
	}
	return errors.Join(errs...)
}

// abortedError reports a launch stopped by its abort word: because its
// context ended, or because it ran past its bound (an *overrunError). It
// wraps that cause.
type abortedError struct{ cause error }

func (e *abortedError) Error() string { return "stopped: " + e.cause.Error() }
func (e *abortedError) Unwrap() error { return e.cause }

// overrunError is the cause of a launch stopped because it was still
// running at its bound, although every device wait is bounded by the
// timeout: waits repeated one after another without end, or lanes waiting
// at a warp-synchronous step for lanes that never come. It matches
// ErrOverrun and vq.ErrTimeout.
type overrunError struct{ bound, timeout time.Duration }

func (e *overrunError) Error() string {
	return fmt.Sprintf("did not finish within %v although every device wait is bounded by %v", e.bound, e.timeout)
}
func (e *overrunError) Unwrap() []error { return []error{ErrOverrun, vq.ErrTimeout} }

// waitKernel waits for the engine's stream, at most bound. When ctx ends
// first, or the bound passes, it sets the launch's abort word and waits
// again, at most bound, so that the kernel is over whenever it returns nil
// or an *abortedError. A kernel that does not stop even then leaves the
// engine stuck (e.stuck): no later launch may queue behind it, and Close
// frees nothing the kernel may still use.
func (e *Engine) waitKernel(ctx context.Context, bound time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, bound)
	err := e.stream.Wait(wctx)
	cancel()
	var cause error
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		cause = ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		cause = &overrunError{bound: bound, timeout: e.cfg.Timeout}
	default:
		return err
	}
	if aerr := e.aborter.abort(e.errRec.Ptr().Add(ErrorAbortOffset), bound); aerr != nil {
		e.stuck = fmt.Errorf("gpuengine: a kernel may still run (%v): %w", cause, aerr)
		return e.stuck
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	if err := e.stream.Wait(sctx); err != nil {
		e.stuck = fmt.Errorf("gpuengine: a kernel did not stop within %v of its abort (%v): %w", bound, cause, err)
		return e.stuck
	}
	return &abortedError{cause: cause}
}
