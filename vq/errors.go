package vq

import (
	"context"
	"errors"
	"fmt"
)

// ErrTimeout is matched (errors.Is) by every error Submit returns because a
// wait ran past Options.Timeout or past the context's deadline.
var ErrTimeout = errors.New("vq: wait timed out")

// ErrBadCommand is returned for a nil command.
var ErrBadCommand = errors.New("vq: bad command")

// Stage names where a Submit was waiting when it gave up.
const (
	StageAdmission  = "admission"  // waiting for a free CID; nothing was queued
	StageTurn       = "turn"       // holding a ticket, waiting for its SQ slot; a Flush took its place
	StageCompletion = "completion" // submitted; the command may still execute
)

// WaitError reports a Submit that stopped waiting. It matches ErrTimeout when
// the cause is the queue's timeout or the context's deadline, and unwraps to
// the cause (ErrTimeout, context.DeadlineExceeded or context.Canceled).
type WaitError struct {
	QID       uint16
	Stage     string // StageAdmission, StageTurn or StageCompletion
	Submitted bool   // the command reached the SQ and may still execute
	CID       uint16 // valid when Stage != StageAdmission
	Err       error
}

func (e *WaitError) Error() string {
	if e.Stage == StageAdmission {
		return fmt.Sprintf("vq: queue %d: waiting for a command ID: %v", e.QID, e.Err)
	}
	return fmt.Sprintf("vq: queue %d: cid %d: waiting for %s (submitted %t): %v", e.QID, e.CID, e.Stage, e.Submitted, e.Err)
}

// Unwrap returns the cause.
func (e *WaitError) Unwrap() error { return e.Err }

// Is reports ErrTimeout for deadline expiry of either kind.
func (e *WaitError) Is(target error) bool {
	return target == ErrTimeout && (errors.Is(e.Err, ErrTimeout) || errors.Is(e.Err, context.DeadlineExceeded))
}
