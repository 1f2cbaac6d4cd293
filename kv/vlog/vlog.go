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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Sizes of the on-disk layout.
const (
	// HeaderSize is a segment file's header: magic (8), owner id (16),
	// CRC32-C of the first 24 bytes (4), zero padding (4).
	HeaderSize = 32
	// RecordHeaderSize precedes every payload: magic (4), payload length
	// (4), CRC32-C of the payload (4), CRC32-C of the first 12 bytes (4).
	RecordHeaderSize = 16
	// PtrSize is the encoded size of a Ptr: segment and offset (8),
	// length (4), CRC (4).
	PtrSize = 16
	// MaxPayload bounds one record's payload.
	MaxPayload = 1 << 30
	// MaxSegmentSize bounds one segment file: Append starts a new segment
	// rather than pass it. An encoded Ptr keeps the offset in the low
	// segmentShift bits of its first word and the segment number above.
	MaxSegmentSize = 1 << segmentShift
	// MaxSegment is the largest segment number.
	MaxSegment = 1<<(64-segmentShift) - 1

	segmentShift = 40
	fileMagic    = "bamvlog1"
	recordMagic  = 0x314c5642 // "BVL1" little-endian
	tmpSuffix    = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors. Errors returned by the package wrap one of these and name the file.
var (
	// ErrCorrupt: a header or a referenced record failed validation, the
	// file ends before a referenced record, or a referenced segment is
	// missing.
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
	// ErrTooLarge: a payload exceeds MaxPayload, or segment numbers are
	// used up.
	ErrTooLarge = errors.New("vlog: record too large")
	// ErrNoSegment: Read was given a pointer into a segment that is not
	// open: removed by Remove, or never there (a damaged pointer).
	ErrNoSegment = errors.New("vlog: no such segment")
	// ErrInvalid: a bad argument (removing the head segment).
	ErrInvalid = errors.New("vlog: invalid argument")
)

// Ptr locates one record: its segment, the offset of its header in the
// segment file, its payload length and the payload's CRC32-C.
type Ptr struct {
	Seg uint32
	Off uint64
	Len uint32
	CRC uint32
}

// End is the offset just past the record in its segment.
func (p Ptr) End() uint64 { return p.Off + RecordHeaderSize + uint64(p.Len) }

// Size is the record's size in its segment, header included.
func (p Ptr) Size() uint64 { return RecordHeaderSize + uint64(p.Len) }

// Put encodes p into b[:PtrSize]. Pointers of segment 0 encode as in the
// single-file format, whose first word was the plain offset.
func (p Ptr) Put(b []byte) {
	binary.LittleEndian.PutUint64(b, p.Off&(MaxSegmentSize-1)|uint64(p.Seg)<<segmentShift)
	binary.LittleEndian.PutUint32(b[8:], p.Len)
	binary.LittleEndian.PutUint32(b[12:], p.CRC)
}

// DecodePtr decodes b[:PtrSize].
func DecodePtr(b []byte) Ptr {
	w := binary.LittleEndian.Uint64(b)
	return Ptr{Seg: uint32(w >> segmentShift), Off: w & (MaxSegmentSize - 1),
		Len: binary.LittleEndian.Uint32(b[8:]), CRC: binary.LittleEndian.Uint32(b[12:])}
}

// SegmentPath is the file of segment id of the log at path: path itself
// for segment 0, path.<id> for the others.
func SegmentPath(path string, id uint32) string {
	if id == 0 {
		return path
	}
	return path + "." + strconv.FormatUint(uint64(id), 10)
}

// Options configure Open.
type Options struct {
	// ID is the owner's identity, written into new segments' headers and
	// checked against existing ones'.
	ID [16]byte
	// Ends maps each segment the owner refers to to the end of its last
	// referenced record. Every kept segment is cut to its end (bytes
	// after it are unreferenced); a referenced segment that is missing or
	// shorter than its end is ErrCorrupt. Segments that are not referenced
	// are deleted, except the newest, which stays the head, cut to its
	// header. Entries of at most HeaderSize count as unreferenced.
	Ends map[uint32]uint64
	// ReadOnly opens the segments without creating, writing, truncating
	// or deleting anything.
	ReadOnly bool
	// Logger receives recovery notes (a cut tail, a deleted segment).
	// Default: discard.
	Logger *slog.Logger
}

// Segment describes one segment file.
type Segment struct {
	ID    uint32 `json:"id"`
	Path  string `json:"path"`
	Bytes uint64 `json:"bytes"` // file size, header included
	Head  bool   `json:"head"`  // receives appends
}

type segment struct {
	id   uint32
	path string
	f    *os.File
	size uint64 // file size; the head's next record goes here
}

// Log is an append-only value log made of segment files. Appends go to the
// newest segment, the head; Rotate starts a new head and Remove deletes
// older segments once nothing refers to them (compaction). Safe for
// concurrent use.
type Log struct {
	path     string
	id       [16]byte
	readOnly bool
	lg       *slog.Logger

	mu      sync.Mutex // orders appends and rotations; guards the fields below
	head    *segment
	written uint64 // bytes appended since Open, all segments
	err     error  // sticky write failure
	closed  bool

	segMu sync.RWMutex        // guards segs; held shared by reads
	segs  map[uint32]*segment // nil once closed

	syncMu sync.Mutex
	synced uint64 // every byte of written up to here is durable
}

func encodeHeader(id [16]byte) []byte {
	h := make([]byte, HeaderSize)
	copy(h, fileMagic)
	copy(h[8:], id[:])
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return h
}

// Open opens the value log whose segment 0 is the file path (creating it
// when there is none) and recovers it as opts says.
func Open(path string, opts Options) (*Log, error) {
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	l := &Log{path: path, id: opts.ID, readOnly: opts.ReadOnly, lg: lg, segs: map[uint32]*segment{}}
	if err := l.recover(opts.Ends); err != nil {
		for _, s := range l.segs {
			s.f.Close()
		}
		return nil, fmt.Errorf("vlog: %s: %w", path, err)
	}
	return l, nil
}

// listSegments returns the segment files beside path and leftover
// temporary files of segments being created.
func listSegments(path string) (map[uint32]string, []string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	found := map[uint32]string{}
	var tmps []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == base:
			found[0] = filepath.Join(dir, name)
		case !strings.HasPrefix(name, base+"."):
		case strings.HasSuffix(name, tmpSuffix):
			tmps = append(tmps, filepath.Join(dir, name))
		default:
			rest := name[len(base)+1:]
			n, err := strconv.ParseUint(rest, 10, 32)
			if err == nil && n > 0 && n <= MaxSegment && strconv.FormatUint(n, 10) == rest {
				found[uint32(n)] = filepath.Join(dir, name)
			}
		}
	}
	return found, tmps, nil
}

