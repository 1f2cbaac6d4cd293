package vq

import (
	"context"
	"sync/atomic"

	"github.com/bam-go/bam/nvme"
)

// Mapper spreads submitters over several queues: Submit picks them round
// robin, SubmitHint by a caller's hint (a worker index, a line number), so
// that a caller with affinity keeps to one queue. It is safe for concurrent
// use.
type Mapper struct {
	qs   []Submitter
	next atomic.Uint64
}

var _ Submitter = (*Mapper)(nil)

// NewMapper returns a mapper over qs (at least one).
func NewMapper(qs ...Submitter) (*Mapper, error) {
	if len(qs) == 0 {
		return nil, errorf("mapper needs at least one queue")
	}
	for i, q := range qs {
		if q == nil {
			return nil, errorf("mapper queue %d is nil", i)
		}
	}
	return &Mapper{qs: append([]Submitter(nil), qs...)}, nil
}

// Len returns the number of queues.
func (m *Mapper) Len() int { return len(m.qs) }

// Queue returns the queue a hint maps to.
func (m *Mapper) Queue(hint uint64) Submitter { return m.qs[hint%uint64(len(m.qs))] }

// Submit submits cmd on the next queue in round-robin order.
func (m *Mapper) Submit(ctx context.Context, cmd *nvme.Command) (nvme.Completion, error) {
	return m.Queue(m.next.Add(1)-1).Submit(ctx, cmd)
}

// SubmitHint submits cmd on the queue hint maps to.
func (m *Mapper) SubmitHint(ctx context.Context, hint uint64, cmd *nvme.Command) (nvme.Completion, error) {
	return m.Queue(hint).Submit(ctx, cmd)
}
