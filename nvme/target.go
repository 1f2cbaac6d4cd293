package nvme

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/internal/prefetch"
)

// TargetConfig configures a Target. The zero value is usable: every zero
// field takes the default named in its comment.
type TargetConfig struct {
	// Workers is the number of goroutines that poll queue pairs. Each queue
	// pair belongs to one worker, which fetches its commands in order.
	// Default: min(GOMAXPROCS, 4).
	Workers int
	// Executors bounds how many commands on blocking namespaces (files,
	// throttled or delayed commands) run at once. Commands on memory
	// namespaces, and file Reads served from the page cache (see
	// NoCachedReadInline), run on the worker that fetched them. Default 64.
	Executors int
	// PageSize is the memory page size PRPs are interpreted with (CC.MPS).
	// Default 4096.
	PageSize int
	// MaxTransfer is the largest data transfer of one command in bytes
	// (MDTS); a larger Read or Write completes with StatusInvalidField.
	// Default 1 MiB.
	MaxTransfer int
	// Spin is how long an idle worker keeps polling before it parks.
	// Default 50µs.
	Spin time.Duration
	// IdlePoll is the longest a parked worker sleeps before polling its
	// queues again without a Kick (GPU submitters never kick). Parking
	// starts at 20µs and doubles up to IdlePoll. Default 1ms.
	IdlePoll time.Duration
	// NoCachedReadInline sends every Read on a file namespace to an
	// executor. By default the worker first tries such a Read itself with
	// a read that cannot block (preadv2 RWF_NOWAIT: page-cache hits only)
	// and hands it to an executor only when that is refused. O_DIRECT
	// files always go to executors.
	NoCachedReadInline bool
	// Faults, when set, is consulted for every fetched command.
	Faults FaultHook
	// Logger receives host protocol errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *TargetConfig) normalize() error {
	if c.Workers <= 0 {
		c.Workers = min(runtime.GOMAXPROCS(0), 4)
	}
	if c.Executors <= 0 {
		c.Executors = 64
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if err := checkPageSize(c.PageSize); err != nil {
		return err
	}
	if c.MaxTransfer <= 0 {
		c.MaxTransfer = 1 << 20
	}
	if c.MaxTransfer < c.PageSize {
		return fmt.Errorf("nvme: MaxTransfer %d is below the page size %d", c.MaxTransfer, c.PageSize)
	}
	if c.Spin <= 0 {
		c.Spin = 50 * time.Microsecond
	}
	if c.IdlePoll <= 0 {
		c.IdlePoll = time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Errors of the Target.
var (
	// ErrQueueExists is returned by AddQueuePair for a queue ID in use.
	ErrQueueExists = errors.New("nvme: queue pair already added")
	// ErrNoQueue is returned for a queue ID the Target does not serve.
	ErrNoQueue = errors.New("nvme: no such queue pair")
	// ErrNamespaceExists is returned by AddNamespace for an NSID in use.
	ErrNamespaceExists = errors.New("nvme: namespace already added")
	// ErrHostProtocol wraps the error recorded when a host breaks the queue
	// protocol (a doorbell value outside the ring, for example).
	ErrHostProtocol = errors.New("nvme: host protocol error")
	// ErrStillRunning is returned, with the context's error, by Shutdown
	// when commands were still running in their namespaces as its context
	// ended.
	ErrStillRunning = errors.New("nvme: commands still running in their namespaces")
)

// Broadcast NSID: all namespaces (valid for Flush).
const nsidAll = 0xFFFFFFFF

type nsEntry struct {
	ns      Namespace
	lbaSize uint64
	blocks  uint64
	inline  bool
	nowait  nowaitReader // nil: never tried on the worker
	ahead   prefetcher   // nil: reads are not prefetched
}

// Queue states.
const (
	qActive int32 = iota
	qFailed
	qRemoved
)

// queue is the Target's view of one queue pair.
type queue struct {
	qp   *QueuePairMemory
	id   uint16
	mask uint32
	w    *worker

	state   atomic.Int32
	serving atomic.Bool // the owning worker is inside serve
	err     atomic.Pointer[error]

	sqHead    uint32        // owned by the worker
	sqHeadPub atomic.Uint32 // SQ head published for SQHD

	cqMu    sync.Mutex
	cqTail  uint32
	cqPhase bool

	inflight atomic.Int64 // commands handed to executors or delayed, and mirror runs
	stats    counters

	run          mirrorRun // owned by the worker; see Mirror
	mirrorWarned atomic.Bool
}

// counters are the statistics of one queue (or retired queues).
type counters struct {
	commands, fetches, completions, reads, writes, flushes atomic.Uint64
	other                                                  atomic.Uint64
	bytesRead, bytesWritten                                atomic.Uint64
	errors, dropped, delayed, cqFullWaits                  atomic.Uint64
	cachedReads                                            atomic.Uint64
	mirrored, mirrorCopies, mirrorFailures                 atomic.Uint64
	runsFull, runsIdle, runsOld, runsBroken, runsShort     atomic.Uint64
	runGatherNs, runCopyNs                                 atomic.Uint64
}

func (c *counters) addTo(s *TargetStats) {
	s.Commands += c.commands.Load()
	s.Fetches += c.fetches.Load()
	s.Completions += c.completions.Load()
	s.Reads += c.reads.Load()
	s.Writes += c.writes.Load()
	s.Flushes += c.flushes.Load()
	s.Other += c.other.Load()
	s.BytesRead += c.bytesRead.Load()
	s.BytesWritten += c.bytesWritten.Load()
	s.Errors += c.errors.Load()
	s.Dropped += c.dropped.Load()
	s.Delayed += c.delayed.Load()
	s.CQFullWaits += c.cqFullWaits.Load()
	s.CachedReads += c.cachedReads.Load()
	s.Mirrored += c.mirrored.Load()
	s.MirrorCopies += c.mirrorCopies.Load()
	s.MirrorFailures += c.mirrorFailures.Load()
	s.MirrorRuns.Full += c.runsFull.Load()
	s.MirrorRuns.Idle += c.runsIdle.Load()
	s.MirrorRuns.Old += c.runsOld.Load()
	s.MirrorRuns.Broken += c.runsBroken.Load()
	s.MirrorRuns.Short += c.runsShort.Load()
	s.MirrorRuns.Gathering += time.Duration(c.runGatherNs.Load())
	s.MirrorRuns.Copying += time.Duration(c.runCopyNs.Load())
}

func (c *counters) retire(from *counters) {
	c.commands.Add(from.commands.Load())
	c.fetches.Add(from.fetches.Load())
	c.completions.Add(from.completions.Load())
	c.reads.Add(from.reads.Load())
	c.writes.Add(from.writes.Load())
	c.flushes.Add(from.flushes.Load())
	c.other.Add(from.other.Load())
	c.bytesRead.Add(from.bytesRead.Load())
	c.bytesWritten.Add(from.bytesWritten.Load())
	c.errors.Add(from.errors.Load())
	c.dropped.Add(from.dropped.Load())
	c.delayed.Add(from.delayed.Load())
	c.cqFullWaits.Add(from.cqFullWaits.Load())
	c.cachedReads.Add(from.cachedReads.Load())
	c.mirrored.Add(from.mirrored.Load())
	c.mirrorCopies.Add(from.mirrorCopies.Load())
	c.mirrorFailures.Add(from.mirrorFailures.Load())
	c.runsFull.Add(from.runsFull.Load())
	c.runsIdle.Add(from.runsIdle.Load())
	c.runsOld.Add(from.runsOld.Load())
	c.runsBroken.Add(from.runsBroken.Load())
	c.runsShort.Add(from.runsShort.Load())
	c.runGatherNs.Add(from.runGatherNs.Load())
	c.runCopyNs.Add(from.runCopyNs.Load())
}

// TargetStats counts what a Target has done since it was made.
type TargetStats struct {
	Commands     uint64 // commands fetched
	Fetches      uint64 // reads of an SQ tail doorbell that found commands: Commands/Fetches is how many one brings
	Completions  uint64 // completions posted
	Reads        uint64 // successful Reads
	Writes       uint64 // successful Writes
	Flushes      uint64 // successful Flushes
	Other        uint64 // other successful commands (Write Zeroes, DSM)
	BytesRead    uint64 // bytes moved from namespaces to the host
	BytesWritten uint64 // bytes moved from the host to namespaces
	Errors       uint64 // completions with a non-success status
	Dropped      uint64 // commands dropped by a fault hook
	Delayed      uint64 // commands delayed by a fault hook
	CQFullWaits  uint64 // times a completion waited for CQ space
	QueueErrors  uint64 // queue pairs failed by a host protocol error
	CachedReads  uint64 // Reads of file namespaces served on the worker from the page cache

	Mirrored       uint64 // Reads completed with their data in a Mirror (MirroredDW0)
	MirrorCopies   uint64 // runs copied into a Mirror
	MirrorFailures uint64 // mirror copies that failed to start or finish
	MirrorRuns     MirrorRunStats
}

// MirrorRunStats says how mirror runs ended (see Mirror) and where their
// Reads waited.
type MirrorRunStats struct {
	Full, Idle, Old, Broken uint64        // ended full, idle, at MirrorMaxAge, or by a Read that did not continue them
	Short                   uint64        // of those, too short to copy
	Gathering               time.Duration // summed over runs: first Read to the run's end
	Copying                 time.Duration // summed over copied runs: copy start until seen done
}

type job struct {
	q   *queue
	cmd Command
}

// Target is a software NVMe controller serving I/O queue pairs in memory.
// See the package documentation for its protocol, idle policy and
// invariants.
type Target struct {
	cfg TargetConfig
	dma *DMASpace
	log *slog.Logger

	mu      sync.Mutex // serialises configuration changes
	nss     atomic.Pointer[map[uint32]*nsEntry]
	ahead   atomic.Bool // some namespace was added with a prefetcher (see prefetch)
	queues  atomic.Pointer[map[uint16]*queue]
	workers []*worker
	faults  atomic.Pointer[FaultHook]
	jobs    chan job

	ctx     context.Context
	cancel  context.CancelFunc
	started atomic.Bool
	closed  atomic.Bool
	wg      sync.WaitGroup
	done    chan struct{} // closed once every goroutine has returned after Close

	retired     counters
	queueErrors atomic.Uint64
	// removed queues whose commands were still running when
	// RemoveQueuePair gave up waiting (see Stragglers); guarded by mu.
	stragglers []*queue
}

// NewTarget returns a Target that moves data through dma. It serves nothing
// until Start.
func NewTarget(cfg TargetConfig, dma *DMASpace) (*Target, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if dma == nil {
		return nil, fmt.Errorf("nvme: NewTarget: nil DMASpace")
	}
	t := &Target{cfg: cfg, dma: dma, log: cfg.Logger, jobs: make(chan job, cfg.Executors), done: make(chan struct{})}
	t.nss.Store(&map[uint32]*nsEntry{})
	t.queues.Store(&map[uint16]*queue{})
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for i := 0; i < cfg.Workers; i++ {
		w := &worker{t: t, id: i, wake: make(chan struct{}, 1), epoch: time.Now()}
		w.ectx.walker.pageSize = cfg.PageSize
		w.queues.Store(&[]*queue{})
		t.workers = append(t.workers, w)
	}
	if cfg.Faults != nil {
		t.SetFaultHook(cfg.Faults)
	}
	return t, nil
}

// Config returns the configuration with defaults filled in.
func (t *Target) Config() TargetConfig { return t.cfg }

// DMA returns the Target's DMA address space.
func (t *Target) DMA() *DMASpace { return t.dma }

// SetFaultHook replaces the fault hook (nil removes it). It applies to
// commands fetched after the call.
func (t *Target) SetFaultHook(h FaultHook) {
	if h == nil {
		t.faults.Store(nil)
		return
	}
	t.faults.Store(&h)
}

// AddNamespace attaches ns as nsid (1..0xFFFFFFFE). The Target does not own
// ns: Close it after the Target.
func (t *Target) AddNamespace(nsid uint32, ns Namespace) error {
	if nsid == 0 || nsid == nsidAll {
		return fmt.Errorf("nvme: NSID %#x is reserved", nsid)
	}
	if ns == nil {
		return fmt.Errorf("nvme: namespace %d is nil", nsid)
	}
	if err := checkLBASize(ns.LBASize()); err != nil {
		return fmt.Errorf("nvme: namespace %d: %w", nsid, err)
	}
	e := &nsEntry{ns: ns, lbaSize: uint64(ns.LBASize()), blocks: ns.Blocks()}
	if in, ok := ns.(interface{ inlineIO() bool }); ok {
		e.inline = in.inlineIO()
	}
	// Only a FileNamespace itself: a type embedding one to change ReadAt
	// (added latency, say) must not have its reads bypassed.
	if fn, ok := ns.(*FileNamespace); ok && !t.cfg.NoCachedReadInline {
		e.nowait = fn
		e.ahead = fn
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.nss.Load()
	if _, ok := old[nsid]; ok {
		return fmt.Errorf("%w: %d", ErrNamespaceExists, nsid)
	}
	next := make(map[uint32]*nsEntry, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[nsid] = e
	t.nss.Store(&next)
	if e.ahead != nil {
		t.ahead.Store(true)
	}
	return nil
}

// RemoveNamespace detaches nsid. Commands already running on it finish;
// later ones complete with StatusInvalidNamespace.
func (t *Target) RemoveNamespace(nsid uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.nss.Load()
	if _, ok := old[nsid]; !ok {
		return fmt.Errorf("nvme: remove namespace %d: not attached", nsid)
	}
	next := make(map[uint32]*nsEntry, len(old))
	for k, v := range old {
		if k != nsid {
			next[k] = v
		}
	}
	t.nss.Store(&next)
	return nil
}

// AddQueuePair starts serving q (before or after Start). The Target's
// internal SQ head and CQ tail start at 0 with phase 1, so the rings must be
// fresh: doorbells 0 and the CQ zeroed.
func (t *Target) AddQueuePair(q *QueuePairMemory) error {
	if q == nil {
		return fmt.Errorf("nvme: AddQueuePair: nil queue pair")
	}
	if err := q.Validate(); err != nil {
		return err
	}
	if t.closed.Load() {
		return ErrClosed
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.queues.Load()
	if _, ok := old[q.ID]; ok {
		return fmt.Errorf("%w: %d", ErrQueueExists, q.ID)
	}
	// The least loaded worker takes the queue.
	w := t.workers[0]
	for _, c := range t.workers[1:] {
		if len(*c.queues.Load()) < len(*w.queues.Load()) {
			w = c
		}
	}
	qq := &queue{qp: q, id: q.ID, mask: q.Depth - 1, w: w, cqPhase: true}
	next := make(map[uint16]*queue, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[q.ID] = qq
	wl := append(append([]*queue(nil), *w.queues.Load()...), qq)
	w.queues.Store(&wl)
	t.queues.Store(&next)
	w.kick()
	return nil
}

// RemoveQueuePair stops serving queue qid. It waits, bounded by ctx, until
// the worker has left the queue and commands handed to executors have
// completed; on expiry those completions are discarded and the error is
// returned. Dropped commands are forgotten.
func (t *Target) RemoveQueuePair(ctx context.Context, qid uint16) error {
	t.mu.Lock()
	old := *t.queues.Load()
	q, ok := old[qid]
	if !ok {
		t.mu.Unlock()
		return fmt.Errorf("%w: %d", ErrNoQueue, qid)
	}
	next := make(map[uint16]*queue, len(old))
	for k, v := range old {
		if k != qid {
			next[k] = v
		}
	}
	var wl []*queue
	for _, c := range *q.w.queues.Load() {
		if c != q {
			wl = append(wl, c)
		}
	}
	q.w.queues.Store(&wl)
	t.queues.Store(&next)
	t.mu.Unlock()

	q.state.Store(qRemoved)
	err := waitFor(ctx, func() bool { return !q.serving.Load() && q.inflight.Load() == 0 })
	t.retired.retire(&q.stats)
	if err != nil {
		t.mu.Lock()
		t.stragglers = append(t.stragglers, q)
		t.mu.Unlock()
		return fmt.Errorf("nvme: remove queue %d: %d commands in flight: %w", qid, q.inflight.Load(), err)
	}
	return nil
}

// Stragglers returns how many commands of queue pairs removed before they
// finished (RemoveQueuePair returned an error) are still running against
// their namespaces. Their completions are discarded, but their data still
// moves: a Write among them lands when it lands. A host that abandoned
// commands must not write the same blocks again, nor reuse the memory
// their PRPs named, until this is 0.
func (t *Target) Stragglers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	kept := t.stragglers[:0]
	for _, q := range t.stragglers {
		if c := q.inflight.Load(); c > 0 || q.serving.Load() {
			n += int(max(c, 1))
			kept = append(kept, q)
		}
	}
	clear(t.stragglers[len(kept):])
	t.stragglers = kept
	return n
}

// waitFor polls cond with a growing sleep until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	d := 10 * time.Microsecond
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		d = min(2*d, time.Millisecond)
	}
	return nil
}

// Start launches the workers and executors. They run until Close or until
// ctx ends.
func (t *Target) Start(ctx context.Context) error {
	if t.closed.Load() {
		return ErrClosed
	}
	if !t.started.CompareAndSwap(false, true) {
		return fmt.Errorf("nvme: target already started")
	}
	stop := context.AfterFunc(ctx, t.cancel)
	t.wg.Go(func() {
		<-t.ctx.Done()
		stop()
	})
	for i := 0; i < t.cfg.Executors; i++ {
		t.wg.Go(t.executor)
	}
	for _, w := range t.workers {
		t.wg.Go(w.run)
	}
	return nil
}

// Close stops the Target and waits for its goroutines: Shutdown with no
// bound. Completions still waiting for CQ space and delayed commands are
// discarded. Namespaces are not closed.
func (t *Target) Close() error {
	return t.Shutdown(context.Background())
}

// Shutdown stops the Target as Close does, waiting for its goroutines only
// until ctx ends. A command running in a namespace call that has not
// returned by then keeps its goroutine: Shutdown returns an error wrapping
// ErrStillRunning and ctx's error, and the goroutine ends when the call
// returns (Done). Until Done is closed such a command may still move data
// through the Target's DMASpace, so the memory registered there, and the
// queue pairs' memory, must stay allocated. Calls after the first wait
// again, each bounded by its own ctx.
func (t *Target) Shutdown(ctx context.Context) error {
	if t.closed.CompareAndSwap(false, true) {
		t.cancel()
		go func() {
			t.wg.Wait()
			close(t.done)
		}()
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %d after the Target stopped (%w)", ErrStillRunning, t.running(), ctx.Err())
	}
}

// Done returns a channel closed once the Target has stopped (Close or
// Shutdown) and every command it was running has returned from its
// namespace.
func (t *Target) Done() <-chan struct{} { return t.done }

// running counts the commands running against namespaces: those of the
// queue pairs served and of removed ones (Stragglers).
func (t *Target) running() int {
	n := t.Stragglers()
	for _, q := range *t.queues.Load() {
		n += int(q.inflight.Load())
	}
	return n
}

// Kick tells the Target that queue qid's SQ tail doorbell was rung, waking
// its worker if parked. Submitters that cannot call it (GPU threads) are
// still served: parked workers poll every TargetConfig.IdlePoll.
func (t *Target) Kick(qid uint16) {
	if q, ok := (*t.queues.Load())[qid]; ok {
		q.w.kick()
	}
}

// Rest tells the Target that no submitter will ring a doorbell before its
// next Kick: a worker with nothing to do parks at once instead of polling
// for TargetConfig.Spin. A host that launches GPU kernels calls it when a
// kernel has ended, so that the workers' polling does not take the cores
// the host's own work after the kernel needs. Commands already fetched are
// finished as usual, and a doorbell rung without a Kick is still found
// within TargetConfig.IdlePoll.
func (t *Target) Rest() {
	for _, w := range t.workers {
		w.resting.Store(true)
	}
}

// Err returns the host protocol error that stopped queue qid, nil while it
// is healthy, or an ErrNoQueue error for a queue the Target does not serve.
func (t *Target) Err(qid uint16) error {
	q, ok := (*t.queues.Load())[qid]
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoQueue, qid)
	}
	if p := q.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns the Target's counters, summed over all queue pairs.
func (t *Target) Stats() TargetStats {
	var s TargetStats
	t.retired.addTo(&s)
	for _, q := range *t.queues.Load() {
		q.stats.addTo(&s)
	}
	s.QueueErrors = t.queueErrors.Load()
	return s
}

// fail stops serving q after a host protocol error.
func (t *Target) fail(q *queue, format string, args ...any) {
	err := fmt.Errorf("%w: queue %d: %s", ErrHostProtocol, q.id, fmt.Sprintf(format, args...))
	if q.state.CompareAndSwap(qActive, qFailed) {
		q.err.Store(&err)
		t.queueErrors.Add(1)
		t.log.Error("nvme target: queue pair stopped", "qid", q.id, "err", err)
	}
}

// serve fetches every command between the queue's SQ head and the tail
// doorbell, in order, and dispatches each. Only q's worker calls it.
func (t *Target) serve(w *worker, q *queue) int {
	q.serving.Store(true)
	defer q.serving.Store(false)
	if q.state.Load() != qActive {
		return 0
	}
	tail := atomic.LoadUint32(q.qp.SQTail)
	if tail > q.mask {
		t.fail(q, "SQ tail doorbell %d outside a ring of %d entries", tail, q.qp.Depth)
		return 0
	}
	n := 0
	ahead := q.sqHead // the next command whose data to prefetch
	if !t.ahead.Load() {
		ahead = tail
	}
	for q.sqHead != tail && q.state.Load() == qActive {
		for ahead != tail && (ahead-q.sqHead)&q.mask < prefetchAhead {
			t.prefetch(q.qp.SQ[ahead*SQESize : (ahead+1)*SQESize])
			ahead = (ahead + 1) & q.mask
		}
		// Decode into the worker's scratch command: a local would escape
		// through the fault hook and cost an allocation per command.
		w.cmd, _ = DecodeCommand(q.qp.SQ[q.sqHead*SQESize : (q.sqHead+1)*SQESize])
		q.sqHead = (q.sqHead + 1) & q.mask
		q.sqHeadPub.Store(q.sqHead)
		q.stats.commands.Add(1)
		t.dispatch(w, q, &w.cmd)
		n++
	}
	if n > 0 {
		q.stats.fetches.Add(1)
	}
	return n
}

// prefetchAhead is how many commands ahead of the one it runs a worker
// starts loading the data of short Reads served from a mapping (prefetch):
// the source in the page cache and the destination. A read of a few
// hundred bytes at random from a large file otherwise waits in turn for a
// TLB walk and a few cache misses on both sides, most of its time on the
// worker; with the loads of the next commands under way they overlap. On
// A1 (H200 host, 512-byte reads of the amount columns) Q3–Q5 took 14–19 %
// less time, interleaved on one machine. Longer reads are left to the
// hardware prefetchers: 4 KiB reads from a 2 GiB file measured alike with
// and without.
const prefetchAhead = 4

// prefetchLines bounds the reads prefetch starts loading: at most this
// many cache lines.
const prefetchLines = 16

// prefetch starts loading the data of the command in sqe when it is a
// short Read that a worker will serve from a mapping. It only hints: it
// reads nothing that the command's execution does not check again.
func (t *Target) prefetch(sqe []byte) {
	if Opcode(sqe[0]) != OpRead {
		return
	}
	cmd, err := DecodeCommand(sqe)
	if err != nil {
		return
	}
	e, ok := (*t.nss.Load())[cmd.NSID]
	if !ok || e.ahead == nil {
		return
	}
	length := uint64(cmd.Blocks()) * e.lbaSize
	if length > prefetch.LineBytes*prefetchLines || !inRange(e, cmd.SLBA(), uint64(cmd.Blocks())) {
		return
	}
	e.ahead.prefetch(int64(cmd.SLBA()*e.lbaSize), int(length))
	page := uint64(t.cfg.PageSize)
	if b, ok := t.dma.Bytes(cmd.PRP1, int(min(length, page-cmd.PRP1%page))); ok {
		prefetch.Bytes(b, len(b), prefetchLines)
	}
}

// dispatch applies the fault hook and runs cmd inline or on an executor.
func (t *Target) dispatch(w *worker, q *queue, cmd *Command) {
	var f Fault
	if h := t.faults.Load(); h != nil {
		f = (*h)(q.id, cmd)
	}
	if f.Kind == FaultDrop {
		q.stats.dropped.Add(1)
		return
	}
	if f.Delay > 0 {
		q.stats.delayed.Add(1)
		c := *cmd
		t.wg.Go(func() {
			timer := time.NewTimer(f.Delay)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-t.ctx.Done():
				return
			}
			// A queue removed meanwhile (a host reset after a timeout)
			// may have its memory in use again: the command must not
			// touch it. A delayed command counts as in flight only from
			// here, so removing a queue does not wait out the delays of
			// commands that will never run: RemoveQueuePair stores the
			// state before it reads inflight, this goroutine adds to
			// inflight before it reads the state, so one of them sees
			// the other.
			q.inflight.Add(1)
			defer q.inflight.Add(-1)
			if q.state.Load() != qActive {
				return
			}
			if f.Kind == FaultFail {
				t.post(q, c.CID, 0, f.Status)
				return
			}
			ec := &execCtx{walker: prpWalker{pageSize: t.cfg.PageSize}}
			dw0, st := t.execute(ec, q, &c)
			t.post(q, c.CID, dw0, st)
		})
		return
	}
	if f.Kind == FaultFail {
		t.post(q, cmd.CID, 0, f.Status)
		return
	}
	e, ok := (*t.nss.Load())[cmd.NSID] // never holds nsidAll
	switch {
	case cmd.NSID != nsidAll && (!ok || e.inline):
		// Memory namespace, or a command that fails validation.
		dw0, st := t.execute(&w.ectx, q, cmd)
		t.complete(w, q, cmd, dw0, st)
		return
	case ok && e.nowait != nil && cmd.Opcode == OpRead && cmd.Fuse == 0 && cmd.PSDT == 0:
		// A Read the namespace may serve without blocking (page cache).
		if st, done := t.transfer(&w.ectx, q, e, cmd, true); done {
			q.stats.cachedReads.Add(1)
			t.complete(w, q, cmd, 0, st)
			return
		}
	}
	q.inflight.Add(1)
	select {
	case t.jobs <- job{q: q, cmd: *cmd}:
	case <-t.ctx.Done():
		q.inflight.Add(-1)
	}
}

func (t *Target) executor() {
	ec := &execCtx{walker: prpWalker{pageSize: t.cfg.PageSize}}
	for {
		select {
		case j := <-t.jobs:
			if j.q.state.Load() == qActive {
				dw0, st := t.execute(ec, j.q, &j.cmd)
				t.post(j.q, j.cmd.CID, dw0, st)
			}
			j.q.inflight.Add(-1)
		case <-t.ctx.Done():
			return
		}
	}
}

// post writes a completion for cid into q's CQ. Dwords 0-2 are written
// first and dword 3, which holds the phase tag, last with an atomic store,
// so a host that observes the new phase observes the whole entry. It never
// fills the ring: while (tail+1) mod depth equals the host's CQ head it
// waits, re-reading the doorbell, until space appears, the queue is removed
// or the Target closes.
func (t *Target) post(q *queue, cid uint16, dw0 uint32, st Status) {
	q.cqMu.Lock()
	defer q.cqMu.Unlock()
	depth := q.qp.Depth
	waited := false
	var spins int
	var sleep time.Duration
	var since time.Time
	for {
		if q.state.Load() != qActive || t.ctx.Err() != nil {
			return
		}
		head := atomic.LoadUint32(q.qp.CQHead)
		if head > q.mask {
			t.fail(q, "CQ head doorbell %d outside a ring of %d entries", head, depth)
			return
		}
		if !Full(head, q.cqTail, depth) {
			break
		}
		if !waited {
			waited = true
			since = time.Now()
			q.stats.cqFullWaits.Add(1)
		}
		// Back off: yield first, then sleep with a growing interval.
		if spins < 64 {
			spins++
			runtime.Gosched()
			continue
		}
		sleep = min(max(2*sleep, 5*time.Microsecond), 200*time.Microsecond)
		time.Sleep(sleep)
		if !since.IsZero() && time.Since(since) > 5*time.Second {
			t.log.Warn("nvme target: CQ full for a long time; host not consuming completions", "qid", q.id)
			since = time.Time{}
		}
	}
	slot := q.qp.CQ[q.cqTail*CQESize : (q.cqTail+1)*CQESize]
	le := binary.LittleEndian
	le.PutUint32(slot[0:], dw0)
	le.PutUint32(slot[4:], 0)
	le.PutUint32(slot[8:], q.sqHeadPub.Load()|uint32(q.id)<<16)
	e := Completion{CID: cid, Phase: q.cqPhase, Status: st}
	atomic.StoreUint32(q.qp.CQEDW3(q.cqTail), e.DW3())
	q.cqTail = (q.cqTail + 1) & q.mask
	if q.cqTail == 0 {
		q.cqPhase = !q.cqPhase
	}
	q.stats.completions.Add(1)
	if !st.Success() {
		q.stats.errors.Add(1)
	}
}

// worker polls the queue pairs assigned to it.
type worker struct {
	t        *Target
	id       int
	queues   atomic.Pointer[[]*queue]
	sleeping atomic.Bool
	resting  atomic.Bool // set by Rest, cleared by kick: park without spinning
	wake     chan struct{}
	ectx     execCtx
	cmd      Command // the command being dispatched; see serve

	// Mirror runs (see Mirror), owned by the worker: queues with an open
	// run, runs being copied, spare CID slices, and the start of run
	// ages.
	open    []*queue
	flights []mirrorFlight
	spare   [][]uint16
	epoch   time.Time
}

func (w *worker) kick() {
	w.resting.Store(false)
	if w.sleeping.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// idlePolls is how many times poll reads the doorbells before it yields.
const idlePolls = 256

// poll reads the worker's SQ doorbells until one has commands, at most
// idlePolls times, then yields once. Yielding on every pass instead
// (runtime.Gosched) makes each pass take the scheduler's global lock: with
// 16 idle workers that lock convoy took about a fifth of the process's CPU
// time in a profile of Q1 on the H200, and a worker queued behind it can
// come back to a rung doorbell late. The occasional yield still lets
// other goroutines run on this worker's thread without waiting for
// preemption.
func (w *worker) poll() {
	for range idlePolls {
		if w.pending() {
			return
		}
	}
	runtime.Gosched()
}

// pending reports whether any of the worker's queues has unfetched commands.
func (w *worker) pending() bool {
	for _, q := range *w.queues.Load() {
		if q.state.Load() == qActive && atomic.LoadUint32(q.qp.SQTail) != q.sqHead {
			return true
		}
	}
	return false
}

// run is the worker loop. Idle policy: after the last command, poll for
// Spin (see poll; not at all after Rest), then park on the wake channel with a
// timeout that starts at 20µs and doubles up to IdlePoll. A Kick or work
// found resets the policy. A parked worker costs one timer wake-up per
// IdlePoll.
func (w *worker) run() {
	t := w.t
	const minPark = 20 * time.Microsecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	spinning := false
	var idleSince time.Time
	park := minPark
	for t.ctx.Err() == nil {
		n := 0
		for _, q := range *w.queues.Load() {
			n += t.serve(w, q)
		}
		mirroring := t.mirrorPoll(w)
		if n > 0 {
			spinning = false
			park = minPark
			continue
		}
		if mirroring {
			// Runs wait for their end or their copy: poll, never park.
			spinning = false
			park = minPark
			w.poll()
			continue
		}
		if !spinning {
			spinning = true
			idleSince = time.Now()
		}
		rested := w.resting.Load()
		if time.Since(idleSince) < t.cfg.Spin && !rested {
			w.poll()
			continue
		}
		// Park. Setting sleeping before the final checks pairs with
		// Kick's store-doorbell-then-load-sleeping and with kick's
		// clear-resting-then-load-sleeping: one side sees the other. A
		// kick that ended a rest meanwhile means a kernel is starting:
		// spin for it instead.
		w.sleeping.Store(true)
		if w.pending() || (rested && !w.resting.Load()) {
			w.sleeping.Store(false)
			spinning = false
			continue
		}
		timer.Reset(park)
		select {
		case <-w.wake:
			spinning = false
			park = minPark
		case <-timer.C:
			park = min(2*park, t.cfg.IdlePoll)
		case <-t.ctx.Done():
		}
		timer.Stop()
		w.sleeping.Store(false)
	}
}
