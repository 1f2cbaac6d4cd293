package gpuengine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bam-go/bam/internal/cuda"
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

// abortedError reports a launch stopped because its context ended; it
// wraps the context's error.
type abortedError struct{ cause error }

func (e *abortedError) Error() string { return "stopped: " + e.cause.Error() }
func (e *abortedError) Unwrap() error { return e.cause }

// waitKernel waits for the engine's stream, at most bound. When ctx ends
// first it sets the launch's abort word and waits again, at most bound,
// so that the kernel is over whenever it returns nil or an
// *abortedError.
func (e *Engine) waitKernel(ctx context.Context, bound time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, bound)
	err := e.stream.Wait(wctx)
	cancel()
	if err == nil || ctx.Err() == nil {
		return err
	}
	if aerr := e.aborter.abort(e.errRec.Ptr().Add(ErrorAbortOffset), bound); aerr != nil {
		return errors.Join(ctx.Err(), aerr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	defer cancel()
	if err := e.stream.Wait(sctx); err != nil {
		return fmt.Errorf("did not stop within %v of its abort: %w", bound, err)
	}
	return &abortedError{cause: ctx.Err()}
}
