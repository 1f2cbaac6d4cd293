package vq

import (
	"context"
	"fmt"
	"sync"

	"github.com/bam-go/bam/nvme"
)

// Locked is the single-lock baseline (BaM's "locking" queue): one mutex
// around enqueue plus doorbell, and the same mutex around completion
// handling; the CQ is peeked without it. CID admission and the waiting
// machinery are the ones QueuePair uses, so a benchmark of the two measures
// the queue protocol and nothing else.
type Locked struct {
	c    *core
	mu   sync.Mutex
	tail uint64 // virtual SQ tail, under mu
}

var _ Submitter = (*Locked)(nil)

// NewLocked returns a single-lock client of the queue pair in mem.
func NewLocked(mem *nvme.QueuePairMemory, opts Options) (*Locked, error) {
	c, err := newCore(mem, opts)
	if err != nil {
		return nil, err
	}
	l := &Locked{c: c}
	c.h = l
	return l, nil
}

// Stats returns the queue's counters.
func (l *Locked) Stats() Stats { return l.c.stats() }

// Submit is QueuePair.Submit with a mutex in place of the queue protocol.
func (l *Locked) Submit(ctx context.Context, cmd *nvme.Command) (nvme.Completion, error) {
	if cmd == nil {
		return nvme.Completion{}, fmt.Errorf("%w: nil", ErrBadCommand)
	}
	c := l.c
	deadline := c.deadline(ctx)
	cid, err := c.acquire(ctx, deadline)
	if err != nil {
		return nvme.Completion{}, err
	}
	c.cmds[cid] = *cmd
	c.cmds[cid].CID = cid
	l.mu.Lock()
	// Admission keeps at most depth-1 commands outstanding, so the SQ
	// always has room here.
	c.cmds[cid].Encode(c.mem.SQE(uint32(l.tail & c.mask)))
	l.tail++
	c.mem.RingSQTail(uint32(l.tail & c.mask))
	c.sqDoorbells.Add(1)
	c.submitted.Add(1)
	l.mu.Unlock()
	if c.opts.Notify != nil {
		c.opts.Notify()
	}
	return c.wait(ctx, deadline, cid)
}

func (l *Locked) harvest() int {
	c := l.c
	if !c.validAtHead(c.r.load(CQHeadOffset)) {
		return 0
	}
	l.mu.Lock()
	n, _ := c.drainCQ()
	if n > 0 {
		c.deliver()
	}
	l.mu.Unlock()
	return n
}
