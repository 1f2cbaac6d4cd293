package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/kv/vlog"
)

// Value-log compaction of a BytesTable moves the live records out of every
// segment but a fresh head and deletes those segments:
//
//  1. rotate: under segMu held exclusively (no Put is between its append
//     and its index write), the value log starts a new head; every older
//     segment is sealed: nothing will be appended to it again;
//  2. move, a chunk of at most ChunkBytes at a time: read the live records
//     of the sealed segments (found by scanning the index), append them to
//     the head and sync it, then, under wmu, swap each key's pointer for
//     the new one if the index still holds the old one (a key written or
//     deleted meanwhile keeps its newer state; the copy is garbage);
//  3. sync the index's log: from here no durable index state refers to a
//     sealed segment;
//  4. scan the index again to check that nothing refers to a sealed
//     segment, then, under segMu held exclusively (no read is between its
//     look-up and its read), remove the sealed segments.
//
// A crash before step 3 leaves the sealed segments in place and every key
// pointing into a segment that exists: the old records, or copies that
// were synced before their pointers were logged. Open deletes segments
// that nothing refers to and cuts unreferenced tails, so a crash at any
// point leaves the old state, the new one, or a mix of the two for
// different keys, all with the same values; nothing acknowledged is lost.
// Copies whose pointer swap did not happen are dead bytes, reclaimed by
// the next compaction.

// Defaults of CompactOptions.
const DefaultCompactChunkBytes = 4 << 20

// CompactOptions configure Compact. The zero value is ready to use.
type CompactOptions struct {
	// MinDeadRatio skips the compaction (Result.Skipped) when
	// ValueLogStats().DeadRatio is below it. A log without dead bytes is
	// never compacted.
	MinDeadRatio float64
	// ChunkBytes bounds the record bytes read into memory, synced and
	// swapped at a time. Default DefaultCompactChunkBytes; a single record
	// larger than it is moved on its own.
	ChunkBytes int
	// Progress, when set, is called after every chunk, on the goroutine
	// running Compact.
	Progress func(CompactProgress)
}

// CompactProgress reports a running compaction.
type CompactProgress struct {
	Entries    uint64 `json:"entries"`     // records moved so far
	Bytes      uint64 `json:"bytes"`       // record bytes moved so far
	TotalBytes uint64 `json:"total_bytes"` // live bytes when the compaction started: an estimate of the whole
}

// CompactResult describes a finished compaction.
type CompactResult struct {
	Skipped        bool          `json:"skipped"`         // below MinDeadRatio, or nothing dead
	Entries        uint64        `json:"entries"`         // records moved
	MovedBytes     uint64        `json:"moved_bytes"`     // record bytes written into the new head
	RemovedBytes   uint64        `json:"removed_bytes"`   // size of the segment files deleted
	ReclaimedBytes uint64        `json:"reclaimed_bytes"` // RemovedBytes less MovedBytes and the new segment's header (0 if negative)
	Segments       int           `json:"segments"`        // segment files deleted
	Duration       time.Duration `json:"duration_ns"`
	Before         ValueLogStats `json:"before"`
	After          ValueLogStats `json:"after"`
}

// ValueLogStats describes a byte-value table's value log: how much of it
// the index refers to and how much a compaction would reclaim.
type ValueLogStats struct {
	Segments  int    `json:"segments"`
	FileBytes uint64 `json:"file_bytes"` // all segment files, headers included
	// LiveBytes is the size of the records the index refers to (headers
	// included). It is exact after Open and counts every write that
	// returned; a write that failed and left the table failed may be
	// off until the table is reopened.
	LiveBytes uint64 `json:"live_bytes"`
	// DeadBytes is the rest, less segment headers: overwritten and
	// deleted values, appends whose index write failed or is in flight,
	// copies of a compaction cut short.
	DeadBytes uint64 `json:"dead_bytes"`
	// DeadRatio is DeadBytes / (LiveBytes + DeadBytes), 0 for an empty log.
	DeadRatio      float64 `json:"dead_ratio"`
	Compactions    uint64  `json:"compactions"`     // finished since the table was opened
	ReclaimedBytes uint64  `json:"reclaimed_bytes"` // by them
}

// compactHook, when set (tests), is called at each step of a compaction
// with the step's name.
var compactHook func(step string)

func compactStep(step string) {
	if compactHook != nil {
		compactHook(step)
	}
}

// compaction is the state of a table's compactions: one at a time, and
// Close stops a running one.
type compaction struct {
	sem       chan struct{} // holds a token while a compaction runs
	mu        sync.Mutex
	cancel    context.CancelFunc // of the running compaction
	closing   bool
	runs      atomic.Uint64
	reclaimed atomic.Uint64
}

func (cp *compaction) init() { cp.sem = make(chan struct{}, 1) }

