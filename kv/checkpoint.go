package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv/wal"
)

// A checkpoint moves the dirty bucket lines into the table object without
// ever leaving it half old, half new:
//
//  1. the images of every dirty line go to the log (recImages records),
//     then a recCommit record, and the log is synced;
//  2. the images are written in place and the store is flushed;
//  3. the catalog records the commit's LSN, live and used counts
//     (SetObjectMeta, durable);
//  4. the log is emptied.
//
// A crash before the commit record is durable leaves the object at the
// previous checkpoint and every logical record in the log: recovery replays
// them. A crash after it leaves a committed image set in the log: recovery
// writes the images again (idempotent) and finishes steps 3 and 4. Logical
// records are replayed only into host memory, never onto the object.

const imagesPerRecord = 1024

// checkpoint runs a checkpoint under the write lock.
func (c *core) checkpoint(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(true); err != nil {
		return err
	}
	return c.checkpointLocked(ctx)
}

func (c *core) checkpointLocked(ctx context.Context) error {
	if len(c.dirty) == 0 {
		// Nothing to move: make the log durable and, when it holds
		// only records already covered, empty it.
		if err := c.log.Commit(ctx, c.log.LastLSN(), true); err != nil {
			c.fail(err)
			return c.errorf("checkpoint", logErr(err))
		}
		return nil
	}
	order := sortedBuckets(c.dirty)
	L := c.geo.line
	for i := 0; i < len(order); i += imagesPerRecord {
		chunk := order[i:min(i+imagesPerRecord, len(order))]
		rec := make([]byte, 0, 4+len(chunk)*(8+L))
		rec = binary.LittleEndian.AppendUint32(rec, uint32(len(chunk)))
		for _, b := range chunk {
			line := c.dirty[b]
			c.geo.seal(line)
			rec = putU64(rec, b)
			rec = append(rec, line...)
		}
		if _, err := c.log.Append(recImages, rec); err != nil {
			c.fail(err)
			return c.errorf("checkpoint", logErr(err))
		}
	}
	commit := putU64(putU64(putU64(nil, c.nb), c.count), c.used)
	lsn, err := c.log.Append(recCommit, commit)
	if err == nil {
		err = c.log.Commit(ctx, lsn, true)
	}
	if err != nil {
		c.fail(err)
		return c.errorf("checkpoint", logErr(err))
	}
	if err := c.install(ctx, c.dirty, lsn, c.count, c.used); err != nil {
		// The images are safe in the log; reopening finishes the job.
		c.failed = fmt.Errorf("kv: table %q: checkpoint failed after its log commit; reopen to finish it: %w", c.name, err)
		return c.errorf("checkpoint", err)
	}
	c.dirty = map[uint64][]byte{}
	c.gen++
	c.addStats(func(s *Stats) { s.Checkpoints++ })
	return nil
}

// install writes committed images in place, flushes, records the
// checkpoint in the catalog and empties the log (steps 2-4).
func (c *core) install(ctx context.Context, images map[uint64][]byte, lsn, count, used uint64) error {
	L := uint64(c.geo.line)
	for _, b := range sortedBuckets(images) {
		if b >= c.nb {
			return fmt.Errorf("%w: image of bucket %d, table has %d", ErrCorrupt, b, c.nb)
		}
		if err := c.data.WriteAtContext(ctx, images[b], b*L); err != nil {
			return err
		}
	}
	if err := c.s.Flush(ctx); err != nil {
		return err
	}
	if err := c.s.SetObjectMeta(ctx, c.name, c.meta(lsn, count, used)); err != nil {
		return err
	}
	obj, err := c.s.Object(c.name)
	if err != nil {
		return err
	}
	c.obj = obj
	if err := c.log.Reset(ctx); err != nil {
		c.fail(err)
		return logErr(err)
	}
	return nil
}

