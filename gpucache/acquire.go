package gpucache

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// outcome of one attempt of Acquire.
type outcome int

const (
	done   outcome = iota // return the handle or the error
	retry                 // start over with a fresh lookup
	toMiss                // the tag's way holds a failed fill: go straight to the miss path
)

// Acquire returns count references to the line named by tag, reading it from
// the backend on a miss. count is the size of the caller's group of
// requests for this line (the CPU analogue of a coalesced warp): the group
// acquires once and releases once. Acquire never marks the line dirty;
// writers use Handle.ReleaseDirty or Handle.MarkDirty.
//
// Errors: ErrInvalidTag, ErrInvalidCount, ErrTooManyReferences,
// ErrCacheTooSmall, ErrTimeout, ctx's error, and ErrFill or ErrWriteBack
// wrapping the backend's error.
func (c *Cache) Acquire(ctx context.Context, tag uint64, count uint32) (Handle, error) {
	if tag >= TagMask {
		return Handle{}, invalidTag(tag)
	}
	if count == 0 || count > StateRefMask {
		return Handle{}, fmt.Errorf("%w: %d not in [1, %d]", ErrInvalidCount, count, StateRefMask)
	}
	set := c.setOf(tag)
	w := c.newWaiter()
	for {
		if g, ok := c.lookup(set, tag); ok {
			h, o, err := c.tryHit(ctx, set, g, tag, count, &w)
			if o == done {
				return h, err
			}
			if o == retry {
				continue
			}
		}
		h, o, err := c.miss(ctx, set, tag, count, &w)
		if o == done {
			return h, err
		}
	}
}

// lookup scans the set's tags for tag without taking the lock.
func (c *Cache) lookup(set uint32, tag uint64) (uintptr, bool) {
	base := uintptr(set) * uintptr(c.cfg.Ways)
	for g := base; g < base+uintptr(c.cfg.Ways); g++ {
		if wordTag(atomic.LoadUint64(c.r.tag(g))) == tag {
			return g, true
		}
	}
	return 0, false
}

// tryHit takes count references on way g, which held tag when scanned
// (DESIGN.md §3 step 3, §5 speculative fetch_add).
func (c *Cache) tryHit(ctx context.Context, set uint32, g uintptr, tag uint64, n uint32, w *waiter) (Handle, outcome, error) {
	st := c.r.state(g)
	old := atomic.AddUint32(st, n) - n
	if wordTag(atomic.LoadUint64(c.r.tag(g))) != tag {
		// The way was given to another tag between the scan and the
		// fetch_add: undo the speculative references.
		subRefs(st, n)
		return Handle{}, retry, nil
	}
	if refs(old)+n > StateRefMask {
		subRefs(st, n)
		return Handle{}, done, fmt.Errorf("%w: line %#x", ErrTooManyReferences, tag)
	}
	switch {
	case old&StateValid != 0 && old&StateBusy == 0:
		return c.hit(set, g, tag, n), done, nil
	case old&(StateValid|StateBusy) == 0:
		// A failed fill left the tag behind; the miss path clears or reuses it.
		subRefs(st, n)
		return Handle{}, toMiss, nil
	case old&StateValid != 0:
		// VALID|BUSY: an owner is evicting the line or writing it back
		// exclusively. Back off and look again.
		subRefs(st, n)
		if err := w.pause(ctx); err != nil {
			return Handle{}, done, c.waitErr(err, tag, "an eviction or write-back")
		}
		return Handle{}, retry, nil
	}
	// BUSY without VALID: the tag is being filled by another caller. Wait
	// holding the references; they keep the way from being claimed again, so
	// once BUSY clears the way's tag and state are stable.
	c.stats.add(set, cWaits, 1)
	// The way's last fill error before the wait: BUSY may have been only
	// a claimer's fetch_or, undone because the way was referenced (step 4
	// of the miss path), over a fill that failed before this call, and that
	// failure is not this caller's to return.
	before := c.errs[g].Load()
	for atomic.LoadUint32(st)&StateBusy != 0 {
		if err := w.pause(ctx); err != nil {
			subRefs(st, n)
			return Handle{}, done, c.waitErr(err, tag, "a concurrent fill")
		}
	}
	if wordTag(atomic.LoadUint64(c.r.tag(g))) != tag {
		subRefs(st, n) // the BUSY owner was filling another tag
		return Handle{}, retry, nil
	}
	if atomic.LoadUint32(st)&StateValid != 0 {
		return c.hit(set, g, tag, n), done, nil
	}
	// Not filled. An aborted filler (cancelled) must not hand its
	// cancellation to us, and a failure stored before the wait began is an
	// earlier fill's: retry the miss ourselves. (A filler that failed just
	// before the wait began is retried too, which costs a read, not a
	// wrong answer.)
	fe := c.errs[g].Load()
	if atomic.LoadUint32(c.r.status(g)) == StatusFillAborted || fe == nil || fe == before {
		subRefs(st, n)
		return Handle{}, toMiss, nil
	}
	subRefs(st, n)
	return Handle{}, done, fmt.Errorf("%w: line %#x (filled by a concurrent acquire): %w", ErrFill, tag, fe.err)
}

