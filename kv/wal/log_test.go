package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

func openT(t *testing.T, path string, opts Options) (*Log, []Record) {
	t.Helper()
	var got []Record
	l, err := Open(path, opts, func(r Record) error {
		r.Payload = append([]byte(nil), r.Payload...)
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l, got
}

func TestLogAppendReplay(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "t.wal")
	id := [16]byte{7}
	l, got := openT(t, p, Options{ID: id})
	if len(got) != 0 {
		t.Fatalf("new log replayed %d records", len(got))
	}
	for i := range 10 {
		lsn, err := l.Append(1, []byte(fmt.Sprint(i)))
		if err != nil || lsn != uint64(i+1) {
			t.Fatalf("Append = %d, %v", lsn, err)
		}
	}
	if err := l.Commit(ctx, 10, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l, got = openT(t, p, Options{ID: id, After: 4})
	defer l.Close(ctx)
	if len(got) != 6 || got[0].LSN != 5 || string(got[5].Payload) != "9" {
		t.Fatalf("replay after 4: %+v", got)
	}
	if lsn, _ := l.Append(1, nil); lsn != 11 {
		t.Fatalf("next LSN %d, want 11", lsn)
	}
	if _, err := Open(p+"x", Options{ID: id}, nil); err != nil {
		t.Fatalf("fresh file: %v", err)
	}
}

func TestLogMismatchAndTornTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "t.wal")
	l, _ := openT(t, p, Options{ID: [16]byte{1}})
	for range 3 {
		l.Append(2, []byte("abcdefgh"))
	}
	l.Close(ctx)
	if _, err := Open(p, Options{ID: [16]byte{2}}, func(Record) error { return nil }); !errors.Is(err, ErrMismatch) {
		t.Fatalf("other ID: %v", err)
	}
	st, _ := os.Stat(p)
	// Cut the last record in half: a torn tail is dropped.
	if err := os.Truncate(p, st.Size()-5); err != nil {
		t.Fatal(err)
	}
	l, got := openT(t, p, Options{ID: [16]byte{1}})
	if len(got) != 2 {
		t.Fatalf("after torn tail: %d records", len(got))
	}
	if lsn, _ := l.Append(2, []byte("z")); lsn != 3 {
		t.Fatalf("next LSN %d", lsn)
	}
	l.Close(ctx)
	// Damage the first record: valid records follow, so it is corruption.
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	f.WriteAt([]byte{0xff}, HeaderSize+RecordHeaderSize)
	f.Close()
	_, err := Open(p, Options{ID: [16]byte{1}}, func(Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("mid-log damage: %v", err)
	}
	l, got = openT(t, p, Options{ID: [16]byte{1}, TruncateCorrupt: true})
	if len(got) != 0 {
		t.Fatalf("TruncateCorrupt kept %d records", len(got))
	}
	l.Close(ctx)
}

func TestLogGroupCommit(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "g.wal")
	cf := &countingFile{}
	l, _ := openT(t, p, Options{ID: [16]byte{3}, OpenFile: func(p string) (File, error) {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		cf.File = f
		return cf, err
	}})
	var wg sync.WaitGroup
	const writers, each = 16, 20
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				lsn, err := l.Append(1, []byte(fmt.Sprint(w, i)))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Commit(ctx, lsn, true); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	l.Close(ctx)
	cf.mu.Lock()
	syncs := cf.syncs
	cf.mu.Unlock()
	if syncs >= writers*each {
		t.Logf("no sharing of syncs observed (%d syncs for %d commits)", syncs, writers*each)
	}
	_, got := openT(t, p, Options{ID: [16]byte{3}})
	if len(got) != writers*each {
		t.Fatalf("replayed %d records, want %d", len(got), writers*each)
	}
}

func TestLogFullDisk(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "f.wal")
	ff := &countingFile{failWrites: true}
	l, _ := openT(t, p, Options{ID: [16]byte{4}, OpenFile: func(p string) (File, error) {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		ff.File = f
		return ff, err
	}})
	lsn, _ := l.Append(1, []byte("x"))
	err := l.Commit(ctx, lsn, true)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrFailed) {
		t.Fatalf("Commit on a full disk: %v", err)
	}
	if _, err := l.Append(1, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append after failure: %v", err)
	}
	l.Close(ctx)
}

// countingFile counts syncs and can fail writes after the header with ENOSPC.
type countingFile struct {
	*os.File
	mu         sync.Mutex
	syncs      int
	failWrites bool
}

func (c *countingFile) WriteAt(b []byte, off int64) (int, error) {
	if c.failWrites && off >= HeaderSize {
		return 0, &os.PathError{Op: "write", Path: c.Name(), Err: syscall.ENOSPC}
	}
	return c.File.WriteAt(b, off)
}

func (c *countingFile) Sync() error {
	c.mu.Lock()
	c.syncs++
	c.mu.Unlock()
	return c.File.Sync()
}
