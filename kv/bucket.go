package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/bam-go/bam/kernels"
)

// Bucket layout. A bucket is one line of the store (its line size). Every
// integer is little-endian.
//
//	0   u16  BucketMagic (zero in a never-written, all-zero bucket)
//	2   u8   BucketVersion
//	3   u8   flags, zero
//	4   u16  live slots
//	6   u16  used slots (live + tombstones)
//	8   u16  slots per bucket
//	10  u16  reserved, zero
//	12  u32  CRC-32C of bytes [BucketHeaderSize, line size), stored when the
//	         bucket is checkpointed; zero means not computed
//	16  [slots]u8 control bytes, padded to a multiple of 16:
//	         CtrlEmpty, CtrlTombstone, or CtrlFull|7-bit fingerprint
//	ko  [slots][key size]byte   keys   (ko = 16 + padded control bytes)
//	vo  [slots][value size]byte values (vo = ko + slots*key size)
//
// The GPU probe kernel (kernels/kv.cu) takes the offsets as arguments and
// uses the same control byte values and hash (hashKey).
const (
	BucketMagic      = 0x4b42
	BucketVersion    = 1
	BucketHeaderSize = 16
	CtrlEmpty        = 0x00
	CtrlTombstone    = 0x01
	CtrlFull         = 0x80
	maxSlots         = 0xffff
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// geometry is the bucket layout for one line size, key size and value size.
type geometry struct {
	line, ks, vs int
	slots        int
	keyOff       int
	valOff       int
}

func align16(n int) int { return (n + 15) &^ 15 }

func newGeometry(line, ks, vs int) (geometry, error) {
	g := geometry{line: line, ks: ks, vs: vs}
	if ks < 1 || vs < 0 {
		return g, fmt.Errorf("%w: key size %d, value size %d", ErrInvalid, ks, vs)
	}
	s := (line - BucketHeaderSize) / (1 + ks + vs)
	for s > 0 && BucketHeaderSize+align16(s)+s*(ks+vs) > line {
		s--
	}
	if s < 1 {
		return g, fmt.Errorf("%w: a %d-byte key and %d-byte value do not fit a %d-byte bucket line; use a larger line size or the byte-slice variant", ErrInvalid, ks, vs, line)
	}
	g.slots = min(s, maxSlots)
	g.keyOff = BucketHeaderSize + align16(g.slots)
	g.valOff = g.keyOff + g.slots*ks
	return g, nil
}

func (g *geometry) ctrl(line []byte) []byte {
	return line[BucketHeaderSize : BucketHeaderSize+g.slots]
}
func (g *geometry) key(line []byte, s int) []byte {
	o := g.keyOff + s*g.ks
	return line[o : o+g.ks]
}
func (g *geometry) val(line []byte, s int) []byte {
	o := g.valOff + s*g.vs
	return line[o : o+g.vs]
}

// hashKey hashes key bytes; bam::kv::hash_key in kernels/kv.cu computes the
// same value. Words are read little-endian, the last one zero-padded.
func hashKey(k []byte) uint64 {
	h := uint64(len(k)) * 0x9e3779b97f4a7c15
	for len(k) >= 8 {
		h = kernels.Mix64(h ^ binary.LittleEndian.Uint64(k))
		k = k[8:]
	}
	if len(k) > 0 {
		var w [8]byte
		copy(w[:], k)
		h = kernels.Mix64(h ^ binary.LittleEndian.Uint64(w[:]))
	}
	return kernels.Mix64(h + 0x632be59bd9b4e019)
}

// fingerprint is the control byte of a full slot for hash h.
func fingerprint(h uint64) byte { return CtrlFull | byte(h>>57) }

// bucketHeader is a decoded bucket header.
type bucketHeader struct {
	live, used, slots int
	crc               uint32
}

// initBucket writes the header of an empty bucket into line.
func (g *geometry) initBucket(line []byte) {
	le := binary.LittleEndian
	le.PutUint16(line[0:], BucketMagic)
	line[2] = BucketVersion
	le.PutUint16(line[8:], uint16(g.slots))
}

func (g *geometry) setCounts(line []byte, live, used int) {
	binary.LittleEndian.PutUint16(line[4:], uint16(live))
	binary.LittleEndian.PutUint16(line[6:], uint16(used))
}

// seal stores the checksum of a bucket about to be written.
func (g *geometry) seal(line []byte) {
	if binary.LittleEndian.Uint16(line) != BucketMagic {
		return // never touched: stays all zero
	}
	binary.LittleEndian.PutUint32(line[12:], crc32.Checksum(line[BucketHeaderSize:], castagnoli))
}

// decodeBucket validates a bucket line: an all-zero line is an empty
// bucket; anything else needs the magic, version, this geometry's slot
// count, counts that agree with the control bytes, control bytes of known
// values, and a matching checksum where one was stored.
func (g *geometry) decodeBucket(line []byte) (bucketHeader, error) {
	var h bucketHeader
	if len(line) != g.line {
		return h, fmt.Errorf("%w: bucket of %d bytes, want %d", ErrCorrupt, len(line), g.line)
	}
	le := binary.LittleEndian
	if le.Uint16(line) == 0 {
		if !allZero(line) {
			return h, fmt.Errorf("%w: bucket without magic holds data", ErrCorrupt)
		}
		h.slots = g.slots
		return h, nil
	}
	if m := le.Uint16(line); m != BucketMagic {
		return h, fmt.Errorf("%w: bucket magic %#04x, want %#04x", ErrCorrupt, m, BucketMagic)
	}
	if line[2] != BucketVersion || line[3] != 0 || le.Uint16(line[10:]) != 0 {
		return h, fmt.Errorf("%w: bucket version %d flags %d reserved %d, want %d/0/0", ErrCorrupt, line[2], line[3], le.Uint16(line[10:]), BucketVersion)
	}
	h.live, h.used, h.slots = int(le.Uint16(line[4:])), int(le.Uint16(line[6:])), int(le.Uint16(line[8:]))
	h.crc = le.Uint32(line[12:])
	if h.slots != g.slots {
		return h, fmt.Errorf("%w: bucket has %d slots, this table's geometry has %d", ErrCorrupt, h.slots, g.slots)
	}
	live, used := 0, 0
	for i, c := range g.ctrl(line) {
		switch {
		case c >= CtrlFull:
			live++
			used++
		case c == CtrlTombstone:
			used++
		case c != CtrlEmpty:
			return h, fmt.Errorf("%w: control byte %d is %#02x", ErrCorrupt, i, c)
		}
	}
	if live != h.live || used != h.used {
		return h, fmt.Errorf("%w: bucket header counts %d live, %d used; control bytes say %d, %d", ErrCorrupt, h.live, h.used, live, used)
	}
	if pad := line[BucketHeaderSize+g.slots : g.keyOff]; !allZero(pad) {
		return h, fmt.Errorf("%w: control padding not zero", ErrCorrupt)
	}
	if h.crc != 0 {
		c := crc32.Checksum(line[BucketHeaderSize:], castagnoli)
		if c != h.crc {
			return h, fmt.Errorf("%w: bucket checksum %#08x, want %#08x", ErrCorrupt, h.crc, c)
		}
	}
	return h, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// probe looks for key (hash h, fingerprint fp) in one bucket line. It
// returns the slot of the key or -1, the first free slot (empty or
// tombstone) or -1, and whether the bucket has an empty slot (which ends a
// probe sequence: the key cannot be in a later bucket).
func (g *geometry) probe(line, key []byte, fp byte) (slot, free int, hasEmpty bool) {
	slot, free = -1, -1
	ctrl := g.ctrl(line)
	for s, c := range ctrl {
		switch {
		case c == fp:
			if bytes.Equal(g.key(line, s), key) {
				return s, free, hasEmpty
			}
		case c == CtrlEmpty:
			if free < 0 {
				free = s
			}
			hasEmpty = true
		case c == CtrlTombstone:
			if free < 0 {
				free = s
			}
		}
	}
	return -1, free, hasEmpty
}
