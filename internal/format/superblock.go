package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Superblock record constants. The byte layout (little-endian) is
//
//	off  size  field
//	  0     8  magic "BAMSTORE"
//	  8     4  format version
//	 12     4  flags (FlagCatalog)
//	 16    16  volume UUID
//	 32     4  namespace index
//	 36     4  namespace count
//	 40     4  LBA size (bytes)
//	 44     4  line size (bytes)
//	 48     8  catalog slot A offset (bytes)
//	 56     8  catalog slot B offset (bytes)
//	 64     8  catalog slot size (bytes)
//	 72     8  data start (bytes)
//	 80     8  capacity: end of the data area (bytes)
//	 88     8  creation time (Unix nanoseconds)
//	 96   412  reserved, written as zero, ignored on read
//	508     4  CRC32C (Castagnoli) of bytes [0, 508)
//
// The record is one 512-byte sector, so a single sector write replaces it.
const (
	SuperblockSize = 512
	Version        = 1 // format version this code writes and reads

	sbCRCOffset = SuperblockSize - 4
)

// Magic begins every superblock.
var Magic = [8]byte{'B', 'A', 'M', 'S', 'T', 'O', 'R', 'E'}

// Superblock flags.
const (
	FlagCatalog uint32 = 1 << 0 // this namespace holds the catalog
)

