package gpucache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// pendingLine is a dirty line Flush could not write back on its first pass:
// referenced, busy, or being evicted.
type pendingLine struct {
	set uint32
	g   uintptr
	tag uint64
}

// Flush writes every line that is dirty when it is called back to storage,
// waits for write-backs of evicted lines already in flight, and then calls
// the backend's Flush. Lines dirtied while it runs may or may not be
// included (DESIGN.md §7).
//
// A write-back owns its line exclusively: Flush claims the way like an
// eviction (refcount 0 and not BUSY, before and after fetch_or(BUSY)) but
// keeps VALID and the tag, so no writer can modify the bytes while storage
// reads them and DIRTY can simply be cleared with BUSY when the write
// succeeds (on failure only BUSY is cleared). Hits on the line back off for
// the duration of its write. A dirty line that stays referenced is retried
// until Config.WaitTimeout, then reported with ErrTimeout.
//
// Write-backs run with at most Config.FlushParallelism in flight. Errors of
// all lines are joined; a failed line stays dirty.
func (c *Cache) Flush(ctx context.Context) error {
	var (
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, c.cfg.FlushParallelism)
		pending []pendingLine
	)
	report := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	run := func(f func() error) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			report(f())
		}()
	}
	for set := uint32(0); set < c.cfg.Sets; set++ {
		w := c.newWaiter()
		if err := c.lockSet(ctx, set, &w); err != nil {
			report(fmt.Errorf("gpucache: flush set %d: %w", set, err))
			break
		}
		base := uintptr(set) * uintptr(c.cfg.Ways)
		var claimed []pendingLine
		for g := base; g < base+uintptr(c.cfg.Ways); g++ {
			if wb := atomic.LoadUint64(c.r.wbTag(g)); wb != TagEmpty {
				pending = append(pending, pendingLine{set, g, wb})
			}
			t := wordTag(atomic.LoadUint64(c.r.tag(g)))
			s := atomic.LoadUint32(c.r.state(g))
			if s&StateValid == 0 || s&StateDirty == 0 {
				continue
			}
			if old, ok := c.claim(g); ok {
				if c.keepDirtyClaim(g, old) {
					claimed = append(claimed, pendingLine{set, g, t})
				}
			} else {
				pending = append(pending, pendingLine{set, g, t})
			}
		}
		c.unlockSet(set)
		for _, p := range claimed {
			run(func() error { return c.writeBackClaimed(ctx, p.set, p.g, p.tag) })
		}
	}
	for _, p := range pending {
		run(func() error { return c.flushPending(ctx, p) })
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := c.backend.Flush(ctx); err != nil {
		return fmt.Errorf("gpucache: backend flush: %w", err)
	}
	return nil
}

// keepDirtyClaim checks the state a claim of way g returned. The state read
// before the claim may be stale: another write-back can finish (clearing
// DIRTY without the set lock) between that read and the claim. Only a claim
// that found the line VALID and DIRTY is kept; otherwise BUSY is undone.
func (c *Cache) keepDirtyClaim(g uintptr, old uint32) bool {
	if old&(StateValid|StateDirty) == StateValid|StateDirty {
		return true
	}
	atomic.AndUint32(c.r.state(g), ^uint32(StateBusy))
	return false
}

// writeBackClaimed writes back way g, which the caller claimed (BUSY) with
// VALID|DIRTY and tag still set, and releases the claim.
func (c *Cache) writeBackClaimed(ctx context.Context, set uint32, g uintptr, tag uint64) error {
	st := c.r.state(g)
	line := c.line(g)
	if err := c.backend.WriteLine(ctx, tag, line); err != nil {
		c.stats.add(set, cWriteBackErrors, 1)
		atomic.AndUint32(st, ^uint32(StateBusy))
		return fmt.Errorf("%w: line %#x: %w", ErrWriteBack, tag, err)
	}
	c.stats.add(set, cWriteBacks, 1)
	c.stats.add(set, cBytesWritten, uint64(len(line)))
	atomic.AndUint32(st, ^uint32(StateBusy|StateDirty))
	return nil
}