func (l *Log) recover(ends map[uint32]uint64) error {
	found, tmps, err := listSegments(l.path)
	if err != nil {
		return err
	}
	refd := map[uint32]uint64{}
	for id, end := range ends {
		if end <= HeaderSize {
			continue
		}
		if id > MaxSegment {
			return fmt.Errorf("%w: segment number %d out of range", ErrCorrupt, id)
		}
		if _, ok := found[id]; !ok {
			return fmt.Errorf("%w: segment %d (%s) is missing, records are referenced up to offset %d", ErrCorrupt, id, SegmentPath(l.path, id), end)
		}
		refd[id] = end
	}
	headID, haveHead := uint32(0), false
	for id := range found {
		if !haveHead || id > headID {
			headID, haveHead = id, true
		}
	}
	if l.readOnly {
		if !haveHead {
			return fmt.Errorf("no segment files: %w", os.ErrNotExist)
		}
	} else {
		removed := false
		for _, p := range tmps {
			l.lg.Warn("vlog: removing an unfinished segment", "file", p)
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return classify(err)
			}
			removed = true
		}
		for _, id := range sortedIDs(found) {
			if _, ok := refd[id]; ok || id == headID {
				continue
			}
			if err := l.checkForeign(found[id]); err != nil {
				return err
			}
			l.lg.Warn("vlog: removing an unreferenced segment", "file", found[id])
			if err := os.Remove(found[id]); err != nil {
				return classify(err)
			}
			delete(found, id)
			removed = true
		}
		if removed {
			if err := syncDir(l.path); err != nil {
				return classify(err)
			}
		}
		if !haveHead {
			s, err := createSegment(l.path, 0, l.id)
			if err != nil {
				return err
			}
			l.segs[0] = s
			l.head = s
			return nil
		}
	}
	for _, id := range sortedIDs(found) {
		s, err := l.openSegment(id, found[id], max(refd[id], HeaderSize), id == headID)
		if err != nil {
			return err
		}
		l.segs[id] = s
		if id == headID {
			l.head = s
		}
	}
	return nil
}

