package vq

import (
	"context"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/nvme"
)

// harvester drains a queue's CQ under whatever exclusion its queue uses and
// reports how many entries it consumed (0 when it found none or could not
// get in).
type harvester interface{ harvest() int }

// core is what QueuePair and Locked share: the CID table (in the metadata
// region), CID admission, the CQ drain and the waiting machinery that
// delivers each completion to its submitter.
//
// Admission: a submitter takes a CID from a pool of depth-1 before it does
// anything else, and the CID returns to the pool only after the CQ head has
// passed the command's completion. So at most depth-1 commands are ever
// outstanding, the controller never sees an overfull SQ or fills the CQ, and
// a CID is unique among outstanding commands.
//
// Waiting: each waiter checks its CID state, and harvests the CQ itself when
// the entry at the head is valid. After a bounded spin and a few yields, one
// waiter takes the poller token and polls for everyone; the rest park on a
// per-CID channel that the harvester signals. The poller, when its own
// command completes, drops the token and wakes a parked waiter to take over.
type core struct {
	r     *region
	mem   *nvme.QueuePairMemory
	qid   uint16
	depth uint32
	mask  uint64
	shift uint
	opts  Options
	h     harvester

	free    chan uint16     // admission: free CIDs
	wake    []chan struct{} // per CID, cap 1: harvester -> parked waiter
	cmds    []nvme.Command  // per CID: the command, owned by the CID holder
	handoff chan struct{}   // cap 1: "no poller and someone parked"
	parked  atomic.Int64
	batch   []uint16 // CIDs of the current harvest, owned by the harvester

	// Counters, grouped by writer and padded apart: the tail-lock holder,
	// the harvester, and the rare paths.
	_                      [SectorBytes]byte
	sqDoorbells, submitted atomic.Uint64
	_                      [SectorBytes]byte
	completed, cqDoorbells atomic.Uint64
	_                      [SectorBytes]byte
	timeouts, late         atomic.Uint64
	fillers, spurious      atomic.Uint64
	quarantined            atomic.Int64
}

func newCore(mem *nvme.QueuePairMemory, opts Options) (*core, error) {
	if mem == nil {
		return nil, errorf("nil queue pair memory")
	}
	if err := mem.Validate(); err != nil {
		return nil, errorf("%w", err)
	}
	r, err := newRegion(opts.Metadata, mem.Depth)
	if err != nil {
		return nil, err
	}
	c := &core{
		r:       r,
		mem:     mem,
		qid:     mem.ID,
		depth:   mem.Depth,
		mask:    uint64(mem.Depth - 1),
		opts:    opts.withDefaults(),
		handoff: make(chan struct{}, 1),
		batch:   make([]uint16, 0, mem.Depth),
	}
	for d := mem.Depth; d > 1; d >>= 1 {
		c.shift++
	}
	n := int(mem.Depth) - 1
	c.free = make(chan uint16, n)
	c.wake = make([]chan struct{}, n)
	c.cmds = make([]nvme.Command, n)
	for i := range n {
		c.wake[i] = make(chan struct{}, 1)
		c.free <- uint16(i)
	}
	return c, nil
}

// deadline is the earlier of now+Timeout and the context's deadline.
func (c *core) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.opts.Timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d
}

// expired returns the reason a wait must stop, or nil.
func expired(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(deadline) {
		return ErrTimeout
	}
	return nil
}

// acquire takes a free CID (admission) and marks it in flight.
func (c *core) acquire(ctx context.Context, deadline time.Time) (uint16, error) {
	var cid uint16
	select {
	case cid = <-c.free:
	default:
		t := getTimer(deadline)
		select {
		case cid = <-c.free:
			putTimer(t)
		case <-ctx.Done():
			putTimer(t)
			c.timeouts.Add(1)
			return 0, &WaitError{QID: c.qid, Stage: StageAdmission, Err: ctx.Err()}
		case <-t.C:
			putTimer(t)
			c.timeouts.Add(1)
			return 0, &WaitError{QID: c.qid, Stage: StageAdmission, Err: ErrTimeout}
		}
	}
	atomic.StoreUint64(c.r.cidState(cid), CIDInFlight)
	return cid, nil
}

// timers recycles the timers of parked waits: thousands of submitters park
// and wake every millisecond, and a fresh timer per park showed up in
// profiles.
var timers sync.Pool

func getTimer(deadline time.Time) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(time.Until(deadline))
		return t
	}
	return time.NewTimer(time.Until(deadline))
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped timer's
// channel holds no stale value, so Reset on reuse is safe.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

