package kv

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/kv/vlog"
)

// MaxValueSize is the largest value a BytesTable stores (64 MiB).
const MaxValueSize = 64 << 20

// ptrType is the value type name of a byte-value table's index.
const ptrType = "vlog.Ptr"

// Table variants, as Info.Variant and VariantOf report them.
const (
	VariantFixed = "fixed" // Table and RawTable: fixed-size values in the buckets
	VariantBytes = "bytes" // BytesTable: byte-slice values in a value log
)

// VariantOf reads the variant of the table called name (VariantFixed or
// VariantBytes) from the catalog, without opening the table, so tools can
// pick OpenRaw or OpenBytes. It fails with bam.ErrNotFound, or ErrCorrupt
// (or another error) when name is not a table.
func VariantOf(s *bam.Store, name string) (string, error) {
	obj, err := s.Object(name)
	if err != nil {
		return "", err
	}
	sch, _, _, err := readSchema(obj)
	if err != nil {
		return "", &bam.ObjectError{Op: "open", Name: name, Err: err}
	}
	return sch.variant, nil
}

// BytesTable maps fixed-size keys to byte-slice values of any length up to
// MaxValueSize. The index is a fixed-size table whose values are pointers
// (segment, offset, length, checksum) into a value log of segment files,
// <LogDir>/kv-<table id>.vlog and kv-<table id>.vlog.<n>, beside the
// table's write-ahead log; each value record holds its key and value.
//
// A Put appends the record to the value log and syncs it before the index
// write is logged, so the index never points at a value that is not
// durable; the index write itself follows Table's rules (durable with
// Options.SyncWrites, or after Sync, Checkpoint or Close). Concurrent Puts
// share value-log syncs; PutMany pays one for its whole batch.
//
// Overwritten and deleted values stay in the value log until Compact
// rewrites the live ones and deletes the old segments; ValueLogStats says
// how much compaction would reclaim. Methods are safe for concurrent use,
// Compact included.
type BytesTable[K comparable] struct {
	c          *core
	vl         *vlog.Log
	syncWrites bool // Options.SyncWrites; the core's copy is off, see PutMany

	// segMu is held shared by every operation that holds value-log
	// pointers across two steps (look up, then read; append, then index),
	// and exclusively to rotate the value log and to remove segments, so
	// neither happens between the two steps.
	segMu sync.RWMutex
	// wmu serialises index writes together with the look-up of the
	// pointers they replace, so live-byte accounting and compaction's
	// compare-and-swap see a stable index. Order: segMu, wmu, core.mu.
	wmu  sync.Mutex
	live atomic.Uint64 // bytes of the records the index refers to; written under wmu

	comp compaction
}

func bytesSchema[K comparable]() (schema, error) {
	kt, err := array.TypeName[K]()
	if err != nil {
		return schema{}, fmt.Errorf("%w: key type: %w", ErrInvalid, err)
	}
	var k K
	return schema{variant: VariantBytes, ks: int(unsafe.Sizeof(k)), vs: vlog.PtrSize, keyType: kt, valType: ptrType}, nil
}

func (c *core) vlogPath() string {
	return filepath.Join(c.opts.LogDir, "kv-"+hex.EncodeToString(c.id[:])+".vlog")
}

// vlogErr adds the package's sentinels to a value-log error.
func vlogErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, vlog.ErrNoSpace):
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, vlog.ErrFailed):
		return fmt.Errorf("%w: %w", ErrFailed, err)
	case errors.Is(err, vlog.ErrClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, vlog.ErrCorrupt), errors.Is(err, vlog.ErrMismatch), errors.Is(err, vlog.ErrNoSegment):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// CreateBytes makes a new empty byte-value table called name, with its log
// and value log. It fails with bam.ErrExists if the name is taken.
func CreateBytes[K comparable](ctx context.Context, s *bam.Store, name string, opts *Options) (*BytesTable[K], error) {
	sch, err := bytesSchema[K]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "create", Name: name, Err: err}
	}
	c, err := createCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	vl, err := vlog.Open(c.vlogPath(), vlog.Options{ID: c.id, Logger: c.logger})
	if err != nil {
		return nil, errors.Join(c.errorf("create", vlogErr(err)), c.close(ctx))
	}
	return newBytesTable[K](c, vl, 0), nil
}

func newBytesTable[K comparable](c *core, vl *vlog.Log, live uint64) *BytesTable[K] {
	t := &BytesTable[K]{c: c, vl: vl, syncWrites: c.opts.SyncWrites}
	// Index writes are logged without a sync and synced after wmu is
	// released, so concurrent writers still share log syncs.
	c.opts.SyncWrites = false
	t.live.Store(live)
	t.comp.init()
	return t
}

