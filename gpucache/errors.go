package gpucache

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by the package wrap one of these (and,
// for storage failures, the backend's own error as well), so callers branch
// with errors.Is.
var (
	// ErrInvalidConfig is returned by New for a geometry or option out of
	// range.
	ErrInvalidConfig = errors.New("gpucache: invalid configuration")

	// ErrInvalidTag is returned for a tag that does not fit the tag field
	// (TagMask and above, TagEmpty among them) or a line index that does not
	// fit a tag.
	ErrInvalidTag = errors.New("gpucache: invalid tag")

	// ErrInvalidCount is returned by Acquire for a reference count of zero or
	// above StateRefMask.
	ErrInvalidCount = errors.New("gpucache: invalid reference count")

	// ErrTooManyReferences is returned by Acquire when the way's reference
	// count would overflow its StateRefBits bits.
	ErrTooManyReferences = errors.New("gpucache: too many references to one line")

	// ErrCacheTooSmall is returned by Acquire when every way of the tag's set
	// stayed referenced (or busy) for longer than Config.FullSetTimeout: the
	// cache cannot hold the lines its callers keep referenced at once.
	ErrCacheTooSmall = errors.New("gpucache: cache too small for the number of live references")

	// ErrTimeout is returned when a wait on another caller's fill or
	// write-back, or on a set lock, lasted longer than Config.WaitTimeout.
	ErrTimeout = errors.New("gpucache: wait timed out")

	// ErrFill wraps a backend error from reading a line. The line is not
	// cached; a later Acquire of the tag tries storage again.
	ErrFill = errors.New("gpucache: fill failed")

	// ErrWriteBack wraps a backend error from writing a dirty line back. The
	// line stays resident and dirty, so no data is lost.
	ErrWriteBack = errors.New("gpucache: write-back failed")

	// ErrLineInUse is returned by Invalidate and Reset when a line they must
	// drop is referenced or busy.
	ErrLineInUse = errors.New("gpucache: line in use")
)

// invalidTag is the error for a tag outside the tag field.
func invalidTag(tag uint64) error {
	return fmt.Errorf("%w: %#x: tags are below %#x (%d bits, all ones reserved for an unused slot)", ErrInvalidTag, tag, uint64(TagMask), TagBits)
}
