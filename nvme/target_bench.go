package nvme

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// IOPSOptions configure MeasureTargetIOPS. Zero fields take the defaults
// named in the comments.
type IOPSOptions struct {
	Submitters int           // submitting goroutines, each with its own queue pair; default 1
	QueueDepth int           // commands each submitter keeps in flight; default 32
	Duration   time.Duration // measuring time; default 1s
	Workers    int           // Target workers; default TargetConfig's
	Blocks     uint64        // namespace size in 4 KiB blocks; default 16384 (64 MiB)
	Kick       bool          // submitters call Kick after ringing (CPU style)
}

// MeasureTargetIOPS measures the Target's own 4 KiB random read rate
// against a memory namespace: Submitters goroutines, each driving one queue
// pair with the package's simple single-goroutine client, keep QueueDepth
// reads in flight for Duration. It returns completions per second. Any
// non-success completion is an error.
func MeasureTargetIOPS(ctx context.Context, opts IOPSOptions) (float64, error) {
	if opts.Submitters <= 0 {
		opts.Submitters = 1
	}
	if opts.QueueDepth <= 0 {
		opts.QueueDepth = 32
	}
	if opts.QueueDepth > 65535 {
		return 0, fmt.Errorf("nvme: MeasureTargetIOPS: queue depth %d above 65535", opts.QueueDepth)
	}
	if opts.Submitters > 65535 {
		return 0, fmt.Errorf("nvme: MeasureTargetIOPS: %d submitters above 65535", opts.Submitters)
	}
	if opts.Duration <= 0 {
		opts.Duration = time.Second
	}
	if opts.Blocks == 0 {
		opts.Blocks = 16384
	}
	ns, err := NewMemoryNamespace(4096, opts.Blocks)
	if err != nil {
		return 0, err
	}
	defer ns.Close()
	dma := NewDMASpace()
	tg, err := NewTarget(TargetConfig{Workers: opts.Workers}, dma)
	if err != nil {
		return 0, err
	}
	if err := tg.AddNamespace(1, ns); err != nil {
		return 0, err
	}
	depth := uint32(1) << bits.Len32(uint32(opts.QueueDepth)) // > QueueDepth
	clients := make([]*simpleClient, opts.Submitters)
	bufs := make([]uint64, opts.Submitters)
	for i := range clients {
		qp, err := NewQueuePairMemory(uint16(i+1), depth)
		if err != nil {
			return 0, err
		}
		if err := tg.AddQueuePair(qp); err != nil {
			return 0, err
		}
		var kick func(uint16)
		if opts.Kick {
			kick = tg.Kick
		}
		clients[i] = newSimpleClient(qp, kick)
		buf := alignedBytes(opts.QueueDepth*4096, 4096)
		if bufs[i], err = dma.RegisterHost(buf); err != nil {
			return 0, err
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := tg.Start(runCtx); err != nil {
		return 0, err
	}
	defer tg.Close()

	var (
		completed atomic.Uint64
		counting  atomic.Bool
		stop      atomic.Bool
		wg        sync.WaitGroup
		errMu     sync.Mutex
		firstErr  error
	)
	setErr := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	for i, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			read := func(slot int) Command {
				cmd := ReadWrite(OpRead, 1, rng.Uint64N(opts.Blocks), 1, bufs[i]+uint64(slot)*4096, 0)
				cmd.CID = uint16(slot)
				return cmd
			}
			for s := 0; s < opts.QueueDepth; s++ {
				cmd := read(s)
				if err := c.put(&cmd); err != nil {
					setErr(err)
					return
				}
			}
			c.ring()
			idle := 0
			for !stop.Load() {
				got := 0
				for {
					e, ok := c.poll()
					if !ok {
						break
					}
					got++
					if !e.Status.Success() {
						setErr(fmt.Errorf("nvme: MeasureTargetIOPS: read completed with %v", e.Status))
						return
					}
					cmd := read(int(e.CID))
					if err := c.put(&cmd); err != nil {
						setErr(err)
						return
					}
				}
				if got == 0 {
					if idle++; idle%1024 == 0 && ctx.Err() != nil {
						setErr(ctx.Err())
						return
					}
					runtime.Gosched()
					continue
				}
				idle = 0
				c.ring()
				if counting.Load() {
					completed.Add(uint64(got))
				}
			}
			// Drain what is in flight so the Target is idle before Close.
			deadline, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for c.outstanding > 0 {
				if _, err := c.wait(deadline); err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						setErr(err)
					}
					return
				}
			}
		})
	}
	// Warm up briefly, then count.
	warm := min(opts.Duration/10, 100*time.Millisecond)
	sleepCtx(ctx, warm)
	counting.Store(true)
	start := time.Now()
	sleepCtx(ctx, opts.Duration)
	n := completed.Load()
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
