package nvme

import (
	"context"
	"testing"
	"time"
)

// FuzzTargetCommand executes arbitrary 64-byte SQEs on a Target with a small
// memory namespace: the Target must never panic, must complete every
// command with the CID it was given, and only with statuses it documents.
func FuzzTargetCommand(f *testing.F) {
	h := newHarness(f, TargetConfig{MaxTransfer: 64 << 10}, nil, 4)
	seed := func(c Command) {
		var b [SQESize]byte
		c.Encode(b[:])
		f.Add(b[:])
	}
	seed(ReadWrite(OpRead, 1, 0, 1, h.bufDMA, 0))
	seed(ReadWrite(OpWrite, 1, 3, 9, h.bufDMA+512, h.bufDMA+4096))
	seed(ReadWrite(OpRead, 1, 0, 24, h.bufDMA, h.bufDMA+uint64(len(h.buf)-8192)))
	seed(Command{Opcode: OpFlush, NSID: nsidAll})
	seed(Command{Opcode: OpWriteZeroes, NSID: 1, CDW10: 5, CDW12: 3})
	seed(Command{Opcode: OpDatasetManagement, NSID: 1, CDW10: 3, CDW11: 4, PRP1: h.bufDMA})
	seed(Command{Opcode: 0xC0, NSID: 1})
	allowed := map[Status]bool{
		StatusSuccess: true, StatusInvalidOpcode: true, StatusInvalidField: true,
		StatusDataTransferError: true, StatusInvalidNamespace: true, StatusLBAOutOfRange: true,
	}
	var cid uint16
	f.Fuzz(func(t *testing.T, sqe []byte) {
		if len(sqe) < SQESize {
			return
		}
		cid++
		slot := h.qp.SQE(h.c.sqTail)
		copy(slot, sqe[:SQESize])
		slot[2], slot[3] = byte(cid), byte(cid>>8)
		h.c.sqTail = (h.c.sqTail + 1) & (h.qp.Depth - 1)
		h.c.outstanding++
		h.c.ring()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := h.c.wait(ctx)
		if err != nil {
			t.Fatalf("no completion: %v", err)
		}
		if e.CID != cid || e.SQID != 1 || uint32(e.SQHD) != h.c.sqTail {
			t.Fatalf("completion %+v for CID %d, SQ tail %d", e, cid, h.c.sqTail)
		}
		if !allowed[e.Status.Code()] {
			t.Fatalf("unexpected status %v", e.Status)
		}
		if err := h.t.Err(1); err != nil {
			t.Fatal(err)
		}
	})
}
