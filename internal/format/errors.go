package format

import (
	"errors"
	"fmt"
)

// ErrCorrupt is wrapped by every error about a record whose bytes are not a
// valid encoding: bad magic, bad checksum, impossible field values.
var ErrCorrupt = errors.New("corrupt store")

// ErrVersion is wrapped when a record was written by a format version this
// code does not read.
var ErrVersion = errors.New("unsupported format version")

// FieldError reports one failed check of an on-disk record.
type FieldError struct {
	File   string // namespace file or device the record came from
	Record string // "superblock", "catalog slot A", ...
	Field  string // name of the field that failed
	Got    string // value found
	Want   string // value or rule expected
	Err    error  // ErrCorrupt or ErrVersion
}

func (e *FieldError) Error() string {
	file := e.File
	if file == "" {
		file = "(unnamed)"
	}
	return fmt.Sprintf("%s: %s: field %s is %s, want %s", file, e.Record, e.Field, e.Got, e.Want)
}

func (e *FieldError) Unwrap() error { return e.Err }

func corrupt(file, record, field, want string, got any) *FieldError {
	return &FieldError{File: file, Record: record, Field: field, Got: fmt.Sprint(got), Want: want, Err: ErrCorrupt}
}

// CatalogError reports that neither catalog slot holds a valid catalog. It
// wraps ErrCorrupt (or ErrVersion when a slot was written by a newer format
// and the other slot is unusable).
type CatalogError struct {
	File  string
	SlotA error
	SlotB error
}

func (e *CatalogError) Error() string {
	return fmt.Sprintf("%s: no valid catalog copy: slot A: %v; slot B: %v", e.File, e.SlotA, e.SlotB)
}

// Unwrap returns the causes of both slots, so errors.Is finds ErrCorrupt
// and ErrVersion, and errors.As finds the *FieldError of each slot.
func (e *CatalogError) Unwrap() []error {
	return []error{e.SlotA, e.SlotB}
}
