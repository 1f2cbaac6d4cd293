package nvme

import (
	"encoding/binary"
	"fmt"
)

// Entry sizes fixed by the specification (CC.IOSQES = 6, CC.IOCQES = 4).
const (
	SQESize = 64
	CQESize = 16
)

// Opcode is an NVMe command opcode. I/O and admin opcodes share values; the
// queue a command is submitted to decides which set applies.
type Opcode uint8

// I/O command opcodes (NVM command set).
const (
	OpFlush              Opcode = 0x00
	OpWrite              Opcode = 0x01
	OpRead               Opcode = 0x02
	OpWriteUncorrectable Opcode = 0x04
	OpCompare            Opcode = 0x05
	OpWriteZeroes        Opcode = 0x08
	OpDatasetManagement  Opcode = 0x09
)

// Admin command opcodes.
const (
	AdminDeleteIOSQ  Opcode = 0x00
	AdminCreateIOSQ  Opcode = 0x01
	AdminGetLogPage  Opcode = 0x02
	AdminDeleteIOCQ  Opcode = 0x04
	AdminCreateIOCQ  Opcode = 0x05
	AdminIdentify    Opcode = 0x06
	AdminAbort       Opcode = 0x08
	AdminSetFeatures Opcode = 0x09
	AdminGetFeatures Opcode = 0x0A
)

// String names an I/O opcode.
func (o Opcode) String() string {
	switch o {
	case OpFlush:
		return "Flush"
	case OpWrite:
		return "Write"
	case OpRead:
		return "Read"
	case OpWriteUncorrectable:
		return "WriteUncorrectable"
	case OpCompare:
		return "Compare"
	case OpWriteZeroes:
		return "WriteZeroes"
	case OpDatasetManagement:
		return "DatasetManagement"
	}
	return fmt.Sprintf("Opcode(%#02x)", uint8(o))
}

// Command is a decoded submission queue entry. Field names follow the
// specification; CDW10..CDW15 are the command-specific dwords.
type Command struct {
	Opcode Opcode
	Fuse   uint8  // FUSE, dword 0 bits 9:8
	PSDT   uint8  // dword 0 bits 15:14; 0 = PRPs
	CID    uint16 // command identifier, dword 0 bits 31:16
	NSID   uint32
	CDW2   uint32
	CDW3   uint32
	MPTR   uint64 // metadata pointer, dwords 4-5
	PRP1   uint64 // dwords 6-7
	PRP2   uint64 // dwords 8-9
	CDW10  uint32
	CDW11  uint32
	CDW12  uint32
	CDW13  uint32
	CDW14  uint32
	CDW15  uint32
}

// Encode writes c as a 64-byte SQE into b, which must hold SQESize bytes.
func (c *Command) Encode(b []byte) {
	_ = b[SQESize-1]
	dw0 := uint32(c.Opcode) | uint32(c.Fuse&3)<<8 | uint32(c.PSDT&3)<<14 | uint32(c.CID)<<16
	le := binary.LittleEndian
	le.PutUint32(b[0:], dw0)
	le.PutUint32(b[4:], c.NSID)
	le.PutUint32(b[8:], c.CDW2)
	le.PutUint32(b[12:], c.CDW3)
	le.PutUint64(b[16:], c.MPTR)
	le.PutUint64(b[24:], c.PRP1)
	le.PutUint64(b[32:], c.PRP2)
	le.PutUint32(b[40:], c.CDW10)
	le.PutUint32(b[44:], c.CDW11)
	le.PutUint32(b[48:], c.CDW12)
	le.PutUint32(b[52:], c.CDW13)
	le.PutUint32(b[56:], c.CDW14)
	le.PutUint32(b[60:], c.CDW15)
}

