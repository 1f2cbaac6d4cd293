package nvme

import (
	"time"
)

// A Mirror keeps a second copy of one range of a queue pair's DMA space
// (a GPU host's staging buffer in pinned memory) where its host reads it
// faster (the GPU's own memory), and copies into it in large runs. A GPU
// reads pinned host memory with its own loads at only about 93 % of the
// link's copy rate, while its copy engines reach the link's rate only on
// copies of 64 KiB and more; the Target, which fetches a queue's Reads in
// order into consecutive staging slots, can join many of them into one
// copy.
//
// Protocol. A Read asks for it with MirrorHint in CDW3 (a reserved dword
// of the NVM command set's Read): the submitter accepts a completion
// delayed while the Target gathers a run, and can read the data from the
// mirror. When the Read's data lies in one contiguous range of the Mirror's
// Region, the Target appends the Read to the queue's open run: consecutive
// ranges, up to QueuePairMemory.MirrorRun bytes. A run ends when it is
// full, when the next Read does not continue it, when no Read joined it for
// MirrorIdle, or when it is MirrorMaxAge old. An ended run of at least
// MirrorMinRun bytes is copied (Mirror.Copy); once the copy is done, its
// Reads complete with MirroredDW0 in dword 0: the data is in the mirror at
// the same offset as in the Region, and also still in the Region. A
// shorter run, a run whose copy failed to start, and every Read without
// the hint complete with dword 0 = 0 as soon as they can: the data is in
// the Region only. A host that ignores dword 0 reads correct data either
// way.
type Mirror interface {
	// Region returns the DMA range [base, base+size) it mirrors.
	Region() (base, size uint64)
	// Copy starts copying bytes [off, off+n) of the Region into the
	// mirror. lane is the calling worker's index (0 ≤ lane <
	// TargetConfig.Workers), so an implementation can give each worker a
	// stream of its own. It must not block on the copy.
	Copy(lane int, off, n uint64) (MirrorCopy, error)
}

// MirrorCopy is a copy a Mirror started.
type MirrorCopy interface {
	// Done reports whether the copy has completed; an error means it
	// failed (the Target then completes the run's Reads from the Region).
	Done() (bool, error)
}

// Mirror protocol values.
const (
	// MirrorHint in a Read's CDW3 allows a mirrored completion.
	MirrorHint uint32 = 1
	// MirroredDW0 in a completion's dword 0 says the data is in the mirror.
	MirroredDW0 uint32 = 1
)

// Run policy. MirrorMinRun: a copy engine moves a run of 64 KiB at the
// link's rate; smaller runs are cheaper read from the Region. MirrorIdle:
// a run no Read has joined for this long is ended, because its Reads'
// submitters may be all the queue has and they wait for it (20 µs is four
// times the mean gap between Reads of one of 64 queues moving 50 GB/s of
// 4 KiB reads). MirrorMaxAge bounds the delay of a Read under a trickle.
const (
	MirrorMinRun       = 64 << 10
	DefaultMirrorRun   = 256 << 10
	MirrorIdle         = 20 * time.Microsecond
	MirrorMaxAge       = 200 * time.Microsecond
	mirrorFirstPoll    = 4 * time.Microsecond // a run's copy is not done sooner
	mirrorPollInterval = 2 * time.Microsecond
)

// mirrorRun is a queue's open run: Reads whose data lies at [off, end) of
// its Mirror's Region, in SQ order. Only the queue's worker touches it.
type mirrorRun struct {
	off, end    uint64
	cids        []uint16
	start, last time.Duration // since the worker's epoch
}

// mirrorFlight is a run whose copy is under way.
type mirrorFlight struct {
	q     *queue
	cp    MirrorCopy
	cids  []uint16
	start time.Duration // when the copy started
	poll  time.Duration // when to ask the copy next
}

// mirrorSpan returns where in q's Mirror Region the data of the Read just
// executed by w lies, if it is one contiguous range inside it.
func (w *worker) mirrorSpan(q *queue, length uint64) (off uint64, ok bool) {
	m := q.qp.Mirror
	if m == nil {
		return 0, false
	}
	segs := w.ectx.walker.segs
	if len(segs) != 1 || uint64(segs[0].Len) != length {
		return 0, false
	}
	base, size := m.Region()
	a := segs[0].Addr
	if a < base || a-base > size || length > size-(a-base) {
		return 0, false
	}
	return a - base, true
}

