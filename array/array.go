package array

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"unsafe"

	"github.com/bam-go/bam"
)

// ErrElemType is returned by Create, Open and TypeName for an element type
// that cannot be stored: one that holds pointers (pointers, strings, slices,
// maps, channels, functions, interfaces) or has size zero.
var ErrElemType = errors.New("array: element type cannot be stored")

// Options configure Create.
type Options struct {
	// Layout spreads the lines over the namespaces (default striped).
	Layout bam.Layout
	// TypeName overrides the element type name recorded in the catalog and
	// checked by Open (default: TypeName[T]()).
	TypeName string
	// Meta is kept with the array in the catalog.
	Meta map[string]string
	// NoZero skips zeroing the new array's storage: its contents are
	// unspecified until written. For arrays about to be overwritten
	// entirely (imports).
	NoZero bool
	// Align places the array's storage at byte offsets that are multiples
	// of Align (bam.ObjectSpec.Align), so that a GPU engine may cache it
	// in lines of up to Align bytes. Default: the store's line size.
	Align int
}

// Array is a fixed-length array of T kept in a store and accessed through
// the store's engine and line cache. Its methods are safe for concurrent
// use. Elements are stored in the host's byte order (little-endian on
// every platform the project supports).
type Array[T any] struct {
	d    *bam.Data
	obj  *bam.Object
	size int
	n    uint64
}

// TypeName returns the catalog name of T: the NumPy-compatible scalar name
// for numbers and bool ("int64", "float32", "bool"; int and uint are named
// by their size), and reflect's name otherwise ("[3]float32",
// "graph.Edge"). It fails with ErrElemType for types that cannot be stored.
func TypeName[T any]() (string, error) {
	t := reflect.TypeFor[T]()
	if err := checkType(t); err != nil {
		return "", err
	}
	switch t.Kind() {
	case reflect.Int, reflect.Uint, reflect.Uintptr:
		prefix := "int"
		if t.Kind() != reflect.Int {
			prefix = "uint"
		}
		return fmt.Sprintf("%s%d", prefix, t.Size()*8), nil
	case reflect.Bool, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		if t.PkgPath() == "" {
			return t.Kind().String(), nil
		}
	}
	return t.String(), nil
}

// checkType rejects types holding pointers and zero-size types.
func checkType(t reflect.Type) error {
	if t == nil {
		return fmt.Errorf("%w: nil type", ErrElemType)
	}
	if t.Size() == 0 {
		return fmt.Errorf("%w: %s has size zero", ErrElemType, t)
	}
	if where := pointerIn(t, t.String()); where != "" {
		return fmt.Errorf("%w: %s holds a pointer (%s); use fixed-size fields only", ErrElemType, t, where)
	}
	return nil
}

// pointerIn returns the path of the first pointer-holding part of t, or "".
func pointerIn(t reflect.Type, path string) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		return pointerIn(t.Elem(), path+"[]")
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if p := pointerIn(f.Type, path+"."+f.Name); p != "" {
				return p
			}
		}
		return ""
	}
	return path + " is a " + t.Kind().String()
}

// Create makes a new array of length zeroed elements called name.
func Create[T any](ctx context.Context, s *bam.Store, name string, length uint64, opts *Options) (*Array[T], error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	tn, err := TypeName[T]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "create", Name: name, Err: err}
	}
	if o.TypeName != "" {
		tn = o.TypeName
	}
	size := int(reflect.TypeFor[T]().Size())
	obj, err := s.CreateObject(ctx, bam.ObjectSpec{Name: name, Kind: bam.KindArray, ElemType: tn, ElemSize: size,
		Length: length, Layout: o.Layout, Meta: o.Meta, NoZero: o.NoZero, Align: o.Align})
	if err != nil {
		return nil, err
	}
	return wrap[T](s, obj)
}

// Open opens the array called name. It fails with an error wrapping
// bam.ErrNotFound when there is none, and bam.ErrTypeMismatch when the
// array was created with another element type name or size, or is not an
// array.
func Open[T any](s *bam.Store, name string) (*Array[T], error) {
	return OpenAs[T](s, name, "")
}

// OpenAs is Open checking the element type name typeName instead of
// TypeName[T]() (for arrays created with Options.TypeName, or imported as
// raw data of a scalar type).
func OpenAs[T any](s *bam.Store, name, typeName string) (*Array[T], error) {
	tn, err := TypeName[T]()
	if err != nil {
		return nil, &bam.ObjectError{Op: "open", Name: name, Err: err}
	}
	if typeName != "" {
		tn = typeName
	}
	obj, err := s.Object(name)
	if err != nil {
		return nil, err
	}
	if err := obj.CheckType(bam.KindArray, tn, int(reflect.TypeFor[T]().Size())); err != nil {
		return nil, err
	}
	return wrap[T](s, obj)
}

func wrap[T any](s *bam.Store, obj *bam.Object) (*Array[T], error) {
	d, err := s.Data(obj)
	if err != nil {
		return nil, err
	}
	return &Array[T]{d: d, obj: obj, size: obj.ElemSize(), n: obj.Len()}, nil
}

// Len returns the number of elements.
func (a *Array[T]) Len() uint64 { return a.n }

// Name returns the array's name when it was opened.
func (a *Array[T]) Name() string { return a.obj.Name() }

