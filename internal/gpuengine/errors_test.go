package gpuengine

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/bam-go/bam/vq"
)

// TestDecodeTimeoutWait: a timeout record's status names the wait that
// gave up, and the error says which; a record without a kind still decodes.
func TestDecodeTimeoutWait(t *testing.T) {
	record := func(code, status uint32) []byte {
		rec := make([]byte, ErrorRecordBytes)
		le := binary.LittleEndian
		le.PutUint32(rec[ErrorCodeOffset:], code)
		le.PutUint32(rec[ErrorStatusOffset:], status)
		le.PutUint64(rec[ErrorIndexOffset:], 77)
		le.PutUint64(rec[ErrorLBAOffset:], 4096)
		le.PutUint64(rec[ErrorNSIDOffset:], 1)
		le.PutUint32(rec[ErrorCountOffset:], 3)
		return rec
	}
	for _, c := range []struct {
		code, status uint32
		wait         WaitKind
		says         string
		timeout      bool
	}{
		{ErrCodeTimeout, TimeoutStatus | WaitTurn, WaitTurn, "wait for its queue ticket's SQ slot timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitCompletion, WaitCompletion, "wait for its command's completion timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitLine, WaitLine, "wait for another thread's fill of the line timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitWay, WaitWay, "wait for a way of the line's set timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitSetLock, WaitSetLock, "wait for the lock of the line's set timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitCopier, WaitCopier, "wait for the fill copier timed out", true},
		{ErrCodeTimeout, TimeoutStatus | WaitSubmit, WaitSubmit, "wait for its command's submission (an earlier ticket of its queue was not issued) timed out", true},
		{ErrCodeTimeout, TimeoutStatus, 0, "element 77: wait timed out", true},
		{ErrCodeAborted, TimeoutStatus | WaitCompletion, WaitCompletion, "wait for its command's completion stopped by the launch's abort", false},
		{ErrCodeStatus, 0x281, 0, "NVMe command on nsid 1 lba 4096 failed", false},
	} {
		e := decodeError(record(c.code, c.status))
		e.Kernel = "k"
		if e.Wait != c.wait {
			t.Errorf("code %d status %#x: Wait %d, want %d", c.code, c.status, e.Wait, c.wait)
		}
		msg := e.Error()
		if !strings.Contains(msg, c.says) || !strings.Contains(msg, "and 2 more failures") {
			t.Errorf("code %d status %#x: %q, want it to contain %q and the count", c.code, c.status, msg, c.says)
		}
		if got := errors.Is(e, vq.ErrTimeout); got != c.timeout {
			t.Errorf("code %d status %#x: errors.Is(vq.ErrTimeout) = %t, want %t", c.code, c.status, got, c.timeout)
		}
	}
	if s := WaitKind(99).String(); s != "wait kind 99" {
		t.Errorf("unknown kind: %q", s)
	}
}
