package taxi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
)

// ErrFormat is wrapped by errors about malformed input files and tables.
var ErrFormat = errors.New("taxi: malformed input")

// ErrInvalid is wrapped by errors about invalid query parameters.
var ErrInvalid = errors.New("taxi: invalid argument")

// Catalog metadata keys on a table's descriptor object.
const (
	metaKind    = "taxi.kind" // "table"
	metaVersion = "taxi.version"
	metaRows    = "taxi.rows"
	metaSchema  = "taxi.schema"
	metaSource  = "taxi.source"
	tableKind   = "table"
	version     = "1"
)

// ColumnName is the store object holding column c of table name.
func ColumnName(table string, c Col) string { return table + "." + Schema[c].Name }

// Table is a taxi table in a store: one array per column and a descriptor
// object (named like the table) whose catalog metadata holds the schema and
// the row count.
type Table struct {
	Name string
	Rows uint64
	Meta map[string]string
	s    *bam.Store
	cols [NumCols]*bam.Data
}

func schemaString() string {
	var parts []string
	for c := range NumCols {
		parts = append(parts, Schema[c].Name+":"+string(Schema[c].Type))
	}
	return strings.Join(parts, ",")
}

// create makes the column arrays of a new table of rows rows. The table is
// not visible to Open until publish writes its descriptor.
func create(ctx context.Context, s *bam.Store, name string, rows uint64, overwrite bool) (*Table, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		return nil, fmt.Errorf("%w: table name %q", ErrInvalid, name)
	}
	names := []string{name}
	for c := range NumCols {
		names = append(names, ColumnName(name, c))
	}
	for _, n := range names {
		if _, err := s.Object(n); err == nil {
			if !overwrite {
				return nil, fmt.Errorf("taxi: table %q: object %q: %w (overwrite to replace)", name, n, bam.ErrExists)
			}
			if err := s.DeleteObject(ctx, n); err != nil {
				return nil, fmt.Errorf("taxi: table %q: replace: %w", name, err)
			}
		}
	}
	t := &Table{Name: name, Rows: rows, s: s}
	for c := range NumCols {
		var err error
		t.cols[c], err = createColumn(ctx, s, ColumnName(name, c), Schema[c].Type, rows)
		if err != nil {
			return nil, fmt.Errorf("taxi: table %q: %w", name, err)
		}
	}
	return t, nil
}

func createColumn(ctx context.Context, s *bam.Store, name string, t Type, rows uint64) (*bam.Data, error) {
	opts := &array.Options{NoZero: true}
	switch t {
	case Uint8:
		a, err := array.Create[uint8](ctx, s, name, rows, opts)
		if err != nil {
			return nil, err
		}
		return a.Data(), nil
	case Int8:
		a, err := array.Create[int8](ctx, s, name, rows, opts)
		if err != nil {
			return nil, err
		}
		return a.Data(), nil
	case Uint16:
		a, err := array.Create[uint16](ctx, s, name, rows, opts)
		if err != nil {
			return nil, err
		}
		return a.Data(), nil
	case Uint32:
		a, err := array.Create[uint32](ctx, s, name, rows, opts)
		if err != nil {
			return nil, err
		}
		return a.Data(), nil
	case Float32:
		a, err := array.Create[float32](ctx, s, name, rows, opts)
		if err != nil {
			return nil, err
		}
		return a.Data(), nil
	}
	return nil, fmt.Errorf("%w: column type %q", ErrInvalid, t)
}