// Limits on geometry.
const (
	MinLineSize   = 512
	MaxLineSize   = 64 << 10
	MinLBASize    = 512
	MaxLBASize    = 64 << 10
	MaxNamespaces = 1024
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Superblock describes one namespace of a store.
type Superblock struct {
	Version     uint32
	Flags       uint32
	VolumeUUID  [16]byte
	Index       uint32 // this namespace's index, 0..Count-1
	Count       uint32 // namespaces in the volume
	LBASize     uint32
	LineSize    uint32
	CatalogA    uint64 // byte offset of catalog slot A
	CatalogB    uint64 // byte offset of catalog slot B
	CatalogSize uint64 // bytes of each slot
	DataStart   uint64 // byte offset of the first data line
	Capacity    uint64 // byte offset one past the last data line
	Created     int64  // Unix nanoseconds
}

// DataLines is the number of lines in the data area.
func (s *Superblock) DataLines() uint64 {
	if s.LineSize == 0 || s.Capacity < s.DataStart {
		return 0
	}
	return (s.Capacity - s.DataStart) / uint64(s.LineSize)
}

// Encode returns the 512-byte encoding of s with its checksum.
func (s *Superblock) Encode() []byte {
	b := make([]byte, SuperblockSize)
	copy(b[0:8], Magic[:])
	le := binary.LittleEndian
	le.PutUint32(b[8:], s.Version)
	le.PutUint32(b[12:], s.Flags)
	copy(b[16:32], s.VolumeUUID[:])
	le.PutUint32(b[32:], s.Index)
	le.PutUint32(b[36:], s.Count)
	le.PutUint32(b[40:], s.LBASize)
	le.PutUint32(b[44:], s.LineSize)
	le.PutUint64(b[48:], s.CatalogA)
	le.PutUint64(b[56:], s.CatalogB)
	le.PutUint64(b[64:], s.CatalogSize)
	le.PutUint64(b[72:], s.DataStart)
	le.PutUint64(b[80:], s.Capacity)
	le.PutUint64(b[88:], uint64(s.Created))
	le.PutUint32(b[sbCRCOffset:], Checksum(b[:sbCRCOffset]))
	return b
}

// DecodeSuperblock decodes and validates the superblock in b, which must hold
// at least SuperblockSize bytes. file names the source in errors.
func DecodeSuperblock(b []byte, file string) (Superblock, error) {
	const rec = "superblock"
	if len(b) < SuperblockSize {
		return Superblock{}, corrupt(file, rec, "length", fmt.Sprintf("at least %d bytes", SuperblockSize), fmt.Sprintf("%d bytes", len(b)))
	}
	if [8]byte(b[0:8]) != Magic {
		return Superblock{}, corrupt(file, rec, "magic", fmt.Sprintf("%q (not a bam namespace)", Magic[:]), fmt.Sprintf("%q", b[0:8]))
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != Version {
		return Superblock{}, &FieldError{File: file, Record: rec, Field: "version", Got: fmt.Sprint(v), Want: fmt.Sprint(Version), Err: ErrVersion}
	}
	if got, want := le.Uint32(b[sbCRCOffset:]), Checksum(b[:sbCRCOffset]); got != want {
		return Superblock{}, corrupt(file, rec, "checksum", fmt.Sprintf("%#08x", want), fmt.Sprintf("%#08x", got))
	}
	s := Superblock{
		Version:     le.Uint32(b[8:]),
		Flags:       le.Uint32(b[12:]),
		VolumeUUID:  [16]byte(b[16:32]),
		Index:       le.Uint32(b[32:]),
		Count:       le.Uint32(b[36:]),
		LBASize:     le.Uint32(b[40:]),
		LineSize:    le.Uint32(b[44:]),
		CatalogA:    le.Uint64(b[48:]),
		CatalogB:    le.Uint64(b[56:]),
		CatalogSize: le.Uint64(b[64:]),
		DataStart:   le.Uint64(b[72:]),
		Capacity:    le.Uint64(b[80:]),
		Created:     int64(le.Uint64(b[88:])),
	}
	if err := s.Validate(file); err != nil {
		return Superblock{}, err
	}
	return s, nil
}

func isPow2(x uint64) bool { return x != 0 && x&(x-1) == 0 }

// ValidateGeometry checks an LBA size and line size pair.
func ValidateGeometry(lbaSize, lineSize uint64) error {
	if !isPow2(lbaSize) || lbaSize < MinLBASize || lbaSize > MaxLBASize {
		return fmt.Errorf("LBA size %d: want a power of two in [%d, %d]", lbaSize, MinLBASize, MaxLBASize)
	}
	if !isPow2(lineSize) || lineSize < MinLineSize || lineSize > MaxLineSize {
		return fmt.Errorf("line size %d: want a power of two in [%d, %d]", lineSize, MinLineSize, MaxLineSize)
	}
	if lineSize < lbaSize {
		return fmt.Errorf("line size %d is smaller than the LBA size %d", lineSize, lbaSize)
	}
	return nil
}

// Validate checks every field of s for internal consistency. It does not
// compare s with the other namespaces of the volume; that is the caller's job.
func (s *Superblock) Validate(file string) error {
	const rec = "superblock"
	if s.Version != Version {
		return &FieldError{File: file, Record: rec, Field: "version", Got: fmt.Sprint(s.Version), Want: fmt.Sprint(Version), Err: ErrVersion}
	}
	if s.Flags&^FlagCatalog != 0 {
		return corrupt(file, rec, "flags", fmt.Sprintf("only bits %#x", FlagCatalog), fmt.Sprintf("%#x", s.Flags))
	}
	if s.VolumeUUID == [16]byte{} {
		return corrupt(file, rec, "volume UUID", "non-zero", "zero")
	}
	if s.Count == 0 || s.Count > MaxNamespaces {
		return corrupt(file, rec, "namespace count", fmt.Sprintf("1..%d", MaxNamespaces), s.Count)
	}
	if s.Index >= s.Count {
		return corrupt(file, rec, "namespace index", fmt.Sprintf("< namespace count %d", s.Count), s.Index)
	}
	if want := s.Index == 0; (s.Flags&FlagCatalog != 0) != want {
		return corrupt(file, rec, "flags", fmt.Sprintf("catalog flag set exactly on namespace 0 (index %d)", s.Index), fmt.Sprintf("%#x", s.Flags))
	}
	if !isPow2(uint64(s.LBASize)) || s.LBASize < MinLBASize || s.LBASize > MaxLBASize {
		return corrupt(file, rec, "LBA size", fmt.Sprintf("power of two in [%d, %d]", MinLBASize, MaxLBASize), s.LBASize)
	}
	if !isPow2(uint64(s.LineSize)) || s.LineSize < MinLineSize || s.LineSize > MaxLineSize || s.LineSize < s.LBASize {
		return corrupt(file, rec, "line size", fmt.Sprintf("power of two in [%d, %d], >= LBA size %d", MinLineSize, MaxLineSize, s.LBASize), s.LineSize)
	}
	line := uint64(s.LineSize)
	if s.CatalogSize == 0 || s.CatalogSize%line != 0 || s.CatalogSize > 1<<40 {
		return corrupt(file, rec, "catalog slot size", fmt.Sprintf("non-zero multiple of the line size %d", line), s.CatalogSize)
	}
	if s.CatalogA < SuperblockSize || s.CatalogA%line != 0 {
		return corrupt(file, rec, "catalog slot A offset", fmt.Sprintf("multiple of the line size %d past the superblock", line), s.CatalogA)
	}
	if s.CatalogA > 1<<62 || s.CatalogB != s.CatalogA+s.CatalogSize {
		return corrupt(file, rec, "catalog slot B offset", fmt.Sprintf("%d (slot A offset + slot size)", s.CatalogA+s.CatalogSize), s.CatalogB)
	}
	if s.DataStart != s.CatalogB+s.CatalogSize {
		return corrupt(file, rec, "data start", fmt.Sprintf("%d (slot B offset + slot size)", s.CatalogB+s.CatalogSize), s.DataStart)
	}
	if s.Capacity < s.DataStart || s.Capacity%line != 0 {
		return corrupt(file, rec, "capacity", fmt.Sprintf("multiple of the line size %d, >= data start %d", line, s.DataStart), s.Capacity)
	}
	return nil
}