// DecodeCommand decodes a 64-byte SQE. It fails only on a short buffer: any
// 64 bytes decode, and validity is judged by whoever executes the command.
func DecodeCommand(b []byte) (Command, error) {
	if len(b) < SQESize {
		return Command{}, fmt.Errorf("nvme: SQE needs %d bytes, have %d", SQESize, len(b))
	}
	le := binary.LittleEndian
	dw0 := le.Uint32(b[0:])
	return Command{
		Opcode: Opcode(dw0),
		Fuse:   uint8(dw0>>8) & 3,
		PSDT:   uint8(dw0>>14) & 3,
		CID:    uint16(dw0 >> 16),
		NSID:   le.Uint32(b[4:]),
		CDW2:   le.Uint32(b[8:]),
		CDW3:   le.Uint32(b[12:]),
		MPTR:   le.Uint64(b[16:]),
		PRP1:   le.Uint64(b[24:]),
		PRP2:   le.Uint64(b[32:]),
		CDW10:  le.Uint32(b[40:]),
		CDW11:  le.Uint32(b[44:]),
		CDW12:  le.Uint32(b[48:]),
		CDW13:  le.Uint32(b[52:]),
		CDW14:  le.Uint32(b[56:]),
		CDW15:  le.Uint32(b[60:]),
	}, nil
}

// SLBA returns the starting LBA of a Read, Write, Compare or Write Zeroes.
func (c *Command) SLBA() uint64 { return uint64(c.CDW10) | uint64(c.CDW11)<<32 }

// Blocks returns the number of logical blocks of a Read or Write (NLB is
// zero-based on the wire; Blocks is not).
func (c *Command) Blocks() uint32 { return c.CDW12&0xFFFF + 1 }

// FUA reports the Force Unit Access bit of a Read or Write.
func (c *Command) FUA() bool { return c.CDW12&(1<<30) != 0 }

// ReadWrite builds a Read or Write of blocks logical blocks (1..65536) at
// slba on nsid, with data at prp1/prp2. The caller sets the CID.
func ReadWrite(op Opcode, nsid uint32, slba uint64, blocks uint32, prp1, prp2 uint64) Command {
	return Command{
		Opcode: op,
		NSID:   nsid,
		PRP1:   prp1,
		PRP2:   prp2,
		CDW10:  uint32(slba),
		CDW11:  uint32(slba >> 32),
		CDW12:  (blocks - 1) & 0xFFFF,
	}
}

// Completion is a decoded completion queue entry.
type Completion struct {
	DW0    uint32 // command specific
	DW1    uint32 // reserved / command specific
	SQHD   uint16 // SQ head pointer: entries the controller has consumed
	SQID   uint16
	CID    uint16
	Phase  bool
	Status Status
}

// Encode writes the CQE into b (CQESize bytes). The dword holding the phase
// tag is the last one written, so a host polling the phase bit of dword 3
// never sees a new phase with stale fields when b is written in place by a
// single writer in program order.
func (e *Completion) Encode(b []byte) {
	_ = b[CQESize-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], e.DW0)
	le.PutUint32(b[4:], e.DW1)
	le.PutUint32(b[8:], uint32(e.SQHD)|uint32(e.SQID)<<16)
	le.PutUint32(b[12:], e.DW3())
}

// DW3 returns dword 3 of the CQE: CID, phase tag and status.
func (e *Completion) DW3() uint32 {
	dw3 := uint32(e.CID) | uint32(e.Status)<<17
	if e.Phase {
		dw3 |= 1 << 16
	}
	return dw3
}

// DecodeCompletion decodes a 16-byte CQE.
func DecodeCompletion(b []byte) (Completion, error) {
	if len(b) < CQESize {
		return Completion{}, fmt.Errorf("nvme: CQE needs %d bytes, have %d", CQESize, len(b))
	}
	le := binary.LittleEndian
	dw2 := le.Uint32(b[8:])
	c := Completion{DW0: le.Uint32(b[0:]), DW1: le.Uint32(b[4:]), SQHD: uint16(dw2), SQID: uint16(dw2 >> 16)}
	c.SetDW3(le.Uint32(b[12:]))
	return c, nil
}

// SetDW3 fills CID, phase and status from dword 3 of a CQE.
func (e *Completion) SetDW3(dw3 uint32) {
	e.CID = uint16(dw3)
	e.Phase = dw3&(1<<16) != 0
	e.Status = Status(dw3 >> 17)
}
