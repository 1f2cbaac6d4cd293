package bam

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/bam-go/bam/internal/format"
	"github.com/bam-go/bam/nvme"
)

// Kind says what an object holds.
type Kind uint8

// Object kinds. The zero Kind in an ObjectSpec means KindArray.
const (
	KindArray Kind = 1 // an array.Array[T]
	KindTable Kind = 2 // a part of a kv.Table
	KindOther Kind = 3 // anything else a layer stores
)

func (k Kind) String() string { return format.Kind(k).String() }

// MarshalText implements encoding.TextMarshaler ("array", "table", "other").
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	for _, c := range []Kind{KindArray, KindTable, KindOther} {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return invalidf("kind %q", b)
}

// Layout says how an object's lines are spread over the namespaces.
type Layout uint8

// Layouts. The zero Layout in an ObjectSpec means LayoutStriped.
const (
	// LayoutStriped puts line j on namespace j mod N: N namespaces give N
	// times the bandwidth and capacity of one.
	LayoutStriped Layout = 1
	// LayoutReplicated puts every line on every namespace: reads spread
	// over all of them, writes go to all.
	LayoutReplicated Layout = 2
)

func (l Layout) String() string { return format.Layout(l).String() }

// MarshalText implements encoding.TextMarshaler ("striped", "replicated").
func (l Layout) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *Layout) UnmarshalText(b []byte) error {
	for _, c := range []Layout{LayoutStriped, LayoutReplicated} {
		if c.String() == string(b) {
			*l = c
			return nil
		}
	}
	return invalidf("layout %q", b)
}

// The public constants are the on-disk values.
var (
	_ = [1]struct{}{}[KindArray-Kind(format.KindArray)]
	_ = [1]struct{}{}[KindTable-Kind(format.KindTable)]
	_ = [1]struct{}{}[KindOther-Kind(format.KindOther)]
	_ = [1]struct{}{}[LayoutStriped-Layout(format.LayoutStriped)]
	_ = [1]struct{}{}[LayoutReplicated-Layout(format.LayoutReplicated)]
)

// scalarSizes are the element types whose size the catalog knows; they are
// also the names internal/npy uses for NumPy dtypes.
var scalarSizes = map[string]int{
	"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2,
	"int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
	"float64": 8, "complex64": 8, "complex128": 16,
}

// ScalarSize returns the size of a scalar element type name such as
// "float32", and false for names the store does not know.
func ScalarSize(elemType string) (int, bool) {
	n, ok := scalarSizes[elemType]
	return n, ok
}

// ObjectSpec describes an object to create.
type ObjectSpec struct {
	Name string // 1..1024 bytes of UTF-8 without control characters
	Kind Kind   // default KindArray

	// ElemType names the element type: a scalar ("int64", "float32",
	// "bool", ...) or a layer-defined name ("edge", "kv-bucket").
	ElemType string
	// ElemSize is the element size in bytes, 1..LineSize. It may be left
	// zero for scalar types, and must match them otherwise.
	ElemSize int

	Length uint64 // elements
	Layout Layout // default LayoutStriped

	// Meta is free-form metadata kept with the object (table schemas,
	// importer provenance, ...).
	Meta map[string]string

	// NoZero skips zeroing the object's lines. Its contents are then
	// unspecified (old data of deleted objects), which is fine for an
	// object about to be overwritten entirely, such as an import.
	NoZero bool

	// Align, when set, places each of the object's extents at a byte
	// offset of its namespace that is a multiple of Align: a power of two
	// from the line size to MaxAlign. An engine can then cache the object
	// in lines of any size up to Align (a GPU cache of larger lines for a
	// scan, say). Default: the line size. Up to Align bytes of each
	// namespace may go unused before the object.
	Align int
}

// MaxAlign is the largest ObjectSpec.Align.
const MaxAlign = 1 << 20

// Extent is the run of lines an object owns on one namespace.
type Extent struct {
	Namespace int    `json:"namespace"`
	StartLBA  uint64 `json:"start_lba"`
	Lines     uint64 `json:"lines"`
}

