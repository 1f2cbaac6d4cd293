// Package wal owns the write-ahead log of a kv table: a file of a
// checksummed header followed by checksummed, length-prefixed records, each
// with a log sequence number (LSN), appended with group commit.
//
// Invariants:
//
//   - Records reach the file in LSN order and LSNs strictly increase;
//     recovery treats anything else as corruption.
//   - A record is acknowledged durable only after an fdatasync that began
//     after it was written (Commit with durable=true).
//   - Recovery replays the longest valid prefix. A bad record with nothing
//     valid after it is a torn tail and is cut off; a bad record followed
//     by a valid one is reported as ErrCorrupt (unless the caller asks to
//     truncate), because acknowledged records could be behind it.
//   - After a write or sync failure the log is failed: every later call
//     returns the error (wrapping ErrFailed, and ErrNoSpace for a full
//     disk). The owner must reopen, which replays what is durable.
//
// The package knows nothing about tables, keys or checkpoints: payloads
// and record types are the owner's. It must not touch files other than
// the one it is given.
package wal
