package vq

import (
	"context"
	"runtime"
	"time"

	"github.com/bam-go/bam/nvme"
)

// DefaultTimeout bounds every wait of a Submit when Options.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Options configures a QueuePair or a Locked queue.
type Options struct {
	// Timeout bounds the whole of one Submit: waiting for a command ID, for
	// the SQ slot's turn and for the completion. Zero means DefaultTimeout.
	// A context deadline, when earlier, bounds it too.
	Timeout time.Duration

	// Notify, when set, is called after each SQ doorbell write, outside
	// every lock, so a software controller can be woken (nvme.Target.Kick).
	Notify func()

	// Spin is how many times a waiter re-checks before it starts yielding
	// the processor; Yield how many runtime.Gosched rounds follow before it
	// parks (or, when no other waiter polls the CQ, becomes the poller).
	// Zero picks the defaults (DefaultSpin; DefaultYield when GOMAXPROCS
	// is at most SmallMachineProcs, else none); negative means none.
	Spin, Yield int

	// Metadata, when non-nil, is the memory of the queue's metadata region:
	// zeroed, SectorBytes-aligned, at least RegionBytes(depth) bytes. When
	// nil the queue allocates it.
	Metadata []uint64
}

// Defaults for Options.Spin and Options.Yield, measured with vqbench: short
// spins, then sleep on a channel so goroutines do not steal the
// controller's processor. On a 2-core machine, 4 yields before parking
// doubled the rate at 16 submitters (a yield lets the controller run and the
// completion often arrives before the waiter parks); on 16 cores the same
// yields halved it, because runtime.Gosched takes the scheduler's global
// run-queue lock. So the yields are the default only where processors are
// scarce (GOMAXPROCS <= SmallMachineProcs).
const (
	DefaultSpin       = 32
	DefaultYield      = 4
	SmallMachineProcs = 4
)

func defaultYield() int {
	if runtime.GOMAXPROCS(0) <= SmallMachineProcs {
		return DefaultYield
	}
	return 0
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	switch {
	case o.Spin == 0:
		o.Spin = DefaultSpin
	case o.Spin < 0:
		o.Spin = 0
	}
	switch {
	case o.Yield == 0:
		o.Yield = defaultYield()
	case o.Yield < 0:
		o.Yield = 0
	}
	return o
}

// Submitter is anything that carries one NVMe command to a controller and
// returns its completion: a QueuePair, a Locked queue, a Mapper.
type Submitter interface {
	// Submit assigns the command a CID, submits it and waits for its
	// completion. A non-success status is returned as the error
	// (status.Err(cmd), errors.Is-able against the nvme.Err* sentinels)
	// together with the completion.
	Submit(ctx context.Context, cmd *nvme.Command) (nvme.Completion, error)
}

// Stats counts a queue's events since it was created.
type Stats struct {
	Submitted       uint64 // commands passed by the SQ tail (fillers included)
	Completed       uint64 // CQEs consumed
	SQDoorbells     uint64 // SQ tail doorbell writes
	CQDoorbells     uint64 // CQ head doorbell writes
	Timeouts        uint64 // Submits that returned a WaitError
	Quarantined     int64  // CIDs abandoned after submission, completion not yet seen
	LateCompletions uint64 // completions that arrived for abandoned CIDs
	Fillers         uint64 // Flush commands written in place of abandoned tickets
	Spurious        uint64 // CQEs naming a CID that was not in flight, or a bad SQHD
}
