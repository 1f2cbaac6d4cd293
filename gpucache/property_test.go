package gpucache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stressScale multiplies the property tests' operation counts: 1 normally,
// 1/4 with -short, BAM_STRESS (default 10 when set to 1) for long runs.
func stressScale() float64 {
	if v := os.Getenv("BAM_STRESS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 1 {
			return 10
		}
		return float64(n)
	}
	if testing.Short() {
		return 0.25
	}
	return 1
}

type propCase struct {
	name       string
	cfg        Config
	goroutines int
	lines      int     // distinct lines touched
	ops        int     // operations per goroutine
	faults     float64 // probability that a backend call fails
	holdTwo    bool    // some operations hold two lines at once
}

// TestProperty runs random reads, writes, flushes and invalidations from
// many goroutines against an oracle. Each goroutine owns one 8-byte word in
// every line and writes increasing values there, so:
//   - a goroutine reads back exactly its own last write (through any number
//     of evictions and refills);
//   - every word it reads only ever grows (a stale read from storage while a
//     write-back is in flight, or a lost write, would go back in time);
//   - after a final Flush, storage equals the oracle.
//
// The fake backend checks the I/O invariants on every call and a checker
// goroutine verifies the per-set tag invariants continuously.
func TestProperty(t *testing.T) {
	cases := []propCase{
		{name: "1x1", cfg: Config{Sets: 1, Ways: 1}, goroutines: 4, lines: 4, ops: 1600},
		{name: "1x2", cfg: Config{Sets: 1, Ways: 2}, goroutines: 6, lines: 6, ops: 1600},
		{name: "2x1", cfg: Config{Sets: 2, Ways: 1}, goroutines: 6, lines: 7, ops: 1600},
		{name: "1x4-round-robin", cfg: Config{Sets: 1, Ways: 4, Policy: PolicyRoundRobin}, goroutines: 8, lines: 9, ops: 1600},
		{name: "2x2-hold-two", cfg: Config{Sets: 2, Ways: 2, FullSetTimeout: 20 * time.Millisecond}, goroutines: 6, lines: 8, ops: 1200, holdTwo: true},
		{name: "1x3-faults", cfg: Config{Sets: 1, Ways: 3}, goroutines: 6, lines: 8, ops: 1600, faults: 0.1},
		{name: "2x4-faults-round-robin", cfg: Config{Sets: 2, Ways: 4, Policy: PolicyRoundRobin}, goroutines: 8, lines: 20, ops: 1600, faults: 0.05},
		{name: "64x8", cfg: Config{Sets: 64, Ways: 8}, goroutines: 8, lines: 700, ops: 4000},
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GPUCACHE_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (set GPUCACHE_SEED to repeat)", seed)
	for i, pc := range cases {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			runProperty(t, pc, seed+uint64(i)*7919)
		})
	}
}

func propTag(line int) uint64 {
	tag, err := MakeTag(uint8(line%3), uint64(line/3))
	if err != nil {
		panic(err)
	}
	return tag
}

