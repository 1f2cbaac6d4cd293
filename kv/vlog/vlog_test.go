package vlog

import (
	"bytes"
	"context"
	"encoding/binary"
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
	l, err = Open(path, Options{ID: testID, Ends: map[uint32]uint64{0: ptrs[1].End()}})
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
	if _, err := Open(path, Options{ID: [16]byte{9}, Ends: map[uint32]uint64{0: ptrs[1].End()}}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open with another id = %v, want ErrMismatch", err)
	}
	if _, err := Open(path, Options{ID: testID, Ends: map[uint32]uint64{0: ptrs[2].End()}}); !errors.Is(err, ErrCorrupt) {
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
		if _, err := l.head.f.WriteAt(body, HeaderSize); err != nil {
			t.Fatal(err)
		}
		p := Ptr{Off: off, Len: n % (1 << 16), CRC: crc}
		got, err := l.Read(p)
		if err == nil && len(got) != int(p.Len) {
			t.Fatalf("Read returned %d bytes for a pointer of %d", len(got), p.Len)
		}
	})
}

func TestSegments(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.vlog")
	l, err := Open(path, Options{ID: testID})
	if err != nil {
		t.Fatal(err)
	}
	old, err := l.Append([]byte("zero-a"), []byte("zero-b"))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := l.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != 1 || sealed[0] != 0 || l.Head() != 1 {
		t.Fatalf("Rotate = %v, head %d; want [0], head 1", sealed, l.Head())
	}
	moved, err := l.Append([]byte("zero-b"), []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if moved[0].Seg != 1 || moved[0].Off != HeaderSize {
		t.Fatalf("first record of segment 1 at %+v", moved[0])
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(old, moved...) {
		if _, err := l.Read(p); err != nil {
			t.Fatalf("Read(%+v): %v", p, err)
		}
	}
	if err := l.Remove(1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Remove(head) = %v, want ErrInvalid", err)
	}
	if err := l.Remove(0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(old[0]); !errors.Is(err, ErrNoSegment) {
		t.Fatalf("Read from a removed segment = %v, want ErrNoSegment", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment 0 still on disk: %v", err)
	}
	if got, want := l.Size(), moved[1].End(); got != want {
		t.Fatalf("Size = %d, want %d", got, want)
	}
	// A rotation whose head never got a referenced record.
	if _, err := l.Rotate(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("unreferenced")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Leftovers of a segment being created, and a stale unreferenced one.
	os.WriteFile(SegmentPath(path, 4)+tmpSuffix, []byte("half"), 0o644)

	// Reopen referencing only the first record of segment 1: the head
	// (2) stays, cut to its header, segment 1 is cut after the record.
	l, err = Open(path, Options{ID: testID, Ends: map[uint32]uint64{1: moved[0].End()}})
	if err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) != 2 || segs[0].ID != 1 || segs[0].Bytes != moved[0].End() || segs[1].ID != 2 || !segs[1].Head || segs[1].Bytes != HeaderSize {
		t.Fatalf("segments after reopen: %+v", segs)
	}
	if got, err := l.Read(moved[0]); err != nil || string(got) != "zero-b" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	p, err := l.Append([]byte("two"))
	if err != nil || p[0].Seg != 2 {
		t.Fatalf("Append after reopen: %+v, %v", p, err)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(SegmentPath(path, 4) + tmpSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary segment file left: %v", err)
	}

	// Nothing referenced: only the head survives.
	l, err = Open(path, Options{ID: testID})
	if err != nil {
		t.Fatal(err)
	}
	if segs := l.Segments(); len(segs) != 1 || segs[0].ID != 2 {
		t.Fatalf("segments: %+v", segs)
	}
	l.Close(ctx)
	if _, err := os.Stat(SegmentPath(path, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unreferenced segment 1 still on disk: %v", err)
	}

	// A referenced segment that is missing.
	if _, err := Open(path, Options{ID: testID, Ends: map[uint32]uint64{1: 100}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a missing segment = %v, want ErrCorrupt", err)
	}
	// An unreferenced file with another owner's header is left alone.
	other, err := Open(filepath.Join(t.TempDir(), "o.vlog"), Options{ID: [16]byte{7}})
	if err != nil {
		t.Fatal(err)
	}
	other.Close(ctx)
	data, _ := os.ReadFile(other.Path())
	os.WriteFile(SegmentPath(path, 1), data, 0o644)
	if _, err := Open(path, Options{ID: testID}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open beside a foreign segment = %v, want ErrMismatch", err)
	}
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "r.vlog")
	if _, err := Open(path, Options{ID: testID, ReadOnly: true}); err == nil {
		t.Fatal("read-only Open of a missing log succeeded")
	}
	l, err := Open(path, Options{ID: testID})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := l.Append([]byte("x"))
	l.Append([]byte("tail"))
	l.Close(ctx)
	l, err = Open(path, Options{ID: testID, ReadOnly: true, Ends: map[uint32]uint64{0: p[0].End()}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if got, err := l.Read(p[0]); err != nil || string(got) != "x" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	if _, err := l.Append([]byte("y")); err == nil {
		t.Fatal("Append to a read-only log succeeded")
	}
	if _, err := l.Rotate(); err == nil {
		t.Fatal("Rotate of a read-only log succeeded")
	}
	if st, _ := os.Stat(path); uint64(st.Size()) == p[0].End() {
		t.Fatal("read-only Open cut the file")
	}
}

// FuzzPtr checks that every 16-byte string decodes to a pointer that
// encodes back to it, and that segment-0 pointers keep the plain offset.
func FuzzPtr(f *testing.F) {
	f.Add(make([]byte, PtrSize))
	f.Add(bytes.Repeat([]byte{0xff}, PtrSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < PtrSize {
			return
		}
		p := DecodePtr(b)
		var out [PtrSize]byte
		p.Put(out[:])
		if !bytes.Equal(out[:], b[:PtrSize]) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b[:PtrSize], p, out)
		}
		if p.Seg > MaxSegment || p.Off >= MaxSegmentSize {
			t.Fatalf("decoded out of range: %+v", p)
		}
		if p.Seg == 0 && p.Off != binary.LittleEndian.Uint64(b) {
			t.Fatalf("segment-0 pointer %+v does not keep the offset %d", p, binary.LittleEndian.Uint64(b))
		}
	})
}
