package gpucache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestCache(t testing.TB, cfg Config) (*Cache, *fakeBackend) {
	t.Helper()
	if cfg.LineSize == 0 {
		cfg.LineSize = MinLineSize
	}
	b := newFakeBackend(int(cfg.LineSize))
	c, err := New(cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.check(t) })
	return c, b
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Sets: 3, Ways: 4, LineSize: 4096}
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"valid", func(*Config) {}, true},
		{"one set one way", func(c *Config) { c.Sets, c.Ways = 1, 1 }, true},
		{"round robin", func(c *Config) { c.Policy = PolicyRoundRobin }, true},
		{"zero sets", func(c *Config) { c.Sets = 0 }, false},
		{"zero ways", func(c *Config) { c.Ways = 0 }, false},
		{"too many ways", func(c *Config) { c.Ways = MaxWays + 1 }, false},
		{"line too small", func(c *Config) { c.LineSize = 256 }, false},
		{"line too large", func(c *Config) { c.LineSize = 128 << 10 }, false},
		{"line not power of two", func(c *Config) { c.LineSize = 3000 }, false},
		{"max line", func(c *Config) { c.LineSize = MaxLineSize }, true},
		{"bad policy", func(c *Config) { c.Policy = 7 }, false},
		{"negative timeout", func(c *Config) { c.WaitTimeout = -1 }, false},
		{"too many lines", func(c *Config) { c.Sets, c.Ways = 1<<31, 4 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := New(ok, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New with nil backend: %v", err)
	}
}

func TestAcquireInvalidArguments(t *testing.T) {
	c, _ := newTestCache(t, Config{Sets: 1, Ways: 2})
	ctx := context.Background()
	if _, err := c.Acquire(ctx, TagEmpty, 1); !errors.Is(err, ErrInvalidTag) {
		t.Errorf("Acquire(TagEmpty) = %v", err)
	}
	if _, err := c.Acquire(ctx, 1, 0); !errors.Is(err, ErrInvalidCount) {
		t.Errorf("Acquire(count 0) = %v", err)
	}
	if _, err := c.Acquire(ctx, 1, StateRefMask+1); !errors.Is(err, ErrInvalidCount) {
		t.Errorf("Acquire(count > max) = %v", err)
	}
	h, err := c.Acquire(ctx, 1, StateRefMask)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, 1, 1); !errors.Is(err, ErrTooManyReferences) {
		t.Errorf("Acquire beyond the reference limit = %v", err)
	}
	h.Release()
	if err := c.quiescentCheck(); err != nil {
		t.Error(err)
	}
}

func TestHitMissAndStats(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 2, Ways: 2})
	ctx := context.Background()
	b.data[5] = make([]byte, MinLineSize)
	b.data[5][0] = 42

	h, err := c.Acquire(ctx, 5, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Line()[0]; got != 42 {
		t.Fatalf("line byte 0 = %d, want 42", got)
	}
	if h.Count() != 3 || h.Tag() != 5 || len(h.Line()) != MinLineSize {
		t.Fatalf("handle %+v", h)
	}
	if s := refs(*c.r.state(uintptr(h.Way()))); s != 3 {
		t.Fatalf("refcount %d after a group acquire of 3", s)
	}
	h.Release()
	h2, err := c.Acquire(ctx, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Way() != h.Way() {
		t.Errorf("second acquire used way %d, first %d", h2.Way(), h.Way())
	}
	h2.Release()
	st := c.Stats()
	want := Stats{Hits: 1, Misses: 1, Fills: 1, BytesRead: MinLineSize}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if r := st.HitRatio(); r != 0.5 {
		t.Errorf("hit ratio %v", r)
	}
	if got := b.reads.Load(); got != 1 {
		t.Errorf("backend reads %d", got)
	}
	// The line's bytes are where the data region says.
	off := h.Way() * c.LineSize()
	if &c.DataRegion()[off] != &h.Line()[0] {
		t.Error("Line is not the data region slice at Way*LineSize")
	}
}

func TestReadsNeverWriteBack(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 2, Ways: 2})
	ctx := context.Background()
	for i := range 200 {
		h, err := c.Acquire(ctx, uint64(i%37), 1)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := b.writes.Load(); n != 0 {
		t.Errorf("%d write-backs from a read-only workload", n)
	}
	if st := c.Stats(); st.Evictions == 0 {
		t.Errorf("no evictions: %+v", st)
	}
}

