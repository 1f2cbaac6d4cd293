package wal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// File is what the log needs of its file. *os.File satisfies it; tests
// substitute files that fail, fill up or forget unsynced writes.
type File interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Sync() error
	Close() error
}

// Options configure Open.
type Options struct {
	// ID is the owner's identity. Create writes it; Open fails with
	// ErrMismatch when the file holds another.
	ID [16]byte
	// After skips records with LSN <= After during replay (they are
	// covered by the owner's last checkpoint). The next record appended
	// gets an LSN above both After and every record in the file.
	After uint64
	// TruncateCorrupt makes Open drop everything from a corrupt record on,
	// even when valid records follow it, instead of failing with
	// ErrCorrupt.
	TruncateCorrupt bool
	// OpenFile opens the file (default os.OpenFile with O_RDWR|O_CREATE).
	OpenFile func(path string) (File, error)
	// Logger receives recovery notes (a dropped torn tail). Default: discard.
	Logger *slog.Logger
}

// Log is an append-only write-ahead log with group commit: Append buffers
// a record in memory and returns its LSN; Commit writes the buffer and,
// for a durable commit, syncs the file, sharing one write and one sync
// among every caller waiting at that time. Safe for concurrent use.
type Log struct {
	path string
	f    File
	log  *slog.Logger

	mu      sync.Mutex
	buf     []byte // encoded records not yet handed to a writer
	spare   []byte
	next    uint64 // LSN of the next record
	size    int64  // bytes in the file (header + written records)
	written uint64 // highest LSN written to the file
	synced  uint64 // highest LSN known durable
	round   *round // the write in progress, nil when idle
	err     error  // sticky failure
	closed  bool
}

// round is one group-commit write (and sync) in progress.
type round struct {
	done chan struct{}
	upto uint64
	sync bool
	err  error
}

// Open opens the log at path, creating it with the header for opts.ID if it
// does not exist or is empty. It replays every valid record with LSN above
// opts.After by calling fn in LSN order (fn may keep nothing of the payload
// after it returns) and positions the log for appending after the last
// valid record. A torn tail (a bad record after which nothing valid
// follows) is cut off; corruption followed by valid records fails with
// ErrCorrupt unless opts.TruncateCorrupt.
func Open(path string, opts Options, fn func(Record) error) (*Log, error) {
	open := opts.OpenFile
	if open == nil {
		open = func(p string) (File, error) { return os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644) }
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	f, err := open(path)
	if err != nil {
		return nil, fmt.Errorf("wal: open %s: %w", path, err)
	}
	l := &Log{path: path, f: f, log: lg, next: opts.After + 1}
	if err := l.recover(opts, fn); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: %s: %w", path, err)
	}
	l.written, l.synced = l.next-1, l.next-1
	return l, nil
}

func readAll(f File) ([]byte, error) {
	var out []byte
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := f.ReadAt(buf, off)
		out = append(out, buf[:n]...)
		off += int64(n)
		if err == io.EOF || (err == nil && n == 0) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (l *Log) recover(opts Options, fn func(Record) error) error {
	data, err := readAll(l.f)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if len(data) < HeaderSize && isZero(data) {
		// New (or created but never written): write the header.
		if err := l.f.Truncate(0); err != nil {
			return err
		}
		if _, err := l.f.WriteAt(EncodeHeader(opts.ID), 0); err != nil {
			return classify(err)
		}
		if err := l.f.Sync(); err != nil {
			return classify(err)
		}
		l.size = HeaderSize
		return nil
	}
	id, err := DecodeHeader(data)
	if err != nil {
		return err
	}
	if id != opts.ID {
		return fmt.Errorf("%w: log ID %x, table ID %x", ErrMismatch, id, opts.ID)
	}
	off := HeaderSize
	last := uint64(0)
	for off < len(data) {
		rec, n, derr := DecodeRecord(data[off:])
		if derr == nil && last != 0 && rec.LSN <= last {
			derr = fmt.Errorf("%w: LSN %d after %d", ErrCorrupt, rec.LSN, last)
		}
		if derr != nil {
			if at := nextValid(data, off+1); at >= 0 && !opts.TruncateCorrupt {
				return fmt.Errorf("record at offset %d: %w (a valid record follows at offset %d, so this is not a torn tail; reopen with TruncateCorrupt to drop everything from offset %d)", off, derr, at, off)
			}
			l.log.Warn("wal: dropping torn tail", "file", l.path, "offset", off, "bytes", len(data)-off, "reason", derr)
			if err := l.f.Truncate(int64(off)); err != nil {
				return classify(err)
			}
			if err := l.f.Sync(); err != nil {
				return classify(err)
			}
			break
		}
		last = rec.LSN
		if rec.LSN > opts.After {
			if err := fn(rec); err != nil {
				return err
			}
		}
		off += n
	}
	l.size = int64(off)
	l.next = max(l.next, last+1)
	return nil
}

// nextValid returns the offset of the first valid record at or after from,
// or -1.
func nextValid(data []byte, from int) int {
	for i := from; i+RecordHeaderSize <= len(data); i++ {
		if data[i] != byte(RecordMagic&0xff) {
			continue
		}
		if _, _, err := DecodeRecord(data[i:]); err == nil {
			return i
		}
	}
	return -1
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// classify marks a full disk so callers can test for it.
func classify(err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}

// ErrNoSpace wraps write and sync failures caused by a full disk.
var ErrNoSpace = errors.New("wal: no space left on device")

// Path is the log's file name.
func (l *Log) Path() string { return l.path }

// Append buffers one record and returns its LSN. Records reach the file in
// LSN order at the next Commit (or when the buffer grows large). It fails
// when the log has failed or closed, or the payload is too large.
func (l *Log) Append(typ uint8, payload []byte) (uint64, error) {
	if typ == 0 {
		return 0, fmt.Errorf("wal: record type 0 is reserved")
	}
	if len(payload) > MaxPayload {
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(payload), MaxPayload)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return 0, err
	}
	lsn := l.next
	l.next++
	l.buf = AppendRecord(l.buf, lsn, typ, payload)
	return lsn, nil
}

// LastLSN is the LSN of the last record appended (or the After of Open).
func (l *Log) LastLSN() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Size is the file's size plus buffered bytes: what a checkpoint would
// reclaim.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.size + int64(len(l.buf))
}