func runProperty(t *testing.T, pc propCase, seed uint64) {
	pc.cfg.LineSize = MinLineSize
	if pc.cfg.WaitTimeout == 0 {
		pc.cfg.WaitTimeout = 20 * time.Second
	}
	if pc.cfg.FullSetTimeout == 0 {
		pc.cfg.FullSetTimeout = 10 * time.Second
	}
	c, b := newTestCache(t, pc.cfg)
	var faultOn atomic.Bool
	faultOn.Store(pc.faults > 0)
	var faultN atomic.Uint64
	errFault := errors.New("injected fault")
	fault := func(context.Context, uint64) error {
		if !faultOn.Load() {
			return nil
		}
		// A cheap deterministic-ish coin shared by all goroutines.
		x := faultN.Add(1) * 0x9E3779B97F4A7C15
		if float64(x>>11)/(1<<53) < pc.faults {
			return errFault
		}
		return nil
	}
	b.beforeRead, b.beforeWrite = fault, fault

	ops := max(20, int(float64(pc.ops)*stressScale()))
	ctx := context.Background()
	stop := make(chan struct{})
	checkerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				checkerDone <- nil
				return
			default:
			}
			if err := c.checkSets(ctx); err != nil {
				checkerDone <- err
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()

	own := make([][]uint64, pc.goroutines) // own[g][line]: last value g wrote
	var wg sync.WaitGroup
	var tooSmall atomic.Int64
	tolerable := func(err error) bool {
		if pc.faults > 0 && (errors.Is(err, errFault) || errors.Is(err, ErrFill) || errors.Is(err, ErrWriteBack)) {
			return true
		}
		if pc.holdTwo && errors.Is(err, ErrCacheTooSmall) {
			tooSmall.Add(1)
			return true
		}
		return false
	}
	for g := range pc.goroutines {
		own[g] = make([]uint64, pc.lines)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			seen := make([][]uint64, pc.lines)
			for i := range seen {
				seen[i] = make([]uint64, pc.goroutines)
			}
			seq := uint64(0)
			check := func(h Handle, line int) error {
				data := h.Line()
				if got := atomic.LoadUint64(word(data, g)); got != own[g][line] {
					return fmt.Errorf("goroutine %d line %d: own word %d, last wrote %d", g, line, got, own[g][line])
				}
				for o := range pc.goroutines {
					v := atomic.LoadUint64(word(data, o))
					if v < seen[line][o] {
						return fmt.Errorf("goroutine %d line %d word %d went back from %d to %d", g, line, o, seen[line][o], v)
					}
					seen[line][o] = v
				}
				return nil
			}
			for range ops {
				line := rng.IntN(pc.lines)
				tag := propTag(line)
				n := uint32(1 + rng.IntN(3))
				switch r := rng.IntN(100); {
				case r < 45: // read
					h, err := c.Acquire(ctx, tag, n)
					if err != nil {
						if tolerable(err) {
							continue
						}
						t.Errorf("read acquire %#x: %v", tag, err)
						return
					}
					if h.Tag() != tag {
						t.Errorf("handle tag %#x, want %#x", h.Tag(), tag)
					}
					err = check(h, line)
					h.Release()
					if err != nil {
						t.Error(err)
						return
					}
				case r < 90: // write
					h, err := c.Acquire(ctx, tag, n)
					if err != nil {
						if tolerable(err) {
							continue
						}
						t.Errorf("write acquire %#x: %v", tag, err)
						return
					}
					if err := check(h, line); err != nil {
						h.Release()
						t.Error(err)
						return
					}
					seq++
					atomic.StoreUint64(word(h.Line(), g), seq)
					own[g][line] = seq
					seen[line][g] = seq
					h.ReleaseDirty()
				case r < 95 && pc.holdTwo: // hold two lines at once
					other := (line + 1 + rng.IntN(pc.lines-1)) % pc.lines
					h1, err := c.Acquire(ctx, tag, 1)
					if err != nil {
						if tolerable(err) {
							continue
						}
						t.Errorf("hold-two acquire: %v", err)
						return
					}
					h2, err := c.Acquire(ctx, propTag(other), 1)
					if err == nil {
						err = check(h2, other)
						h2.Release()
					}
					h1.Release()
					if err != nil && !tolerable(err) {
						t.Errorf("hold-two second acquire: %v", err)
						return
					}
				case r < 98: // flush
					if err := c.Flush(ctx); err != nil && !tolerable(err) {
						t.Errorf("flush: %v", err)
						return
					}
				default: // invalidate
					if err := c.Invalidate(ctx, tag); err != nil && !errors.Is(err, ErrLineInUse) && !tolerable(err) {
						t.Errorf("invalidate %#x: %v", tag, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-checkerDone; err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	if err := c.quiescentCheck(); err != nil {
		t.Fatal(err)
	}
	faultOn.Store(false)
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("final flush: %v", err)
	}
	for line := range pc.lines {
		for g := range pc.goroutines {
			if got := b.word(propTag(line), g); got != own[g][line] {
				t.Errorf("line %d word %d: storage %d, oracle %d", line, g, got, own[g][line])
			}
		}
	}
	st := c.Stats()
	t.Logf("ops/goroutine %d, stats %+v, hit ratio %.2f, too-small %d", ops, st, st.HitRatio(), tooSmall.Load())
	if st.Misses == 0 || st.Hits == 0 {
		t.Errorf("workload exercised no hits or no misses: %+v", st)
	}
}