// validAtHead reports whether the CQ entry at virtual position head carries
// the phase expected there, i.e. whether a harvest would find work.
func (c *core) validAtHead(head uint64) bool {
	dw3 := atomic.LoadUint32(c.mem.CQEDW3(uint32(head & c.mask)))
	return (dw3>>16)&1 == 1 == nvme.ExpectedPhase(head, c.depth)
}

// drainCQ consumes every valid CQ entry from the head, records each result
// in its CID record, publishes the new head and rings the CQ doorbell once.
// The caller holds the queue's harvest exclusion and must call deliver
// afterwards. It returns the number consumed and the SQHD of the last one.
func (c *core) drainCQ() (n int, sqhd uint16) {
	head := c.r.load(CQHeadOffset)
	le := binary.LittleEndian
	for n < int(c.depth) {
		i := uint32(head & c.mask)
		dw3 := atomic.LoadUint32(c.mem.CQEDW3(i))
		if (dw3>>16)&1 == 1 != nvme.ExpectedPhase(head, c.depth) {
			break
		}
		// The controller writes dword 3 last; loading it above orders
		// these reads after the rest of the entry.
		e := c.mem.CQE(i)
		dw0, dw2 := le.Uint32(e[0:]), le.Uint32(e[8:])
		sqhd = uint16(dw2)
		cid := uint16(dw3)
		if int(cid) < len(c.cmds) {
			res := uint64(dw0)<<ResultDW0Shift | uint64(sqhd)<<ResultSQHDShift | uint64(dw3>>17)<<ResultStatusShift
			atomic.StoreUint64(c.r.cidResult(cid), res)
			c.batch = append(c.batch, cid)
		} else {
			c.spurious.Add(1)
		}
		head++
		n++
	}
	if n > 0 {
		c.r.store(CQHeadOffset, head)
		c.mem.RingCQHead(uint32(head & c.mask))
		c.cqDoorbells.Add(1)
		c.completed.Add(uint64(n))
	}
	return n, sqhd
}

// deliver hands the results of the last drain to their submitters. The CQ
// head has passed every entry of the batch, so each CID may now be reused.
func (c *core) deliver() {
	for _, cid := range c.batch {
		st := c.r.cidState(cid)
		for done := false; !done; {
			switch old := atomic.LoadUint64(st); old {
			case CIDInFlight:
				done = atomic.CompareAndSwapUint64(st, old, CIDDone)
			case CIDParked:
				if done = atomic.CompareAndSwapUint64(st, old, CIDDone); done {
					c.wake[cid] <- struct{}{} // cap 1, empty: never blocks
				}
			case CIDAbandoned:
				// Its submitter left; the completion is dropped and
				// the quarantined CID goes back to the pool.
				atomic.StoreUint64(st, CIDFree)
				c.quarantined.Add(-1)
				c.late.Add(1)
				c.free <- cid
				done = true
			default:
				c.spurious.Add(1)
				done = true
			}
		}
	}
	c.batch = c.batch[:0]
}

// finish turns a CIDDone record into the submitter's result and frees the
// CID.
func (c *core) finish(cid uint16) (nvme.Completion, error) {
	res := atomic.LoadUint64(c.r.cidResult(cid))
	comp := nvme.Completion{
		DW0:    uint32(res >> ResultDW0Shift),
		SQHD:   uint16(res >> ResultSQHDShift),
		SQID:   c.qid,
		CID:    cid,
		Status: nvme.Status(res>>ResultStatusShift) & 0x7FFF,
	}
	err := comp.Status.Err(&c.cmds[cid])
	atomic.StoreUint64(c.r.cidState(cid), CIDFree)
	c.free <- cid // cap depth-1: never blocks
	c.passPoller()
	return comp, err
}

// passPoller wakes a parked waiter when nobody polls the CQ.
func (c *core) passPoller() {
	if c.parked.Load() > 0 && c.r.load(PollerOffset) == 0 {
		select {
		case c.handoff <- struct{}{}:
		default:
		}
	}
}

// abandon gives up on a submitted command. If its completion was recorded
// meanwhile, the result is returned instead.
func (c *core) abandon(cid uint16, from uint64, cause error) (nvme.Completion, error) {
	st := c.r.cidState(cid)
	if !atomic.CompareAndSwapUint64(st, from, CIDAbandoned) {
		if from == CIDParked {
			<-c.wake[cid] // the harvester set Done and is sending
		}
		return c.finish(cid)
	}
	c.quarantined.Add(1)
	c.timeouts.Add(1)
	c.passPoller()
	return nvme.Completion{}, &WaitError{QID: c.qid, Stage: StageCompletion, Submitted: true, CID: cid, Err: cause}
}