// Buffered is the number of bytes appended but not yet written.
func (l *Log) Buffered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buf)
}

func (l *Log) usable() error {
	if l.closed {
		return ErrClosed
	}
	if l.err != nil {
		return l.err
	}
	return nil
}

// Commit makes every record up to lsn written to the file and, when
// durable, synced. Concurrent callers share rounds: one caller writes and
// syncs everything buffered, the others wait for it. The wait ends early
// with ctx's error (the records stay queued).
func (l *Log) Commit(ctx context.Context, lsn uint64, durable bool) error {
	l.mu.Lock()
	for {
		if err := l.usable(); err != nil {
			l.mu.Unlock()
			return err
		}
		if lsn <= l.synced || (!durable && lsn <= l.written) {
			l.mu.Unlock()
			return nil
		}
		if r := l.round; r != nil {
			// Wait for the round in progress, then look again.
			l.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			l.mu.Lock()
			continue
		}
		// Lead a round: write all that is buffered.
		r := &round{done: make(chan struct{}), upto: l.next - 1, sync: durable}
		buf := l.buf
		l.buf, l.spare = l.spare[:0], nil
		off := l.size
		l.round = r
		l.mu.Unlock()

		var err error
		if len(buf) > 0 {
			_, err = l.f.WriteAt(buf, off)
		}
		if err == nil && durable {
			err = l.f.Sync()
		}

		l.mu.Lock()
		l.round = nil
		if err != nil {
			r.err = classify(err)
			l.err = errors.Join(ErrFailed, fmt.Errorf("%s: %w", l.path, r.err))
		} else {
			l.size += int64(len(buf))
			l.written = r.upto
			if durable {
				l.synced = r.upto
			}
			if l.spare == nil {
				l.spare = buf[:0]
			}
		}
		close(r.done)
	}
}

// Reset empties the log after its owner has checkpointed everything up to
// LastLSN: the file is cut back to its header and synced. LSNs continue
// from where they were. Buffered records are dropped, so the caller must
// hold off appends while it checkpoints.
func (l *Log) Reset(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	for l.round != nil {
		r := l.round
		l.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			l.mu.Lock()
			return ctx.Err()
		}
		l.mu.Lock()
	}
	if err := l.f.Truncate(HeaderSize); err != nil {
		l.err = errors.Join(ErrFailed, classify(err))
		return l.err
	}
	if err := l.f.Sync(); err != nil {
		l.err = errors.Join(ErrFailed, classify(err))
		return l.err
	}
	l.buf = l.buf[:0]
	l.size = HeaderSize
	l.written, l.synced = l.next-1, l.next-1
	return nil
}

// Err returns the sticky failure, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close writes and syncs what is buffered (unless the log failed) and
// closes the file.
func (l *Log) Close(ctx context.Context) error {
	l.mu.Lock()
	last := l.next - 1
	failed := l.err != nil || l.closed
	l.mu.Unlock()
	var err error
	if !failed {
		err = l.Commit(ctx, last, true)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	return errors.Join(err, l.f.Close())
}
