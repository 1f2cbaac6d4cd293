package nvme

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

func TestCommandKnownLayout(t *testing.T) {
	c := ReadWrite(OpRead, 1, 0x0000_0102_0304_0506, 8, 0x1122_3344_5566_7000, 0x8877_6655_4433_2000)
	c.CID = 0xBEEF
	var b [SQESize]byte
	c.Encode(b[:])
	want := "0200efbe" + // OPC 02h, FUSE 0, PSDT 0, CID BEEFh
		"01000000" + "00000000" + "00000000" + // NSID 1, CDW2, CDW3
		"0000000000000000" + // MPTR
		"0070665544332211" + // PRP1
		"0020334455667788" + // PRP2
		"06050403" + "02010000" + // SLBA low, high
		"07000000" + // NLB 7 (zero-based)
		"00000000" + "00000000" + "00000000"
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("SQE\n got %s\nwant %s", got, want)
	}
	d, err := DecodeCommand(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if d != c || d.SLBA() != 0x0102_0304_0506 || d.Blocks() != 8 || d.FUA() {
		t.Fatalf("decoded %+v", d)
	}
}

func TestCommandFieldBits(t *testing.T) {
	c := Command{Opcode: 0xFF, Fuse: 3, PSDT: 3, CID: 0xFFFF}
	var b [SQESize]byte
	c.Encode(b[:])
	if b[0] != 0xFF || b[1] != 0xC3 || b[2] != 0xFF || b[3] != 0xFF {
		t.Fatalf("dword 0 % x", b[:4])
	}
	c = Command{Fuse: 7, PSDT: 5} // out-of-range fields are masked
	c.Encode(b[:])
	if b[1] != 0x43 {
		t.Fatalf("masked dword 0 byte 1 %#x", b[1])
	}
	if _, err := DecodeCommand(b[:63]); err == nil {
		t.Fatal("short SQE decoded")
	}
}

func TestCompletionKnownLayout(t *testing.T) {
	e := Completion{DW0: 0xAABBCCDD, SQHD: 0x0102, SQID: 0x0304, CID: 0x0506, Phase: true, Status: StatusLBAOutOfRange.WithDNR()}
	var b [CQESize]byte
	e.Encode(b[:])
	// DW3 = CID | P<<16 | status<<17; status = DNR(1<<14) | SCT 0 | SC 80h.
	dw3 := uint32(0x0506) | 1<<16 | uint32(1<<14|0x80)<<17
	want := fmt.Sprintf("ddccbbaa00000000%02x%02x%02x%02x%02x%02x%02x%02x", 0x02, 0x01, 0x04, 0x03,
		byte(dw3), byte(dw3>>8), byte(dw3>>16), byte(dw3>>24))
	if got := hex.EncodeToString(b[:]); got != want {
		t.Fatalf("CQE\n got %s\nwant %s", got, want)
	}
	d, err := DecodeCompletion(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if d != e {
		t.Fatalf("decoded %+v, want %+v", d, e)
	}
	if !d.Status.DNR() || d.Status.Code() != StatusLBAOutOfRange || d.Status.SCT() != SCTGeneric {
		t.Fatalf("status %v", d.Status)
	}
	if _, err := DecodeCompletion(b[:15]); err == nil {
		t.Fatal("short CQE decoded")
	}
}

func TestStatusErrors(t *testing.T) {
	cmd := ReadWrite(OpWrite, 3, 99, 1, 0, 0)
	err := StatusWriteFault.WithDNR().Err(&cmd)
	if !errors.Is(err, ErrWriteFault) || errors.Is(err, ErrUnrecoveredRead) {
		t.Fatalf("errors.Is on %v", err)
	}
	if StatusSuccess.Err(&cmd) != nil {
		t.Fatal("success is an error")
	}
	if s := StatusWriteFault.String(); s != "write fault (SCT 2h SC 80h)" {
		t.Fatalf("String %q", s)
	}
	if s := MakeStatus(SCTVendor, 0xC1).String(); s != "status (SCT 7h SC C1h)" {
		t.Fatalf("String %q", s)
	}
}

func TestPhaseArithmetic(t *testing.T) {
	for _, depth := range []uint32{2, 4, 1024} {
		for p := uint64(0); p < uint64(depth)*5; p++ {
			want := (p/uint64(depth))%2 == 0
			if ExpectedPhase(p, depth) != want {
				t.Fatalf("depth %d position %d", depth, p)
			}
		}
		if !Full(0, depth-1, depth) || Full(1, depth-1, depth) || Entries(depth-1, 0, depth) != 1 {
			t.Fatalf("ring arithmetic at depth %d", depth)
		}
	}
}

func TestNewQueuePairMemory(t *testing.T) {
	for _, depth := range []uint32{2, 4, 64, 65536} {
		q, err := NewQueuePairMemory(1, depth)
		if err != nil {
			t.Fatal(err)
		}
		if addrOf(q.SQ)%64 != 0 || addrOf(q.CQ)%16 != 0 {
			t.Fatalf("depth %d: misaligned rings", depth)
		}
	}
	for _, depth := range []uint32{0, 1, 3, 100, 1 << 17} {
		if _, err := NewQueuePairMemory(1, depth); err == nil {
			t.Fatalf("depth %d accepted", depth)
		}
	}
	if _, err := NewQueuePairMemory(0, 4); err == nil {
		t.Fatal("queue ID 0 accepted")
	}
}

func FuzzDecodeCommand(f *testing.F) {
	c := ReadWrite(OpWrite, 1, 12345, 8, 0x1000, 0x2000)
	c.CID = 7
	var b [SQESize]byte
	c.Encode(b[:])
	f.Add(b[:])
	f.Add(bytes.Repeat([]byte{0xFF}, SQESize))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := DecodeCommand(in)
		if len(in) < SQESize {
			if err == nil {
				t.Fatal("short input decoded")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var out [SQESize]byte
		c.Encode(out[:])
		want := append([]byte(nil), in[:SQESize]...)
		want[1] &^= 0x3C // dword 0 bits 13:10 are reserved and not kept
		if !bytes.Equal(out[:], want) {
			t.Fatalf("re-encode differs:\n% x\n% x", out, in[:SQESize])
		}
		if c.Blocks() < 1 || c.Blocks() > 65536 {
			t.Fatalf("Blocks %d", c.Blocks())
		}
	})
}

func FuzzDecodeCompletion(f *testing.F) {
	e := Completion{DW0: 1, SQHD: 3, SQID: 1, CID: 9, Phase: true, Status: StatusInvalidField}
	var b [CQESize]byte
	e.Encode(b[:])
	f.Add(b[:])
	f.Add(bytes.Repeat([]byte{0xFF}, CQESize))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := DecodeCompletion(in)
		if len(in) < CQESize {
			if err == nil {
				t.Fatal("short input decoded")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		var out [CQESize]byte
		e.Encode(out[:])
		if !bytes.Equal(out[:], in[:CQESize]) {
			t.Fatalf("re-encode differs:\n% x\n% x", out, in[:CQESize])
		}
		_ = e.Status.String()
	})
}
