package nvme

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
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
	Blocks     uint64        // namespace size in blocks; default 16384
	Kick       bool          // submitters call Kick after ringing (CPU style)

	// File measures a FileNamespace instead of a memory namespace: a
	// temporary file of Blocks blocks in Dir (default os.TempDir()) is
	// written and read back once, so the measured reads hit the page
	// cache. It is removed afterwards.
	File bool
	Dir  string
	// BlockSize is the namespace's LBA size and the size of every read,
	// 512 or 4096. Default 4096.
	BlockSize int
	// NoCachedReadInline sets TargetConfig.NoCachedReadInline: file reads
	// all go through executors (for comparison).
	NoCachedReadInline bool
	// Map is the file namespace's MapMode (default MapAuto: mapped reads).
	Map MapMode
	// Commands, when positive, ends the measurement after about this many
	// completions instead of after Duration (for testing.B loops). There is
	// no warm-up in this mode.
	Commands uint64
}

// newIOPSNamespace makes the namespace MeasureTargetIOPS reads from.
func newIOPSNamespace(opts IOPSOptions) (Namespace, func(), error) {
	if !opts.File {
		ns, err := NewMemoryNamespace(opts.BlockSize, opts.Blocks)
		if err != nil {
			return nil, nil, err
		}
		return ns, func() { ns.Close() }, nil
	}
	f, err := os.CreateTemp(opts.Dir, "nvme-iops-*.img")
	if err != nil {
		return nil, nil, fmt.Errorf("nvme: MeasureTargetIOPS: %w", err)
	}
	path := f.Name()
	cleanup := func() { os.Remove(path) }
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i*7 + i>>12)
	}
	size := int64(opts.Blocks) * int64(opts.BlockSize)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.WriteAt(chunk[:min(int64(len(chunk)), size-off)], off); err != nil {
			f.Close()
			cleanup()
			return nil, nil, fmt.Errorf("nvme: MeasureTargetIOPS: fill: %w", err)
		}
	}
	// Read it back so every block is in the page cache.
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := f.ReadAt(chunk[:min(int64(len(chunk)), size-off)], off); err != nil {
			f.Close()
			cleanup()
			return nil, nil, fmt.Errorf("nvme: MeasureTargetIOPS: warm: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("nvme: MeasureTargetIOPS: %w", err)
	}
	ns, err := OpenFileNamespace(path, FileOptions{LBASize: opts.BlockSize, ReadOnly: true, Map: opts.Map})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return ns, func() { ns.Close(); cleanup() }, nil
}

// MeasureTargetIOPS measures the Target's own random read rate of one block
// (BlockSize, default 4 KiB) against a memory namespace, or with File a
// file namespace served from the page cache: Submitters goroutines, each
// driving one queue pair with the package's simple single-goroutine client,
// keep QueueDepth reads in flight for Duration (or Commands completions).
// It returns completions per second. Any non-success completion is an
// error.
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
	if opts.BlockSize == 0 {
		opts.BlockSize = 4096
	}
	if err := checkLBASize(opts.BlockSize); err != nil {
		return 0, fmt.Errorf("nvme: MeasureTargetIOPS: %w", err)
	}
	bs := uint64(opts.BlockSize)
	ns, closeNS, err := newIOPSNamespace(opts)
	if err != nil {
		return 0, err
	}
	defer closeNS()
	dma := NewDMASpace()
	tg, err := NewTarget(TargetConfig{Workers: opts.Workers, NoCachedReadInline: opts.NoCachedReadInline}, dma)
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
		buf := alignedBytes(opts.QueueDepth*int(bs), 4096)
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
		reached   = make(chan struct{})
		reachOnce sync.Once
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
		reachOnce.Do(func() { close(reached) })
	}
	for i, c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			read := func(slot int) Command {
				cmd := ReadWrite(OpRead, 1, rng.Uint64N(opts.Blocks), 1, bufs[i]+uint64(slot)*bs, 0)
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
					if n := completed.Add(uint64(got)); opts.Commands > 0 && n >= opts.Commands {
						reachOnce.Do(func() { close(reached) })
					}
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
	var start time.Time
	if opts.Commands > 0 {
		counting.Store(true)
		start = time.Now()
		select {
		case <-reached:
		case <-ctx.Done():
		}
	} else {
		// Warm up briefly, then count.
		warm := min(opts.Duration/10, 100*time.Millisecond)
		sleepCtx(ctx, warm)
		counting.Store(true)
		start = time.Now()
		sleepCtx(ctx, opts.Duration)
	}
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