// OpenBytes opens the byte-value table called name and recovers it: the
// index as Open does, then the value log: every segment is cut after the
// last record the index refers to (values whose index write was lost, or a
// torn append), and segments the index does not refer to are deleted (a
// compaction cut short). A referenced segment that is missing or shorter
// than the index requires fails with ErrCorrupt. Open reads every bucket
// once to find those ends.
func OpenBytes[K comparable](ctx context.Context, s *bam.Store, name string, opts *Options) (*BytesTable[K], error) {
	sch, err := bytesSchema[K]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "open", Name: name, Err: err}
	}
	c, err := openCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*BytesTable[K], error) {
		c.closed = true
		return nil, errors.Join(c.errorf("open", err), c.log.Close(ctx))
	}
	ends := map[uint32]uint64{}
	var live uint64
	var ierr error
	for kb, vb := range c.all(ctx, &ierr) {
		p := vlog.DecodePtr(vb)
		if p.Len > uint32(c.sch.ks+MaxValueSize) || p.Len < uint32(c.sch.ks) || p.Off < vlog.HeaderSize {
			return fail(fmt.Errorf("%w: key %x points at a value record of %d bytes at offset %d", ErrCorrupt, kb, p.Len, p.Off))
		}
		ends[p.Seg] = max(ends[p.Seg], p.End())
		live += p.Size()
	}
	if ierr != nil {
		return fail(ierr)
	}
	vl, err := vlog.Open(c.vlogPath(), vlog.Options{ID: c.id, Ends: ends, ReadOnly: s.Options().ReadOnly, Logger: c.logger})
	if err != nil {
		return fail(vlogErr(err))
	}
	return newBytesTable[K](c, vl, live), nil
}

// Name returns the table's name.
func (t *BytesTable[K]) Name() string { return t.c.name }

// ValueLogPath is the file of the value log's segment 0; segment n is this
// name with ".n" appended.
func (t *BytesTable[K]) ValueLogPath() string { return t.vl.Path() }

// ValueLogBytes is the size of the value log's segment files, including
// space that compaction would reclaim.
func (t *BytesTable[K]) ValueLogBytes() uint64 { return t.vl.Size() }

// read fetches the value a pointer refers to and checks its key.
func (t *BytesTable[K]) read(key, pb []byte) ([]byte, error) {
	p := vlog.DecodePtr(pb)
	rec, err := t.vl.Read(p)
	if err != nil {
		return nil, vlogErr(err)
	}
	if len(rec) < len(key) || !bytes.Equal(rec[:len(key)], key) {
		return nil, vlogErr(&vlog.CorruptError{Path: vlog.SegmentPath(t.vl.Path(), p.Seg), Off: p.Off, Reason: "record holds another key"})
	}
	return rec[len(key):], nil
}

// readCurrent reads the value of key from pointer pb, which may be stale
// (taken from an iteration): if compaction removed its segment meanwhile,
// the key is looked up again. ok is false when the key is gone. The caller
// holds segMu shared.
func (t *BytesTable[K]) readCurrent(ctx context.Context, key, pb []byte) (v []byte, ok bool, err error) {
	v, err = t.read(key, pb)
	if err == nil || !errors.Is(err, vlog.ErrNoSegment) {
		return v, err == nil, err
	}
	var cur [vlog.PtrSize]byte
	if ok, err := t.c.get(ctx, key, cur[:]); err != nil || !ok {
		return nil, false, err
	}
	v, err = t.read(key, cur[:])
	return v, err == nil, err
}

// Get returns the value of k (a new slice the caller owns) and whether it
// is present. A damaged value record fails with ErrCorrupt naming the value
// log segment and the record's offset.
func (t *BytesTable[K]) Get(ctx context.Context, k K) ([]byte, bool, error) {
	var pb [vlog.PtrSize]byte
	kb := bytesOf(&k)
	t.segMu.RLock()
	defer t.segMu.RUnlock()
	ok, err := t.c.get(ctx, kb, pb[:])
	if err != nil || !ok {
		return nil, false, t.c.errorf("get from", err)
	}
	v, err := t.read(kb, pb[:])
	if err != nil {
		return nil, false, t.c.errorf("get from", err)
	}
	return v, true, nil
}

// Has reports whether k is present, without reading its value.
func (t *BytesTable[K]) Has(ctx context.Context, k K) (bool, error) {
	ok, err := t.c.get(ctx, bytesOf(&k), nil)
	return ok, t.c.errorf("look up in", err)
}

