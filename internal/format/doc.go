// Package format owns the on-disk records of a bam store: the superblock at
// the start of every namespace and the catalog of named objects, and the
// geometry rules that give an object's extents their meaning.
//
// # Namespace layout
//
// Every namespace (a file ns-NNN.bam or a block device) is laid out as
//
//	[0, SuperblockSize)           superblock (one sector, CRC32C protected)
//	[CatalogA, CatalogA+CatalogSize)  catalog slot A
//	[CatalogB, CatalogB+CatalogSize)  catalog slot B
//	[DataStart, Capacity)         data lines
//
// All region starts are multiples of the line size. The catalog slots are
// reserved on every namespace so that the data area starts at the same offset
// everywhere, but only namespace 0 (FlagCatalog) holds the catalog.
//
// # Invariants
//
//   - Encoding is deterministic: equal values encode to equal bytes.
//   - Decoding never panics and never allocates more than the input can
//     describe; every failure is a *FieldError (or *CatalogError) naming the
//     file, the record, the field and the expected value, and wraps ErrCorrupt
//     or ErrVersion.
//   - A catalog of generation g lives in slot A when g is even and slot B when
//     g is odd, so writing generation g+1 never touches the slot that holds g.
//
// The package does no I/O and must not know about engines, caches or queues.
package format
