package nvme

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file drives the Target the way the GPU drives it in host-proxied
// mode (kernels/include/bam/queue.cuh): many submitters per queue pair, a
// ticket per command whose SQ position is also its CID, tail markers and a
// tail lock whose holder rings the SQ doorbell for a batch, completions
// harvested in CQ order by whoever holds the head lock (who also rings the
// CQ head doorbell and opens turns from SQHD), no Kick after a doorbell, and
// up to Depth commands outstanding per queue. With completions in fetch
// order the turn rules keep the CQ from filling; with completions out of
// order (delayed commands) it does fill and the Target waits for the CQ head
// doorbell. Bursts start up to launchDelay after a Kick and are separated by
// pauses longer than the Target's Spin, so workers park between them and
// find the next burst only by their timeout poll. Every command must
// complete within a bound of its issue.

// CID record states of the GPU protocol (the device never parks).
const (
	gqFree uint64 = iota
	gqInFlight
	gqDone
	gqAbandoned
)

// gpuLikeQueue is the host-side imitation of bam::queue on one queue pair.
type gpuLikeQueue struct {
	qp    *QueuePairMemory
	depth uint64
	mask  uint64
	shift uint

	ticket   atomic.Uint64
	tailLock atomic.Uint32
	headLock atomic.Uint32
	sqTail   atomic.Uint64 // virtual SQ tail (moved by the tail-lock holder)
	sqHead   atomic.Uint64 // virtual SQ head (moved by the head-lock holder from SQHD)
	cqHead   atomic.Uint64 // virtual CQ head

	turns   []atomic.Uint64
	markers []atomic.Uint64
	state   []atomic.Uint64 // per CID = SQ position
	result  []atomic.Uint64 // status of the last completion per CID
	vHD     uint64          // SQHD of the last harvested entry as a virtual position (head-lock holder only)

	staging    []byte // one 4 KiB slot per SQ position
	stagingDMA uint64

	// slowHarvest, when set, makes every slowEvery-th harvest hold the head
	// lock for that long before reading the CQ (a harvester delayed by
	// PCIe round trips or descheduled), so the CQ fills up.
	slowHarvest time.Duration
	slowEvery   uint64
	harvests    atomic.Uint64

	// firstErr is the first CQE that broke the protocol: a CID not in
	// flight, an SQHD going back or past the tail, another SQ's ID.
	firstErr atomic.Pointer[string]
}

func newGPULikeQueue(tb testing.TB, tg *Target, id uint16, depth uint32) *gpuLikeQueue {
	tb.Helper()
	qp, err := NewQueuePairMemory(id, depth)
	if err != nil {
		tb.Fatal(err)
	}
	q := &gpuLikeQueue{
		qp:      qp,
		depth:   uint64(depth),
		mask:    uint64(depth - 1),
		turns:   make([]atomic.Uint64, depth),
		markers: make([]atomic.Uint64, depth),
		state:   make([]atomic.Uint64, depth),
		result:  make([]atomic.Uint64, depth),
		staging: alignedBuffer(int(depth)*4096, 4096),
	}
	for d := depth; d > 1; d >>= 1 {
		q.shift++
	}
	if q.stagingDMA, err = tg.DMA().RegisterHost(q.staging); err != nil {
		tb.Fatal(err)
	}
	if err := tg.AddQueuePair(qp); err != nil {
		tb.Fatal(err)
	}
	return q
}

func (q *gpuLikeQueue) protocolError(format string, args ...any) {
	s := fmt.Sprintf("queue %d: ", q.qp.ID) + fmt.Sprintf(format, args...)
	q.firstErr.CompareAndSwap(nil, &s)
}

// gpuPause is the device backoff: a few yields, then short sleeps.
func gpuPause(i int) {
	if i < 8 {
		runtime.Gosched()
		return
	}
	time.Sleep(time.Duration(min(i, 64)) * time.Microsecond)
}