func TestWritesSurviveEviction(t *testing.T) {
	for _, p := range []Policy{PolicyClock, PolicyRoundRobin} {
		t.Run(p.String(), func(t *testing.T) {
			c, b := newTestCache(t, Config{Sets: 2, Ways: 2, Policy: p})
			ctx := context.Background()
			const lines = 20
			for round := uint64(1); round <= 3; round++ {
				for i := range uint64(lines) {
					h, err := c.Acquire(ctx, i, 1)
					if err != nil {
						t.Fatal(err)
					}
					atomic.StoreUint64(word(h.Line(), 0), round*100+i)
					h.ReleaseDirty()
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range uint64(lines) {
				if got := b.word(i, 0); got != 300+i {
					t.Errorf("line %d: storage has %d, want %d", i, got, 300+i)
				}
			}
			if b.flushes.Load() != 1 {
				t.Errorf("backend Flush called %d times", b.flushes.Load())
			}
			// A second flush has nothing to write.
			w := b.writes.Load()
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if b.writes.Load() != w {
				t.Errorf("second Flush wrote %d lines", b.writes.Load()-w)
			}
		})
	}
}

// TestBusySetIsNotTooSmall has goroutines take turns on a one-way cache,
// each holding its line for a tenth of a waiter's FullSetTimeout: the set
// is full whenever a waiter looks, and the last of them waits far longer
// than FullSetTimeout in all, but the way keeps changing hands, so no
// Acquire may fail with ErrCacheTooSmall. (A hold that a loaded host
// stretches past FullSetTimeout would be a legitimate failure, hence the
// tenfold margin.)
func TestBusySetIsNotTooSmall(t *testing.T) {
	const (
		timeout = 100 * time.Millisecond
		hold    = timeout / 10
	)
	c, _ := newTestCache(t, Config{Sets: 1, Ways: 1, FullSetTimeout: timeout})
	ctx := context.Background()
	const workers, turns = 16, 3
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		longest time.Duration
	)
	errs := make(chan error, workers*turns)
	for w := range uint64(workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range uint64(turns) {
				start := time.Now()
				h, err := c.Acquire(ctx, w*turns+k, 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				longest = max(longest, time.Since(start))
				mu.Unlock()
				time.Sleep(hold)
				h.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Acquire: %v", err)
	}
	// The first round alone makes its last waiter wait workers-1 holds.
	if longest <= timeout {
		t.Errorf("the longest wait was %v, not over FullSetTimeout %v: the test did not make a waiter outlast it", longest, timeout)
	}
}

func TestCacheTooSmall(t *testing.T) {
	const ways = 3
	c, _ := newTestCache(t, Config{Sets: 1, Ways: ways, FullSetTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	var held []Handle
	for i := range uint64(ways) {
		h, err := c.Acquire(ctx, i, 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, h)
	}
	start := time.Now()
	_, err := c.Acquire(ctx, ways, 1)
	if !errors.Is(err, ErrCacheTooSmall) {
		t.Fatalf("Acquire of line K+1 = %v, want ErrCacheTooSmall", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ErrCacheTooSmall after %v", d)
	}
	if c.Stats().TooSmall != 1 {
		t.Errorf("stats %+v", c.Stats())
	}
	// Hits on held lines still work, and releasing one makes room.
	h, err := c.Acquire(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	held[0].Release()
	h, err = c.Acquire(ctx, ways, 1)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	h.Release()
	for _, h := range held[1:] {
		h.Release()
	}
	if err := c.quiescentCheck(); err != nil {
		t.Error(err)
	}
}

// gate blocks backend calls for chosen tags until released.
type gate struct {
	entered chan uint64
	release chan error
}

func newGate() *gate { return &gate{entered: make(chan uint64, 16), release: make(chan error, 16)} }

func (g *gate) hook(tag uint64) func(context.Context, uint64) error {
	return func(ctx context.Context, t uint64) error {
		if t != tag {
			return nil
		}
		g.entered <- t
		select {
		case err := <-g.release:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func TestFillErrorReachesWaiters(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 2})
	ctx := context.Background()
	g := newGate()
	b.beforeRead = g.hook(7)
	boom := errors.New("media error")

	errc := make(chan error, 2)
	go func() {
		h, err := c.Acquire(ctx, 7, 1)
		if err == nil {
			h.Release()
		}
		errc <- err
	}()
	<-g.entered // the filler is in ReadLine with the way BUSY
	go func() {
		h, err := c.Acquire(ctx, 7, 2)
		if err == nil {
			h.Release()
		}
		errc <- err
	}()
	waitFor(t, func() bool { return c.Stats().Waits > 0 })
	g.release <- boom
	for range 2 {
		if err := <-errc; !errors.Is(err, ErrFill) || !errors.Is(err, boom) {
			t.Errorf("Acquire = %v, want ErrFill wrapping %v", err, boom)
		}
	}
	if err := c.checkSets(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.quiescentCheck(); err != nil {
		t.Fatal(err)
	}
	// The cache stays usable: the next acquire reads storage again.
	b.beforeRead = nil
	h, err := c.Acquire(ctx, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if st := c.Stats(); st.FillErrors != 1 || st.Fills != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestCancelledFillerDoesNotFailWaiters(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 2})
	g := newGate()
	b.beforeRead = g.hook(9)
	fctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(fctx, 9, 1)
		errc <- err
	}()
	<-g.entered
	waiterc := make(chan error, 1)
	go func() {
		h, err := c.Acquire(context.Background(), 9, 1)
		if err == nil {
			if h.Tag() != 9 {
				err = errors.New("wrong tag")
			}
			h.Release()
		}
		waiterc <- err
	}()
	waitFor(t, func() bool { return c.Stats().Waits > 0 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled filler got %v", err)
	}
	// The waiter retries the miss itself rather than inheriting the
	// filler's cancellation.
	<-g.entered
	g.release <- nil
	if err := <-waiterc; err != nil {
		t.Errorf("waiter got %v, want success", err)
	}
	if err := c.quiescentCheck(); err != nil {
		t.Error(err)
	}
}

// TestStaleFillErrorNotReturned: a fill of tag 7 fails and leaves its
// tag behind (StatusFillFailed, its error stored). Later a claimer of
// another line sets BUSY on that way and, finding it referenced, clears it
// again (miss step 4); a caller for tag 7 that took its references in
// between waits for BUSY as for a fill. The failure it then finds is the
// earlier call's: it must read the line, not return that error.
func TestStaleFillErrorNotReturned(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 2})
	ctx := context.Background()
	boom := errors.New("media error")
	b.beforeRead = func(_ context.Context, tag uint64) error {
		if tag == 7 {
			return boom
		}
		return nil
	}
	if _, err := c.Acquire(ctx, 7, 1); !errors.Is(err, boom) {
		t.Fatalf("failing fill: %v, want %v", err, boom)
	}
	b.beforeRead = nil
	g := ^uintptr(0)
	for w := uintptr(0); w < uintptr(c.Lines()); w++ {
		if wordTag(atomic.LoadUint64(c.r.tag(w))) == 7 {
			g = w
		}
	}
	if g == ^uintptr(0) || atomic.LoadUint32(c.r.status(g)) != StatusFillFailed {
		t.Fatal("the failed fill left no way with tag 7 and StatusFillFailed")
	}
	st := c.r.state(g)
	atomic.OrUint32(st, StateBusy) // a claimer's fetch_or ...
	errc := make(chan error, 1)
	go func() {
		h, err := c.Acquire(ctx, 7, 1)
		if err == nil {
			if h.Tag() != 7 {
				err = fmt.Errorf("handle of tag %d", h.Tag())
			}
			h.Release()
		}
		errc <- err
	}()
	waitFor(t, func() bool { return refs(atomic.LoadUint32(st)) == 1 })
	atomic.AndUint32(st, ^uint32(StateBusy)) // ... undone: the way was referenced
	if err := <-errc; err != nil {
		t.Fatalf("acquire after an earlier failed fill: %v, want the line", err)
	}
	if err := c.quiescentCheck(); err != nil {
		t.Fatal(err)
	}
}

func TestWaiterCancellation(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 2})
	g := newGate()
	b.beforeRead = g.hook(3)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		h, err := c.Acquire(ctx, 3, 1)
		if err == nil {
			h.Release()
		}
		done <- err
	}()
	<-g.entered
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(wctx, 3, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter = %v, want DeadlineExceeded", err)
	}
	g.release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := c.quiescentCheck(); err != nil {
		t.Error(err)
	}
}

func TestWaitTimeout(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 2, WaitTimeout: 30 * time.Millisecond})
	g := newGate()
	b.beforeRead = g.hook(3)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if h, err := c.Acquire(context.Background(), 3, 1); err == nil {
			h.Release()
		}
	}()
	<-g.entered
	if _, err := c.Acquire(context.Background(), 3, 1); !errors.Is(err, ErrTimeout) {
		t.Errorf("waiter = %v, want ErrTimeout", err)
	}
	g.release <- nil
	<-done
}

func TestWriteBackErrorKeepsLine(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 1})
	ctx := context.Background()
	h, err := c.Acquire(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(word(h.Line(), 0), 11)
	h.ReleaseDirty()

	boom := errors.New("write fault")
	b.beforeWrite = func(context.Context, uint64) error { return boom }
	if _, err := c.Acquire(ctx, 2, 1); !errors.Is(err, ErrWriteBack) || !errors.Is(err, boom) {
		t.Fatalf("evicting acquire = %v, want ErrWriteBack wrapping %v", err, boom)
	}
	if err := c.Flush(ctx); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v, want %v", err, boom)
	}
	if err := c.checkSets(ctx); err != nil {
		t.Fatal(err)
	}
	// Line 1 is still resident, dirty and intact.
	h, err = c.Acquire(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := atomic.LoadUint64(word(h.Line(), 0)); got != 11 {
		t.Fatalf("line 1 word 0 = %d after failed write-backs", got)
	}
	h.Release()
	b.beforeWrite = nil
	if h, err = c.Acquire(ctx, 2, 1); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if got := b.word(1, 0); got != 11 {
		t.Errorf("storage word = %d, want 11", got)
	}
	if st := c.Stats(); st.WriteBackErrors != 2 || st.WriteBacks != 1 {
		t.Errorf("stats %+v", st)
	}
}