// begin waits for a running compaction to finish and returns the context
// of a new one and the function that ends it.
func (cp *compaction) begin(ctx context.Context) (context.Context, func(), error) {
	select {
	case cp.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.closing {
		<-cp.sem
		return nil, nil, ErrClosed
	}
	cctx, cancel := context.WithCancel(ctx)
	cp.cancel = cancel
	return cctx, func() {
		cp.mu.Lock()
		cp.cancel = nil
		cp.mu.Unlock()
		cancel()
		<-cp.sem
	}, nil
}

// stop cancels a running compaction, refuses new ones and waits (at most
// until ctx is done) for the running one to return.
func (cp *compaction) stop(ctx context.Context) {
	cp.mu.Lock()
	cp.closing = true
	if cp.cancel != nil {
		cp.cancel()
	}
	cp.mu.Unlock()
	select {
	case cp.sem <- struct{}{}:
		<-cp.sem
	case <-ctx.Done():
	}
}

// ValueLogStats describes the value log's live and dead bytes.
func (t *BytesTable[K]) ValueLogStats() ValueLogStats {
	segs := t.vl.Segments()
	st := ValueLogStats{Segments: len(segs), LiveBytes: t.live.Load(), Compactions: t.comp.runs.Load(), ReclaimedBytes: t.comp.reclaimed.Load()}
	var headers uint64
	for _, s := range segs {
		st.FileBytes += s.Bytes
		headers += min(s.Bytes, vlog.HeaderSize)
	}
	if used := st.FileBytes - headers; used > st.LiveBytes {
		st.DeadBytes = used - st.LiveBytes
	}
	if total := st.LiveBytes + st.DeadBytes; total > 0 {
		st.DeadRatio = float64(st.DeadBytes) / float64(total)
	}
	return st
}

// movable is one record to move: its key and the pointer the index held.
type movable struct {
	key []byte
	ptr vlog.Ptr
}

// Compact rewrites the live values into a fresh value-log segment, points
// the index at the copies and deletes the old segments, reclaiming the
// space of overwritten and deleted values. It runs beside reads and
// writes, which wait only while the value log rotates, while a chunk's
// pointers are swapped, and while old segments are deleted; a second
// Compact waits for the first. It needs free space for the live bytes of
// the old segments. A crash or an error at any point leaves every
// acknowledged value readable (see the comment at the top of compact.go);
// cancelling ctx or closing the table stops it at the next chunk. Memory
// is bounded by ChunkBytes.
func (t *BytesTable[K]) Compact(ctx context.Context, opts *CompactOptions) (CompactResult, error) {
	var o CompactOptions
	if opts != nil {
		o = *opts
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultCompactChunkBytes
	}
	res := CompactResult{Before: t.ValueLogStats()}
	if o.MinDeadRatio < 0 || o.MinDeadRatio > 1 {
		return res, t.c.errorf("compact", fmt.Errorf("%w: MinDeadRatio %g: want 0..1", ErrInvalid, o.MinDeadRatio))
	}
	cctx, end, err := t.comp.begin(ctx)
	if err != nil {
		return res, t.c.errorf("compact", err)
	}
	defer end()
	res.Before = t.ValueLogStats()
	if res.Before.DeadBytes == 0 || res.Before.DeadRatio < o.MinDeadRatio {
		res.Skipped, res.After = true, res.Before
		return res, nil
	}
	start := time.Now()
	if err := t.compact(cctx, &o, &res); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", ErrClosed, err) // stopped by Close
		}
		res.After = t.ValueLogStats()
		t.c.logger.Warn("kv: value-log compaction stopped", "table", t.c.name, "moved", res.Entries, "err", err)
		return res, t.c.errorf("compact", err)
	}
	res.Duration = time.Since(start)
	res.After = t.ValueLogStats()
	t.comp.runs.Add(1)
	t.comp.reclaimed.Add(res.ReclaimedBytes)
	t.c.logger.Info("kv: compacted the value log", "table", t.c.name, "entries", res.Entries, "moved_bytes", res.MovedBytes,
		"removed_bytes", res.RemovedBytes, "segments", res.Segments, "duration", res.Duration)
	return res, nil
}