// Object returns the catalog handle (layout, extents, element type).
func (a *Array[T]) Object() *bam.Object { return a.obj }

// Data returns the byte-level view (io.ReaderAt and io.WriterAt over the
// element bytes).
func (a *Array[T]) Data() *bam.Data { return a.d }

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

func (a *Array[T]) outOfRange(op string, i uint64) error {
	return &bam.ObjectError{Op: op, Name: a.obj.Name(), Err: fmt.Errorf("%w: index %d, length %d", bam.ErrOutOfRange, i, a.n)}
}

// Get returns element i.
func (a *Array[T]) Get(ctx context.Context, i uint64) (T, error) {
	var v [1]T
	if i >= a.n {
		return v[0], a.outOfRange("get", i)
	}
	err := a.d.ReadAtContext(ctx, bytesOf(v[:]), i*uint64(a.size))
	return v[0], err
}

// Set stores v as element i. It is durable after Flush.
func (a *Array[T]) Set(ctx context.Context, i uint64, v T) error {
	if i >= a.n {
		return a.outOfRange("set", i)
	}
	w := [1]T{v}
	return a.d.WriteAtContext(ctx, bytesOf(w[:]), i*uint64(a.size))
}

// Gather sets dst[k] to element idx[k]; len(dst) must equal len(idx).
// Requests for one line are served by one cache acquisition.
func (a *Array[T]) Gather(ctx context.Context, idx []uint64, dst []T) error {
	if len(dst) != len(idx) {
		return &bam.ObjectError{Op: "gather", Name: a.obj.Name(), Err: fmt.Errorf("%w: %d indices, %d destinations", bam.ErrInvalid, len(idx), len(dst))}
	}
	return a.d.Gather(ctx, idx, bytesOf(dst))
}

// Scatter stores src[k] as element idx[k]; len(src) must equal len(idx).
// When an index repeats, which of its values is stored is unspecified.
func (a *Array[T]) Scatter(ctx context.Context, idx []uint64, src []T) error {
	if len(src) != len(idx) {
		return &bam.ObjectError{Op: "scatter", Name: a.obj.Name(), Err: fmt.Errorf("%w: %d indices, %d values", bam.ErrInvalid, len(idx), len(src))}
	}
	return a.d.Scatter(ctx, idx, bytesOf(src))
}

// ReadRange fills dst with elements start, start+1, ....
func (a *Array[T]) ReadRange(ctx context.Context, start uint64, dst []T) error {
	if start > a.n || uint64(len(dst)) > a.n-start {
		return a.outOfRange("read range", start+uint64(len(dst)))
	}
	return a.d.ReadAtContext(ctx, bytesOf(dst), start*uint64(a.size))
}

// WriteRange stores src as elements start, start+1, ....
func (a *Array[T]) WriteRange(ctx context.Context, start uint64, src []T) error {
	if start > a.n || uint64(len(src)) > a.n-start {
		return a.outOfRange("write range", start+uint64(len(src)))
	}
	return a.d.WriteAtContext(ctx, bytesOf(src), start*uint64(a.size))
}

// rangeChunk is how many bytes Range reads at a time.
const rangeChunk = 256 << 10

// Range iterates over elements [lo, hi) in order, yielding each index and
// value. It reads ahead in chunks of about 256 KiB. It stops at the first
// error, which it stores in *errp (errp may be nil to ignore errors); the
// caller checks it after the loop.
func (a *Array[T]) Range(ctx context.Context, lo, hi uint64, errp *error) iter.Seq2[uint64, T] {
	return func(yield func(uint64, T) bool) {
		fail := func(err error) {
			if errp != nil {
				*errp = err
			}
		}
		if lo > hi || hi > a.n {
			fail(&bam.ObjectError{Op: "range", Name: a.obj.Name(), Err: fmt.Errorf("%w: [%d, %d) of length %d", bam.ErrOutOfRange, lo, hi, a.n)})
			return
		}
		buf := make([]T, max(1, min(rangeChunk/a.size, int(min(hi-lo, 1<<30)))))
		for i := lo; i < hi; {
			n := min(uint64(len(buf)), hi-i)
			if err := a.ReadRange(ctx, i, buf[:n]); err != nil {
				fail(err)
				return
			}
			for k := range n {
				if !yield(i+k, buf[k]) {
					return
				}
			}
			i += n
		}
	}
}

// ReadAt implements io.ReaderAt over the array's element bytes.
func (a *Array[T]) ReadAt(p []byte, off int64) (int, error) { return a.d.ReadAt(p, off) }

// WriteAt implements io.WriterAt over the array's element bytes.
func (a *Array[T]) WriteAt(p []byte, off int64) (int, error) { return a.d.WriteAt(p, off) }

// Flush makes every write to the store made before the call durable
// (DESIGN.md §7): dirty lines are written back and the namespaces flushed.
// The cache is shared, so this flushes the whole store.
func (a *Array[T]) Flush(ctx context.Context) error { return a.d.Flush(ctx) }

// Stats returns the engine's counters for this array since the store was
// opened: requests, bytes asked, hits, misses, lines and bytes read and
// written; Amplification() is bytes moved per byte asked.
func (a *Array[T]) Stats() bam.DataStats { return a.d.Stats() }