func (c *Cache) hit(set uint32, g uintptr, tag uint64, n uint32) Handle {
	if c.cfg.Policy == PolicyClock {
		if !c.r.referenced(g) {
			c.r.setReferenced(g)
		}
	}
	c.stats.add(set, cHits, 1)
	return Handle{c: c, g: g, tag: tag, count: n}
}

func (c *Cache) waitErr(err error, tag uint64, what string) error {
	if errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: line %#x: waited more than %v for %s", ErrTimeout, tag, c.cfg.WaitTimeout, what)
	}
	return fmt.Errorf("gpucache: line %#x: waiting for %s: %w", tag, what, err)
}

// miss runs DESIGN.md §3 step 4: under the set lock re-scan, pick and claim
// a victim, install the tag with the group's references, drop the lock,
// write the victim back if dirty, fill, publish VALID.
func (c *Cache) miss(ctx context.Context, set uint32, tag uint64, n uint32, w *waiter) (Handle, outcome, error) {
	locked, err := c.lockSetUnlessInstalled(ctx, set, tag, w)
	if err != nil {
		return Handle{}, done, c.waitErr(err, tag, "the set lock")
	}
	if !locked {
		return Handle{}, retry, nil // installed meanwhile: take the hit path
	}
	base := uintptr(set) * uintptr(c.cfg.Ways)
	free := ^uintptr(0)
	for g := base; g < base+uintptr(c.cfg.Ways); g++ {
		// Read the write-back tag first: a way's two tags change only under
		// this lock, except the owner clearing the write-back tag once
		// storage has the line.
		if atomic.LoadUint64(c.r.wbTag(g)) == tag {
			// The line's write-back is in flight: storage is stale until
			// it completes (DESIGN.md §5). Wait, then start over.
			c.unlockSet(set)
			c.stats.add(set, cWaits, 1)
			if err := w.pause(ctx); err != nil {
				return Handle{}, done, c.waitErr(err, tag, "the line's write-back")
			}
			return Handle{}, retry, nil
		}
		t := wordTag(atomic.LoadUint64(c.r.tag(g)))
		s := atomic.LoadUint32(c.r.state(g))
		if t == tag {
			if s&(StateValid|StateBusy) != 0 {
				// Resident or being filled: someone installed it since our
				// lookup. Take the hit path (no line resident twice).
				c.unlockSet(set)
				return Handle{}, retry, nil
			}
			// A failed fill's leftover (not VALID, not BUSY). Clear its
			// tag so the tag is never in two ways; callers still waiting
			// on it see the change and retry. It is a free way once
			// nobody references it.
			c.r.clearTag(g)
		}
		if free == ^uintptr(0) && s&(StateValid|StateBusy) == 0 && refs(s) == 0 {
			free = g
		}
	}
	victim, old, ok := uintptr(0), uint32(0), false
	if free != ^uintptr(0) {
		old, ok = c.claim(free)
		victim = free
	}
	if !ok {
		victim, old, ok = c.chooseVictim(set)
	}
	if !ok {
		c.unlockSet(set)
		return c.setFull(ctx, set, tag, w)
	}
	st := c.r.state(victim)
	oldTag := wordTag(atomic.LoadUint64(c.r.tag(victim)))
	evict := old&StateValid != 0
	dirty := evict && old&StateDirty != 0
	if dirty {
		atomic.StoreUint64(c.r.wbTag(victim), oldTag)
	}
	atomic.StoreUint32(c.r.status(victim), StatusOK)
	// The new tag with an odd generation and a clear clock bit, before any
	// store to the line: a reader that peeked at the old line (Peek, no
	// reference) sees the change even if the way later holds its tag again.
	c.r.install(victim, tag)
	atomic.AddUint32(st, n)
	atomic.AndUint32(st, ^uint32(StateValid|StateDirty))
	c.unlockSet(set)

	c.stats.add(set, cMisses, 1)
	if evict {
		c.stats.add(set, cEvictions, 1)
	}
	line := c.line(victim)
	if dirty {
		err := c.backend.WriteLine(ctx, oldTag, line)
		if err != nil {
			c.stats.add(set, cWriteBackErrors, 1)
			return Handle{}, done, c.restoreVictim(set, victim, oldTag, tag, n, err)
		}
		c.stats.add(set, cWriteBacks, 1)
		c.stats.add(set, cBytesWritten, uint64(len(line)))
		atomic.StoreUint64(c.r.wbTag(victim), TagEmpty)
	}
	if err := c.backend.ReadLine(ctx, tag, line); err != nil {
		c.stats.add(set, cFillErrors, 1)
		code := uint32(StatusFillFailed)
		if ctx.Err() != nil {
			code = StatusFillAborted
		}
		c.errs[victim].Store(&fillError{err})
		atomic.StoreUint32(c.r.status(victim), code)
		atomic.AndUint32(st, ^uint32(StateBusy)) // failed: !VALID, !BUSY, tag kept for the waiters
		subRefs(st, n)
		return Handle{}, done, fmt.Errorf("%w: line %#x: %w", ErrFill, tag, err)
	}
	c.stats.add(set, cFills, 1)
	c.stats.add(set, cBytesRead, uint64(len(line)))
	// Publish: the generation even again, then BUSY -> VALID in one atomic
	// (fetch_xor), after the data is in place; sequentially consistent
	// here, release on the device.
	c.r.publish(victim)
	for {
		s := atomic.LoadUint32(st)
		if atomic.CompareAndSwapUint32(st, s, s^(StateValid|StateBusy)) {
			break
		}
	}
	return Handle{c: c, g: victim, tag: tag, count: n}, done, nil
}

