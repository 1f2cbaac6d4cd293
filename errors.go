package bam

import (
	"errors"
	"fmt"

	"github.com/bam-go/bam/internal/format"
)

// Sentinel errors. Errors returned by the package wrap one of these (test
// with errors.Is) and add context: the operation, the store, the object.
var (
	// ErrNotFound is returned when a named object, or the store itself,
	// does not exist.
	ErrNotFound = errors.New("not found")

	// ErrExists is returned by Create when the location already holds a
	// store, and by CreateObject and RenameObject when the name is taken.
	ErrExists = errors.New("already exists")

	// ErrCorrupt is returned when an on-disk record fails validation: bad
	// magic, checksum or field values, namespaces of different volumes,
	// missing namespaces, overlapping extents. The error is, or wraps, a
	// *FieldError or *CatalogError naming the file, field and expected value.
	ErrCorrupt = format.ErrCorrupt

	// ErrVersion is returned when a record was written by a format version
	// this code does not read.
	ErrVersion = format.ErrVersion

	// ErrTypeMismatch is returned when an object is opened as a kind or
	// element type other than the one it was created with.
	ErrTypeMismatch = errors.New("type mismatch")

	// ErrNoSpace is returned when the namespaces have no free run of lines
	// long enough for a new object, or the catalog slot is full.
	ErrNoSpace = errors.New("no space")

	// ErrClosed is returned by every operation on a closed Store.
	ErrClosed = errors.New("store closed")

	// ErrOutOfRange is returned for an element or line index beyond an
	// object's length.
	ErrOutOfRange = errors.New("index out of range")

	// ErrInvalid is returned for invalid arguments and options.
	ErrInvalid = errors.New("invalid argument")

	// ErrReadOnly is returned by catalog updates on a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("store is read-only")

	// ErrLocked is returned by Open and Create when another process holds
	// the store open for writing (or, for a writer, holds it open at all).
	ErrLocked = errors.New("store in use by another process")
)

// FieldError reports one failed check of an on-disk record: the file, the
// record (superblock, catalog slot), the field, the value found and the
// value expected. It wraps ErrCorrupt or ErrVersion.
type FieldError = format.FieldError

// CatalogError reports that neither catalog copy is valid; it holds the
// failure of each slot and wraps ErrCorrupt.
type CatalogError = format.CatalogError

// ObjectError is an error about one named object.
type ObjectError struct {
	Op   string // "create", "open", "delete", "rename", ...
	Name string
	Err  error
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("bam: %s object %q: %v", e.Op, e.Name, e.Err)
}

func (e *ObjectError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
