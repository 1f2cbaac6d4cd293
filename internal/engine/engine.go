package engine

import (
	"context"
	"errors"
	"fmt"
)

// Errors. Engines wrap these so that the store can translate them into its
// own sentinels.
var (
	// ErrOutOfRange: an element index or byte range beyond the object.
	ErrOutOfRange = errors.New("engine: out of range")
	// ErrInvalid: a malformed descriptor or argument (short buffer, zero
	// element size, extents that do not fit the namespaces).
	ErrInvalid = errors.New("engine: invalid argument")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrUnavailable: the engine cannot run on this machine (no GPU, no
	// driver).
	ErrUnavailable = errors.New("engine: not available")
)

// Layout says how an object's lines are spread over the namespaces. The
// values are those of the catalog.
type Layout uint8

// Layouts.
const (
	// Striped: line j on namespace j mod N, at line j / N of its extent.
	Striped Layout = 1
	// Replicated: line j on every namespace, at line j of each extent.
	Replicated Layout = 2
)

// Extent is the run of lines an object owns on one namespace.
type Extent struct {
	StartLBA uint64 // first logical block
	Lines    uint64 // lines in the run (0: nothing on this namespace)
}

// Object describes one object to an engine: plain data from the catalog.
// ID is unique in the store and never reused, so engines may key state by
// it. An Object must not change after it was first handed to an engine.
type Object struct {
	ID       uint64
	Name     string // for error messages
	ElemSize int    // bytes per element, 1..LineSize
	Length   uint64 // elements
	LineSize int    // bytes per line (the store's)
	LBASize  int    // bytes per logical block (the store's)
	Layout   Layout
	Extents  []Extent // one per namespace of the store, by index
}

// Validate checks the descriptor's internal consistency: sizes, layout,
// and extents long enough for the object's lines.
func (o *Object) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: object %q: %s", ErrInvalid, o.Name, fmt.Sprintf(format, a...))
	}
	switch {
	case o.LineSize <= 0 || o.LBASize <= 0 || o.LineSize%o.LBASize != 0:
		return bad("line size %d is not a multiple of the block size %d", o.LineSize, o.LBASize)
	case o.ElemSize < 1 || o.ElemSize > o.LineSize:
		return bad("element size %d not in [1, %d]", o.ElemSize, o.LineSize)
	case len(o.Extents) == 0:
		return bad("no extents")
	case o.Layout != Striped && o.Layout != Replicated:
		return bad("unknown layout %d", o.Layout)
	}
	lines := o.Lines()
	n := uint64(len(o.Extents))
	for k, e := range o.Extents {
		want := lines
		if o.Layout == Striped {
			want = lines / n
			if uint64(k) < lines%n {
				want++
			}
		}
		if e.Lines < want {
			return bad("extent on namespace %d has %d lines, the object needs %d there", k, e.Lines, want)
		}
	}
	return nil
}

// ElemsPerLine is the number of elements one line holds.
func (o *Object) ElemsPerLine() uint64 { return uint64(o.LineSize / o.ElemSize) }

// LineBytes is the number of element bytes in one line: ElemsPerLine *
// ElemSize. The rest of the line is padding.
func (o *Object) LineBytes() uint64 { return o.ElemsPerLine() * uint64(o.ElemSize) }

// Bytes is the size of the object's element bytes, Length * ElemSize.
func (o *Object) Bytes() uint64 { return o.Length * uint64(o.ElemSize) }

// Lines is the number of lines the object occupies (per replica).
func (o *Object) Lines() uint64 {
	per := o.ElemsPerLine()
	if per == 0 {
		return 0
	}
	return (o.Length + per - 1) / per
}

// Replicas is the number of copies of every line.
func (o *Object) Replicas() int {
	if o.Layout == Replicated {
		return len(o.Extents)
	}
	return 1
}

// ElementLine returns the line holding element i and the element's byte
// offset in that line. It does not check i against Length.
func (o *Object) ElementLine(i uint64) (line uint64, off int) {
	per := o.ElemsPerLine()
	return i / per, int(i%per) * o.ElemSize
}

// LineAddr returns the namespace index and first LBA of copy replica of
// line. It does not check its arguments.
func (o *Object) LineAddr(line uint64, replica int) (ns int, lba uint64) {
	var idx uint64
	if o.Layout == Replicated {
		ns, idx = replica, line
	} else {
		n := uint64(len(o.Extents))
		ns, idx = int(line%n), line/n
	}
	return ns, o.Extents[ns].StartLBA + idx*uint64(o.LineSize/o.LBASize)
}

// Stats counts what an engine did, for one object or in total.
type Stats struct {
	Requests     uint64 `json:"requests"`      // calls: ReadAt, WriteAt, Gather, Scatter
	Elements     uint64 `json:"elements"`      // elements asked for by Gather and Scatter
	BytesAsked   uint64 `json:"bytes_asked"`   // bytes callers asked to read or write
	Acquires     uint64 `json:"acquires"`      // line acquisitions (one per group of requests for a line)
	Hits         uint64 `json:"hits"`          // acquisitions served without reading storage
	Misses       uint64 `json:"misses"`        // acquisitions that read their line from storage
	LinesRead    uint64 `json:"lines_read"`    // lines read from storage
	LinesWritten uint64 `json:"lines_written"` // lines written to storage (per replica)
	BytesRead    uint64 `json:"bytes_read"`    // bytes read from storage
	BytesWritten uint64 `json:"bytes_written"` // bytes written to storage
	Flushes      uint64 `json:"flushes"`
}

// Amplification is the I/O amplification: bytes moved to and from storage
// per byte asked, or 0 before anything was asked.
func (s Stats) Amplification() float64 {
	if s.BytesAsked == 0 {
		return 0
	}
	return float64(s.BytesRead+s.BytesWritten) / float64(s.BytesAsked)
}

// HitRatio is Hits / Acquires, or 0 before any acquisition.
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// Engine moves object bytes between callers and storage through a line
// cache. All methods are safe for concurrent use. Offsets and indices are
// checked against the object: out-of-range requests fail with an error
// wrapping ErrOutOfRange and move nothing.
type Engine interface {
	// Name is "cpu" or "gpu".
	Name() string

	// ReadAt fills p with the object's element bytes at off.
	ReadAt(ctx context.Context, o *Object, p []byte, off uint64) error
	// WriteAt stores p as the object's element bytes at off.
	WriteAt(ctx context.Context, o *Object, p []byte, off uint64) error

	// Gather copies element idx[k] into dst[k*ElemSize:(k+1)*ElemSize].
	Gather(ctx context.Context, o *Object, idx []uint64, dst []byte) error
	// Scatter stores src[k*ElemSize:(k+1)*ElemSize] as element idx[k].
	// When an index repeats, one of its values is stored; which one is
	// unspecified.
	Scatter(ctx context.Context, o *Object, idx []uint64, src []byte) error

	// Flush makes every write that returned before the call durable.
	Flush(ctx context.Context) error
	// Evict writes back and drops every cached line of o and forgets o.
	// The store calls it before deleting o, so that no line of o is
	// written after its space is given to another object. It fails if a
	// line of o is in use.
	Evict(ctx context.Context, o *Object) error

	// Stats returns the engine's totals; ObjectStats those of one object
	// (zero for an object it has not seen).
	Stats() Stats
	ObjectStats(o *Object) Stats

	// Close stops the engine. It does not flush: call Flush first.
	Close() error
}