func sortedIDs[V any](m map[uint32]V) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// readHeader reads a segment's header: zero is true for a file that was
// created and never written (shorter than a header, all zero).
func readHeader(f *os.File) (hdr []byte, zero bool, err error) {
	hdr = make([]byte, HeaderSize)
	n, err := f.ReadAt(hdr, 0)
	if err != nil && err != io.EOF {
		return nil, false, err
	}
	if n < HeaderSize && isZero(hdr[:n]) {
		return nil, true, nil
	}
	if n < HeaderSize || string(hdr[:8]) != fileMagic || binary.LittleEndian.Uint32(hdr[24:]) != crc32.Checksum(hdr[:24], castagnoli) {
		return nil, false, fmt.Errorf("%w: bad file header", ErrCorrupt)
	}
	return hdr, false, nil
}

// checkForeign refuses to delete a file that is not an empty or valid
// segment of this log.
func (l *Log) checkForeign(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr, zero, err := readHeader(f)
	switch {
	case err != nil:
		return fmt.Errorf("unreferenced segment %s: %w", path, err)
	case !zero && [16]byte(hdr[8:24]) != l.id:
		return fmt.Errorf("%w: unreferenced segment %s has file id %x, table id %x", ErrMismatch, path, hdr[8:24], l.id)
	}
	return nil
}

// openSegment opens one segment, checks its header and cuts it to end.
func (l *Log) openSegment(id uint32, path string, end uint64, head bool) (*segment, error) {
	flag := os.O_RDWR
	if l.readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	s := &segment{id: id, path: path, f: f}
	if err := l.checkSegment(s, end, head); err != nil {
		f.Close()
		return nil, fmt.Errorf("segment %d (%s): %w", id, path, err)
	}
	return s, nil
}

func (l *Log) checkSegment(s *segment, end uint64, head bool) error {
	st, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := uint64(st.Size())
	hdr, zero, err := readHeader(s.f)
	if err != nil {
		return err
	}
	if zero {
		// Created and never written: only the head of a log written by
		// an older version can be in this state.
		if end > HeaderSize || !head {
			return fmt.Errorf("%w: file is %d bytes, records are referenced up to offset %d", ErrCorrupt, size, end)
		}
		if l.readOnly {
			s.size = size
			return nil
		}
		if err := s.f.Truncate(0); err != nil {
			return classify(err)
		}
		if _, err := s.f.WriteAt(encodeHeader(l.id), 0); err != nil {
			return classify(err)
		}
		s.size = HeaderSize
		return classify(s.f.Sync())
	}
	if [16]byte(hdr[8:24]) != l.id {
		return fmt.Errorf("%w: file id %x, table id %x", ErrMismatch, hdr[8:24], l.id)
	}
	if size < end {
		return fmt.Errorf("%w: file ends at offset %d, records are referenced up to offset %d", ErrCorrupt, size, end)
	}
	s.size = size
	if size > end && !l.readOnly {
		l.lg.Warn("vlog: dropping unreferenced tail", "file", s.path, "offset", end, "bytes", size-end)
		if err := s.f.Truncate(int64(end)); err != nil {
			return classify(err)
		}
		if err := s.f.Sync(); err != nil {
			return classify(err)
		}
		s.size = end
	}
	return nil
}

