// Package vlog owns the value log of a kv byte-value table: a set of
// segment files, each a checksummed header followed by checksummed,
// length-prefixed records. The table's index stores a Ptr (segment,
// offset, length, checksum) per key; the value bytes live only here.
//
// Segment 0 is the file the log is opened with (kv-<id>.vlog), segment n
// is that name with ".n" appended. The newest segment, the head, receives
// every append; older ones are only read, until compaction moves their
// live records into the head (Rotate starts a fresh head first) and
// Remove deletes them.
//
// Invariants:
//
//   - Records are only appended, never rewritten, so a Ptr stays valid for
//     as long as its segment exists and is not cut below the record's end.
//   - Every record carries its payload checksum twice: in its header and
//     in the Ptr that refers to it. Read checks both and fails with an
//     error wrapping ErrCorrupt that names the file and the offset.
//   - The owner decides what is garbage: Open is given the end of the last
//     referenced record of every referenced segment, cuts everything after
//     it, and deletes segments nothing refers to (except the head); a
//     referenced segment that is missing or shorter than its end is
//     ErrCorrupt. Remove is called only once the owner has made durable an
//     index that no longer refers to the segments removed.
//   - A segment file appears complete or not at all: it is written under a
//     temporary name with its header, synced, renamed and its directory
//     synced. Leftover temporary files are deleted by Open.
//   - The head has the highest segment number, so numbers are never
//     reused; an encoded Ptr of segment 0 is the plain offset of the
//     single-file format, which stays readable.
//   - Sync makes every record appended before it durable; concurrent
//     callers share one fdatasync (group commit). A rotated-out head is
//     synced before the switch. After a failed write or sync the log
//     refuses further writes (ErrFailed).
//
// The package knows nothing about tables or keys and must not touch files
// other than its segments and their temporary files.
package vlog
