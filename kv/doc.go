// Package kv owns key-value tables kept in a bam store: Table[K, V] for
// fixed-size keys and values, BytesTable[K] for byte-slice values kept in a
// value log, batch lookups on the CPU engine and on the GPU (GPUTable),
// and their durability (a write-ahead log, package kv/wal).
//
// # Storage
//
// A table is one catalog object of kind table whose elements are bucket
// lines: each bucket is one line of the store (bucket.go has the layout),
// holding up to Slots keys with 7-bit fingerprints in control bytes, so a
// lookup reads one line, and a warp probes a line cooperatively on the GPU.
// Collisions spill into the following buckets (bucketised linear probing);
// a lookup stops at the first bucket with an empty slot. Deletes leave
// tombstones, so slots never go back to empty except by a rehash. When
// live entries plus tombstones would pass Options.MaxLoad, the table is
// rebuilt into a new object (name + ".rehash") and published with one
// atomic SwapObjects.
//
// The write-ahead log is a file beside the store's namespaces,
// <LogDir>/kv-<table id>.wal (LogDir defaults to the store's directory;
// stores on block devices must name one). A file and not a catalog
// object, because a log wants appends and fdatasync of its own bytes,
// while object writes go through the shared line cache and Flush writes
// back the whole store. The table's id is kept in its catalog metadata,
// so renames keep the log.
//
// # Durability (DESIGN.md §7)
//
//   - A write is logged (one checksummed record per call: PutMany and
//     DeleteMany batches are atomic) and applied to host-memory images of
//     the buckets it changes. With Options.SyncWrites it returns after an
//     fdatasync of the log that concurrent writers share (group commit);
//     otherwise it is durable after Sync, Checkpoint or Close.
//   - The bucket object on storage is written only by checkpoints, which
//     put the images in the log first (a double write), so it always holds
//     one checkpoint's state, never a mix. Recovery finishes a committed
//     checkpoint from the log and replays later records into memory.
//   - A torn record at the end of the log is dropped; damage followed by
//     valid records fails Open with ErrCorrupt (Options.TruncateCorruptLog
//     overrides).
//   - A failed log write (full disk, I/O error) fails the table for
//     writes (ErrFailed); reads still work; reopening recovers every
//     acknowledged write.
//   - BytesTable: a value is appended to the value log's head segment
//     (kv-<id>.vlog, then kv-<id>.vlog.<n>) and synced before its 16-byte
//     pointer goes through the table's log, so the index never points at a
//     value that could be lost. On open every segment is cut after the
//     last record the index points to (torn appends, values whose index
//     write was lost) and segments it does not point to are deleted; a
//     referenced record that fails its checksum is ErrCorrupt naming the
//     file and offset.
//   - BytesTable.Compact reclaims the space of overwritten and deleted
//     values (ValueLogStats says how much there is): it starts a new head
//     segment, copies the live records of the older segments into it,
//     syncs them, swaps each key's pointer if the key still has the old
//     one, syncs the table's log and only then deletes the old segments
//     (compact.go). A crash at any step leaves every key pointing at a
//     record that exists; reads and writes continue during a compaction.
//
// # Invariants
//
//   - The bucket object equals the state at the catalog's kv.ckpt_lsn.
//   - Every change after it is in the log, in LSN order, and in the
//     in-memory bucket images.
//   - kv.len and kv.used in the catalog are the counts at kv.ckpt_lsn.
//
// The package must not write object lines other than through bam.Data, nor
// touch another object's lines, nor files other than its logs.
package kv
