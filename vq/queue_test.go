package vq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bam-go/bam/nvme"
)

// writeRead writes the pattern of (lba, gen) through s, reads it back into
// the same buffer and checks it.
func writeRead(ctx context.Context, s Submitter, buf []byte, addr, lba, gen uint64) error {
	fillPattern(buf, lba, gen)
	w := nvme.ReadWrite(nvme.OpWrite, 1, lba, 1, addr, 0)
	if _, err := s.Submit(ctx, &w); err != nil {
		return fmt.Errorf("write lba %d: %w", lba, err)
	}
	clear(buf)
	rd := nvme.ReadWrite(nvme.OpRead, 1, lba, 1, addr, 0)
	comp, err := s.Submit(ctx, &rd)
	if err != nil {
		return fmt.Errorf("read lba %d: %w", lba, err)
	}
	if !comp.Status.Success() {
		return fmt.Errorf("read lba %d: status %v without error", lba, comp.Status)
	}
	return checkPattern(buf, lba, gen)
}

type stressCase struct {
	goroutines, queues, depth, rounds int
	file, locked                      bool
}

func (c stressCase) String() string {
	kind := "vq"
	if c.locked {
		kind = "locked"
	}
	ns := "mem"
	if c.file {
		ns = "file"
	}
	return fmt.Sprintf("%s/%s/g%d-q%d-d%d", kind, ns, c.goroutines, c.queues, c.depth)
}