// setFull backs off when no way of the set can be evicted, and fails with
// ErrCacheTooSmall once the set has stayed so, with no way claimed for
// another line, for FullSetTimeout. A set whose ways keep changing hands
// is busy, not too small: its clock restarts at each claim (the ways'
// generations change), and the call's WaitTimeout still bounds it.
func (c *Cache) setFull(ctx context.Context, set uint32, tag uint64, w *waiter) (Handle, outcome, error) {
	now := time.Now()
	var gens uint64
	base := uintptr(set) * uintptr(c.cfg.Ways)
	for g := base; g < base+uintptr(c.cfg.Ways); g++ {
		gens += uint64(wordGen(atomic.LoadUint64(c.r.tag(g))))
	}
	if w.fullSince.IsZero() || gens != w.fullGens {
		w.fullSince, w.fullGens = now, gens
	}
	if now.Sub(w.fullSince) > c.cfg.FullSetTimeout {
		c.stats.add(set, cTooSmall, 1)
		return Handle{}, done, fmt.Errorf("%w: set %d of line %#x: all %d ways referenced or busy for %v",
			ErrCacheTooSmall, set, tag, c.cfg.Ways, c.cfg.FullSetTimeout)
	}
	if err := w.pause(ctx); err != nil {
		return Handle{}, done, c.waitErr(err, tag, "an evictable way")
	}
	return Handle{}, retry, nil
}