// wait waits for the completion of the command holding cid.
func (c *core) wait(ctx context.Context, deadline time.Time, cid uint16) (nvme.Completion, error) {
	st := c.r.cidState(cid)
	spin, yield := c.opts.Spin, c.opts.Spin+c.opts.Yield
	var timer *time.Timer
	defer func() {
		if timer != nil {
			putTimer(timer)
		}
	}()
	for i := 0; ; i++ {
		if atomic.LoadUint64(st) == CIDDone {
			return c.finish(cid)
		}
		if i&15 == 15 {
			if err := expired(ctx, deadline); err != nil {
				return c.abandon(cid, CIDInFlight, err)
			}
		}
		if c.h.harvest() > 0 {
			continue
		}
		if i < spin {
			continue
		}
		if i < yield {
			runtime.Gosched()
			continue
		}
		if c.r.tryLock(PollerOffset) {
			return c.poll(ctx, deadline, cid)
		}
		// Park, unless the poller left meanwhile.
		if !atomic.CompareAndSwapUint64(st, CIDInFlight, CIDParked) {
			continue // done
		}
		c.parked.Add(1)
		if c.r.load(PollerOffset) == 0 {
			c.parked.Add(-1)
			if !atomic.CompareAndSwapUint64(st, CIDParked, CIDInFlight) {
				<-c.wake[cid]
				return c.finish(cid)
			}
			i = spin // go straight back to competing for the poller token
			continue
		}
		if timer == nil {
			timer = getTimer(deadline)
		}
		select {
		case <-c.wake[cid]:
			c.parked.Add(-1)
			return c.finish(cid)
		case <-c.handoff:
			c.parked.Add(-1)
			if !atomic.CompareAndSwapUint64(st, CIDParked, CIDInFlight) {
				<-c.wake[cid]
				c.passHandoff()
				return c.finish(cid)
			}
			i = yield - 1
		case <-ctx.Done():
			c.parked.Add(-1)
			return c.abandon(cid, CIDParked, ctx.Err())
		case <-timer.C:
			c.parked.Add(-1)
			return c.abandon(cid, CIDParked, ErrTimeout)
		}
	}
}

// passHandoff re-posts a handoff a waiter consumed but cannot use.
func (c *core) passHandoff() {
	select {
	case c.handoff <- struct{}{}:
	default:
	}
}

// pollerYieldEvery is how many empty polls the poller makes between
// yields.
const pollerYieldEvery = 16

// poll is the wait of the poller-token holder: it harvests for everyone
// until its own command completes, then passes the token on.
func (c *core) poll(ctx context.Context, deadline time.Time, cid uint16) (nvme.Completion, error) {
	st := c.r.cidState(cid)
	defer func() {
		c.r.unlock(PollerOffset)
		c.passPoller()
	}()
	idle := 0
	for i := 0; ; i++ {
		if atomic.LoadUint64(st) == CIDDone {
			return c.finish(cid)
		}
		if i&15 == 15 {
			if err := expired(ctx, deadline); err != nil {
				return c.abandon(cid, CIDInFlight, err)
			}
		}
		if c.h.harvest() > 0 {
			idle = 0
			continue
		}
		idle++
		switch {
		case idle < c.opts.Spin:
		case idle < 1<<14:
			// Yield now and then, not on every empty poll: Gosched
			// takes the scheduler's global run-queue lock, which
			// thousands of waiters on 16 cores turned into the
			// bottleneck.
			if idle%pollerYieldEvery == 0 {
				runtime.Gosched()
			}
		default:
			// The controller is slow (a file, a fault hook): stop
			// burning a processor it may need.
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// stats snapshots the counters.
func (c *core) stats() Stats {
	return Stats{
		Submitted:       c.submitted.Load(),
		Completed:       c.completed.Load(),
		SQDoorbells:     c.sqDoorbells.Load(),
		CQDoorbells:     c.cqDoorbells.Load(),
		Timeouts:        c.timeouts.Load(),
		Quarantined:     c.quarantined.Load(),
		LateCompletions: c.late.Load(),
		Fillers:         c.fillers.Load(),
		Spurious:        c.spurious.Load(),
	}
}
