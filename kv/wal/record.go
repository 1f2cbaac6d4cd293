package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-disk layout. Every integer is little-endian.
//
// File header (HeaderSize bytes, written once when the log is created):
//
//	0   [8]byte  FileMagic "BAMKVWAL"
//	8   u32      Version
//	12  u32      reserved, zero
//	16  [16]byte ID: the owner's identity (a kv table's UUID)
//	32  [28]byte reserved, zero
//	60  u32      CRC-32C of bytes [0, 60)
//
// Record (RecordHeaderSize bytes, then Length payload bytes, no padding):
//
//	0   u32  RecordMagic
//	4   u32  CRC-32C of bytes [8, RecordHeaderSize+Length)
//	8   u32  Length
//	12  u8   Type (non-zero)
//	13  [3]  reserved, zero
//	16  u64  LSN
const (
	FileMagic        = "BAMKVWAL"
	Version          = 1
	HeaderSize       = 64
	RecordMagic      = 0x52574b42 // "BKWR"
	RecordHeaderSize = 24
	// MaxPayload bounds one record's payload. Larger lengths are treated
	// as corruption by the decoder.
	MaxPayload = 64 << 20
)

// Errors. Decoding and recovery errors wrap one of these.
var (
	// ErrCorrupt: a header or record fails validation (magic, checksum,
	// length, LSN order), and valid records follow the bad one, so the
	// damage is not a torn tail.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrVersion: the file was written by an unknown format version.
	ErrVersion = errors.New("wal: unsupported version")
	// ErrMismatch: the file belongs to another owner (ID differs).
	ErrMismatch = errors.New("wal: log belongs to another table")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrFailed: an earlier write or sync failed; the log accepts nothing
	// more until it is reopened. It is joined with the original error.
	ErrFailed = errors.New("wal: log failed")
	// ErrTooLarge: a payload exceeds MaxPayload.
	ErrTooLarge = errors.New("wal: record too large")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is one decoded log record. Payload aliases the decoder's buffer.
type Record struct {
	LSN     uint64
	Type    uint8
	Payload []byte
}

// EncodeHeader returns the file header for id.
func EncodeHeader(id [16]byte) []byte {
	b := make([]byte, HeaderSize)
	copy(b, FileMagic)
	binary.LittleEndian.PutUint32(b[8:], Version)
	copy(b[16:32], id[:])
	binary.LittleEndian.PutUint32(b[60:], crc32.Checksum(b[:60], castagnoli))
	return b
}

// DecodeHeader validates a file header and returns its ID.
func DecodeHeader(b []byte) ([16]byte, error) {
	var id [16]byte
	if len(b) < HeaderSize {
		return id, fmt.Errorf("%w: header: %d bytes, want %d", ErrCorrupt, len(b), HeaderSize)
	}
	if string(b[:8]) != FileMagic {
		return id, fmt.Errorf("%w: header: magic %q, want %q", ErrCorrupt, b[:8], FileMagic)
	}
	if got, want := binary.LittleEndian.Uint32(b[60:]), crc32.Checksum(b[:60], castagnoli); got != want {
		return id, fmt.Errorf("%w: header: checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != Version {
		return id, fmt.Errorf("%w: header: version %d, this code reads %d", ErrVersion, v, Version)
	}
	copy(id[:], b[16:32])
	return id, nil
}

// AppendRecord appends the encoding of one record to dst.
func AppendRecord(dst []byte, lsn uint64, typ uint8, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, RecordHeaderSize)...)
	dst = append(dst, payload...)
	h := dst[start:]
	le := binary.LittleEndian
	le.PutUint32(h[0:], RecordMagic)
	le.PutUint32(h[8:], uint32(len(payload)))
	h[12] = typ
	le.PutUint64(h[16:], lsn)
	le.PutUint32(h[4:], crc32.Checksum(h[8:], castagnoli))
	return dst
}

// DecodeRecord decodes the record at the start of b and returns it with
// its encoded size. It fails with an error wrapping ErrCorrupt when b does
// not start with a complete, valid record (a short b is reported as
// io.ErrUnexpectedEOF wrapped in ErrCorrupt).
func DecodeRecord(b []byte) (Record, int, error) {
	le := binary.LittleEndian
	if len(b) < RecordHeaderSize {
		return Record{}, 0, fmt.Errorf("%w: record header: %d bytes left, want %d", ErrCorrupt, len(b), RecordHeaderSize)
	}
	if m := le.Uint32(b); m != RecordMagic {
		return Record{}, 0, fmt.Errorf("%w: record magic %#08x, want %#08x", ErrCorrupt, m, RecordMagic)
	}
	n := le.Uint32(b[8:])
	if n > MaxPayload {
		return Record{}, 0, fmt.Errorf("%w: record length %d exceeds %d", ErrCorrupt, n, MaxPayload)
	}
	end := RecordHeaderSize + int(n)
	if len(b) < end {
		return Record{}, 0, fmt.Errorf("%w: record of %d bytes, %d left", ErrCorrupt, end, len(b))
	}
	if got, want := le.Uint32(b[4:]), crc32.Checksum(b[8:end], castagnoli); got != want {
		return Record{}, 0, fmt.Errorf("%w: record checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	if b[12] == 0 || b[13] != 0 || b[14] != 0 || b[15] != 0 {
		return Record{}, 0, fmt.Errorf("%w: record type %d, reserved %x", ErrCorrupt, b[12], b[13:16])
	}
	return Record{LSN: le.Uint64(b[16:]), Type: b[12], Payload: b[RecordHeaderSize:end:end]}, end, nil
}
