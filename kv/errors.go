package kv

import (
	"errors"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv/wal"
)

// Sentinel errors. Errors returned by the package wrap one of these, or one
// of the store's (bam.ErrNotFound for a missing table, bam.ErrExists,
// bam.ErrNoSpace, bam.ErrClosed), and name the table.
var (
	// ErrInvalid: bad arguments or options (mismatched slice lengths, key
	// and value too large for a bucket line, a key type with pointers).
	ErrInvalid = bam.ErrInvalid

	// ErrTypeMismatch: the table was created with other key or value
	// sizes or type names than the ones it is opened with.
	ErrTypeMismatch = bam.ErrTypeMismatch

	// ErrCorrupt: a bucket line, the table's metadata or its log failed
	// validation. Torn records at the end of the log are not corruption:
	// recovery drops them.
	ErrCorrupt = bam.ErrCorrupt

	// ErrNoSpace: the store or the log's file system is full.
	ErrNoSpace = bam.ErrNoSpace

	// ErrClosed: the table was closed.
	ErrClosed = errors.New("kv: table closed")

	// ErrFailed: a write of the log failed earlier (a full disk, an I/O
	// error); the table refuses writes until it is closed and reopened,
	// which recovers every acknowledged write. Joined with the cause.
	ErrFailed = wal.ErrFailed

	// ErrNoLog: the store has no directory for the table's log (a store on
	// block devices) and Options.LogDir is empty.
	ErrNoLog = errors.New("kv: no directory for the write-ahead log")

	// ErrConcurrentGrowth: the table was rehashed while an iteration was
	// in progress; the iteration stops with this error.
	ErrConcurrentGrowth = errors.New("kv: table grew during iteration")
)