// GetMany looks up keys[i] for every i: vals[i] is its value (nil when
// absent) and found[i] says whether it is present. The slices must have
// the same length.
func (t *BytesTable[K]) GetMany(ctx context.Context, keys []K, vals [][]byte, found []bool) error {
	if len(vals) != len(keys) || len(found) != len(keys) {
		return t.c.errorf("get from", fmt.Errorf("%w: %d keys, %d values, %d found flags", ErrInvalid, len(keys), len(vals), len(found)))
	}
	ptrs := make([]byte, len(keys)*vlog.PtrSize)
	t.segMu.RLock()
	defer t.segMu.RUnlock()
	if err := t.c.getMany(ctx, sliceBytes(keys), ptrs, found); err != nil {
		return t.c.errorf("get from", err)
	}
	kb, ks := sliceBytes(keys), t.c.sch.ks
	for i := range keys {
		vals[i] = nil
		if !found[i] {
			continue
		}
		v, err := t.read(kb[i*ks:(i+1)*ks], ptrs[i*vlog.PtrSize:(i+1)*vlog.PtrSize])
		if err != nil {
			return t.c.errorf("get from", err)
		}
		vals[i] = v
	}
	return nil
}

// Put stores a copy of v as the value of k. Values longer than
// MaxValueSize fail with ErrInvalid.
func (t *BytesTable[K]) Put(ctx context.Context, k K, v []byte) error {
	return t.PutMany(ctx, []K{k}, [][]byte{v})
}

// PutMany stores vals[i] as the value of keys[i], in order (a key given
// twice keeps its last value). The index writes are atomic as for
// Table.PutMany; the values are appended and synced first with one write
// and one sync.
func (t *BytesTable[K]) PutMany(ctx context.Context, keys []K, vals [][]byte) error {
	if len(vals) != len(keys) {
		return t.c.errorf("put into", fmt.Errorf("%w: %d keys, %d values", ErrInvalid, len(keys), len(vals)))
	}
	if len(keys) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return t.c.errorf("put into", err)
	}
	kb, ks := sliceBytes(keys), t.c.sch.ks
	recs := make([][]byte, len(keys))
	for i, v := range vals {
		if len(v) > MaxValueSize {
			return t.c.errorf("put into", fmt.Errorf("%w: value of %d bytes, at most MaxValueSize (%d)", ErrInvalid, len(v), MaxValueSize))
		}
		r := make([]byte, 0, ks+len(v))
		r = append(r, kb[i*ks:(i+1)*ks]...)
		recs[i] = append(r, v...)
	}
	// Check the table is writable before growing the value log.
	t.c.mu.RLock()
	err := t.c.usable(true)
	t.c.mu.RUnlock()
	if err != nil {
		return t.c.errorf("put into", err)
	}
	// The records' segment must not be removed before the index refers
	// to them: hold segMu from the append to the index write.
	t.segMu.RLock()
	ptrs, err := t.vl.Append(recs...)
	if err == nil {
		err = t.vl.Sync(ctx)
	}
	if err != nil {
		t.segMu.RUnlock()
		return t.c.errorf("put into", vlogErr(err))
	}
	pb := make([]byte, len(keys)*vlog.PtrSize)
	ops := make([]op, len(keys))
	for i, p := range ptrs {
		b := pb[i*vlog.PtrSize : (i+1)*vlog.PtrSize]
		p.Put(b)
		ops[i] = op{kind: opPut, key: kb[i*ks : (i+1)*ks], val: b}
	}
	err = t.writeIndex(ctx, ops)
	t.segMu.RUnlock()
	if err != nil {
		return t.c.errorf("put into", err)
	}
	return t.c.errorf("put into", t.syncIfAsked(ctx))
}

// syncIfAsked syncs the index's log when the table was opened with
// Options.SyncWrites.
func (t *BytesTable[K]) syncIfAsked(ctx context.Context) error {
	if !t.syncWrites {
		return nil
	}
	return t.c.sync(ctx)
}

