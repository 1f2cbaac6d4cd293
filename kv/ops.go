package kv

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

var linePool = sync.Pool{New: func() any { return new([]byte) }}

// readLine returns bucket b as of now: the dirty image, or the line on
// storage read into buf. The caller holds mu (read or write).
func (c *core) readLine(ctx context.Context, b uint64, buf []byte) ([]byte, error) {
	if l, ok := c.dirty[b]; ok {
		return l, nil
	}
	if err := c.data.ReadAtContext(ctx, buf[:c.geo.line], b*uint64(c.geo.line)); err != nil {
		return nil, err
	}
	return buf[:c.geo.line], nil
}

// lookup finds key; on success it copies the value into val (when not nil).
// The caller holds mu for reading.
func (c *core) lookup(ctx context.Context, key, val []byte, buf []byte) (bool, error) {
	h := hashKey(key)
	fp := fingerprint(h)
	mask := c.nb - 1
	b := h & mask
	probes := uint64(0)
	defer func() { c.addStats(func(s *Stats) { s.Gets++; s.Probes += probes }) }()
	for range c.nb {
		line, err := c.readLine(ctx, b, buf)
		if err != nil {
			return false, err
		}
		probes++
		s, _, hasEmpty := c.geo.probe(line, key, fp)
		if s >= 0 {
			if val != nil {
				copy(val, c.geo.val(line, s))
			}
			return true, nil
		}
		if hasEmpty {
			return false, nil
		}
		b = (b + 1) & mask
	}
	return false, nil
}

func (c *core) getLineBuf() (*[]byte, []byte) {
	p := linePool.Get().(*[]byte)
	if cap(*p) < c.geo.line {
		*p = make([]byte, c.geo.line)
	}
	return p, (*p)[:c.geo.line]
}

// get looks up one key.
func (c *core) get(ctx context.Context, key, val []byte) (bool, error) {
	p, buf := c.getLineBuf()
	defer linePool.Put(p)
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.usable(false); err != nil {
		return false, err
	}
	return c.lookup(ctx, key, val, buf)
}