// ObjectInfo describes an object in the catalog.
type ObjectInfo struct {
	ID           uint64            `json:"id"`
	Name         string            `json:"name"`
	Kind         Kind              `json:"kind"`
	ElemType     string            `json:"elem_type"`
	ElemSize     int               `json:"elem_size"`
	Length       uint64            `json:"length"`
	LineSize     int               `json:"line_size"`
	ElemsPerLine int               `json:"elems_per_line"`
	Lines        uint64            `json:"lines"` // per replica
	Layout       Layout            `json:"layout"`
	Extents      []Extent          `json:"extents"`
	Created      time.Time         `json:"created"`
	Meta         map[string]string `json:"meta,omitempty"`
}

// Bytes is the space the object takes on the namespaces, all replicas.
func (i *ObjectInfo) Bytes() uint64 {
	var n uint64
	for _, e := range i.Extents {
		n += e.Lines * uint64(i.LineSize)
	}
	return n
}

func objectInfo(o *format.Object, c *format.Catalog) ObjectInfo {
	info := ObjectInfo{
		ID:           o.ID,
		Name:         o.Name,
		Kind:         Kind(o.Kind),
		ElemType:     o.ElemType,
		ElemSize:     int(o.ElemSize),
		Length:       o.Length,
		LineSize:     int(o.LineSize),
		ElemsPerLine: int(format.ElemsPerLine(o.LineSize, o.ElemSize)),
		Lines:        format.ObjectLines(o.Length, o.LineSize, o.ElemSize),
		Layout:       Layout(o.Layout),
		Extents:      make([]Extent, len(o.Extents)),
		Created:      time.Unix(0, o.Created),
	}
	for k, e := range o.Extents {
		info.Extents[k] = Extent{Namespace: k, StartLBA: e.StartLBA, Lines: e.Lines}
	}
	if len(o.Meta) > 0 {
		info.Meta = maps.Clone(o.Meta)
	}
	return info
}

// catalog returns the current catalog, or ErrClosed.
func (s *Store) catalog() (*format.Catalog, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.cat.Load(), nil
}

// Object returns a handle to the object called name, or an error wrapping
// ErrNotFound.
func (s *Store) Object(name string) (*Object, error) {
	c, err := s.catalog()
	if err != nil {
		return nil, err
	}
	i := c.Find(name)
	if i < 0 {
		return nil, &ObjectError{Op: "open", Name: name, Err: ErrNotFound}
	}
	return newObject(&c.Objects[i], c), nil
}

// Objects lists the catalog, sorted by name. It returns nil on a closed
// store.
func (s *Store) Objects() []ObjectInfo {
	c, err := s.catalog()
	if err != nil {
		return nil
	}
	out := make([]ObjectInfo, len(c.Objects))
	for i := range c.Objects {
		out[i] = objectInfo(&c.Objects[i], c)
	}
	return out
}

// CreateObject allocates line-aligned extents for a new object, zeroes them
// (unless spec.NoZero), and records the object in the catalog. It returns
// once the catalog update is durable. Errors wrap ErrExists, ErrNoSpace,
// ErrInvalid, ErrReadOnly or ErrClosed.
func (s *Store) CreateObject(ctx context.Context, spec ObjectSpec) (*Object, error) {
	o, err := s.checkSpec(spec)
	if err != nil {
		return nil, &ObjectError{Op: "create", Name: spec.Name, Err: err}
	}
	align := s.lineSize
	if spec.Align != 0 {
		align = uint64(spec.Align)
	}
	var made *Object
	err = s.update(ctx, func(c *format.Catalog) error {
		if c.Find(o.Name) >= 0 {
			return ErrExists
		}
		lines := format.ObjectLines(o.Length, o.LineSize, o.ElemSize)
		o.ID = c.NextID
		c.NextID++
		o.Created = s.now().UnixNano()
		o.Extents = make([]format.Extent, c.Namespaces)
		for k := range o.Extents {
			n := format.ExtentLines(o.Layout, lines, uint32(k), c.Namespaces)
			if n == 0 {
				continue
			}
			start, err := s.allocate(c, k, n, align)
			if err != nil {
				return err
			}
			o.Extents[k] = format.Extent{StartLBA: start, Lines: n}
		}
		if !spec.NoZero {
			if err := s.zeroExtents(ctx, o.Extents); err != nil {
				return err
			}
		}
		c.Objects = append(c.Objects, o)
		c.Sort()
		made = newObject(&c.Objects[c.Find(o.Name)], c)
		return nil
	})
	if err != nil {
		return nil, &ObjectError{Op: "create", Name: spec.Name, Err: err}
	}
	s.log.Debug("created object", "name", o.Name, "id", o.ID, "length", o.Length, "lines", made.Lines())
	return made, nil
}