// reserve takes a ticket and waits until its slot may be used: the slot's
// previous occupant consumed (turn), its CID retired, and the next slot's
// previous occupant consumed (at most Depth-1 entries in the SQ).
func (q *gpuLikeQueue) reserve(deadline time.Time) (uint64, bool) {
	t := q.ticket.Add(1) - 1
	pos, next := t&q.mask, t+1
	for i := 0; ; i++ {
		if q.turns[pos].Load() == t>>q.shift && q.state[pos].Load() == gqFree &&
			q.turns[next&q.mask].Load() >= next>>q.shift {
			break
		}
		if q.harvest() > 0 {
			continue
		}
		if i&7 == 7 && time.Now().After(deadline) {
			return t, false
		}
		gpuPause(i)
	}
	q.state[pos].Store(gqInFlight)
	return t, true
}

// issue writes ticket t's command (CID = position), sets its marker and
// moves the SQ tail over every marked slot if it gets the tail lock,
// ringing the doorbell once per batch. No Kick: GPU threads cannot.
func (q *gpuLikeQueue) issue(t uint64, cmd Command) {
	pos := t & q.mask
	cmd.CID = uint16(pos)
	cmd.Encode(q.qp.SQE(uint32(pos)))
	q.markers[pos].Store(t + 1)
	for {
		if !q.tailLock.CompareAndSwap(0, 1) {
			return
		}
		start := q.sqTail.Load()
		tail := start
		for q.markers[tail&q.mask].Load() == tail+1 {
			tail++
		}
		if tail != start {
			q.sqTail.Store(tail)
			q.qp.RingSQTail(uint32(tail & q.mask))
		}
		q.tailLock.Store(0)
		if q.markers[tail&q.mask].Load() != tail+1 {
			return
		}
	}
}

// harvest drains valid completions at the CQ head if the head lock is free,
// marks their CIDs done, rings the CQ head doorbell once and opens the turns
// of the SQ slots the last SQHD passed.
func (q *gpuLikeQueue) harvest() int {
	if q.headLock.Load() != 0 || !q.headLock.CompareAndSwap(0, 1) {
		return 0
	}
	defer q.headLock.Store(0)
	if q.slowHarvest > 0 && q.harvests.Add(1)%q.slowEvery == 0 {
		time.Sleep(q.slowHarvest)
	}
	head := q.cqHead.Load()
	var n uint64
	var lastSQHD uint64
	for n < q.mask {
		p := head + n
		slot := uint32(p & q.mask)
		dw3 := atomic.LoadUint32(q.qp.CQEDW3(slot))
		if (dw3>>16)&1 == 1 != ExpectedPhase(p, uint32(q.depth)) {
			break
		}
		dw2 := binary.LittleEndian.Uint32(q.qp.CQE(slot)[8:])
		if sqid := uint16(dw2 >> 16); sqid != q.qp.ID {
			q.protocolError("CQE at %d names SQ %d", p, sqid)
		}
		// SQHD never decreases along the CQ and never passes the tail.
		sqhd := uint64(dw2 & 0xFFFF)
		if v := q.vHD + (sqhd-q.vHD)&q.mask; v > q.sqTail.Load() {
			q.protocolError("SQHD %d at CQ position %d is behind the previous %d or beyond the tail", sqhd, p, q.vHD&q.mask)
		} else {
			q.vHD = v
		}
		lastSQHD = sqhd
		cid := uint64(dw3 & 0xFFFF)
		if cid >= q.depth {
			q.protocolError("CQE at %d names CID %d", p, cid)
		} else {
			q.result[cid].Store(uint64(dw3 >> 17))
			if !q.state[cid].CompareAndSwap(gqInFlight, gqDone) {
				if q.state[cid].CompareAndSwap(gqAbandoned, gqFree) {
					// Late completion of an abandoned command.
				} else {
					q.protocolError("CQE at %d for CID %d in state %d", p, cid, q.state[cid].Load())
				}
			}
		}
		n++
	}
	if n == 0 {
		return 0
	}
	q.cqHead.Store(head + n)
	q.qp.RingCQHead(uint32((head + n) & q.mask))
	sqhead, sqtail := q.sqHead.Load(), q.sqTail.Load()
	if delta := (lastSQHD - sqhead) & q.mask; delta != 0 && delta <= sqtail-sqhead {
		for v := sqhead; v < sqhead+delta; v++ {
			q.turns[v&q.mask].Store(v>>q.shift + 1)
		}
		q.sqHead.Store(sqhead + delta)
	}
	return int(n)
}