// recover replays the log over the checkpointed object (see the comment at
// the top of this file). Called by openCore before the table is shared.
func (c *core) recover(ctx context.Context, ckpt uint64) error {
	type rec struct {
		lsn     uint64
		typ     uint8
		payload []byte
	}
	var recs []rec
	var err error
	c.log, err = c.openLog(ckpt, func(r wal.Record) error {
		recs = append(recs, rec{r.LSN, r.Type, append([]byte(nil), r.Payload...)})
		return nil
	})
	if err != nil {
		return err
	}
	c.addStats(func(s *Stats) { s.Replayed = uint64(len(recs)) })
	lastCommit := -1
	for i, r := range recs {
		if r.typ == recCommit {
			lastCommit = i
		}
	}
	L := c.geo.line
	if lastCommit >= 0 {
		images := map[uint64][]byte{}
		for _, r := range recs[:lastCommit] {
			if r.typ != recImages {
				continue
			}
			p := r.payload
			if len(p) < 4 {
				return fmt.Errorf("%w: image record %d: short", ErrCorrupt, r.lsn)
			}
			n := int(binary.LittleEndian.Uint32(p))
			p = p[4:]
			if len(p) != n*(8+L) {
				return fmt.Errorf("%w: image record %d: %d bytes for %d images of %d-byte lines", ErrCorrupt, r.lsn, len(p), n, L)
			}
			for k := range n {
				b := binary.LittleEndian.Uint64(p[k*(8+L):])
				line := p[k*(8+L)+8 : (k+1)*(8+L)]
				if _, err := c.geo.decodeBucket(line); err != nil {
					return fmt.Errorf("image of bucket %d in record %d: %w", b, r.lsn, err)
				}
				images[b] = line
			}
		}
		cm := recs[lastCommit]
		if len(cm.payload) != 24 {
			return fmt.Errorf("%w: commit record %d: %d bytes", ErrCorrupt, cm.lsn, len(cm.payload))
		}
		nb := binary.LittleEndian.Uint64(cm.payload)
		count, used := binary.LittleEndian.Uint64(cm.payload[8:]), binary.LittleEndian.Uint64(cm.payload[16:])
		if nb != c.nb {
			return fmt.Errorf("%w: commit record %d is for %d buckets, the table has %d", ErrCorrupt, cm.lsn, nb, c.nb)
		}
		c.logger.Info("kv: finishing an interrupted checkpoint", "table", c.name, "images", len(images), "lsn", cm.lsn)
		// Records after the commit (none are written before the log is
		// emptied, but be safe) are replayed below on top of the images.
		rest := recs[lastCommit+1:]
		if err := c.install(ctx, images, cm.lsn, count, used); err != nil {
			return fmt.Errorf("finish checkpoint %d: %w", cm.lsn, err)
		}
		c.count, c.used = count, used
		recs = rest
		if len(recs) > 0 {
			c.logger.Warn("kv: records after a checkpoint commit were dropped", "table", c.name, "records", len(recs))
			recs = nil
		}
	}
	for _, r := range recs {
		if r.typ != recBatch {
			continue // images of a checkpoint that never committed
		}
		ops, count, used, err := c.decodeBatch(r.payload)
		if err != nil {
			return fmt.Errorf("record %d: %w", r.lsn, err)
		}
		w := &lineSet{c: c, touched: map[uint64][]byte{}}
		gotCount, gotUsed, err := c.apply(ctx, w, ops, c.count, c.used)
		if err != nil {
			return fmt.Errorf("replay record %d: %w", r.lsn, err)
		}
		if gotCount != count || gotUsed != used {
			c.logger.Warn("kv: replay counts differ from the log's", "table", c.name, "lsn", r.lsn,
				"len", gotCount, "logged_len", count, "used", gotUsed, "logged_used", used)
		}
		for b, l := range w.touched {
			c.dirty[b] = l
		}
		c.count, c.used = gotCount, gotUsed
	}
	return nil
}

// decodeBatch decodes a recBatch payload. The decoder is fuzzed: any input
// gives ops or an error wrapping ErrCorrupt.
func (c *core) decodeBatch(p []byte) ([]op, uint64, uint64, error) {
	return decodeBatch(p, c.sch.ks, c.sch.vs)
}

func decodeBatch(p []byte, ks, vs int) ([]op, uint64, uint64, error) {
	if len(p) < 20 {
		return nil, 0, 0, fmt.Errorf("%w: batch record of %d bytes", ErrCorrupt, len(p))
	}
	le := binary.LittleEndian
	count, used, n := le.Uint64(p), le.Uint64(p[8:]), int(le.Uint32(p[16:]))
	p = p[20:]
	if n > len(p) {
		return nil, 0, 0, fmt.Errorf("%w: batch of %d ops in %d bytes", ErrCorrupt, n, len(p))
	}
	ops := make([]op, 0, n)
	for i := range n {
		if len(p) < 1+ks {
			return nil, 0, 0, fmt.Errorf("%w: op %d truncated", ErrCorrupt, i)
		}
		o := op{kind: p[0], key: p[1 : 1+ks]}
		p = p[1+ks:]
		switch o.kind {
		case opPut:
			if len(p) < vs {
				return nil, 0, 0, fmt.Errorf("%w: op %d value truncated", ErrCorrupt, i)
			}
			o.val = p[:vs]
			p = p[vs:]
		case opDelete:
		default:
			return nil, 0, 0, fmt.Errorf("%w: op %d has kind %d", ErrCorrupt, i, o.kind)
		}
		ops = append(ops, o)
	}
	if len(p) != 0 {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes after %d ops", ErrCorrupt, len(p), n)
	}
	return ops, count, used, nil
}

