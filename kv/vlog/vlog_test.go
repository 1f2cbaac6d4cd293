package vlog

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

var testID = [16]byte{1, 2, 3}

func TestAppendReadReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.vlog")
	l, err := Open(path, Options{ID: testID})
	if err != nil {
		t.Fatal(err)
	}
	payloads := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("xy"), 5000)}
	ptrs, err := l.Append(payloads...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for i, p := range ptrs {
		got, err := l.Read(p)
		if err != nil || !bytes.Equal(got, payloads[i]) {
			t.Fatalf("Read(%+v) = %q, %v", p, got, err)
		}
		var b [PtrSize]byte
		p.Put(b[:])
		if DecodePtr(b[:]) != p {
			t.Fatalf("pointer round trip of %+v", p)
		}
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Reopen keeping only the first two records.
	l, err = Open(path, Options{ID: testID, End: ptrs[1].End()})
	if err != nil {
		t.Fatal(err)
	}
	if l.Size() != ptrs[1].End() {
		t.Fatalf("Size = %d, want %d", l.Size(), ptrs[1].End())
	}
	if _, err := l.Read(ptrs[2]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read past the cut = %v, want ErrCorrupt", err)
	}
	if got, err := l.Read(ptrs[1]); err != nil || string(got) != "a" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	wrong := ptrs[1]
	wrong.CRC++
	if _, err := l.Read(wrong); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read with a wrong checksum = %v, want ErrCorrupt", err)
	}
	l.Close(ctx)
	if _, err := Open(path, Options{ID: [16]byte{9}, End: ptrs[1].End()}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open with another id = %v, want ErrMismatch", err)
	}
	if _, err := Open(path, Options{ID: testID, End: ptrs[2].End()}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with End past the file = %v, want ErrCorrupt", err)
	}
	if err := os.WriteFile(path, []byte("not a value log, but long enough to have a header"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{ID: testID}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of a foreign file = %v, want ErrCorrupt", err)
	}
}

// FuzzRead checks that Read of arbitrary bytes under an arbitrary pointer
// fails cleanly or returns a payload matching the pointer.
func FuzzRead(f *testing.F) {
	f.Add([]byte{}, uint64(HeaderSize), uint32(0), uint32(0))
	f.Add(bytes.Repeat([]byte{0x42}, 64), uint64(HeaderSize), uint32(4), uint32(7))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, body []byte, off uint64, n uint32, crc uint32) {
		path := filepath.Join(dir, "f.vlog")
		os.Remove(path)
		l, err := Open(path, Options{ID: testID})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		if _, err := l.f.WriteAt(body, HeaderSize); err != nil {
			t.Fatal(err)
		}
		p := Ptr{Off: off, Len: n % (1 << 16), CRC: crc}
		got, err := l.Read(p)
		if err == nil && len(got) != int(p.Len) {
			t.Fatalf("Read returned %d bytes for a pointer of %d", len(got), p.Len)
		}
	})
}
