package nvme

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// simpleClient is the smallest correct host side of one queue pair, for a
// single goroutine: write SQEs, ring the tail, poll the CQ phase, ring the
// head. It keeps at most Depth-1 commands outstanding. Package vq is the
// real, concurrent client; this one exists to test and measure the Target.
type simpleClient struct {
	qp          *QueuePairMemory
	kick        func(uint16) // nil for a client that never kicks (GPU-like)
	sqTail      uint32
	sqHead      uint32 // last SQHD seen
	cqHead      uint32
	phase       bool
	outstanding int
}

var errQueueBusy = errors.New("nvme: queue has Depth-1 commands outstanding")

func newSimpleClient(qp *QueuePairMemory, kick func(uint16)) *simpleClient {
	return &simpleClient{qp: qp, kick: kick, phase: true}
}

// canSubmit reports whether another command fits.
func (c *simpleClient) canSubmit() bool {
	return c.outstanding < int(c.qp.Depth)-1 && !Full(c.sqHead, c.sqTail, c.qp.Depth)
}

// put writes cmd into the next SQ slot without ringing the doorbell.
func (c *simpleClient) put(cmd *Command) error {
	if !c.canSubmit() {
		return errQueueBusy
	}
	cmd.Encode(c.qp.SQE(c.sqTail))
	c.sqTail = (c.sqTail + 1) & (c.qp.Depth - 1)
	c.outstanding++
	return nil
}

// ring publishes the SQ tail and kicks the Target.
func (c *simpleClient) ring() {
	c.qp.RingSQTail(c.sqTail)
	if c.kick != nil {
		c.kick(c.qp.ID)
	}
}

// submit puts and rings one command.
func (c *simpleClient) submit(cmd *Command) error {
	if err := c.put(cmd); err != nil {
		return err
	}
	c.ring()
	return nil
}

// poll consumes the next completion if one is posted.
func (c *simpleClient) poll() (Completion, bool) {
	dw3 := atomic.LoadUint32(c.qp.CQEDW3(c.cqHead))
	if (dw3&(1<<16) != 0) != c.phase {
		return Completion{}, false
	}
	e, _ := DecodeCompletion(c.qp.CQE(c.cqHead))
	e.SetDW3(dw3)
	c.cqHead = (c.cqHead + 1) & (c.qp.Depth - 1)
	if c.cqHead == 0 {
		c.phase = !c.phase
	}
	c.qp.RingCQHead(c.cqHead)
	c.sqHead = uint32(e.SQHD) & (c.qp.Depth - 1)
	c.outstanding--
	return e, true
}

// wait polls until a completion arrives or ctx ends.
func (c *simpleClient) wait(ctx context.Context) (Completion, error) {
	for i := 0; ; i++ {
		if e, ok := c.poll(); ok {
			return e, nil
		}
		if i%64 == 63 {
			if err := ctx.Err(); err != nil {
				return Completion{}, fmt.Errorf("nvme: waiting for a completion on queue %d: %w", c.qp.ID, err)
			}
			if i > 4096 {
				time.Sleep(5 * time.Microsecond)
				continue
			}
		}
		runtime.Gosched()
	}
}

// do submits cmd and waits for its completion (the only one outstanding).
func (c *simpleClient) do(ctx context.Context, cmd *Command) (Completion, error) {
	if err := c.submit(cmd); err != nil {
		return Completion{}, err
	}
	return c.wait(ctx)
}