// rehash rebuilds the table into a new object sized for want entries,
// publishes it with SwapObjects and empties the log. Caller holds mu for
// writing.
func (c *core) rehash(ctx context.Context, want uint64) error {
	nb := bucketsFor(want, c.geo.slots, c.opts.MaxLoad*0.6)
	if nb < c.nb && c.count > 0 {
		nb = c.nb
	}
	tmp := c.name + rehashSuffix
	if _, err := c.s.Object(tmp); err == nil {
		if err := c.s.DeleteObject(ctx, tmp); err != nil {
			return c.errorf("rehash", err)
		}
	}
	// Everything logged so far is in the new object once it is live.
	last := c.log.LastLSN()
	obj, err := c.s.CreateObject(ctx, bam.ObjectSpec{Name: tmp, Kind: bam.KindTable, ElemType: BucketElemType,
		ElemSize: c.geo.line, Length: nb, Meta: c.meta(last, c.count, c.count)})
	if err != nil {
		return c.errorf("rehash", err)
	}
	dst, err := c.s.Data(obj)
	if err != nil {
		return c.errorf("rehash", err)
	}
	nc := &core{s: c.s, name: tmp, sch: c.sch, geo: c.geo, data: dst, obj: obj, nb: nb, dirty: map[uint64][]byte{}}
	w := &lineSet{c: nc, touched: map[uint64][]byte{}}
	L := uint64(c.geo.line)
	flushW := func() error {
		for _, b := range sortedBuckets(w.touched) {
			c.geo.seal(w.touched[b])
			if err := dst.WriteAtContext(ctx, w.touched[b], b*L); err != nil {
				return err
			}
		}
		w.touched = map[uint64][]byte{}
		return nil
	}
	const chunk = 256
	lines := make([]byte, chunk*L)
	var moved uint64
	for start := uint64(0); start < c.nb; start += chunk {
		n := min(chunk, c.nb-start)
		if err := c.data.ReadAtContext(ctx, lines[:n*L], start*L); err != nil {
			return c.errorf("rehash", err)
		}
		var ops []op
		for k := range n {
			line := lines[k*L : (k+1)*L]
			if d, ok := c.dirty[start+k]; ok {
				line = d
			}
			ctrl := c.geo.ctrl(line)
			for s, cb := range ctrl {
				if cb >= CtrlFull {
					ops = append(ops, op{kind: opPut, key: c.geo.key(line, s), val: c.geo.val(line, s)})
				}
			}
		}
		if _, _, err := nc.apply(ctx, w, ops, 0, 0); err != nil {
			return c.errorf("rehash", err)
		}
		moved += uint64(len(ops))
		if int64(len(w.touched))*int64(L) > c.opts.CheckpointBytes {
			if err := flushW(); err != nil {
				return c.errorf("rehash", err)
			}
		}
	}
	if err := flushW(); err != nil {
		return c.errorf("rehash", err)
	}
	if moved != c.count {
		return c.errorf("rehash", fmt.Errorf("%w: moved %d entries, the table counts %d", ErrCorrupt, moved, c.count))
	}
	if err := c.s.Flush(ctx); err != nil {
		return c.errorf("rehash", err)
	}
	if err := c.s.SwapObjects(ctx, c.name, tmp); err != nil {
		return c.errorf("rehash", err)
	}
	live, err := c.s.Object(c.name)
	if err != nil {
		return c.errorf("rehash", err)
	}
	old := c.nb
	if err := c.bind(live); err != nil {
		return c.errorf("rehash", err)
	}
	c.dirty = map[uint64][]byte{}
	c.used = c.count
	c.gen++
	c.addStats(func(s *Stats) { s.Rehashes++ })
	// From here the new object is live; a failure below leaves a table
	// that is correct but has a stale object or a long log, both cleaned
	// by the next open.
	var errs []error
	if err := c.s.DeleteObject(ctx, tmp); err != nil {
		errs = append(errs, err)
	}
	if err := c.log.Reset(ctx); err != nil {
		c.fail(err)
		errs = append(errs, logErr(err))
	}
	c.logger.Info("kv: rehashed", "table", c.name, "from_buckets", old, "to_buckets", nb, "entries", c.count)
	if err := errors.Join(errs...); err != nil {
		return c.errorf("rehash", err)
	}
	return nil
}

// checkpointLSN returns the LSN recorded by the last checkpoint.
func (c *core) checkpointLSN() uint64 {
	v, _ := c.obj.Meta(metaCkpt)
	n, _ := strconv.ParseUint(v, 10, 64)
	return n
}