// A miss on a line whose write-back is in flight waits for the write-back
// before reading storage (the fake backend reports a violation otherwise).
func TestMissWaitsForWriteBack(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 1})
	ctx := context.Background()
	h, err := c.Acquire(ctx, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(word(h.Line(), 0), 77)
	h.ReleaseDirty()

	g := newGate()
	b.beforeWrite = g.hook(1)
	evicted := make(chan error, 1)
	go func() {
		h, err := c.Acquire(ctx, 2, 1) // evicts line 1
		if err == nil {
			h.Release()
		}
		evicted <- err
	}()
	<-g.entered
	reread := make(chan uint64, 1)
	go func() {
		h, err := c.Acquire(ctx, 1, 1)
		if err != nil {
			t.Error(err)
			reread <- 0
			return
		}
		reread <- atomic.LoadUint64(word(h.Line(), 0))
		h.Release()
	}()
	waitFor(t, func() bool { return c.Stats().Waits > 0 })
	if err := c.checkSets(ctx); err != nil {
		t.Fatal(err)
	}
	g.release <- nil
	if err := <-evicted; err != nil {
		t.Fatal(err)
	}
	if got := <-reread; got != 77 {
		t.Errorf("reread line 1 word 0 = %d, want 77", got)
	}
}

func TestInvalidateAndReset(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 2, Ways: 2})
	ctx := context.Background()
	h, err := c.Acquire(ctx, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(ctx, 4); !errors.Is(err, ErrLineInUse) {
		t.Errorf("Invalidate of a held line = %v", err)
	}
	if err := c.Reset(); !errors.Is(err, ErrLineInUse) {
		t.Errorf("Reset with a held line = %v", err)
	}
	atomic.StoreUint64(word(h.Line(), 1), 5)
	h.ReleaseDirty()
	if err := c.Invalidate(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if got := b.word(4, 1); got != 5 {
		t.Errorf("Invalidate did not write back: storage word %d", got)
	}
	if _, ok := c.lookup(SetIndex(4, 2), 4); ok {
		t.Error("line still resident after Invalidate")
	}
	if err := c.Invalidate(ctx, 4); err != nil {
		t.Errorf("Invalidate of an absent line = %v", err)
	}
	// Reset drops dirty data.
	h, _ = c.Acquire(ctx, 6, 1)
	atomic.StoreUint64(word(h.Line(), 0), 9)
	h.ReleaseDirty()
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.word(6, 0); got != 0 {
		t.Errorf("Reset wrote back a dirty line")
	}
	if c.Stats() != (Stats{}) {
		t.Errorf("stats after Reset: %+v", c.Stats())
	}
}

// TestConcurrentGroupAcquire has many goroutines acquire one cold line with
// different counts at once: exactly one fill, and the reference count
// returns to zero.
func TestConcurrentGroupAcquire(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 4})
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := c.Acquire(ctx, 100, uint32(i%4+1))
			if err != nil {
				t.Error(err)
				return
			}
			h.Release()
		}()
	}
	wg.Wait()
	if n := b.reads.Load(); n != 1 {
		t.Errorf("%d fills of one line", n)
	}
	if err := c.quiescentCheck(); err != nil {
		t.Error(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestPeekValid(t *testing.T) {
	ctx := context.Background()
	c, _ := newTestCache(t, Config{Sets: 1, Ways: 2, LineSize: 512})
	h, err := c.Acquire(ctx, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	line, s, ok := c.Peek(7)
	if !ok || len(line) != 512 {
		t.Fatalf("Peek of a resident line: ok=%v len=%d", ok, len(line))
	}
	if !c.Valid(7, s) {
		t.Fatal("Valid right after Peek is false")
	}
	if _, _, ok := c.Peek(8); ok {
		t.Fatal("Peek of an absent line is true")
	}
	// Fill both ways with other tags: 7 is evicted, its snapshot is stale.
	for _, tag := range []uint64{8, 9} {
		h, err := c.Acquire(ctx, tag, 1)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	if c.Valid(7, s) {
		t.Fatal("Valid after the way was reused is true")
	}
	// Evicted and refilled with the same tag: the generation tells.
	h, err = c.Acquire(ctx, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	if _, s2, ok := c.Peek(7); !ok || s2 == s {
		t.Fatalf("Peek after refill: ok=%v, snapshot unchanged=%v", ok, s2 == s)
	}
	if c.Valid(7, s) {
		t.Fatal("old snapshot valid after the line was evicted and refilled")
	}
}

// genOf returns the generation word of the way holding tag, or false when
// no way of its set holds it.
func genOf(c *Cache, tag uint64) (uint32, bool) {
	g, ok := c.lookup(c.setOf(tag), tag)
	if !ok {
		return 0, false
	}
	return wordGen(atomic.LoadUint64(c.r.tag(g))), true
}

// TestGenerationParity follows one way's generation through a fill in
// progress (odd: no reader without a reference may copy the line), a failed
// fill (still odd), a published fill (even), and an eviction whose
// write-back fails (odd while claimed, even again once the old line is
// given back, and changed, so an older snapshot is stale).
func TestGenerationParity(t *testing.T) {
	c, b := newTestCache(t, Config{Sets: 1, Ways: 1, LineSize: 512})
	ctx := context.Background()
	g := newGate()
	b.beforeRead = g.hook(7)
	errc := make(chan error, 1)
	acquire := func(tag uint64) {
		h, err := c.Acquire(ctx, tag, 1)
		if err == nil {
			h.Release()
		}
		errc <- err
	}
	go acquire(7)
	<-g.entered // the filler holds the way BUSY, its tag installed
	if gen, ok := genOf(c, 7); !ok || gen%2 != 1 {
		t.Fatalf("during the fill: generation %d (found %v), want odd", gen, ok)
	}
	if _, _, ok := c.Peek(7); ok {
		t.Fatal("Peek of a line being filled is true")
	}
	g.release <- errors.New("media error")
	if err := <-errc; !errors.Is(err, ErrFill) {
		t.Fatalf("Acquire = %v, want ErrFill", err)
	}
	if gen, ok := genOf(c, 7); ok && gen%2 != 1 {
		t.Fatalf("after a failed fill: generation %d, want odd", gen)
	}
	if _, _, ok := c.Peek(7); ok {
		t.Fatal("Peek after a failed fill is true")
	}

	go acquire(7)
	<-g.entered
	g.release <- nil
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	gen, ok := genOf(c, 7)
	if !ok || gen%2 != 0 {
		t.Fatalf("after the fill: generation %d (found %v), want even", gen, ok)
	}
	line, s, ok := c.Peek(7)
	if !ok || !c.Valid(7, s) || atomic.LoadUint64(word(line, 0)) != 0 {
		t.Fatal("Peek of a published line failed or read other bytes")
	}

	// Dirty 7, then fail its write-back while 8 evicts it.
	h, err := c.Acquire(ctx, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	atomic.StoreUint64(word(h.Line(), 0), 42)
	h.ReleaseDirty()
	_, before, _ := c.Peek(7)
	b.beforeWrite = func(context.Context, uint64) error { return errors.New("write fault") }
	if _, err := c.Acquire(ctx, 8, 1); !errors.Is(err, ErrWriteBack) {
		t.Fatalf("evicting acquire = %v, want ErrWriteBack", err)
	}
	after, ok := genOf(c, 7)
	if !ok || after%2 != 0 || after == gen {
		t.Fatalf("after the failed write-back: generation %d (found %v), want even and not %d", after, ok, gen)
	}
	if c.Valid(7, before) {
		t.Fatal("a snapshot from before the failed eviction is still valid")
	}
	line, s, ok = c.Peek(7)
	if !ok || !c.Valid(7, s) || atomic.LoadUint64(word(line, 0)) != 42 {
		t.Fatal("the line given back after the failed write-back cannot be peeked or lost its store")
	}
	b.beforeWrite = nil
}

// TestMissStopsWaitingOnceInstalled: a miss waiting for its set's lock
// (miss step 1) takes the hit path once someone else has installed its
// line, rather than waiting for the lock: here the lock stays held for the
// whole call, so waiting for it would time out.
func TestMissStopsWaitingOnceInstalled(t *testing.T) {
	c, _ := newTestCache(t, Config{Sets: 1, Ways: 2, WaitTimeout: 2 * time.Second})
	ctx := context.Background()
	h, err := c.Acquire(ctx, 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	w := c.newWaiter()
	if err := c.lockSet(ctx, 0, &w); err != nil {
		t.Fatal(err)
	}
	defer c.unlockSet(0)
	start := time.Now()
	w = c.newWaiter()
	_, o, err := c.miss(ctx, 0, 5, 1, &w)
	if err != nil || o != retry {
		t.Fatalf("miss of an installed line with the set lock held: outcome %d, %v; want a retry", o, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("miss took %v to see its line installed", took)
	}
	// A line that is not installed still waits for the lock, and times out.
	w = c.newWaiter()
	if _, _, err := c.miss(ctx, 0, 7, 1, &w); !errors.Is(err, ErrTimeout) {
		t.Errorf("miss of an absent line with the set lock held: %v, want ErrTimeout", err)
	}
}