// complete posts the completion of a command the worker executed, or, for
// a successful Read that asked for it and whose data the queue's Mirror
// covers, adds it to the queue's run (see Mirror).
func (t *Target) complete(w *worker, q *queue, cmd *Command, dw0 uint32, st Status) {
	if !st.Success() || cmd.Opcode != OpRead || cmd.CDW3&MirrorHint == 0 || q.qp.Mirror == nil {
		t.post(q, cmd.CID, dw0, st)
		return
	}
	e, ok := (*t.nss.Load())[cmd.NSID]
	if !ok {
		t.post(q, cmd.CID, dw0, st)
		return
	}
	n := uint64(cmd.Blocks()) * e.lbaSize
	off, ok := w.mirrorSpan(q, n)
	if !ok {
		t.post(q, cmd.CID, dw0, st)
		return
	}
	r := &q.run
	limit := uint64(q.qp.MirrorRun)
	if limit == 0 {
		limit = DefaultMirrorRun
	}
	if len(r.cids) > 0 && (off != r.end || r.end-r.off+n > limit) {
		q.stats.runsBroken.Add(1)
		t.endRun(w, q)
	}
	now := w.now()
	if len(r.cids) == 0 {
		if k := len(w.spare); k > 0 && r.cids == nil {
			r.cids, w.spare = w.spare[k-1], w.spare[:k-1]
		}
		r.off, r.end, r.start = off, off, now
		q.inflight.Add(1) // the run, until its Reads are posted or dropped
		w.open = append(w.open, q)
	}
	r.end += n
	r.cids = append(r.cids, cmd.CID)
	r.last = now
	if r.end-r.off >= limit {
		q.stats.runsFull.Add(1)
		t.endRun(w, q)
	}
}

// endRun ends q's open run: a copy when it is long enough and starts,
// else its completions now.
func (t *Target) endRun(w *worker, q *queue) {
	r := &q.run
	if len(r.cids) == 0 {
		return
	}
	for i, o := range w.open {
		if o == q {
			w.open = append(w.open[:i], w.open[i+1:]...)
			break
		}
	}
	cids := r.cids
	r.cids = nil
	n := r.end - r.off
	now := w.now()
	q.stats.runGatherNs.Add(uint64(now - r.start))
	if q.state.Load() != qActive {
		q.inflight.Add(-1)
		return
	}
	if n >= MirrorMinRun {
		cp, err := q.qp.Mirror.Copy(w.id, r.off, n)
		if err == nil {
			q.stats.mirrorCopies.Add(1)
			w.flights = append(w.flights, mirrorFlight{q: q, cp: cp, cids: cids, start: now, poll: now + mirrorFirstPoll})
			return
		}
		t.mirrorFailed(q, err)
	} else {
		q.stats.runsShort.Add(1)
	}
	for _, cid := range cids {
		t.post(q, cid, 0, StatusSuccess)
	}
	q.inflight.Add(-1)
	w.recycle(cids)
}

// mirrorFailed logs a failed copy once per queue; its Reads are completed
// from the Region.
func (t *Target) mirrorFailed(q *queue, err error) {
	q.stats.mirrorFailures.Add(1)
	if q.mirrorWarned.CompareAndSwap(false, true) {
		t.log.Warn("nvme target: mirror copy failed; completing from the region", "qid", q.id, "err", err)
	}
}

// mirrorPoll ends runs gone idle or old and posts the completions of runs
// whose copies are done. It reports whether runs or copies remain, so the
// worker keeps polling instead of parking.
func (t *Target) mirrorPoll(w *worker) bool {
	if len(w.open) == 0 && len(w.flights) == 0 {
		return false
	}
	now := w.now()
	for i := 0; i < len(w.open); {
		q := w.open[i]
		r := &q.run
		switch {
		case q.state.Load() != qActive:
		case now-r.last >= MirrorIdle:
			q.stats.runsIdle.Add(1)
		case now-r.start >= MirrorMaxAge:
			q.stats.runsOld.Add(1)
		default:
			i++
			continue
		}
		t.endRun(w, q) // removes w.open[i]
	}
	kept := w.flights[:0]
	for _, f := range w.flights {
		if now < f.poll {
			kept = append(kept, f)
			continue
		}
		done, err := f.cp.Done()
		if !done && err == nil {
			f.poll = now + mirrorPollInterval
			kept = append(kept, f)
			continue
		}
		f.q.stats.runCopyNs.Add(uint64(now - f.start))
		if f.q.state.Load() == qActive {
			dw0 := MirroredDW0
			if err != nil {
				t.mirrorFailed(f.q, err)
				dw0 = 0
			} else {
				f.q.stats.mirrored.Add(uint64(len(f.cids)))
			}
			for _, cid := range f.cids {
				t.post(f.q, cid, dw0, StatusSuccess)
			}
		}
		f.q.inflight.Add(-1)
		w.recycle(f.cids)
	}
	clear(w.flights[len(kept):])
	w.flights = kept
	return len(w.open) > 0 || len(w.flights) > 0
}

// now is the time since the worker started, for run ages.
func (w *worker) now() time.Duration { return time.Since(w.epoch) }

// recycle keeps a run's CID slice for a later run.
func (w *worker) recycle(cids []uint16) {
	if len(w.spare) < 64 {
		w.spare = append(w.spare, cids[:0])
	}
}
