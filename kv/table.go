package kv

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"unsafe"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
)

// Table is a hash table of fixed-size keys and values kept in a bam store.
// K and V are pointer-free types (numbers, arrays, structs of those); keys
// compare by their bytes. Methods are safe for concurrent use: lookups run
// in parallel, writes are serialised among themselves (their log syncs are
// shared: group commit).
type Table[K comparable, V any] struct {
	c *core
}

func bytesOf[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

func sliceBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

func fixedSchema[K comparable, V any]() (schema, error) {
	kt, err := array.TypeName[K]()
	if err != nil {
		return schema{}, fmt.Errorf("%w: key type: %w", ErrInvalid, err)
	}
	vt, err := array.TypeName[V]()
	if err != nil {
		return schema{}, fmt.Errorf("%w: value type: %w", ErrInvalid, err)
	}
	var k K
	var v V
	return schema{variant: "fixed", ks: int(unsafe.Sizeof(k)), vs: int(unsafe.Sizeof(v)), keyType: kt, valType: vt}, nil
}

// Create makes a new empty table called name (a catalog object of kind
// table) with its log. It fails with bam.ErrExists if the name is taken.
func Create[K comparable, V any](ctx context.Context, s *bam.Store, name string, opts *Options) (*Table[K, V], error) {
	sch, err := fixedSchema[K, V]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "create", Name: name, Err: err}
	}
	c, err := createCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	return &Table[K, V]{c: c}, nil
}

// Open opens the table called name and recovers it: the log is replayed
// over the last checkpoint, torn records at its end are dropped, an
// interrupted checkpoint is finished. It fails with bam.ErrNotFound,
// ErrTypeMismatch (other key or value sizes or types) or ErrCorrupt (a
// damaged log, with valid records after the damage).
func Open[K comparable, V any](ctx context.Context, s *bam.Store, name string, opts *Options) (*Table[K, V], error) {
	sch, err := fixedSchema[K, V]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "open", Name: name, Err: err}
	}
	c, err := openCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	return &Table[K, V]{c: c}, nil
}

// Name returns the table's name.
func (t *Table[K, V]) Name() string { return t.c.name }

// Get returns the value of k and whether it is present.
func (t *Table[K, V]) Get(ctx context.Context, k K) (V, bool, error) {
	var v V
	ok, err := t.c.get(ctx, bytesOf(&k), bytesOf(&v))
	return v, ok, t.c.errorf("get from", err)
}

// Has reports whether k is present.
func (t *Table[K, V]) Has(ctx context.Context, k K) (bool, error) {
	ok, err := t.c.get(ctx, bytesOf(&k), nil)
	return ok, t.c.errorf("look up in", err)
}

// GetMany looks up keys[i] for every i: vals[i] is its value (the zero V
// when absent) and found[i] says whether it is present. The slices must
// have the same length.
func (t *Table[K, V]) GetMany(ctx context.Context, keys []K, vals []V, found []bool) error {
	if len(vals) != len(keys) || len(found) != len(keys) {
		return t.c.errorf("get from", fmt.Errorf("%w: %d keys, %d values, %d found flags", ErrInvalid, len(keys), len(vals), len(found)))
	}
	return t.c.errorf("get from", t.c.getMany(ctx, sliceBytes(keys), sliceBytes(vals), found))
}

// Put stores v as the value of k.
func (t *Table[K, V]) Put(ctx context.Context, k K, v V) error {
	return t.c.errorf("put into", t.c.write(ctx, []op{{kind: opPut, key: bytesOf(&k), val: bytesOf(&v)}}, false))
}

// Delete removes k; deleting an absent key is not an error.
func (t *Table[K, V]) Delete(ctx context.Context, k K) error {
	return t.c.errorf("delete from", t.c.write(ctx, []op{{kind: opDelete, key: bytesOf(&k)}}, false))
}

// PutMany stores vals[i] as the value of keys[i], in order (a key given
// twice keeps its last value). The batch is atomic across a crash: after
// recovery all of it is visible or none (batches beyond 16 MiB of log are
// split into atomic pieces of that size).
func (t *Table[K, V]) PutMany(ctx context.Context, keys []K, vals []V) error {
	if len(vals) != len(keys) {
		return t.c.errorf("put into", fmt.Errorf("%w: %d keys, %d values", ErrInvalid, len(keys), len(vals)))
	}
	ops := make([]op, len(keys))
	kb, vb := sliceBytes(keys), sliceBytes(vals)
	ks, vs := t.c.sch.ks, t.c.sch.vs
	for i := range keys {
		ops[i] = op{kind: opPut, key: kb[i*ks : (i+1)*ks], val: vb[i*vs : (i+1)*vs]}
	}
	return t.c.errorf("put into", t.c.write(ctx, ops, false))
}

