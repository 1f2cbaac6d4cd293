package vq

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/nvme"
)

func errorf(format string, args ...any) error {
	return fmt.Errorf("vq: "+format, args...)
}

// QueuePair is the client side of one NVMe I/O queue pair, shared by any
// number of goroutines, following BaM's queue protocol (see the package
// documentation for the rules). It is safe for concurrent use.
type QueuePair struct {
	c *core
	r *region

	abMu       sync.Mutex
	abandoned  map[uint64]uint16 // ticket -> CID of submitters that left before their turn
	nAbandoned atomic.Int64
}

var _ Submitter = (*QueuePair)(nil)

// New returns the client of the queue pair in mem. mem's rings must be
// zeroed and the controller must not have served it before.
func New(mem *nvme.QueuePairMemory, opts Options) (*QueuePair, error) {
	c, err := newCore(mem, opts)
	if err != nil {
		return nil, err
	}
	q := &QueuePair{c: c, r: c.r, abandoned: make(map[uint64]uint16)}
	c.h = q
	return q, nil
}

// ID returns the queue pair's identifier.
func (q *QueuePair) ID() uint16 { return q.c.qid }

// Depth returns the number of ring entries; at most Depth()-1 commands are
// outstanding.
func (q *QueuePair) Depth() uint32 { return q.c.depth }

// Stats returns the queue's counters.
func (q *QueuePair) Stats() Stats { return q.c.stats() }

// Metadata returns the metadata region (RegionBytes(Depth()) bytes as
// words), for a device mirror of the protocol.
func (q *QueuePair) Metadata() []uint64 { return q.r.words }

// Submit assigns cmd a CID, enqueues it, rings the SQ doorbell (once per
// batch of contiguous entries) and waits for its completion. cmd is not
// modified. A non-success status comes back as the error (errors.Is against
// nvme.ErrUnrecoveredRead and the like) together with the completion. A wait
// past Options.Timeout or the context's deadline returns a *WaitError that
// matches ErrTimeout.
func (q *QueuePair) Submit(ctx context.Context, cmd *nvme.Command) (nvme.Completion, error) {
	if cmd == nil {
		return nvme.Completion{}, fmt.Errorf("%w: nil", ErrBadCommand)
	}
	c := q.c
	deadline := c.deadline(ctx)
	cid, err := c.acquire(ctx, deadline)
	if err != nil {
		return nvme.Completion{}, err
	}
	c.cmds[cid] = *cmd
	c.cmds[cid].CID = cid

	t := atomic.AddUint64(q.r.word(TicketOffset), 1) - 1
	if err := q.waitTurn(ctx, deadline, t, cid); err != nil {
		return nvme.Completion{}, err
	}
	pos := t & c.mask
	c.cmds[cid].Encode(c.mem.SQE(uint32(pos)))
	atomic.StoreUint64(q.r.marker(pos), t+1)
	q.flushTail()
	return c.wait(ctx, deadline, cid)
}

// waitTurn waits until slot t%depth is on turn t/depth, i.e. the controller
// has consumed the slot's previous occupant. On expiry the ticket cannot
// just be dropped (the SQ tail would stop at its slot forever), so a Flush
// with the same NSID and the now quarantined CID takes its place when the
// turn comes: either written here, if the turn came while giving up, or by
// the head-lock holder that opens the turn.
func (q *QueuePair) waitTurn(ctx context.Context, deadline time.Time, t uint64, cid uint16) error {
	c := q.c
	turn := q.r.turn(t & c.mask)
	want := t >> c.shift
	for i := 0; ; i++ {
		if atomic.LoadUint64(turn) == want {
			return nil
		}
		if i&15 == 15 {
			if err := expired(ctx, deadline); err != nil {
				return q.abandonTicket(t, cid, err)
			}
		}
		if q.harvest() > 0 {
			continue
		}
		switch {
		case i < c.opts.Spin:
		case i < 4096:
			runtime.Gosched()
		default:
			time.Sleep(50 * time.Microsecond)
		}
	}
}

