package gpuengine

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/nvme"
)

// faultMode is one round's fault hook in TestGPUFaultRounds.
type faultMode struct {
	name   string
	per    uint64         // one command in per is hit (0: none)
	kind   nvme.FaultKind // what a hit command gets
	delay  time.Duration  // for FaultNone: how late a hit command runs
	writes bool           // writes are hit too, not only reads
}

// TestGPUFaultRounds runs random gathers, range reads and scatters through
// a cache far smaller than the array, each round under a random fault
// hook: failing statuses, dropped commands, and Reads (and Writes) delayed
// below, around and far past the timeout, so that late completions meet
// running kernels, reset queues and the leftovers of failed fills. The
// contract it checks is the one a caller relies on: a call that returns
// no error returned (or stored) exactly the right elements, whatever
// failed before it; a failed scatter leaves each of its elements at its
// old or its new value, and once a read has seen one of them it never
// sees the other; and with the faults gone the engine serves every
// element right.
func TestGPUFaultRounds(t *testing.T) {
	// Short, so that the rounds that time out are quick; a sanitizer's
	// kernels (and lanes that copy alone, with no fill copier running
	// beside them) are slower, and no-fault rounds must not time out.
	timeout := 100 * time.Millisecond
	if cudatest.Sanitizer() != "" {
		timeout = time.Second
	}
	r := newRig(t, Config{CacheBytes: 256 << 10, Ways: 4, QueuePairs: 4, QueueDepth: 64, Timeout: timeout}, 1, 1<<17, 3)
	ctx := ctxT(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// possible[i]: the values element i may hold; one once it is known.
	possible := make([][]uint64, r.n)
	for i := range possible {
		possible[i] = []uint64{r.stored(uint64(i))}
	}
	saw := func(what string, i, v uint64) {
		t.Helper()
		for _, p := range possible[i] {
			if p == v {
				possible[i] = []uint64{v}
				return
			}
		}
		t.Fatalf("%s: element %d = %#x with no error, want one of %#x", what, i, v, possible[i])
	}

	modes := []faultMode{
		{name: "none"},
		{name: "fail 1/50", per: 50, kind: nvme.FaultFail},
		{name: "fail 1/7 with writes", per: 7, kind: nvme.FaultFail, writes: true},
		{name: "drop 1/200", per: 200, kind: nvme.FaultDrop},
		{name: "delay 1/5 a tenth of the timeout", per: 5, delay: timeout / 10},
		{name: "delay 1/5 a third of the timeout", per: 5, delay: timeout / 3},
		{name: "delay 1/20 just past the timeout", per: 20, delay: timeout + timeout/5},
		{name: "delay 1/10 just past the timeout, writes too", per: 10, delay: timeout + timeout/5, writes: true},
		{name: "delay 1/3 far past the timeout", per: 3, delay: 4 * timeout},
		{name: "delay all 2x the timeout, writes too", per: 1, delay: 2 * timeout, writes: true},
	}
	var calls, hits atomic.Uint64
	var mode atomic.Pointer[faultMode]
	r.e.SetFaultHook(func(q uint16, c *nvme.Command) nvme.Fault {
		m := mode.Load()
		if m == nil || m.per == 0 || (c.Opcode != nvme.OpRead && !(m.writes && c.Opcode == nvme.OpWrite)) {
			return nvme.Fault{}
		}
		if splitmix(seed^calls.Add(1))%m.per != 0 {
			return nvme.Fault{}
		}
		hits.Add(1)
		if m.kind != nvme.FaultNone {
			return nvme.Fault{Kind: m.kind, Status: nvme.StatusUnrecoveredRead}
		}
		return nvme.Fault{Delay: m.delay}
	})

	rounds, failed := 64, 0
	counts := map[string][2]int{} // per mode: calls without and with an error
	for round := range rounds {
		m := &modes[rng.IntN(len(modes))]
		if round%8 == 7 {
			m = &modes[0] // now and then a round with no faults
		}
		mode.Store(m)
		what := fmt.Sprintf("round %d (%s)", round, m.name)
		var err error
		switch op := rng.IntN(3); op {
		case 0: // gather
			idx := make([]uint64, 1+rng.IntN(4096))
			for i := range idx {
				idx[i] = rng.Uint64N(r.n)
			}
			out := make([]byte, 8*len(idx))
			if err = r.arr.Gather(ctx, idx, out); err == nil {
				for i, j := range idx {
					saw(what+" gather", j, binary.LittleEndian.Uint64(out[8*i:]))
				}
			}
		case 1: // range read
			start := rng.Uint64N(r.n)
			n := 1 + rng.Uint64N(min(r.n-start, 64<<10))
			out := make([]byte, 8*n)
			if err = r.arr.ReadRange(ctx, start, out); err == nil {
				for i := range n {
					saw(what+" range read", start+i, binary.LittleEndian.Uint64(out[8*i:]))
				}
			}
		case 2: // scatter of distinct indices
			k := 1 + rng.IntN(2048)
			idx := make([]uint64, 0, k)
			seen := map[uint64]bool{}
			for len(idx) < k {
				if j := rng.Uint64N(r.n); !seen[j] {
					seen[j] = true
					idx = append(idx, j)
				}
			}
			vals := make([]byte, 8*k)
			for i := range idx {
				binary.LittleEndian.PutUint64(vals[8*i:], rng.Uint64())
			}
			err = r.arr.Scatter(ctx, idx, vals)
			for i, j := range idx {
				v := binary.LittleEndian.Uint64(vals[8*i:])
				if err == nil {
					possible[j] = []uint64{v}
				} else {
					possible[j] = append(possible[j], v)
				}
			}
		}
		c := counts[m.name]
		if err != nil {
			c[1]++
			failed++
		} else {
			c[0]++
		}
		counts[m.name] = c
		if err != nil && m.per == 0 {
			t.Fatalf("%s: %v with no faults", what, err)
		}
	}
	mode.Store(nil)
	t.Logf("%d rounds, %d failed, %d commands hit; per mode (ok, failed): %v", rounds, failed, hits.Load(), counts)

	// With the faults gone: every element, twice (the second pass through
	// what the first left in the cache), then Flush and storage itself.
	out := make([]byte, 8*r.n)
	for pass := range 2 {
		if err := r.arr.ReadRange(ctx, 0, out); err != nil {
			t.Fatalf("read of every element after the rounds (pass %d): %v", pass, err)
		}
		for i := range r.n {
			saw(fmt.Sprintf("final read %d", pass), i, binary.LittleEndian.Uint64(out[8*i:]))
		}
	}
	if err := r.e.Flush(ctx); err != nil {
		t.Fatalf("flush after the rounds: %v", err)
	}
	for i := range r.n {
		if got := r.stored(i); got != possible[i][0] {
			t.Fatalf("after Flush, storage element %d = %#x, want %#x", i, got, possible[i][0])
		}
	}
	checkGenerations(t, r.e)
}

// splitmix is SplitMix64's finaliser: a well-spread hash of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