// publish flushes the columns and writes the descriptor that makes the
// table visible: a table whose descriptor exists is complete.
func (t *Table) publish(ctx context.Context, meta map[string]string) error {
	if err := t.s.Flush(ctx); err != nil {
		return fmt.Errorf("taxi: table %q: flush: %w", t.Name, err)
	}
	m := map[string]string{
		metaKind:    tableKind,
		metaVersion: version,
		metaRows:    strconv.FormatUint(t.Rows, 10),
		metaSchema:  schemaString(),
	}
	for k, v := range meta {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	if _, err := array.Create[uint8](ctx, t.s, t.Name, 1, &array.Options{TypeName: "taxi-table", Meta: m}); err != nil {
		return fmt.Errorf("taxi: table %q: %w", t.Name, err)
	}
	t.Meta = m
	return nil
}

// Open opens table name of store s. It fails with an error wrapping
// bam.ErrNotFound when there is no such table and ErrFormat when the
// descriptor or a column does not match the schema.
func Open(s *bam.Store, name string) (*Table, error) {
	o, err := s.Object(name)
	if err != nil {
		return nil, fmt.Errorf("taxi: table %q: %w", name, err)
	}
	info := o.Info()
	if info.Meta[metaKind] != tableKind {
		return nil, fmt.Errorf("%w: object %q is not a taxi table", ErrFormat, name)
	}
	if v := info.Meta[metaVersion]; v != version {
		return nil, fmt.Errorf("%w: table %q has version %q, want %q", ErrFormat, name, v, version)
	}
	if got := info.Meta[metaSchema]; got != schemaString() {
		return nil, fmt.Errorf("%w: table %q has schema %q, want %q", ErrFormat, name, got, schemaString())
	}
	rows, err := strconv.ParseUint(info.Meta[metaRows], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: table %q: rows %q", ErrFormat, name, info.Meta[metaRows])
	}
	t := &Table{Name: name, Rows: rows, Meta: info.Meta, s: s}
	for c := range NumCols {
		co, err := s.Object(ColumnName(name, c))
		if err != nil {
			return nil, fmt.Errorf("taxi: table %q: %w", name, err)
		}
		if err := co.CheckType(bam.KindArray, string(Schema[c].Type), Schema[c].Type.Size()); err != nil {
			return nil, fmt.Errorf("%w: table %q: %w", ErrFormat, name, err)
		}
		if co.Len() != rows {
			return nil, fmt.Errorf("%w: table %q: column %s has %d rows, want %d", ErrFormat, name, Schema[c].Name, co.Len(), rows)
		}
		if t.cols[c], err = s.Data(co); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Store returns the table's store.
func (t *Table) Store() *bam.Store { return t.s }

// Column returns the byte-level access to column c.
func (t *Table) Column(c Col) *bam.Data { return t.cols[c] }

// writeBatch stores b as rows [start, start+b.N).
func (t *Table) writeBatch(ctx context.Context, start uint64, b *Batch) error {
	for c := range NumCols {
		sz := uint64(Schema[c].Type.Size())
		if err := t.cols[c].WriteAtContext(ctx, b.Raw[c], start*sz); err != nil {
			return fmt.Errorf("taxi: table %q: write %s: %w", t.Name, Schema[c].Name, err)
		}
	}
	return nil
}

// ReadBatch reads rows [start, start+n) of every column.
func (t *Table) ReadBatch(ctx context.Context, start uint64, n int) (*Batch, error) {
	if start > t.Rows || uint64(n) > t.Rows-start {
		return nil, fmt.Errorf("%w: rows [%d, %d) of %d", bam.ErrOutOfRange, start, start+uint64(n), t.Rows)
	}
	b := NewBatch(n)
	for c := range NumCols {
		if err := t.readColumn(ctx, c, start, b.Raw[c]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (t *Table) readColumn(ctx context.Context, c Col, start uint64, dst []byte) error {
	if err := t.cols[c].ReadAtContext(ctx, dst, start*uint64(Schema[c].Type.Size())); err != nil {
		return fmt.Errorf("taxi: table %q: read %s: %w", t.Name, Schema[c].Name, err)
	}
	return nil
}

// Load reads the whole table into memory.
func (t *Table) Load(ctx context.Context) (*Batch, error) {
	if t.Rows > 1<<40 {
		return nil, fmt.Errorf("%w: %d rows do not fit in memory", ErrInvalid, t.Rows)
	}
	return t.ReadBatch(ctx, 0, int(t.Rows))
}