func (s *Store) checkSpec(spec ObjectSpec) (format.Object, error) {
	if err := format.ValidateName(spec.Name); err != nil {
		return format.Object{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	kind, layout := spec.Kind, spec.Layout
	if kind == 0 {
		kind = KindArray
	}
	if layout == 0 {
		layout = LayoutStriped
	}
	if kind != KindArray && kind != KindTable && kind != KindOther {
		return format.Object{}, invalidf("kind %d", kind)
	}
	if layout != LayoutStriped && layout != LayoutReplicated {
		return format.Object{}, invalidf("layout %d", layout)
	}
	if spec.ElemType == "" || len(spec.ElemType) > format.MaxElemTypeLen {
		return format.Object{}, invalidf("element type %q: want 1..%d bytes", spec.ElemType, format.MaxElemTypeLen)
	}
	size := spec.ElemSize
	if n, ok := scalarSizes[spec.ElemType]; ok {
		if size == 0 {
			size = n
		} else if size != n {
			return format.Object{}, invalidf("element size %d for %s, which is %d bytes", size, spec.ElemType, n)
		}
	}
	if size < 1 || uint64(size) > s.lineSize {
		return format.Object{}, invalidf("element size %d: want 1..%d (the line size)", size, s.lineSize)
	}
	if a := spec.Align; a != 0 && (a < 0 || uint64(a) < s.lineSize || a > MaxAlign || a&(a-1) != 0) {
		return format.Object{}, invalidf("alignment %d: want a power of two from %d (the line size) to %d", a, s.lineSize, MaxAlign)
	}
	for k, v := range spec.Meta {
		if len(k) > format.MaxMetaLen || len(v) > format.MaxMetaLen {
			return format.Object{}, invalidf("metadata %q: keys and values are limited to %d bytes", k, format.MaxMetaLen)
		}
	}
	o := format.Object{
		Name:     spec.Name,
		Kind:     format.Kind(kind),
		ElemType: spec.ElemType,
		ElemSize: uint64(size),
		Length:   spec.Length,
		LineSize: s.lineSize,
		Layout:   format.Layout(layout),
	}
	if len(spec.Meta) > 0 {
		o.Meta = maps.Clone(spec.Meta)
	}
	return o, nil
}

// zeroExtents zeroes new extents and flushes the namespaces it touched, so
// that the catalog never names lines whose zeroing could still be lost.
func (s *Store) zeroExtents(ctx context.Context, ext []format.Extent) error {
	for k, e := range ext {
		if e.Lines == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		ns := s.ns[k]
		off := int64(e.StartLBA * s.lbaSize)
		n := int64(e.Lines * s.lineSize)
		if err := zeroRange(ns.dev, off, n, s.lineSize); err != nil {
			return fmt.Errorf("%s: zero %d bytes at %d: %w", ns.name, n, off, err)
		}
		if err := ns.dev.Flush(); err != nil {
			return fmt.Errorf("%s: flush: %w", ns.name, err)
		}
	}
	return nil
}

func zeroRange(dev nvme.Namespace, off, n int64, lineSize uint64) error {
	if z, ok := dev.(nvme.Zeroer); ok {
		return z.WriteZeroes(off, n)
	}
	buf := make([]byte, max(int64(lineSize), min(n, 1<<20)))
	for n > 0 {
		c := min(n, int64(len(buf)))
		if _, err := dev.WriteAt(buf[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}

// DeleteObject removes name from the catalog; its lines become free for
// later objects. It returns once the update is durable.
func (s *Store) DeleteObject(ctx context.Context, name string) error {
	if err := s.evictObject(ctx, name); err != nil {
		return &ObjectError{Op: "delete", Name: name, Err: err}
	}
	err := s.update(ctx, func(c *format.Catalog) error {
		i := c.Find(name)
		if i < 0 {
			return ErrNotFound
		}
		c.Objects = slices.Delete(c.Objects, i, i+1)
		return nil
	})
	if err != nil {
		return &ObjectError{Op: "delete", Name: name, Err: err}
	}
	return nil
}

// RenameObject renames from to to in one durable catalog update. It fails
// with ErrExists if to is taken (use SwapObjects to exchange two names).
func (s *Store) RenameObject(ctx context.Context, from, to string) error {
	if err := format.ValidateName(to); err != nil {
		return &ObjectError{Op: "rename", Name: from, Err: fmt.Errorf("%w: %v", ErrInvalid, err)}
	}
	err := s.update(ctx, func(c *format.Catalog) error {
		i := c.Find(from)
		if i < 0 {
			return ErrNotFound
		}
		if from == to {
			return nil
		}
		if c.Find(to) >= 0 {
			return fmt.Errorf("%w: %q", ErrExists, to)
		}
		c.Objects[i].Name = to
		c.Sort()
		return nil
	})
	if err != nil {
		return &ObjectError{Op: "rename", Name: from, Err: err}
	}
	return nil
}

// SwapObjects exchanges the names of objects a and b in one durable catalog
// update: a reader opening either name after SwapObjects returns sees the
// other object, and a crash leaves either both names swapped or neither.
// A table rebuilt beside the live one is published this way.
func (s *Store) SwapObjects(ctx context.Context, a, b string) error {
	err := s.update(ctx, func(c *format.Catalog) error {
		i, j := c.Find(a), c.Find(b)
		if i < 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, a)
		}
		if j < 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, b)
		}
		c.Objects[i].Name, c.Objects[j].Name = b, a
		c.Sort()
		return nil
	})
	if err != nil {
		return &ObjectError{Op: "swap", Name: a, Err: err}
	}
	return nil
}

// SetObjectMeta replaces the user metadata of name in one durable update.
func (s *Store) SetObjectMeta(ctx context.Context, name string, meta map[string]string) error {
	for k, v := range meta {
		if len(k) > format.MaxMetaLen || len(v) > format.MaxMetaLen {
			return &ObjectError{Op: "set metadata of", Name: name, Err: invalidf("metadata %q: keys and values are limited to %d bytes", k, format.MaxMetaLen)}
		}
	}
	err := s.update(ctx, func(c *format.Catalog) error {
		i := c.Find(name)
		if i < 0 {
			return ErrNotFound
		}
		c.Objects[i].Meta = nil
		if len(meta) > 0 {
			c.Objects[i].Meta = maps.Clone(meta)
		}
		return nil
	})
	if err != nil {
		return &ObjectError{Op: "set metadata of", Name: name, Err: err}
	}
	return nil
}

// usedRuns returns the occupied runs [start, end) in LBAs of namespace k,
// sorted by start.
func usedRuns(c *format.Catalog, k int, lbasPerLine uint64) [][2]uint64 {
	var runs [][2]uint64
	for i := range c.Objects {
		e := c.Objects[i].Extents[k]
		if e.Lines > 0 {
			runs = append(runs, [2]uint64{e.StartLBA, e.StartLBA + e.Lines*lbasPerLine})
		}
	}
	slices.SortFunc(runs, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	return runs
}

// freeRuns calls f for each free run [start, end) in LBAs of namespace k.
func (s *Store) freeRuns(c *format.Catalog, k int, f func(start, end uint64) bool) {
	sb := &s.ns[k].sb
	pos, end := sb.DataStart/s.lbaSize, sb.Capacity/s.lbaSize
	for _, r := range usedRuns(c, k, s.lineSize/s.lbaSize) {
		if r[0] > pos && !f(pos, r[0]) {
			return
		}
		pos = max(pos, r[1])
	}
	if end > pos {
		f(pos, end)
	}
}

// allocate finds the first free run of lines lines on namespace k that
// starts at a multiple of align bytes. Free space is derived from the
// catalog alone, so it is right after any crash.
func (s *Store) allocate(c *format.Catalog, k int, lines, align uint64) (uint64, error) {
	lpl := s.lineSize / s.lbaSize
	alba := align / s.lbaSize
	var at uint64
	found := false
	var largest uint64
	s.freeRuns(c, k, func(start, end uint64) bool {
		first := (start + alba - 1) / alba * alba
		if first >= end {
			return true
		}
		n := (end - first) / lpl
		largest = max(largest, n)
		if n >= lines {
			at, found = first, true
			return false
		}
		return true
	})
	if !found {
		return 0, fmt.Errorf("%w: namespace %d (%s) has no free run of %d lines; largest is %d lines",
			ErrNoSpace, k, s.ns[k].name, lines, largest)
	}
	return at, nil
}