// wait polls t's CID record, helping to harvest, until its completion
// arrives or the deadline passes (the CID is then abandoned).
func (q *gpuLikeQueue) wait(t uint64, deadline time.Time) (Status, bool) {
	st := &q.state[t&q.mask]
	for i := 0; ; i++ {
		if st.Load() == gqDone {
			return Status(q.result[t&q.mask].Load()), true
		}
		if q.harvest() > 0 {
			continue
		}
		if i&7 == 7 && time.Now().After(deadline) {
			if st.CompareAndSwap(gqInFlight, gqAbandoned) {
				return 0, false
			}
		}
		gpuPause(i)
	}
}

// reset is what the engine does after a timeout or around a run of another
// protocol: the Target lets go of the queue pair, the rings, doorbells and
// metadata are zeroed, and the Target is handed the pair again. Only
// between bursts.
func (q *gpuLikeQueue) reset(ctx context.Context, tg *Target) error {
	if err := tg.RemoveQueuePair(ctx, q.qp.ID); err != nil {
		return err
	}
	clear(q.qp.SQ)
	clear(q.qp.CQ)
	q.qp.RingSQTail(0)
	q.qp.RingCQHead(0)
	for _, w := range []*atomic.Uint64{&q.ticket, &q.sqTail, &q.sqHead, &q.cqHead} {
		w.Store(0)
	}
	for i := range q.turns {
		q.turns[i].Store(0)
		q.markers[i].Store(0)
		q.state[i].Store(gqFree)
	}
	q.vHD = 0
	return tg.AddQueuePair(q.qp)
}

// retire frees t's slot and CID for ticket t + Depth.
func (q *gpuLikeQueue) retire(t uint64) { q.state[t&q.mask].Store(gqFree) }

// stallConfig shapes one run of TestTargetGPULikeNoStall.
type stallConfig struct {
	queues, workers int
	depth           uint32
	submitters      int // goroutines; each is bound to queue g mod queues
	executors       int // 0: memory namespace served inline; >0: through this many executors
	spin, idlePoll  time.Duration
	launchDelay     time.Duration // longest gap between the per-round Kick and a submitter's first command
	idle            time.Duration // pause between rounds, longer than spin
	perRound        int           // most commands per submitter per round
	slowHarvest     time.Duration // see gpuLikeQueue.slowHarvest (every 8th harvest)
	delay           time.Duration // every 5th command is delayed this long (off the worker)
	resetEvery      int           // reset every queue pair after this many rounds (0: never)
	rest            bool          // Rest after every round, as the GPU engine does after a kernel, and in odd rounds also right after the Kick
}

// TestTargetGPULikeNoStall checks that no command submitted by GPU-style
// clients (no Kick, CQ allowed to fill, bursts separated by idle pauses
// longer than Spin) waits longer than a bound for its completion.
func TestTargetGPULikeNoStall(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  stallConfig
	}{
		{"worker per queue", stallConfig{queues: 4, workers: 4, depth: 8, submitters: 64,
			spin: 2 * time.Millisecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 10 * time.Millisecond, idle: 3 * time.Millisecond, perRound: 4}},
		{"slow harvest", stallConfig{queues: 4, workers: 2, depth: 8, submitters: 64,
			spin: 2 * time.Millisecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 6 * time.Millisecond, idle: 3 * time.Millisecond, perRound: 6,
			slowHarvest: 300 * time.Microsecond}},
		// Delayed commands complete out of order, so the CQ fills and
		// completions wait for the head doorbell.
		{"out of order", stallConfig{queues: 3, workers: 2, depth: 4, submitters: 48,
			spin: 2 * time.Millisecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 6 * time.Millisecond, idle: 3 * time.Millisecond, perRound: 4,
			slowHarvest: 200 * time.Microsecond, delay: 300 * time.Microsecond}},
		{"shared workers", stallConfig{queues: 6, workers: 2, depth: 4, submitters: 48,
			spin: 500 * time.Microsecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 3 * time.Millisecond, idle: time.Millisecond, perRound: 6, resetEvery: 5}},
		// Rest parks the workers at once; in odd rounds it comes after
		// the Kick, so the round's doorbells are found only by polling.
		{"rest", stallConfig{queues: 4, workers: 4, depth: 8, submitters: 64,
			spin: 2 * time.Millisecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 3 * time.Millisecond, idle: 500 * time.Microsecond, perRound: 4, rest: true}},
		{"executors", stallConfig{queues: 3, workers: 2, depth: 16, submitters: 48, executors: 2,
			spin: time.Millisecond, idlePoll: 200 * time.Microsecond,
			launchDelay: 4 * time.Millisecond, idle: 2 * time.Millisecond, perRound: 4,
			slowHarvest: 200 * time.Microsecond}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) { testGPULikeNoStall(t, tc.cfg) })
	}
}