// DeleteMany removes keys, atomically like PutMany.
func (t *Table[K, V]) DeleteMany(ctx context.Context, keys []K) error {
	ops := make([]op, len(keys))
	kb := sliceBytes(keys)
	ks := t.c.sch.ks
	for i := range keys {
		ops[i] = op{kind: opDelete, key: kb[i*ks : (i+1)*ks]}
	}
	return t.c.errorf("delete from", t.c.write(ctx, ops, false))
}

// Len returns the number of entries.
func (t *Table[K, V]) Len() uint64 {
	t.c.mu.RLock()
	defer t.c.mu.RUnlock()
	return t.c.count
}

// Sync makes every write that returned before the call durable: it syncs
// the log (DESIGN.md §7).
func (t *Table[K, V]) Sync(ctx context.Context) error { return t.c.errorf("sync", t.c.sync(ctx)) }

// Checkpoint writes the changed bucket lines into the table object, flushes
// the store and empties the log. Open then has nothing to replay.
func (t *Table[K, V]) Checkpoint(ctx context.Context) error { return t.c.checkpoint(ctx) }

// Info describes the table: sizes, load, log, counters.
func (t *Table[K, V]) Info() Info { return t.c.info() }

// Close checkpoints the table and closes its log. The table is unusable
// afterwards; the store stays open.
func (t *Table[K, V]) Close(ctx context.Context) error { return t.c.close(ctx) }

// All iterates over the entries in bucket order. It is not a snapshot:
// entries written during the iteration may or may not be seen, but every
// entry present throughout is yielded once, unless the table is rehashed
// meanwhile, which stops the iteration with ErrConcurrentGrowth. The first
// error is stored in *errp (errp may be nil).
func (t *Table[K, V]) All(ctx context.Context, errp *error) iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for kb, vb := range t.c.all(ctx, errp) {
			var k K
			var v V
			copy(bytesOf(&k), kb)
			copy(bytesOf(&v), vb)
			if !yield(k, v) {
				return
			}
		}
	}
}

// Verify reads every bucket and checks its structure and checksum.
func (t *Table[K, V]) Verify(ctx context.Context) error { return t.c.verify(ctx) }

func (c *core) sync(ctx context.Context) error {
	c.mu.RLock()
	err := c.usable(true)
	c.mu.RUnlock()
	if err != nil {
		return err
	}
	if err := c.log.Commit(ctx, c.log.LastLSN(), true); err != nil {
		c.mu.Lock()
		c.fail(err)
		c.mu.Unlock()
		return logErr(err)
	}
	return nil
}

func (c *core) close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	var err error
	if c.failed == nil {
		err = c.checkpointLocked(ctx)
	}
	c.closed = true
	return errors.Join(err, c.errorf("close", c.log.Close(ctx)))
}

// all yields key and value bytes (valid only during the yield).
func (c *core) all(ctx context.Context, errp *error) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		fail := func(err error) {
			if errp != nil {
				*errp = c.errorf("iterate over", err)
			}
		}
		const chunk = 64
		L := uint64(c.geo.line)
		buf := make([]byte, chunk*L)
		c.mu.RLock()
		nb := c.nb
		rehashes := c.stats.Rehashes
		c.mu.RUnlock()
		for start := uint64(0); start < nb; start += chunk {
			n := min(chunk, nb-start)
			c.mu.RLock()
			if err := c.usable(false); err != nil {
				c.mu.RUnlock()
				fail(err)
				return
			}
			c.statsMu.Lock()
			grown := c.stats.Rehashes != rehashes
			c.statsMu.Unlock()
			if grown || c.nb != nb {
				c.mu.RUnlock()
				fail(ErrConcurrentGrowth)
				return
			}
			err := c.data.ReadAtContext(ctx, buf[:n*L], start*L)
			if err == nil {
				for k := range n {
					if d, ok := c.dirty[start+k]; ok {
						copy(buf[k*L:(k+1)*L], d)
					}
				}
			}
			c.mu.RUnlock()
			if err != nil {
				fail(err)
				return
			}
			for k := range n {
				line := buf[k*L : (k+1)*L]
				for s, cb := range c.geo.ctrl(line) {
					if cb >= CtrlFull && !yield(c.geo.key(line, s), c.geo.val(line, s)) {
						return
					}
				}
			}
		}
	}
}

func (c *core) verify(ctx context.Context) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	L := uint64(c.geo.line)
	buf := make([]byte, L)
	var live, used uint64
	for b := range c.nb {
		line, err := c.readLine(ctx, b, buf)
		if err != nil {
			return c.errorf("verify", err)
		}
		h, err := c.geo.decodeBucket(line)
		if err != nil {
			return c.errorf("verify", fmt.Errorf("bucket %d: %w", b, err))
		}
		live += uint64(h.live)
		used += uint64(h.used)
	}
	if live != c.count || used != c.used {
		return c.errorf("verify", fmt.Errorf("%w: buckets hold %d live and %d used slots, the table counts %d and %d", ErrCorrupt, live, used, c.count, c.used))
	}
	return nil
}