// getMany looks up n keys (keys is n*ks bytes): vals receives n*vs bytes
// (zero for missing keys), found[i] says whether key i is present. Home
// buckets are read with one Gather; the rare keys that overflow into the
// next buckets continue one by one.
func (c *core) getMany(ctx context.Context, keys, vals []byte, found []bool) error {
	ks, vs := c.sch.ks, c.sch.vs
	n := len(found)
	if len(keys) != n*ks || len(vals) != n*vs {
		return fmt.Errorf("%w: %d keys, %d values, %d found flags", ErrInvalid, len(keys)/max(ks, 1), len(vals)/max(vs, 1), n)
	}
	if n == 0 {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.usable(false); err != nil {
		return err
	}
	mask := c.nb - 1
	hashes := make([]uint64, n)
	home := make(map[uint64]int, n) // bucket -> index into lines
	var idx []uint64
	for i := range n {
		h := hashKey(keys[i*ks : (i+1)*ks])
		hashes[i] = h
		b := h & mask
		if _, ok := c.dirty[b]; ok {
			continue
		}
		if _, ok := home[b]; !ok {
			home[b] = len(idx)
			idx = append(idx, b)
		}
	}
	L := c.geo.line
	lines := make([]byte, len(idx)*L)
	if len(idx) > 0 {
		if err := c.data.Gather(ctx, idx, lines); err != nil {
			return err
		}
	}
	var probes uint64
	p, buf := c.getLineBuf()
	defer linePool.Put(p)
	for i := range n {
		key := keys[i*ks : (i+1)*ks]
		val := vals[i*vs : (i+1)*vs]
		h := hashes[i]
		fp := fingerprint(h)
		b := h & mask
		var line []byte
		if l, ok := c.dirty[b]; ok {
			line = l
		} else {
			k := home[b]
			line = lines[k*L : (k+1)*L]
		}
		found[i] = false
		clear(val)
		for step := uint64(0); ; step++ {
			probes++
			s, _, hasEmpty := c.geo.probe(line, key, fp)
			if s >= 0 {
				copy(val, c.geo.val(line, s))
				found[i] = true
				break
			}
			if hasEmpty || step+1 >= c.nb {
				break
			}
			b = (b + 1) & mask
			var err error
			if line, err = c.readLine(ctx, b, buf); err != nil {
				return err
			}
		}
	}
	c.addStats(func(s *Stats) { s.Gets += uint64(n); s.Probes += probes })
	return nil
}

// op is one logical write.
type op struct {
	kind byte
	key  []byte
	val  []byte
}

// lineSet is the working set of one write batch: bucket images copied on
// first touch from the dirty set or storage, installed only when the whole
// batch succeeded.
type lineSet struct {
	c       *core
	touched map[uint64][]byte
}

func (w *lineSet) line(ctx context.Context, b uint64) ([]byte, error) {
	if l, ok := w.touched[b]; ok {
		return l, nil
	}
	c := w.c
	l := make([]byte, c.geo.line)
	if d, ok := c.dirty[b]; ok {
		copy(l, d)
	} else {
		if err := c.data.ReadAtContext(ctx, l, b*uint64(c.geo.line)); err != nil {
			return nil, err
		}
		if _, err := c.geo.decodeBucket(l); err != nil {
			return nil, fmt.Errorf("bucket %d: %w", b, err)
		}
		if binary.LittleEndian.Uint16(l) == 0 {
			c.geo.initBucket(l)
		}
		binary.LittleEndian.PutUint32(l[12:], 0) // checksum is recomputed at the next checkpoint
	}
	w.touched[b] = l
	return l, nil
}

// apply performs ops on the working set and returns the live and used
// counts after them. The caller holds mu for writing.
func (c *core) apply(ctx context.Context, w *lineSet, ops []op, count, used uint64) (uint64, uint64, error) {
	mask := c.nb - 1
	g := &c.geo
	for _, o := range ops {
		h := hashKey(o.key)
		fp := fingerprint(h)
		b := h & mask
		freeB, freeS := uint64(0), -1
		found := false
		for step := uint64(0); step < c.nb && !found; step++ {
			line, err := w.line(ctx, b)
			if err != nil {
				return 0, 0, err
			}
			s, free, hasEmpty := g.probe(line, o.key, fp)
			if s >= 0 {
				found = true
				if o.kind == opPut {
					copy(g.val(line, s), o.val)
					break
				}
				live, u := int(binary.LittleEndian.Uint16(line[4:])), int(binary.LittleEndian.Uint16(line[6:]))
				g.ctrl(line)[s] = CtrlTombstone
				clear(g.key(line, s))
				clear(g.val(line, s))
				g.setCounts(line, live-1, u)
				count--
				break
			}
			if free >= 0 && freeS < 0 {
				freeB, freeS = b, free
			}
			if hasEmpty {
				break // the key is not in a later bucket
			}
			b = (b + 1) & mask
		}
		if found || o.kind == opDelete {
			continue
		}
		if freeS < 0 {
			return 0, 0, fmt.Errorf("%w: no free slot in %d buckets", ErrNoSpace, c.nb)
		}
		line, err := w.line(ctx, freeB)
		if err != nil {
			return 0, 0, err
		}
		live, u := int(binary.LittleEndian.Uint16(line[4:])), int(binary.LittleEndian.Uint16(line[6:]))
		if g.ctrl(line)[freeS] == CtrlEmpty {
			u++
			used++
		}
		g.ctrl(line)[freeS] = fp
		copy(g.key(line, freeS), o.key)
		copy(g.val(line, freeS), o.val)
		g.setCounts(line, live+1, u)
		count++
	}
	return count, used, nil
}

// write logs and applies a batch of operations atomically: after a crash
// either all of them or none are visible. With durable (or
// Options.SyncWrites) it returns after the log record is synced.
func (c *core) write(ctx context.Context, ops []op, durable bool) error {
	if len(ops) == 0 {
		return nil
	}
	durable = durable || c.opts.SyncWrites
	// Big batches go in pieces of at most ~16 MiB of log each; each piece
	// is atomic on its own.
	per := max(1, (16<<20)/(1+c.sch.ks+c.sch.vs))
	for len(ops) > 0 {
		n := min(len(ops), per)
		if err := c.writeAtomic(ctx, ops[:n], durable); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

func (c *core) writeAtomic(ctx context.Context, ops []op, durable bool) error {
	puts := uint64(0)
	for _, o := range ops {
		if o.kind == opPut {
			puts++
		}
	}
	c.mu.Lock()
	if err := c.usable(true); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.ensureRoom(ctx, ops, puts); err != nil {
		c.mu.Unlock()
		return err
	}
	w := &lineSet{c: c, touched: map[uint64][]byte{}}
	count, used, err := c.apply(ctx, w, ops, c.count, c.used)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	rec := make([]byte, 0, 20+len(ops)*(1+c.sch.ks+c.sch.vs))
	rec = putU64(rec, count)
	rec = putU64(rec, used)
	rec = binary.LittleEndian.AppendUint32(rec, uint32(len(ops)))
	for _, o := range ops {
		rec = append(rec, o.kind)
		rec = append(rec, o.key...)
		if o.kind == opPut {
			rec = append(rec, o.val...)
		}
	}
	lsn, err := c.log.Append(recBatch, rec)
	if err != nil {
		c.fail(err)
		c.mu.Unlock()
		return logErr(err)
	}
	for b, l := range w.touched {
		c.dirty[b] = l
	}
	c.count, c.used = count, used
	dirtyBytes := int64(len(c.dirty)) * int64(c.geo.line)
	c.mu.Unlock()
	c.addStats(func(s *Stats) {
		for _, o := range ops {
			if o.kind == opPut {
				s.Puts++
			} else {
				s.Deletes++
			}
		}
	})

	if durable || c.log.Buffered() > 1<<20 {
		if err := c.log.Commit(ctx, lsn, durable); err != nil {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return logErr(err)
		}
	}
	if dirtyBytes > c.opts.CheckpointBytes || c.log.Size() > c.opts.LogBytes {
		if err := c.checkpoint(ctx); err != nil {
			return err
		}
	}
	return nil
}

// fail marks the table failed after a log failure. Caller holds mu.
func (c *core) fail(err error) {
	if c.failed == nil {
		c.failed = fmt.Errorf("kv: table %q: log %s failed; writes are refused until the table is reopened: %w", c.name, c.logPath(), logErr(err))
	}
}

// ensureRoom rehashes into a larger table when ops could push the used
// slots past MaxLoad. Caller holds mu for writing.
func (c *core) ensureRoom(ctx context.Context, ops []op, puts uint64) error {
	limit := uint64(c.opts.MaxLoad * float64(c.capacity()))
	if c.used+puts <= limit {
		return nil
	}
	// Count the keys that are really new before deciding.
	fresh := uint64(0)
	p, buf := c.getLineBuf()
	defer linePool.Put(p)
	seen := map[string]bool{}
	for _, o := range ops {
		if o.kind != opPut || seen[string(o.key)] {
			continue
		}
		seen[string(o.key)] = true
		ok, err := c.lookup(ctx, o.key, nil, buf)
		if err != nil {
			return err
		}
		if !ok {
			fresh++
		}
	}
	if c.used+fresh <= limit {
		return nil
	}
	return c.rehash(ctx, c.count+fresh)
}

// sortedBuckets returns the keys of m in increasing order.
func sortedBuckets(m map[uint64][]byte) []uint64 {
	out := make([]uint64, 0, len(m))
	for b := range m {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}
