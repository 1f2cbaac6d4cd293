package bam

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/bam-go/bam/internal/format"
)

// Element and line rule.
//
// Elements never straddle lines. A line of LineSize bytes holds
// ElemsPerLine = floor(LineSize / ElemSize) elements packed from its start;
// the last LineSize mod ElemSize bytes of every line are padding. Any element
// size from 1 byte to the line size is allowed. For sizes that divide the
// line size (all powers of two up to it) there is no padding, and element i
// is at byte i*ElemSize of the object, as in a flat array. So element i is
// in object line i / ElemsPerLine at byte (i % ElemsPerLine) * ElemSize, and
// a single line read always serves a whole element.
//
// Object lines map to namespaces by the object's Layout:
//
//	Striped:    line j lives on namespace j mod N, at line j / N of that
//	            namespace's extent (LBA = StartLBA + (j / N) * LineSize/LBASize).
//	Replicated: every namespace holds every line j, at line j of its extent;
//	            reads choose a replica round robin, writes go to all.

// LineAddr is where one copy of an object line lives.
type LineAddr struct {
	Namespace int    // namespace index
	LBA       uint64 // first logical block of the line
	Offset    uint64 // byte offset of the line in the namespace (LBA * LBASize)
}

// Location is where one element lives: its line, its byte offset in that
// line, and the line's address (replica 0 for replicated objects).
type Location struct {
	Line   uint64 // object line number
	Offset int    // byte offset of the element within the line
	LineAddr
}

// Object is a handle to a catalog entry: its description and the layout
// math that maps elements to lines and lines to namespace addresses. A handle
// is a snapshot taken when it was returned; a later rename or delete does not
// change it. Stop using handles of an object before deleting it: its lines
// may be given to a new object. Object is safe for concurrent use.
type Object struct {
	info        ObjectInfo
	n           uint64 // namespaces
	lbaSize     uint64
	lbasPerLine uint64
	perLine     uint64
	rr          atomic.Uint64 // replica chooser for reads
}

func newObject(o *format.Object, c *format.Catalog) *Object {
	info := objectInfo(o, c)
	return &Object{
		info:        info,
		n:           uint64(c.Namespaces),
		lbaSize:     c.LBASize,
		lbasPerLine: o.LineSize / c.LBASize,
		perLine:     format.ElemsPerLine(o.LineSize, o.ElemSize),
	}
}

// Info returns a copy of the object's description.
func (o *Object) Info() ObjectInfo {
	i := o.info
	i.Extents = slices.Clone(i.Extents)
	if i.Meta != nil {
		i.Meta = maps.Clone(i.Meta)
	}
	return i
}

// Name returns the object's name when the handle was taken.
func (o *Object) Name() string { return o.info.Name }

// ID returns the object's ID, unique in the store and never reused.
func (o *Object) ID() uint64 { return o.info.ID }

// Kind returns the object's kind.
func (o *Object) Kind() Kind { return o.info.Kind }

// ElemType returns the element type name, e.g. "float32".
func (o *Object) ElemType() string { return o.info.ElemType }

// ElemSize returns the element size in bytes.
func (o *Object) ElemSize() int { return o.info.ElemSize }

// Len returns the number of elements.
func (o *Object) Len() uint64 { return o.info.Length }

// Layout returns how the object's lines are spread over namespaces.
func (o *Object) Layout() Layout { return o.info.Layout }

// LineSize returns the object's line size in bytes.
func (o *Object) LineSize() int { return o.info.LineSize }

// Lines returns the number of lines the object occupies (per replica).
func (o *Object) Lines() uint64 { return o.info.Lines }

// ElemsPerLine returns how many elements one line holds.
func (o *Object) ElemsPerLine() int { return int(o.perLine) }

// Replicas returns how many copies of each line exist: 1 when striped, the
// number of namespaces when replicated.
func (o *Object) Replicas() int {
	if o.info.Layout == LayoutReplicated {
		return int(o.n)
	}
	return 1
}

// Meta returns the value of user metadata key.
func (o *Object) Meta(key string) (string, bool) {
	v, ok := o.info.Meta[key]
	return v, ok
}

// CheckType returns an error wrapping ErrTypeMismatch unless the object has
// the given kind, element type name and element size.
func (o *Object) CheckType(kind Kind, elemType string, elemSize int) error {
	if o.info.Kind != kind || o.info.ElemType != elemType || o.info.ElemSize != elemSize {
		return &ObjectError{Op: "open", Name: o.info.Name, Err: fmt.Errorf("%w: object is %s of %s (%d bytes), want %s of %s (%d bytes)",
			ErrTypeMismatch, o.info.Kind, o.info.ElemType, o.info.ElemSize, kind, elemType, elemSize)}
	}
	return nil
}

// ElementLine returns the line holding element i and the element's byte
// offset in it.
func (o *Object) ElementLine(i uint64) (line uint64, offset int, err error) {
	if i >= o.info.Length {
		return 0, 0, fmt.Errorf("%w: element %d of %q with %d elements", ErrOutOfRange, i, o.info.Name, o.info.Length)
	}
	return i / o.perLine, int(i%o.perLine) * o.info.ElemSize, nil
}

// LineAddr returns the address of copy replica (0..Replicas()-1) of line.
func (o *Object) LineAddr(line uint64, replica int) (LineAddr, error) {
	if line >= o.info.Lines {
		return LineAddr{}, fmt.Errorf("%w: line %d of %q with %d lines", ErrOutOfRange, line, o.info.Name, o.info.Lines)
	}
	if replica < 0 || replica >= o.Replicas() {
		return LineAddr{}, fmt.Errorf("%w: replica %d of %q with %d replicas", ErrOutOfRange, replica, o.info.Name, o.Replicas())
	}
	var ns, idx uint64
	if o.info.Layout == LayoutReplicated {
		ns, idx = uint64(replica), line
	} else {
		ns, idx = line%o.n, line/o.n
	}
	lba := o.info.Extents[ns].StartLBA + idx*o.lbasPerLine
	return LineAddr{Namespace: int(ns), LBA: lba, Offset: lba * o.lbaSize}, nil
}

// ReadLineAddr returns the address to read line from: the only copy of a
// striped object, or the next replica in round-robin order.
func (o *Object) ReadLineAddr(line uint64) (LineAddr, error) {
	r := 0
	if n := o.Replicas(); n > 1 {
		r = int((o.rr.Add(1) - 1) % uint64(n))
	}
	return o.LineAddr(line, r)
}

// Locate returns the line, in-line offset and (replica 0) address of
// element i.
func (o *Object) Locate(i uint64) (Location, error) {
	line, off, err := o.ElementLine(i)
	if err != nil {
		return Location{}, err
	}
	a, err := o.LineAddr(line, 0)
	if err != nil {
		return Location{}, err
	}
	return Location{Line: line, Offset: off, LineAddr: a}, nil
}