// runStress has every goroutine write and read back its own blocks, checking
// each read's bytes, then checks that every command completed exactly once.
func runStress(t *testing.T, c stressCase) {
	const blocksPerG = 4
	r := newRig(t, rigConfig{
		queues: c.queues, depth: c.depth, file: c.file, locked: c.locked,
		blocks: uint64(c.goroutines * blocksPerG), buffers: c.goroutines,
		timeout: 30 * time.Second,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	errc := make(chan error, 1)
	for g := range c.goroutines {
		wg.Go(func() {
			buf, addr := r.block(g)
			var s Submitter = r.mapper.Queue(uint64(g))
			if g%2 == 1 {
				s = r.mapper // round robin across queues
			}
			for j := range c.rounds {
				lba := uint64(g + (j%blocksPerG)*c.goroutines)
				if err := writeRead(ctx, s, buf, addr, lba, uint64(j)); err != nil {
					if failed.Add(1) == 1 {
						errc <- fmt.Errorf("goroutine %d round %d: %w", g, j, err)
						cancel()
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	want := uint64(2 * c.goroutines * c.rounds)
	var got Stats
	for _, s := range r.subs {
		var st Stats
		switch q := s.(type) {
		case *QueuePair:
			st = q.Stats()
		case *Locked:
			st = q.Stats()
		}
		got.Submitted += st.Submitted
		got.Completed += st.Completed
		got.Spurious += st.Spurious
		got.Timeouts += st.Timeouts
		got.SQDoorbells += st.SQDoorbells
		got.CQDoorbells += st.CQDoorbells
	}
	ts := r.target.Stats()
	if got.Submitted != want || got.Completed != want || ts.Completions != want || ts.Commands != want {
		t.Fatalf("commands: want %d submitted/completed, client %d/%d, target fetched %d posted %d", want, got.Submitted, got.Completed, ts.Commands, ts.Completions)
	}
	if got.Spurious != 0 || got.Timeouts != 0 || ts.Errors != 0 || ts.CQFullWaits != 0 {
		t.Fatalf("spurious %d timeouts %d target errors %d CQ-full waits %d", got.Spurious, got.Timeouts, ts.Errors, ts.CQFullWaits)
	}
	t.Logf("%d commands, %d SQ doorbells (%.1f cmds each), %d CQ doorbells", want, got.SQDoorbells,
		float64(want)/float64(got.SQDoorbells), got.CQDoorbells)
}

func TestStress(t *testing.T) {
	cases := []stressCase{
		{goroutines: 1, queues: 1, depth: 2, rounds: 5000},      // ticket and phase wrap every command
		{goroutines: 8, queues: 1, depth: 2, rounds: 2500},      // one CID: full queue all the time
		{goroutines: 64, queues: 1, depth: 4, rounds: 500},      // full queue, many waiters
		{goroutines: 256, queues: 4, depth: 16, rounds: 200},    //
		{goroutines: 1000, queues: 16, depth: 64, rounds: 50},   //
		{goroutines: 10000, queues: 64, depth: 1024, rounds: 5}, // 10 000 goroutines over 64 queues
		{goroutines: 100, queues: 2, depth: 8, rounds: 100, file: true},
		{goroutines: 64, queues: 2, depth: 8, rounds: 300, locked: true},
	}
	if stress() {
		cases = append(cases,
			stressCase{goroutines: 16, queues: 1, depth: 2, rounds: 50000},
			stressCase{goroutines: 10000, queues: 1, depth: 1024, rounds: 40},
			stressCase{goroutines: 10000, queues: 64, depth: 8, rounds: 40},
			stressCase{goroutines: 4096, queues: 32, depth: 128, rounds: 100},
			stressCase{goroutines: 2000, queues: 4, depth: 32, rounds: 50, file: true},
			stressCase{goroutines: 1000, queues: 8, depth: 16, rounds: 100, locked: true},
		)
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { runStress(t, c) })
	}
}

// TestStatusDelivered fails reads of one LBA with an unrecovered read error:
// those submitters get the status as an error, everyone else succeeds.
func TestStatusDelivered(t *testing.T) {
	const bad = 7
	hook := func(_ uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && c.SLBA() == bad {
			return nvme.Fault{Kind: nvme.FaultFail, Status: nvme.StatusUnrecoveredRead.WithDNR()}
		}
		return nvme.Fault{}
	}
	const G = 32
	r := newRig(t, rigConfig{queues: 2, depth: 4, blocks: G, buffers: G, faults: hook, timeout: 10 * time.Second})
	var wg sync.WaitGroup
	errs := make([]error, G)
	for g := range G {
		wg.Go(func() {
			buf, addr := r.block(g)
			for j := range 50 {
				if err := writeRead(context.Background(), r.mapper.Queue(uint64(g)), buf, addr, uint64(g), uint64(j)); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for g, err := range errs {
		if g != bad {
			if err != nil {
				t.Errorf("goroutine %d: %v", g, err)
			}
			continue
		}
		var se *nvme.StatusError
		if !errors.Is(err, nvme.ErrUnrecoveredRead) || !errors.As(err, &se) || se.SLBA != bad || se.Op != nvme.OpRead {
			t.Errorf("goroutine %d: got %v, want an unrecovered read error for lba %d", g, err, bad)
		}
		if errors.Is(err, ErrTimeout) {
			t.Errorf("status error matches ErrTimeout: %v", err)
		}
	}
}

// TestDroppedCommand drops one command: its submitter gets ErrTimeout, the
// others keep working meanwhile, and the queue works afterwards with the CID
// quarantined.
func TestDroppedCommand(t *testing.T) {
	const dropLBA = 3
	var dropped atomic.Bool
	hook := func(_ uint16, c *nvme.Command) nvme.Fault {
		if c.Opcode == nvme.OpRead && c.SLBA() == dropLBA && dropped.CompareAndSwap(false, true) {
			return nvme.Fault{Kind: nvme.FaultDrop}
		}
		return nvme.Fault{}
	}
	const G = 16
	r := newRig(t, rigConfig{queues: 1, depth: 8, blocks: G, buffers: G, faults: hook, timeout: 300 * time.Millisecond})
	q := r.qps[0]
	var wg sync.WaitGroup
	errs := make([]error, G)
	var others atomic.Int64
	start := time.Now()
	for g := range G {
		wg.Go(func() {
			buf, addr := r.block(g)
			for j := 0; ; j++ {
				if g != dropLBA && time.Since(start) > 600*time.Millisecond {
					return
				}
				if err := writeRead(context.Background(), q, buf, addr, uint64(g), uint64(j)); err != nil {
					errs[g] = err
					return
				}
				if g == dropLBA {
					t.Errorf("dropped command's submitter returned without error")
					return
				}
				others.Add(1)
			}
		})
	}
	wg.Wait()
	var we *WaitError
	if err := errs[dropLBA]; !errors.Is(err, ErrTimeout) || !errors.As(err, &we) || !we.Submitted || we.Stage != StageCompletion {
		t.Fatalf("dropped command: got %v, want a submitted ErrTimeout", err)
	}
	for g, err := range errs {
		if g != dropLBA && err != nil {
			t.Errorf("goroutine %d: %v", g, err)
		}
	}
	if others.Load() < 20 {
		t.Errorf("only %d write/read pairs by the other submitters", others.Load())
	}
	st := q.Stats()
	if st.Quarantined != 1 || st.Timeouts != 1 {
		t.Errorf("stats after drop: %+v; want 1 quarantined CID, 1 timeout", st)
	}
	// The queue still serves its remaining depth-2 CIDs, at full depth.
	var wg2 sync.WaitGroup
	for g := range G {
		wg2.Go(func() {
			buf, addr := r.block(g)
			for j := range 20 {
				if err := writeRead(context.Background(), q, buf, addr, uint64(g), uint64(1000+j)); err != nil {
					t.Errorf("after drop, goroutine %d: %v", g, err)
					return
				}
			}
		})
	}
	wg2.Wait()
}

// TestLateCompletion delays one command past the timeout: its submitter gets
// ErrTimeout, and when the completion finally arrives the CID is released.
func TestLateCompletion(t *testing.T) {
	var delayed atomic.Bool
	hook := func(_ uint16, c *nvme.Command) nvme.Fault {
		if c.SLBA() == 1 && delayed.CompareAndSwap(false, true) {
			return nvme.Fault{Delay: 400 * time.Millisecond}
		}
		return nvme.Fault{}
	}
	r := newRig(t, rigConfig{queues: 1, depth: 4, blocks: 4, buffers: 4, faults: hook, timeout: 100 * time.Millisecond})
	q := r.qps[0]
	buf, addr := r.block(1)
	err := writeRead(context.Background(), q, buf, addr, 1, 1)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("delayed command: got %v, want ErrTimeout", err)
	}
	if st := q.Stats(); st.Quarantined != 1 {
		t.Fatalf("quarantined = %d, want 1", st.Quarantined)
	}
	// Keep the queue busy until the late completion is harvested.
	buf0, addr0 := r.block(0)
	deadline := time.Now().Add(5 * time.Second)
	for j := 0; q.Stats().LateCompletions == 0; j++ {
		if time.Now().After(deadline) {
			t.Fatal("late completion never harvested")
		}
		if err := writeRead(context.Background(), q, buf0, addr0, 0, uint64(j)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := q.Stats(); st.Quarantined != 0 || st.LateCompletions != 1 {
		t.Fatalf("after late completion: %+v", st)
	}
	// All three CIDs are usable again: three concurrent commands.
	var wg sync.WaitGroup
	for g := 1; g < 4; g++ {
		wg.Go(func() {
			b, a := r.block(g)
			if err := writeRead(context.Background(), q, b, a, uint64(g), 99); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestContextCanceled checks that a canceled context ends a wait with the
// context's error, not ErrTimeout.
func TestContextCanceled(t *testing.T) {
	r := newRig(t, rigConfig{queues: 1, depth: 2, blocks: 2, buffers: 2,
		faults: func(uint16, *nvme.Command) nvme.Fault { return nvme.Fault{Kind: nvme.FaultDrop} }})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, addr := r.block(0)
	rd := nvme.ReadWrite(nvme.OpRead, 1, 0, 1, addr, 0)
	_, err := r.qps[0].Submit(ctx, &rd)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The only CID is quarantined: admission now times out, unsubmitted.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	_, err = r.qps[0].Submit(ctx2, &rd)
	var we *WaitError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &we) || we.Submitted || we.Stage != StageAdmission {
		t.Fatalf("got %v, want an admission timeout", err)
	}
}

// TestTurnAbandon exercises the rule for a ticket whose submitter gives up
// before its slot's turn: a Flush with its CID takes its place when the turn
// opens.
func TestTurnAbandon(t *testing.T) {
	mem, err := nvme.NewQueuePairMemory(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(mem, Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cid, err := q.c.acquire(ctx, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q.c.cmds[cid] = nvme.Command{Opcode: nvme.OpRead, NSID: 5, CID: cid}
	// Ticket 4 is slot 0's second turn; slot 0's first occupant (ticket 0)
	// has not been consumed, so the wait expires.
	err = q.waitTurn(ctx, time.Now().Add(20*time.Millisecond), 4, cid)
	var we *WaitError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &we) || we.Stage != StageTurn || we.Submitted {
		t.Fatalf("got %v, want a turn timeout", err)
	}
	if got := q.Stats().Quarantined; got != 1 {
		t.Fatalf("quarantined %d, want 1", got)
	}
	// Pretend tickets 0..3 were submitted and the controller consumed
	// ticket 0: opening slot 0's turn 1 must write the filler.
	q.r.store(SQTailOffset, 4)
	q.advanceSQHead(1)
	f, _ := nvme.DecodeCommand(mem.SQE(0))
	if f.Opcode != nvme.OpFlush || f.CID != cid || f.NSID != 5 {
		t.Fatalf("slot 0 holds %+v, want a Flush of nsid 5 with cid %d", f, cid)
	}
	if m := *q.r.marker(0); m != 5 {
		t.Fatalf("slot 0 marker %d, want 5 (ticket 4 + 1)", m)
	}
	if st := q.Stats(); st.Fillers != 1 || q.nAbandoned.Load() != 0 {
		t.Fatalf("stats %+v, %d abandoned", st, q.nAbandoned.Load())
	}
}

func TestBadInput(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	mem, _ := nvme.NewQueuePairMemory(1, 4)
	if _, err := New(mem, Options{Metadata: make([]uint64, 4)}); err == nil {
		t.Error("short metadata accepted")
	}
	q, err := New(mem, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Submit(context.Background(), nil); !errors.Is(err, ErrBadCommand) {
		t.Errorf("nil command: %v", err)
	}
	if _, err := NewMapper(); err == nil {
		t.Error("empty mapper accepted")
	}
}