func testGPULikeNoStall(t *testing.T, cfg stallConfig) {
	const (
		lbaSize = 4096
		blocks  = 512
		bound   = 2 * time.Second // issue to completion
	)
	rounds := 40 * stressScale()
	if testing.Short() {
		rounds = 12
	}
	m, err := NewMemoryNamespace(lbaSize, blocks)
	if err != nil {
		t.Fatal(err)
	}
	for lba := uint64(0); lba < blocks; lba++ {
		binary.LittleEndian.PutUint64(m.Bytes()[lba*lbaSize:], lba)
		binary.LittleEndian.PutUint64(m.Bytes()[(lba+1)*lbaSize-8:], ^lba)
	}
	var ns Namespace = m
	if cfg.executors > 0 {
		ns = wrappedNamespace{m}
	}
	tcfg := TargetConfig{
		Workers: cfg.workers, Executors: cfg.executors, Spin: cfg.spin, IdlePoll: cfg.idlePoll,
		Logger: quietLogger,
	}
	if cfg.delay > 0 {
		tcfg.Faults = NewFaultInjector(1, &FaultRule{Every: 5, Fault: Fault{Delay: cfg.delay}}).Hook()
	}
	tg, err := NewTarget(tcfg, NewDMASpace())
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddNamespace(1, ns); err != nil {
		t.Fatal(err)
	}
	qs := make([]*gpuLikeQueue, cfg.queues)
	for i := range qs {
		qs[i] = newGPULikeQueue(t, tg, uint16(i+1), cfg.depth)
		qs[i].slowHarvest, qs[i].slowEvery = cfg.slowHarvest, 8
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tg.Close()

	var (
		mu       sync.Mutex
		failures []string
		worst    time.Duration
		done     atomic.Uint64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 8 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	note := func(d time.Duration) {
		mu.Lock()
		worst = max(worst, d)
		mu.Unlock()
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.queues), uint64(cfg.submitters)))
	for round := 0; round < rounds && len(failures) == 0; round++ {
		// A launch: the engine kicks every queue, then the kernel's first
		// doorbells come up to launchDelay later, and later blocks later
		// still.
		for _, q := range qs {
			tg.Kick(q.qp.ID)
		}
		if cfg.rest && round%2 == 1 {
			tg.Rest()
		}
		var wg sync.WaitGroup
		for g := 0; g < cfg.submitters; g++ {
			q := qs[g%len(qs)]
			delay := time.Duration(rng.Int64N(int64(cfg.launchDelay)))
			n := 1 + rng.IntN(cfg.perRound)
			seed := rng.Uint64()
			wg.Go(func() {
				time.Sleep(delay)
				r := rand.New(rand.NewPCG(seed, 0))
				for range n {
					lba := r.Uint64N(blocks)
					t0 := time.Now()
					tk, ok := q.reserve(t0.Add(3 * bound))
					if !ok {
						fail("queue %d ticket %d: no slot within %v", q.qp.ID, tk, 3*bound)
						return
					}
					slot := q.staging[(tk&q.mask)*lbaSize : (tk&q.mask+1)*lbaSize]
					issued := time.Now()
					q.issue(tk, ReadWrite(OpRead, 1, lba, 1, q.stagingDMA+(tk&q.mask)*lbaSize, 0))
					st, ok := q.wait(tk, issued.Add(bound))
					d := time.Since(issued)
					note(d)
					if !ok {
						fail("queue %d ticket %d (CID %d): no completion within %v", q.qp.ID, tk, tk&q.mask, bound)
						return
					}
					if !st.Success() {
						fail("queue %d ticket %d: status %v", q.qp.ID, tk, st)
					} else if got, last := binary.LittleEndian.Uint64(slot), binary.LittleEndian.Uint64(slot[lbaSize-8:]); got != lba || last != ^lba {
						fail("queue %d ticket %d: read LBA %d, got block %d/%d", q.qp.ID, tk, lba, got, ^last)
					}
					q.retire(tk)
					done.Add(1)
				}
			})
		}
		wg.Wait()
		if cfg.rest {
			tg.Rest()
		}
		if cfg.resetEvery > 0 && round%cfg.resetEvery == cfg.resetEvery-1 && len(failures) == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for _, q := range qs {
				if err := q.reset(ctx, tg); err != nil {
					fail("reset queue %d: %v", q.qp.ID, err)
				}
			}
			cancel()
		}
		// Idle long enough for every worker to park.
		time.Sleep(cfg.idle + time.Duration(rng.Int64N(int64(cfg.idle))))
	}
	s := tg.Stats()
	for _, q := range qs {
		if p := q.firstErr.Load(); p != nil {
			failures = append(failures, "protocol: "+*p)
		}
		if err := tg.Err(q.qp.ID); err != nil {
			failures = append(failures, err.Error())
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d commands completed, then:\n%s\ntarget: %s\nstats: %+v",
			done.Load(), strings.Join(failures, "\n"), describeTarget(tg), s)
	}
	if s.Completions != done.Load() || s.Commands != done.Load() {
		t.Fatalf("%d commands completed by the host; target fetched %d, posted %d", done.Load(), s.Commands, s.Completions)
	}
	if s.Fetches == 0 || s.Fetches > s.Commands {
		t.Fatalf("%d fetches for %d commands", s.Fetches, s.Commands)
	}
	t.Logf("%d commands in %d rounds, slowest %v, CQ-full waits %d", done.Load(), rounds, worst, s.CQFullWaits)
}