// claim makes the caller the BUSY owner of way g if nobody references it:
// refcount 0 and not BUSY both before and after fetch_or(BUSY); otherwise
// BUSY is undone (DESIGN.md §5). It returns the state before the claim.
// Callers hold the set lock.
func (c *Cache) claim(g uintptr) (uint32, bool) {
	st := c.r.state(g)
	s0 := atomic.LoadUint32(st)
	if s0&StateBusy != 0 || refs(s0) != 0 {
		return 0, false
	}
	s1 := atomic.OrUint32(st, StateBusy)
	if s1&StateBusy != 0 {
		return 0, false // another owner; its BUSY is not ours to clear
	}
	if refs(s1) != 0 {
		atomic.AndUint32(st, ^uint32(StateBusy))
		return 0, false
	}
	return s1, true
}

// chooseVictim claims a way of the set by the configured policy, skipping
// referenced and busy ways. Callers hold the set lock.
func (c *Cache) chooseVictim(set uint32) (uintptr, uint32, bool) {
	k := c.cfg.Ways
	base := uintptr(set) * uintptr(k)
	hp := c.r.hand(set)
	hand := atomic.LoadUint32(hp) % k
	steps := k
	if c.cfg.Policy == PolicyClock {
		steps = 2 * k // one pass may only clear reference bits
	}
	for i := uint32(0); i < steps; i++ {
		way := (hand + i) % k
		g := base + uintptr(way)
		s := atomic.LoadUint32(c.r.state(g))
		if s&StateBusy != 0 || refs(s) != 0 {
			continue
		}
		if c.cfg.Policy == PolicyClock && s&StateValid != 0 {
			if c.r.referenced(g) {
				c.r.clearReferenced(g)
				continue
			}
		}
		if old, ok := c.claim(g); ok {
			atomic.StoreUint32(hp, (way+1)%k)
			return g, old, true
		}
	}
	atomic.StoreUint32(hp, (hand+steps)%k)
	return 0, 0, false
}

// restoreVictim undoes an eviction whose write-back failed: the way gets its
// old tag back, VALID and DIRTY, so no data is lost; callers waiting for the
// new tag see the tag change and retry. Tags change only under the set
// lock, so the lock is taken without the caller's context (it is never held
// across I/O, so the bounded wait succeeds).
func (c *Cache) restoreVictim(set uint32, g uintptr, oldTag, newTag uint64, n uint32, cause error) error {
	werr := fmt.Errorf("%w: line %#x (evicted for %#x): %w", ErrWriteBack, oldTag, newTag, cause)
	w := c.newWaiter()
	if err := c.lockSet(context.Background(), set, &w); err != nil {
		// Unreachable unless a lock holder stopped: leave the way BUSY (the
		// data stays in the line, callers time out instead of reading
		// stale storage) and report both failures.
		return fmt.Errorf("%w; way %d left busy: %w", werr, g, err)
	}
	st := c.r.state(g)
	c.r.restore(g, oldTag) // the old data, untouched, is its tag's again
	atomic.StoreUint64(c.r.wbTag(g), TagEmpty)
	atomic.OrUint32(st, StateValid|StateDirty)
	atomic.AndUint32(st, ^uint32(StateBusy))
	c.unlockSet(set)
	subRefs(st, n)
	return werr
}