// createSegment makes segment id with its header, durably: the file is
// written under a temporary name, synced and renamed into place, and the
// directory is synced, so a segment file never has a torn header.
func createSegment(path string, id uint32, owner [16]byte) (*segment, error) {
	final := SegmentPath(path, id)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, classify(err)
	}
	fail := func(err error) (*segment, error) {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("create segment %d: %w", id, classify(err))
	}
	if _, err := f.WriteAt(encodeHeader(owner), 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return fail(err)
	}
	if err := syncDir(final); err != nil {
		f.Close()
		return nil, fmt.Errorf("create segment %d: %w", id, classify(err))
	}
	return &segment{id: id, path: final, f: f, size: HeaderSize}, nil
}

// syncDir makes the creation, renaming or removal of files in the
// directory of path durable.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
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

// Path is the file of segment 0, the base of the other segments' names.
func (l *Log) Path() string { return l.path }

// Size is the total size of the segment files, headers included.
func (l *Log) Size() uint64 {
	var n uint64
	for _, s := range l.Segments() {
		n += s.Bytes
	}
	return n
}

// Head is the segment that receives appends.
func (l *Log) Head() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head == nil {
		return 0
	}
	return l.head.id
}

// Segments describes the open segments, oldest first.
func (l *Log) Segments() []Segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	out := make([]Segment, 0, len(l.segs))
	for _, id := range sortedIDs(l.segs) {
		s := l.segs[id]
		out = append(out, Segment{ID: id, Path: s.path, Bytes: s.size, Head: s == l.head})
	}
	return out
}

// Append writes one record per payload, contiguously, with one write into
// the head segment, and returns their pointers. The records are durable
// after Sync. A head that would pass MaxSegmentSize is rotated first.
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
	if l.head.size+uint64(len(buf)) > MaxSegmentSize {
		if err := l.rotateLocked(); err != nil {
			return nil, err
		}
	}
	h := l.head
	if _, err := h.f.WriteAt(buf, int64(h.size)); err != nil {
		l.err = fmt.Errorf("%w: write %s at offset %d: %w", ErrFailed, h.path, h.size, classify(err))
		return nil, l.err
	}
	for i := range ptrs {
		ptrs[i].Seg = h.id
		ptrs[i].Off += h.size
	}
	h.size += uint64(len(buf))
	l.written += uint64(len(buf))
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

// Rotate starts a new head segment, numbered one above the current one,
// after syncing the current head; later appends go to the new head. It
// returns the numbers of every other segment, oldest first: the ones a
// compaction may empty and Remove.
func (l *Log) Rotate() ([]uint32, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return nil, err
	}
	if err := l.rotateLocked(); err != nil {
		return nil, err
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	ids := sortedIDs(l.segs)
	return slices.DeleteFunc(ids, func(id uint32) bool { return id == l.head.id }), nil
}

// rotateLocked switches to a new head. Caller holds mu.
func (l *Log) rotateLocked() error {
	old := l.head
	if old.id >= MaxSegment {
		return fmt.Errorf("%w: segment numbers used up (%d)", ErrTooLarge, old.id)
	}
	// Everything in the old head becomes durable here, so Sync only ever
	// has to sync the current head.
	if err := old.f.Sync(); err != nil {
		l.err = fmt.Errorf("%w: sync %s: %w", ErrFailed, old.path, classify(err))
		return l.err
	}
	s, err := createSegment(l.path, old.id+1, l.id)
	if err != nil {
		return fmt.Errorf("vlog: %s: %w", l.path, err)
	}
	l.segMu.Lock()
	l.segs[s.id] = s
	l.segMu.Unlock()
	l.head = s
	return nil
}

