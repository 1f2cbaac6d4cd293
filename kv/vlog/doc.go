// Package vlog owns the value log of a kv byte-value table: an append-only
// file of a checksummed header followed by checksummed, length-prefixed
// records. The table's index stores a Ptr (offset, length, checksum) per
// key; the value bytes live only here.
//
// Invariants:
//
//   - Records are only appended, never rewritten, so a Ptr stays valid for
//     as long as the file is not truncated below its end.
//   - Every record carries its payload checksum twice: in its header and
//     in the Ptr that refers to it. Read checks both and fails with an
//     error wrapping ErrCorrupt that names the file and the offset.
//   - The owner decides what is garbage: Open is given the end of the last
//     referenced record and cuts everything after it (a torn or
//     unreferenced tail); a file shorter than that end is ErrCorrupt.
//   - Sync makes every record appended before it durable; concurrent
//     callers share one fdatasync (group commit). After a failed write or
//     sync the log refuses further writes (ErrFailed).
//
// Space of records no longer referenced is not reclaimed (no compaction
// yet). The package knows nothing about tables or keys and must not touch
// files other than the one it is given.
package vlog
