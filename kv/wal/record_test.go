package wal

import (
	"bytes"
	"errors"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	cases := []struct {
		lsn     uint64
		typ     uint8
		payload []byte
	}{
		{1, 1, nil},
		{2, 7, []byte("x")},
		{1 << 40, 255, bytes.Repeat([]byte{0xab}, 5000)},
	}
	var buf []byte
	for _, c := range cases {
		buf = AppendRecord(buf, c.lsn, c.typ, c.payload)
	}
	off := 0
	for i, c := range cases {
		r, n, err := DecodeRecord(buf[off:])
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if r.LSN != c.lsn || r.Type != c.typ || !bytes.Equal(r.Payload, c.payload) {
			t.Fatalf("case %d: got %+v", i, r)
		}
		off += n
	}
	if off != len(buf) {
		t.Fatalf("consumed %d of %d bytes", off, len(buf))
	}
}

func TestRecordDetectsDamage(t *testing.T) {
	rec := AppendRecord(nil, 9, 2, []byte("payload bytes"))
	for i := range rec {
		b := bytes.Clone(rec)
		b[i] ^= 0x10
		if _, _, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip of byte %d not detected: %v", i, err)
		}
	}
	for n := range len(rec) {
		if _, _, err := DecodeRecord(rec[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncation to %d bytes not detected: %v", n, err)
		}
	}
}

func TestHeader(t *testing.T) {
	id := [16]byte{1, 2, 3}
	h := EncodeHeader(id)
	got, err := DecodeHeader(h)
	if err != nil || got != id {
		t.Fatalf("DecodeHeader = %x, %v", got, err)
	}
	h[20] ^= 1
	if _, err := DecodeHeader(h); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("damaged header: %v", err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(AppendRecord(nil, 1, 1, []byte("hello")))
	f.Add(AppendRecord(AppendRecord(nil, 1, 1, nil), 2, 3, []byte{0, 1, 2}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if n > len(b) || n != RecordHeaderSize+len(r.Payload) {
			t.Fatalf("size %d of %d bytes, payload %d", n, len(b), len(r.Payload))
		}
		again := AppendRecord(nil, r.LSN, r.Type, r.Payload)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(EncodeHeader([16]byte{9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if !bytes.Equal(EncodeHeader(id), b[:HeaderSize]) {
			t.Fatalf("valid header does not re-encode")
		}
	})
}
