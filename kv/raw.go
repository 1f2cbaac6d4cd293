package kv

import (
	"context"
	"fmt"

	"github.com/bam-go/bam"
)

// RawTable is a table seen as byte keys and byte values of its sizes,
// whatever types created it (tools such as bam kv). Same semantics as
// Table.
type RawTable struct {
	c *core
}

// CreateRaw makes a table of keySize-byte keys and valueSize-byte values
// with the type names "bytes<N>".
func CreateRaw(ctx context.Context, s *bam.Store, name string, keySize, valueSize int, opts *Options) (*RawTable, error) {
	sch := schema{variant: "fixed", ks: keySize, vs: valueSize,
		keyType: fmt.Sprintf("[%d]uint8", keySize), valType: fmt.Sprintf("[%d]uint8", valueSize)}
	c, err := createCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	return &RawTable{c: c}, nil
}

// OpenRaw opens any fixed-size table, taking its sizes from the catalog.
func OpenRaw(ctx context.Context, s *bam.Store, name string, opts *Options) (*RawTable, error) {
	obj, err := s.Object(name)
	if err != nil {
		return nil, err
	}
	sch, _, _, err := readSchema(obj)
	if err != nil {
		return nil, &bam.ObjectError{Op: "open", Name: name, Err: err}
	}
	if sch.variant != VariantFixed {
		// A bytes table's values are pointers into its value log: writing
		// them raw would leave the log and its statistics behind.
		return nil, &bam.ObjectError{Op: "open", Name: name,
			Err: fmt.Errorf("%w: table is of the %s variant: open it with OpenBytes", ErrTypeMismatch, sch.variant)}
	}
	c, err := openCore(ctx, s, name, sch, opts)
	if err != nil {
		return nil, err
	}
	return &RawTable{c: c}, nil
}

// KeySize and ValueSize are the table's sizes in bytes.
func (t *RawTable) KeySize() int   { return t.c.sch.ks }
func (t *RawTable) ValueSize() int { return t.c.sch.vs }

func (t *RawTable) checkKey(k []byte) error {
	if len(k) != t.c.sch.ks {
		return fmt.Errorf("%w: key of %d bytes, the table's keys have %d", ErrInvalid, len(k), t.c.sch.ks)
	}
	return nil
}

// Get returns a copy of the value of key.
func (t *RawTable) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if err := t.checkKey(key); err != nil {
		return nil, false, t.c.errorf("get from", err)
	}
	v := make([]byte, t.c.sch.vs)
	ok, err := t.c.get(ctx, key, v)
	return v, ok, t.c.errorf("get from", err)
}

// PutMany stores vals[i] under keys[i] as one atomic batch.
func (t *RawTable) PutMany(ctx context.Context, keys, vals [][]byte) error {
	if len(keys) != len(vals) {
		return t.c.errorf("put into", fmt.Errorf("%w: %d keys, %d values", ErrInvalid, len(keys), len(vals)))
	}
	ops := make([]op, len(keys))
	for i := range keys {
		if err := t.checkKey(keys[i]); err != nil {
			return t.c.errorf("put into", err)
		}
		if len(vals[i]) != t.c.sch.vs {
			return t.c.errorf("put into", fmt.Errorf("%w: value of %d bytes, the table's values have %d", ErrInvalid, len(vals[i]), t.c.sch.vs))
		}
		ops[i] = op{kind: opPut, key: keys[i], val: vals[i]}
	}
	return t.c.errorf("put into", t.c.write(ctx, ops, false))
}

// Delete removes key.
func (t *RawTable) Delete(ctx context.Context, key []byte) error {
	if err := t.checkKey(key); err != nil {
		return t.c.errorf("delete from", err)
	}
	return t.c.errorf("delete from", t.c.write(ctx, []op{{kind: opDelete, key: key}}, false))
}

// Sync, Checkpoint, Info, Verify and Close are as for Table.
func (t *RawTable) Sync(ctx context.Context) error       { return t.c.errorf("sync", t.c.sync(ctx)) }
func (t *RawTable) Checkpoint(ctx context.Context) error { return t.c.checkpoint(ctx) }
func (t *RawTable) Info() Info                           { return t.c.info() }
func (t *RawTable) Verify(ctx context.Context) error     { return t.c.verify(ctx) }
func (t *RawTable) Close(ctx context.Context) error      { return t.c.close(ctx) }