// writeIndex applies index writes (puts of encoded pointers, deletes) and
// keeps the live-byte count: under wmu it looks up the pointers the ops
// replace, then writes. Pieces are written as core.write would split them,
// so each piece's accounting matches what it changed.
func (t *BytesTable[K]) writeIndex(ctx context.Context, ops []op) error {
	ks := t.c.sch.ks
	per := max(1, (16<<20)/(1+ks+vlog.PtrSize))
	t.wmu.Lock()
	defer t.wmu.Unlock()
	for len(ops) > 0 {
		piece := ops[:min(len(ops), per)]
		ops = ops[len(piece):]
		keys := make([]byte, 0, len(piece)*ks)
		for _, o := range piece {
			keys = append(keys, o.key...)
		}
		old := make([]byte, len(piece)*vlog.PtrSize)
		found := make([]bool, len(piece))
		if err := t.c.getMany(ctx, keys, old, found); err != nil {
			return err
		}
		// The piece changes the live bytes by the sizes the keys refer to
		// after it less the sizes before it; a record replaced within the
		// piece was never live.
		before := make(map[string]uint64, len(piece))
		after := make(map[string]uint64, len(piece))
		for i, o := range piece {
			k := string(o.key)
			if _, seen := before[k]; !seen {
				before[k] = 0
				if found[i] {
					before[k] = vlog.DecodePtr(old[i*vlog.PtrSize:]).Size()
				}
			}
			after[k] = 0
			if o.kind == opPut {
				after[k] = vlog.DecodePtr(o.val).Size()
			}
		}
		var gone, added uint64
		for k, n := range before {
			gone += n
			added += after[k]
		}
		if err := t.c.write(ctx, piece, false); err != nil {
			return err
		}
		t.live.Store(t.live.Load() - gone + added)
	}
	return nil
}

// Delete removes k; deleting an absent key is not an error. The value's
// space in the value log is reclaimed by the next Compact.
func (t *BytesTable[K]) Delete(ctx context.Context, k K) error {
	return t.DeleteMany(ctx, []K{k})
}

// DeleteMany removes keys, atomically like Table.DeleteMany.
func (t *BytesTable[K]) DeleteMany(ctx context.Context, keys []K) error {
	ops := make([]op, len(keys))
	kb, ks := sliceBytes(keys), t.c.sch.ks
	for i := range keys {
		ops[i] = op{kind: opDelete, key: kb[i*ks : (i+1)*ks]}
	}
	if err := t.writeIndex(ctx, ops); err != nil {
		return t.c.errorf("delete from", err)
	}
	return t.c.errorf("delete from", t.syncIfAsked(ctx))
}

// Len returns the number of entries.
func (t *BytesTable[K]) Len() uint64 {
	t.c.mu.RLock()
	defer t.c.mu.RUnlock()
	return t.c.count
}

// Sync makes every write that returned before the call durable.
func (t *BytesTable[K]) Sync(ctx context.Context) error {
	if err := t.vl.Sync(ctx); err != nil {
		return t.c.errorf("sync", vlogErr(err))
	}
	return t.c.errorf("sync", t.c.sync(ctx))
}

// Checkpoint checkpoints the index as Table.Checkpoint does.
func (t *BytesTable[K]) Checkpoint(ctx context.Context) error { return t.c.checkpoint(ctx) }

// Info describes the index (its values are pointers of vlog.PtrSize bytes).
func (t *BytesTable[K]) Info() Info { return t.c.info() }

// Verify checks the index's buckets, then reads every value record the
// index refers to and checks its checksums and key.
func (t *BytesTable[K]) Verify(ctx context.Context) error {
	if err := t.c.verify(ctx); err != nil {
		return err
	}
	var err error
	for kb, pb := range t.c.all(ctx, &err) {
		t.segMu.RLock()
		_, _, rerr := t.readCurrent(ctx, kb, pb)
		t.segMu.RUnlock()
		if rerr != nil {
			return t.c.errorf("verify", rerr)
		}
	}
	return err
}

// All iterates over the entries in bucket order, with All's rules for
// Table. The first error is stored in *errp (errp may be nil).
func (t *BytesTable[K]) All(ctx context.Context, errp *error) iter.Seq2[K, []byte] {
	return func(yield func(K, []byte) bool) {
		for kb, pb := range t.c.all(ctx, errp) {
			t.segMu.RLock()
			v, ok, err := t.readCurrent(ctx, kb, pb)
			t.segMu.RUnlock()
			if err != nil {
				if errp != nil {
					*errp = t.c.errorf("iterate over", err)
				}
				return
			}
			if !ok {
				continue // deleted since the iteration read its bucket
			}
			var k K
			copy(bytesOf(&k), kb)
			if !yield(k, v) {
				return
			}
		}
	}
}

// Close stops a running Compact (it returns an error; the table keeps
// either state), checkpoints the index and closes both logs. The table is
// unusable afterwards; the store stays open.
func (t *BytesTable[K]) Close(ctx context.Context) error {
	t.comp.stop(ctx)
	err := t.c.close(ctx)
	return errors.Join(err, t.c.errorf("close", vlogErr(t.vl.Close(ctx))))
}