// Remove closes and deletes segments (never the head) and syncs the
// directory. Reads of pointers into them fail with ErrNoSegment from the
// moment Remove starts; reads in progress finish first. The owner must
// have made durable an index that no longer refers to them.
func (l *Log) Remove(ids ...uint32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	for _, id := range ids {
		if id == l.head.id {
			return fmt.Errorf("%w: segment %d of %s is the head", ErrInvalid, id, l.path)
		}
	}
	l.segMu.Lock()
	var gone []*segment
	for _, id := range ids {
		if s, ok := l.segs[id]; ok {
			gone = append(gone, s)
			delete(l.segs, id)
		}
	}
	l.segMu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	var errs []error
	for _, s := range gone {
		errs = append(errs, s.f.Close())
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, syncDir(l.path))
	if err := errors.Join(errs...); err != nil {
		// Files left behind are unreferenced; the next Open deletes them.
		return fmt.Errorf("vlog: remove segments of %s: %w", l.path, classify(err))
	}
	return nil
}

// Sync makes every record appended before the call durable. Concurrent
// callers share syncs: one that finds its records already covered by a
// sync that started after they were written returns at once.
func (l *Log) Sync(ctx context.Context) error {
	l.mu.Lock()
	want := l.written
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
	// Older heads were synced when they were rotated out, so everything
	// written so far is covered by a sync of the current head.
	l.mu.Lock()
	upto, h := l.written, l.head
	l.mu.Unlock()
	if err := h.f.Sync(); err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = fmt.Errorf("%w: sync %s: %w", ErrFailed, h.path, classify(err))
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
// the file and offset; a pointer into a segment that is not open is
// ErrNoSegment.
func (l *Log) Read(p Ptr) ([]byte, error) {
	if p.Off < HeaderSize || p.Len > MaxPayload {
		return nil, l.corrupt(SegmentPath(l.path, p.Seg), p, "pointer out of range")
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if l.segs == nil {
		return nil, ErrClosed
	}
	s, ok := l.segs[p.Seg]
	if !ok {
		return nil, fmt.Errorf("%w: segment %d of %s (record at offset %d)", ErrNoSegment, p.Seg, l.path, p.Off)
	}
	buf := make([]byte, RecordHeaderSize+int(p.Len))
	if _, err := s.f.ReadAt(buf, int64(p.Off)); err != nil {
		if err == io.EOF {
			return nil, l.corrupt(s.path, p, "record past the end of the file")
		}
		return nil, fmt.Errorf("vlog: read %s at offset %d: %w", s.path, p.Off, err)
	}
	h := buf[:RecordHeaderSize]
	switch {
	case binary.LittleEndian.Uint32(h[12:]) != crc32.Checksum(h[:12], castagnoli):
		return nil, l.corrupt(s.path, p, "record header checksum mismatch")
	case binary.LittleEndian.Uint32(h) != recordMagic:
		return nil, l.corrupt(s.path, p, "bad record magic")
	case binary.LittleEndian.Uint32(h[4:]) != p.Len:
		return nil, l.corrupt(s.path, p, fmt.Sprintf("record length %d, index says %d", binary.LittleEndian.Uint32(h[4:]), p.Len))
	case binary.LittleEndian.Uint32(h[8:]) != p.CRC:
		return nil, l.corrupt(s.path, p, "record checksum differs from the index's")
	}
	payload := buf[RecordHeaderSize:]
	if crc32.Checksum(payload, castagnoli) != p.CRC {
		return nil, l.corrupt(s.path, p, "payload checksum mismatch")
	}
	return payload, nil
}

// CorruptError describes a damaged record. It wraps ErrCorrupt.
type CorruptError struct {
	Path   string // the segment file
	Off    uint64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("vlog: %s: record at offset %d: %s", e.Path, e.Off, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func (l *Log) corrupt(path string, p Ptr, reason string) error {
	return &CorruptError{Path: path, Off: p.Off, Reason: reason}
}

// Close syncs (unless read-only or failed) and closes the files.
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
	l.segMu.Lock()
	segs := l.segs
	l.segs = nil
	l.segMu.Unlock()
	errs := []error{err}
	for _, id := range sortedIDs(segs) {
		errs = append(errs, segs[id].f.Close())
	}
	return errors.Join(errs...)
}
