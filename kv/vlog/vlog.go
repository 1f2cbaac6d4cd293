package vlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// Sizes of the on-disk layout.
const (
	// HeaderSize is the file header: magic (8), owner id (16), CRC32-C of
	// the first 24 bytes (4), zero padding (4).
	HeaderSize = 32
	// RecordHeaderSize precedes every payload: magic (4), payload length
	// (4), CRC32-C of the payload (4), CRC32-C of the first 12 bytes (4).
	RecordHeaderSize = 16
	// PtrSize is the encoded size of a Ptr: offset (8), length (4), CRC (4).
	PtrSize = 16
	// MaxPayload bounds one record's payload.
	MaxPayload = 1 << 30

	fileMagic   = "bamvlog1"
	recordMagic = 0x314c5642 // "BVL1" little-endian
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors. Errors returned by the package wrap one of these and name the file.
var (
	// ErrCorrupt: a header or a referenced record failed validation, or
	// the file ends before a referenced record.
	ErrCorrupt = errors.New("vlog: corrupt value log")
	// ErrMismatch: the file belongs to another owner id.
	ErrMismatch = errors.New("vlog: value log of another table")
	// ErrFailed: an earlier write or sync failed; the log refuses writes
	// until it is reopened.
	ErrFailed = errors.New("vlog: value log failed")
	// ErrNoSpace wraps write and sync failures caused by a full disk.
	ErrNoSpace = errors.New("vlog: no space left on device")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("vlog: closed")
	// ErrTooLarge: a payload exceeds MaxPayload.
	ErrTooLarge = errors.New("vlog: record too large")
)

// Ptr locates one record: the offset of its header, its payload length and
// the payload's CRC32-C.
type Ptr struct {
	Off uint64
	Len uint32
	CRC uint32
}

// End is the offset just past the record.
func (p Ptr) End() uint64 { return p.Off + RecordHeaderSize + uint64(p.Len) }

// Put encodes p into b[:PtrSize].
func (p Ptr) Put(b []byte) {
	binary.LittleEndian.PutUint64(b, p.Off)
	binary.LittleEndian.PutUint32(b[8:], p.Len)
	binary.LittleEndian.PutUint32(b[12:], p.CRC)
}

// DecodePtr decodes b[:PtrSize].
func DecodePtr(b []byte) Ptr {
	return Ptr{Off: binary.LittleEndian.Uint64(b), Len: binary.LittleEndian.Uint32(b[8:]), CRC: binary.LittleEndian.Uint32(b[12:])}
}

// Options configure Open.
type Options struct {
	// ID is the owner's identity, written into a new file's header and
	// checked against an existing one's.
	ID [16]byte
	// End is the end of the last referenced record (at least HeaderSize).
	// Bytes after it are cut off; a file shorter than End is ErrCorrupt.
	End uint64
	// ReadOnly opens the file without creating, writing or truncating it.
	ReadOnly bool
	// Logger receives recovery notes (a cut tail). Default: discard.
	Logger *slog.Logger
}

// Log is an append-only value log. Safe for concurrent use.
type Log struct {
	path     string
	f        *os.File
	readOnly bool

	mu     sync.Mutex
	tail   uint64 // offset of the next record
	err    error  // sticky write failure
	closed bool

	syncMu sync.Mutex
	synced uint64 // every record ending at or before this is durable
}

func encodeHeader(id [16]byte) []byte {
	h := make([]byte, HeaderSize)
	copy(h, fileMagic)
	copy(h[8:], id[:])
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return h
}

// Open opens (or creates) the value log at path and cuts it to opts.End.
func Open(path string, opts Options) (*Log, error) {
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	end := max(opts.End, HeaderSize)
	flag := os.O_RDWR | os.O_CREATE
	if opts.ReadOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vlog: open %s: %w", path, err)
	}
	l := &Log{path: path, f: f, readOnly: opts.ReadOnly, tail: end, synced: end}
	if err := l.recover(opts.ID, end, lg); err != nil {
		f.Close()
		return nil, fmt.Errorf("vlog: %s: %w", path, err)
	}
	return l, nil
}

func (l *Log) recover(id [16]byte, end uint64, lg *slog.Logger) error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	size := uint64(st.Size())
	hdr := make([]byte, HeaderSize)
	n, err := l.f.ReadAt(hdr, 0)
	if err != nil && err != io.EOF {
		return err
	}
	if n < HeaderSize && isZero(hdr[:n]) {
		// New, or created and never written.
		if end > HeaderSize {
			return fmt.Errorf("%w: file is %d bytes, records are referenced up to offset %d", ErrCorrupt, size, end)
		}
		if l.readOnly {
			return nil
		}
		if err := l.f.Truncate(0); err != nil {
			return classify(err)
		}
		if _, err := l.f.WriteAt(encodeHeader(id), 0); err != nil {
			return classify(err)
		}
		return classify(l.f.Sync())
	}
	if n < HeaderSize || string(hdr[:8]) != fileMagic || binary.LittleEndian.Uint32(hdr[24:]) != crc32.Checksum(hdr[:24], castagnoli) {
		return fmt.Errorf("%w: bad file header", ErrCorrupt)
	}
	if [16]byte(hdr[8:24]) != id {
		return fmt.Errorf("%w: file id %x, table id %x", ErrMismatch, hdr[8:24], id)
	}
	if size < end {
		return fmt.Errorf("%w: file ends at offset %d, records are referenced up to offset %d", ErrCorrupt, size, end)
	}
	if size > end && !l.readOnly {
		lg.Warn("vlog: dropping unreferenced tail", "file", l.path, "offset", end, "bytes", size-end)
		if err := l.f.Truncate(int64(end)); err != nil {
			return classify(err)
		}
		if err := l.f.Sync(); err != nil {
			return classify(err)
		}
	}
	return nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func classify(err error) error {
	if err != nil && errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}

