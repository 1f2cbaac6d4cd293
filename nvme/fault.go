package nvme

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// FaultKind says what a fault hook does to a command.
type FaultKind uint8

const (
	// FaultNone runs the command normally (after Delay, if any).
	FaultNone FaultKind = iota
	// FaultFail completes the command with Fault.Status without running it.
	FaultFail
	// FaultDrop fetches the command and never completes it, as a hung
	// device would. Its SQ slot is still consumed.
	FaultDrop
)

// Fault is a fault hook's verdict on one command.
type Fault struct {
	Kind   FaultKind
	Status Status        // for FaultFail
	Delay  time.Duration // wait this long before running or failing the command
}

// FaultHook decides, for each command a Target fetches, whether to run it
// normally, fail it, delay it or drop it. It is called on the worker that
// fetched the command, in fetch order per queue, and must be quick and safe
// for concurrent use across queues. cmd is valid only during the call.
type FaultHook func(qid uint16, cmd *Command) Fault

// FaultRule is one rule of a FaultInjector: commands that Match (all when
// Match is nil) get Fault with probability Probability (always when 0), or
// every Every-th match when Every > 0.
type FaultRule struct {
	Match       func(qid uint16, cmd *Command) bool
	Probability float64
	Every       uint64
	Fault       Fault

	seen atomic.Uint64
}

// FaultInjector is a ready-made FaultHook made of rules, tried in order; the
// first that fires decides. Randomness comes from a seeded generator so a
// failing test can be replayed.
type FaultInjector struct {
	mu    sync.Mutex
	rng   *rand.Rand
	rules []*FaultRule
	fired atomic.Uint64
}

// NewFaultInjector returns an injector with the given seed and rules.
func NewFaultInjector(seed uint64, rules ...*FaultRule) *FaultInjector {
	return &FaultInjector{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rules: rules}
}

// Fired returns how many commands a rule has applied to.
func (f *FaultInjector) Fired() uint64 { return f.fired.Load() }

// Hook returns the injector as a FaultHook.
func (f *FaultInjector) Hook() FaultHook {
	return func(qid uint16, cmd *Command) Fault {
		for _, r := range f.rules {
			if r.Match != nil && !r.Match(qid, cmd) {
				continue
			}
			n := r.seen.Add(1)
			fire := true
			switch {
			case r.Every > 0:
				fire = n%r.Every == 0
			case r.Probability > 0:
				f.mu.Lock()
				fire = f.rng.Float64() < r.Probability
				f.mu.Unlock()
			}
			if fire {
				f.fired.Add(1)
				return r.Fault
			}
		}
		return Fault{}
	}
}

// MatchOpcode returns a FaultRule.Match that selects one opcode.
func MatchOpcode(op Opcode) func(uint16, *Command) bool {
	return func(_ uint16, c *Command) bool { return c.Opcode == op }
}