// flushPending finishes one line the first pass of Flush could not claim:
// it waits until the line is clean, gone from the way with its write-back
// complete, or claimable, and writes it back in the last case.
func (c *Cache) flushPending(ctx context.Context, p pendingLine) error {
	w := c.newWaiter()
	for {
		if err := c.lockSet(ctx, p.set, &w); err != nil {
			return fmt.Errorf("gpucache: flush line %#x: %w", p.tag, err)
		}
		wb := atomic.LoadUint64(c.r.wbTag(p.g))
		t := wordTag(atomic.LoadUint64(c.r.tag(p.g)))
		s := atomic.LoadUint32(c.r.state(p.g))
		switch {
		case wb == p.tag:
			// Evicted; its write-back is in flight.
		case t != p.tag || s&StateValid == 0:
			c.unlockSet(p.set) // evicted and written back
			return nil
		case s&StateDirty == 0 && s&StateBusy == 0:
			c.unlockSet(p.set) // written back by someone else
			return nil
		case s&StateDirty != 0:
			if old, ok := c.claim(p.g); ok {
				c.unlockSet(p.set)
				if !c.keepDirtyClaim(p.g, old) {
					return nil
				}
				return c.writeBackClaimed(ctx, p.set, p.g, p.tag)
			}
		}
		c.unlockSet(p.set)
		if err := w.pause(ctx); err != nil {
			if errors.Is(err, ErrTimeout) {
				return fmt.Errorf("%w: flush line %#x: still referenced or busy after %v", ErrTimeout, p.tag, c.cfg.WaitTimeout)
			}
			return fmt.Errorf("gpucache: flush line %#x: %w", p.tag, err)
		}
	}
}

// Invalidate drops the line named by tag from the cache, writing it back
// first if it is dirty. It returns nil if the line is not resident and
// ErrLineInUse if it is referenced or busy.
func (c *Cache) Invalidate(ctx context.Context, tag uint64) error {
	if tag >= TagMask {
		return invalidTag(tag)
	}
	set := c.setOf(tag)
	w := c.newWaiter()
	for {
		if err := c.lockSet(ctx, set, &w); err != nil {
			return fmt.Errorf("gpucache: invalidate line %#x: %w", tag, err)
		}
		g, ok := c.lookup(set, tag)
		if !ok {
			busy := false
			base := uintptr(set) * uintptr(c.cfg.Ways)
			for x := base; x < base+uintptr(c.cfg.Ways); x++ {
				busy = busy || atomic.LoadUint64(c.r.wbTag(x)) == tag
			}
			c.unlockSet(set)
			if !busy {
				return nil
			}
			if err := w.pause(ctx); err != nil {
				return fmt.Errorf("gpucache: invalidate line %#x: waiting for its write-back: %w", tag, err)
			}
			continue
		}
		old, ok := c.claim(g)
		if !ok {
			c.unlockSet(set)
			return fmt.Errorf("%w: invalidate line %#x", ErrLineInUse, tag)
		}
		if old&StateValid != 0 && old&StateDirty != 0 {
			c.unlockSet(set)
			if err := c.writeBackClaimed(ctx, set, g, tag); err != nil {
				return err
			}
			continue // clean now; drop it on the next pass
		}
		c.r.clearTag(g)
		atomic.AndUint32(c.r.state(g), ^uint32(StateValid|StateDirty|StateBusy))
		c.unlockSet(set)
		return nil
	}
}

// Reset discards every line, dirty ones included, without writing anything
// back, and zeroes the counters. It is for tests and must not run
// concurrently with any other method; it fails with ErrLineInUse if a line
// is referenced or busy.
func (c *Cache) Reset() error {
	for g := range c.errs {
		s := atomic.LoadUint32(c.r.state(uintptr(g)))
		if refs(s) != 0 || s&StateBusy != 0 {
			return fmt.Errorf("%w: way %d has state %#x", ErrLineInUse, g, s)
		}
	}
	c.r.init()
	for g := range c.errs {
		c.errs[g].Store(nil)
	}
	c.stats.reset()
	return nil
}