func (q *QueuePair) abandonTicket(t uint64, cid uint16, cause error) error {
	c := q.c
	c.timeouts.Add(1)
	c.quarantined.Add(1)
	atomic.StoreUint64(q.r.cidState(cid), CIDAbandoned)
	werr := &WaitError{QID: c.qid, Stage: StageTurn, CID: cid, Err: cause}
	q.abMu.Lock()
	q.nAbandoned.Add(1)
	q.abandoned[t] = cid
	// The opener stores the turn, then checks nAbandoned; we raised
	// nAbandoned, then check the turn: one of us sees the other.
	if atomic.LoadUint64(q.r.turn(t&c.mask)) == t>>c.shift {
		delete(q.abandoned, t)
		q.nAbandoned.Add(-1)
		q.abMu.Unlock()
		q.writeFiller(t, cid)
		return werr
	}
	q.abMu.Unlock()
	return werr
}

// writeFiller puts a Flush with the abandoned command's NSID and CID into
// ticket t's slot: no data moves, and its completion frees the CID.
func (q *QueuePair) writeFiller(t uint64, cid uint16) {
	c := q.c
	f := nvme.Command{Opcode: nvme.OpFlush, NSID: c.cmds[cid].NSID, CID: cid}
	pos := t & c.mask
	f.Encode(c.mem.SQE(uint32(pos)))
	atomic.StoreUint64(q.r.marker(pos), t+1)
	c.fillers.Add(1)
	q.flushTail()
}

// flushTail moves the SQ tail over every contiguous marked slot and rings
// the doorbell once. Only the holder of the tail lock moves the tail; a
// submitter that cannot get the lock leaves, because the holder re-checks
// the marker at the new tail after unlocking and goes round again when it
// is set, so no marked entry is stranded.
func (q *QueuePair) flushTail() {
	c := q.c
	for {
		if !q.r.tryLock(TailLockOffset) {
			return
		}
		start := q.r.load(SQTailOffset)
		tail := start
		for atomic.LoadUint64(q.r.marker(tail&c.mask)) == tail+1 {
			tail++
		}
		if tail != start {
			q.r.store(SQTailOffset, tail)
			c.mem.RingSQTail(uint32(tail & c.mask))
			c.sqDoorbells.Add(1)
			c.submitted.Add(tail - start)
		}
		q.r.unlock(TailLockOffset)
		if tail != start && c.opts.Notify != nil {
			c.opts.Notify()
		}
		if atomic.LoadUint64(q.r.marker(tail&c.mask)) != tail+1 {
			return
		}
	}
}

// harvest drains the CQ if the entry at its head is valid and the head lock
// is free: records results, rings the CQ doorbell once, moves the SQ head to
// the last CQE's SQHD (opening the turns of the slots passed), then wakes the
// submitters.
func (q *QueuePair) harvest() int {
	c := q.c
	if !c.validAtHead(q.r.load(CQHeadOffset)) || !q.r.tryLock(HeadLockOffset) {
		return 0
	}
	n, sqhd := c.drainCQ()
	if n > 0 {
		q.advanceSQHead(sqhd)
		c.deliver()
	}
	q.r.unlock(HeadLockOffset)
	return n
}

// advanceSQHead moves the virtual SQ head to physical position sqhd and
// opens the next turn of every slot passed. Caller holds the head lock.
func (q *QueuePair) advanceSQHead(sqhd uint16) {
	c := q.c
	head := q.r.load(SQHeadOffset)
	delta := (uint64(sqhd) - head) & c.mask
	if delta == 0 {
		return
	}
	if tail := q.r.load(SQTailOffset); delta > tail-head {
		c.spurious.Add(1) // SQHD beyond the tail: ignore it
		return
	}
	for v := head; v < head+delta; v++ {
		atomic.StoreUint64(q.r.turn(v&c.mask), v>>c.shift+1)
		if q.nAbandoned.Load() > 0 {
			q.openAbandoned(v + uint64(c.depth))
		}
	}
	q.r.store(SQHeadOffset, head+delta)
}

// openAbandoned writes the filler of ticket t if its submitter gave up.
func (q *QueuePair) openAbandoned(t uint64) {
	q.abMu.Lock()
	cid, ok := q.abandoned[t]
	if ok {
		delete(q.abandoned, t)
		q.nAbandoned.Add(-1)
	}
	q.abMu.Unlock()
	if ok {
		q.writeFiller(t, cid)
	}
}
