package nvme

import (
	"errors"
	"fmt"
)

// Status is the 15-bit status field of a CQE (dword 3 bits 31:17, shifted
// down): SC 7:0, SCT 10:8, CRD 12:11, M 13, DNR 14. The zero value is success.
type Status uint16

// Status code types.
const (
	SCTGeneric         = 0
	SCTCommandSpecific = 1
	SCTMedia           = 2
	SCTPath            = 3
	SCTVendor          = 7
)

// MakeStatus builds a status from its type and code.
func MakeStatus(sct, sc uint8) Status { return Status(uint16(sct&7)<<8 | uint16(sc)) }

// Statuses used by the project (NVMe Base 2.0, figure "Generic Command Status
// Values" and "Media and Data Integrity Errors").
var (
	StatusSuccess           = MakeStatus(SCTGeneric, 0x00)
	StatusInvalidOpcode     = MakeStatus(SCTGeneric, 0x01)
	StatusInvalidField      = MakeStatus(SCTGeneric, 0x02)
	StatusCIDConflict       = MakeStatus(SCTGeneric, 0x03)
	StatusDataTransferError = MakeStatus(SCTGeneric, 0x04)
	StatusInternalError     = MakeStatus(SCTGeneric, 0x06)
	StatusInvalidNamespace  = MakeStatus(SCTGeneric, 0x0B)
	StatusLBAOutOfRange     = MakeStatus(SCTGeneric, 0x80)
	StatusCapacityExceeded  = MakeStatus(SCTGeneric, 0x81)
	StatusWriteFault        = MakeStatus(SCTMedia, 0x80)
	StatusUnrecoveredRead   = MakeStatus(SCTMedia, 0x81)
	StatusAccessDenied      = MakeStatus(SCTMedia, 0x86)
)

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// SCT returns the status code type.
func (s Status) SCT() uint8 { return uint8(s>>8) & 7 }

// CRD returns the command retry delay field.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }

// More reports the M bit (more information in a log page).
func (s Status) More() bool { return s&(1<<13) != 0 }

// DNR reports the Do Not Retry bit.
func (s Status) DNR() bool { return s&(1<<14) != 0 }

// WithDNR returns s with the Do Not Retry bit set.
func (s Status) WithDNR() Status { return s | 1<<14 }

// Code returns s without CRD, M and DNR: the part that identifies the error.
func (s Status) Code() Status { return s & 0x7FF }

// Success reports whether s is a successful completion.
func (s Status) Success() bool { return s.Code() == 0 }

var statusNames = map[Status]string{
	StatusSuccess:           "success",
	StatusInvalidOpcode:     "invalid command opcode",
	StatusInvalidField:      "invalid field in command",
	StatusCIDConflict:       "command ID conflict",
	StatusDataTransferError: "data transfer error",
	StatusInternalError:     "internal error",
	StatusInvalidNamespace:  "invalid namespace or format",
	StatusLBAOutOfRange:     "LBA out of range",
	StatusCapacityExceeded:  "capacity exceeded",
	StatusWriteFault:        "write fault",
	StatusUnrecoveredRead:   "unrecovered read error",
	StatusAccessDenied:      "access denied",
}

// String describes the status, e.g. "LBA out of range (SCT 0h SC 80h, DNR)".
func (s Status) String() string {
	name, ok := statusNames[s.Code()]
	if !ok {
		name = "status"
	}
	str := fmt.Sprintf("%s (SCT %Xh SC %02Xh", name, s.SCT(), s.SC())
	if s.DNR() {
		str += ", DNR"
	}
	return str + ")"
}

// StatusError is the error for a completion with a non-success status.
// errors.Is matches it against the Err* sentinels by status type and code,
// ignoring DNR, CRD and M.
type StatusError struct {
	Status Status
	Op     Opcode
	NSID   uint32
	SLBA   uint64
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvme: %v nsid %d slba %d: %v", e.Op, e.NSID, e.SLBA, e.Status)
}

// Is matches sentinel status errors by code.
func (e *StatusError) Is(target error) bool {
	var t *StatusError
	if errors.As(target, &t) {
		return t.Status.Code() == e.Status.Code()
	}
	return false
}

// Sentinels for errors.Is on the common statuses.
var (
	ErrInvalidOpcode    error = &StatusError{Status: StatusInvalidOpcode}
	ErrInvalidField     error = &StatusError{Status: StatusInvalidField}
	ErrDataTransfer     error = &StatusError{Status: StatusDataTransferError}
	ErrInternal         error = &StatusError{Status: StatusInternalError}
	ErrInvalidNamespace error = &StatusError{Status: StatusInvalidNamespace}
	ErrLBAOutOfRange    error = &StatusError{Status: StatusLBAOutOfRange}
	ErrCapacityExceeded error = &StatusError{Status: StatusCapacityExceeded}
	ErrWriteFault       error = &StatusError{Status: StatusWriteFault}
	ErrUnrecoveredRead  error = &StatusError{Status: StatusUnrecoveredRead}
	ErrAccessDenied     error = &StatusError{Status: StatusAccessDenied}
)

// Err returns nil for success and a *StatusError otherwise, naming the
// command it completed.
func (s Status) Err(cmd *Command) error {
	if s.Success() {
		return nil
	}
	e := &StatusError{Status: s}
	if cmd != nil {
		e.Op, e.NSID, e.SLBA = cmd.Opcode, cmd.NSID, cmd.SLBA()
	}
	return e
}