func (t *BytesTable[K]) compact(ctx context.Context, o *CompactOptions, res *CompactResult) error {
	t.c.mu.RLock()
	err := t.c.usable(true)
	t.c.mu.RUnlock()
	if err != nil {
		return err
	}
	// 1. Rotate.
	t.segMu.Lock()
	sealedIDs, err := t.vl.Rotate()
	t.segMu.Unlock()
	if err != nil {
		return vlogErr(err)
	}
	compactStep("rotated")
	sealed := map[uint32]uint64{}
	for _, s := range t.vl.Segments() {
		sealed[s.ID] = s.Bytes
	}
	for id := range sealed {
		if !containsID(sealedIDs, id) {
			delete(sealed, id)
		}
	}
	t.c.logger.Info("kv: compacting the value log", "table", t.c.name, "segments", len(sealed), "live_bytes", res.Before.LiveBytes)

	// 2. Move the live records, a chunk at a time.
	var chunk []movable
	var chunkBytes int
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		n, err := t.moveChunk(ctx, chunk)
		if err != nil {
			return err
		}
		res.Entries += uint64(len(chunk))
		res.MovedBytes += n
		chunk, chunkBytes = chunk[:0], 0
		if o.Progress != nil {
			o.Progress(CompactProgress{Entries: res.Entries, Bytes: res.MovedBytes, TotalBytes: res.Before.LiveBytes})
		}
		return nil
	}
	if err := t.scanSealed(ctx, sealed, func(key []byte, p vlog.Ptr) error {
		chunk = append(chunk, movable{key: bytes.Clone(key), ptr: p})
		chunkBytes += int(p.Size())
		if chunkBytes >= o.ChunkBytes {
			return flush()
		}
		return nil
	}); err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}

	// 3. Make the swaps durable.
	if err := t.c.sync(ctx); err != nil {
		return err
	}
	compactStep("synced")

	// 4. Check, then remove the sealed segments.
	left := 0
	if err := t.scanSealed(ctx, sealed, func([]byte, vlog.Ptr) error { left++; return nil }); err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("%w: %d entries still refer to the old value-log segments; they are kept", ErrCorrupt, left)
	}
	compactStep("checked")
	ids := make([]uint32, 0, len(sealed))
	for id, n := range sealed {
		ids = append(ids, id)
		res.RemovedBytes += n
	}
	t.segMu.Lock()
	err = t.vl.Remove(ids...)
	t.segMu.Unlock()
	if err != nil {
		return vlogErr(err)
	}
	compactStep("removed")
	res.Segments = len(ids)
	if cost := res.MovedBytes + vlog.HeaderSize; res.RemovedBytes > cost {
		res.ReclaimedBytes = res.RemovedBytes - cost
	}
	return nil
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// maxScanRestarts bounds the restarts of an index scan cut short by a
// rehash (writers growing the table).
const maxScanRestarts = 8

// scanSealed calls fn for every entry whose pointer is into a sealed
// segment. fn runs outside the table's locks and may write. A scan that a
// rehash stops is started again: entries already moved no longer qualify.
func (t *BytesTable[K]) scanSealed(ctx context.Context, sealed map[uint32]uint64, fn func(key []byte, p vlog.Ptr) error) error {
	for attempt := 0; ; attempt++ {
		var ierr, ferr error
		for kb, pb := range t.c.all(ctx, &ierr) {
			p := vlog.DecodePtr(pb)
			if _, ok := sealed[p.Seg]; !ok {
				continue
			}
			if ferr = fn(kb, p); ferr != nil {
				break
			}
		}
		if ferr != nil {
			return ferr
		}
		if ierr == nil {
			return ctx.Err()
		}
		if !errors.Is(ierr, ErrConcurrentGrowth) || attempt >= maxScanRestarts {
			return ierr
		}
	}
}

// moveChunk copies a chunk's records into the head, syncs them and swaps
// the pointers of the keys that still refer to the originals. It returns
// the record bytes written.
func (t *BytesTable[K]) moveChunk(ctx context.Context, chunk []movable) (uint64, error) {
	recs := make([][]byte, len(chunk))
	var n uint64
	for i, m := range chunk {
		rec, err := t.vl.Read(m.ptr)
		if err != nil {
			return 0, vlogErr(err)
		}
		if len(rec) < len(m.key) || !bytes.Equal(rec[:len(m.key)], m.key) {
			return 0, vlogErr(&vlog.CorruptError{Path: vlog.SegmentPath(t.vl.Path(), m.ptr.Seg), Off: m.ptr.Off, Reason: "record holds another key"})
		}
		recs[i] = rec
		n += m.ptr.Size()
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ptrs, err := t.vl.Append(recs...)
	if err == nil {
		err = t.vl.Sync(ctx)
	}
	if err != nil {
		return 0, vlogErr(err)
	}
	compactStep("copied")

	ks := t.c.sch.ks
	keys := make([]byte, 0, len(chunk)*ks)
	for _, m := range chunk {
		keys = append(keys, m.key...)
	}
	cur := make([]byte, len(chunk)*vlog.PtrSize)
	found := make([]bool, len(chunk))
	nb := make([]byte, len(chunk)*vlog.PtrSize)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if err := t.c.getMany(ctx, keys, cur, found); err != nil {
		return 0, err
	}
	ops := make([]op, 0, len(chunk))
	for i, m := range chunk {
		if !found[i] || vlog.DecodePtr(cur[i*vlog.PtrSize:]) != m.ptr {
			continue // written or deleted since the scan: the copy is garbage
		}
		b := nb[i*vlog.PtrSize : (i+1)*vlog.PtrSize]
		ptrs[i].Put(b)
		ops = append(ops, op{kind: opPut, key: m.key, val: b})
	}
	// Same sizes: the live bytes do not change.
	if err := t.c.write(ctx, ops, false); err != nil {
		return 0, err
	}
	compactStep("swapped")
	return n, nil
}