// Path is the log's file name.
func (l *Log) Path() string { return l.path }

// Size is the offset the next record will be written at.
func (l *Log) Size() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tail
}

// Append writes one record per payload, contiguously, with one write, and
// returns their pointers. The records are durable after Sync.
func (l *Log) Append(payloads ...[]byte) ([]Ptr, error) {
	total := 0
	for _, p := range payloads {
		if len(p) > MaxPayload {
			return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(p), MaxPayload)
		}
		total += RecordHeaderSize + len(p)
	}
	buf := make([]byte, 0, total)
	ptrs := make([]Ptr, len(payloads))
	for i, p := range payloads {
		crc := crc32.Checksum(p, castagnoli)
		var h [RecordHeaderSize]byte
		binary.LittleEndian.PutUint32(h[0:], recordMagic)
		binary.LittleEndian.PutUint32(h[4:], uint32(len(p)))
		binary.LittleEndian.PutUint32(h[8:], crc)
		binary.LittleEndian.PutUint32(h[12:], crc32.Checksum(h[:12], castagnoli))
		ptrs[i] = Ptr{Off: uint64(len(buf)), Len: uint32(len(p)), CRC: crc}
		buf = append(buf, h[:]...)
		buf = append(buf, p...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return nil, err
	}
	if _, err := l.f.WriteAt(buf, int64(l.tail)); err != nil {
		l.err = fmt.Errorf("%w: write %s at offset %d: %w", ErrFailed, l.path, l.tail, classify(err))
		return nil, l.err
	}
	for i := range ptrs {
		ptrs[i].Off += l.tail
	}
	l.tail += uint64(len(buf))
	return ptrs, nil
}

func (l *Log) writable() error {
	switch {
	case l.closed:
		return ErrClosed
	case l.readOnly:
		return fmt.Errorf("vlog: %s is open read-only", l.path)
	}
	return l.err
}

// Sync makes every record appended before the call durable. Concurrent
// callers share syncs: one that finds its records already covered by a
// sync that started after they were written returns at once.
func (l *Log) Sync(ctx context.Context) error {
	l.mu.Lock()
	want := l.tail
	err := l.writable()
	l.mu.Unlock()
	if err != nil {
		return err
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced >= want {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	upto := l.tail // everything written so far is covered by this sync
	l.mu.Unlock()
	if err := l.f.Sync(); err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("%w: sync %s: %w", ErrFailed, l.path, classify(err))
		}
		err = l.err
		l.mu.Unlock()
		return err
	}
	l.synced = upto
	return nil
}

// Read returns the payload of the record p points at, in a new slice. A
// record that does not match p or its own checksums is ErrCorrupt, naming
// the file and offset.
func (l *Log) Read(p Ptr) ([]byte, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if p.Off < HeaderSize || p.Len > MaxPayload {
		return nil, l.corrupt(p, "pointer out of range")
	}
	buf := make([]byte, RecordHeaderSize+int(p.Len))
	if _, err := l.f.ReadAt(buf, int64(p.Off)); err != nil {
		if err == io.EOF {
			return nil, l.corrupt(p, "record past the end of the file")
		}
		return nil, fmt.Errorf("vlog: read %s at offset %d: %w", l.path, p.Off, err)
	}
	h := buf[:RecordHeaderSize]
	switch {
	case binary.LittleEndian.Uint32(h[12:]) != crc32.Checksum(h[:12], castagnoli):
		return nil, l.corrupt(p, "record header checksum mismatch")
	case binary.LittleEndian.Uint32(h) != recordMagic:
		return nil, l.corrupt(p, "bad record magic")
	case binary.LittleEndian.Uint32(h[4:]) != p.Len:
		return nil, l.corrupt(p, fmt.Sprintf("record length %d, index says %d", binary.LittleEndian.Uint32(h[4:]), p.Len))
	case binary.LittleEndian.Uint32(h[8:]) != p.CRC:
		return nil, l.corrupt(p, "record checksum differs from the index's")
	}
	payload := buf[RecordHeaderSize:]
	if crc32.Checksum(payload, castagnoli) != p.CRC {
		return nil, l.corrupt(p, "payload checksum mismatch")
	}
	return payload, nil
}

// CorruptError describes a damaged record. It wraps ErrCorrupt.
type CorruptError struct {
	Path   string
	Off    uint64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("vlog: %s: record at offset %d: %s", e.Path, e.Off, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func (l *Log) corrupt(p Ptr, reason string) error {
	return &CorruptError{Path: l.path, Off: p.Off, Reason: reason}
}

// Close syncs (unless read-only or failed) and closes the file.
func (l *Log) Close(ctx context.Context) error {
	var err error
	l.mu.Lock()
	ok := !l.closed && !l.readOnly && l.err == nil
	l.mu.Unlock()
	if ok {
		err = l.Sync(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return errors.Join(err, l.f.Close())
}
