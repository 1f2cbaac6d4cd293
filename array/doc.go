// Package array owns Array[T]: a typed, fixed-length array of a fixed-size
// element type kept in a bam store, read and written through the store's
// engine and its set-associative line cache.
//
// Element types are numbers, bool, arrays and structs of those: anything
// without pointers (strings, slices, maps, pointers, interfaces, channels
// and functions are refused with ErrElemType at Create and Open). The
// element type's name (TypeName) and size are recorded in the catalog and
// checked on Open, which fails with bam.ErrTypeMismatch on a difference.
// Elements are stored as their in-memory bytes, in the host's byte order.
//
// Calls: Get/Set of one element, Gather/Scatter by index (requests for one
// line share a cache acquisition), ReadRange/WriteRange, Range (an
// iter.Seq2 over a range), io.ReaderAt/io.WriterAt on the element bytes,
// Flush (the durability contract of DESIGN.md §7) and Stats. Every call
// that may block takes a context; an index out of range is an error
// wrapping bam.ErrOutOfRange, never a panic.
//
// # Invariants
//
//   - An Array never holds cache references between calls.
//   - A write is durable once a Flush that started after it returns.
//
// The package must not do I/O of its own or know about engines, caches or
// queues: it builds on bam.Store, bam.Object and bam.Data.
package array
