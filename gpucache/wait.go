package gpucache

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

const (
	spinYields = 4                      // first waits only yield the processor
	minSleep   = 2 * time.Microsecond   // then sleeps grow from here
	maxSleep   = 500 * time.Microsecond // to here
)

// waiter bounds and paces the waits of one call. Waits never spin hot: after
// a few yields they sleep, doubling up to maxSleep, and the total is bounded
// by Config.WaitTimeout.
type waiter struct {
	limit     time.Duration
	n         int
	start     time.Time // first wait; zero until then
	fullSince time.Time // first time the set had no evictable way, since its last claim
	fullGens  uint64    // the sum of the set's way generations then
}

func (c *Cache) newWaiter() waiter { return waiter{limit: c.cfg.WaitTimeout} }

// pause waits once. It returns ctx's error when ctx is done and ErrTimeout
// when the call has waited longer than its limit.
func (w *waiter) pause(ctx context.Context) error {
	now := time.Now()
	if w.start.IsZero() {
		w.start = now
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if now.Sub(w.start) > w.limit {
		return ErrTimeout
	}
	if w.n < spinYields {
		runtime.Gosched()
	} else {
		d := minSleep << min(w.n-spinYields, 16)
		time.Sleep(min(d, maxSleep))
	}
	w.n++
	return nil
}

// lockSet takes the set's lock. The lock is a compare-and-swap try-lock on
// the SetLockOffset word; holders only scan and claim ways (no I/O, no
// waits), so a waiter gets it after a few yields.
func (c *Cache) lockSet(ctx context.Context, set uint32, w *waiter) error {
	p := c.r.lock(set)
	for {
		if atomic.LoadUint32(p) == LockFree && atomic.CompareAndSwapUint32(p, LockFree, LockHeld) {
			return nil
		}
		if err := w.pause(ctx); err != nil {
			return err
		}
	}
}

// lockSetUnlessInstalled is lockSet for a miss of tag (miss step 1):
// between tries it looks for the line in the set, and once it finds it
// installed (VALID or BUSY: someone else's claim) it stops waiting and
// returns false, so that the misses of one line that raced to the lock
// take the hit path without taking the lock one after the other.
func (c *Cache) lockSetUnlessInstalled(ctx context.Context, set uint32, tag uint64, w *waiter) (bool, error) {
	p := c.r.lock(set)
	for i := 0; ; i++ {
		if atomic.LoadUint32(p) == LockFree && atomic.CompareAndSwapUint32(p, LockFree, LockHeld) {
			return true, nil
		}
		if i > 0 {
			if g, ok := c.lookup(set, tag); ok && atomic.LoadUint32(c.r.state(g))&(StateValid|StateBusy) != 0 {
				return false, nil
			}
		}
		if err := w.pause(ctx); err != nil {
			return false, err
		}
	}
}

func (c *Cache) unlockSet(set uint32) { atomic.StoreUint32(c.r.lock(set), LockFree) }