// describeTarget summarises what the Target's workers and queues are doing,
// for a failure message. Worker-owned fields are not read.
func describeTarget(tg *Target) string {
	var b strings.Builder
	for _, w := range tg.workers {
		fmt.Fprintf(&b, "worker %d sleeping=%v queues:", w.id, w.sleeping.Load())
		for _, q := range *w.queues.Load() {
			fmt.Fprintf(&b, " [%d sqhead %d sqtail-doorbell %d cqhead-doorbell %d serving %v inflight %d]",
				q.id, q.sqHeadPub.Load(), atomic.LoadUint32(q.qp.SQTail), atomic.LoadUint32(q.qp.CQHead),
				q.serving.Load(), q.inflight.Load())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestTargetRestParks checks that Rest parks workers that would otherwise
// poll for a whole Spin (an hour here).
func TestTargetRestParks(t *testing.T) {
	tg, err := NewTarget(TargetConfig{Workers: 3, Spin: time.Hour, Logger: quietLogger}, NewDMASpace())
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	parked := func() bool {
		for _, w := range tg.workers {
			if !w.sleeping.Load() {
				return false
			}
		}
		return true
	}
	time.Sleep(20 * time.Millisecond)
	if parked() {
		t.Fatal("workers parked within their Spin without a Rest")
	}
	tg.Rest()
	deadline := time.Now().Add(5 * time.Second)
	for !parked() {
		if time.Now().After(deadline) {
			t.Fatal("workers still polling 5s after Rest")
		}
		time.Sleep(time.Millisecond)
	}
}
