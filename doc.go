// Package bam gives Go programs array and key-value access to datasets far
// larger than GPU memory, stored on NVMe SSDs or files, with GPU threads
// orchestrating their own storage access.
//
// This package owns the Store: it creates and opens volumes (a directory of
// namespace files ns-000.bam, ns-001.bam, ..., or a list of block devices),
// verifies their superblocks, keeps the catalog of named objects, allocates
// their line-aligned extents and maps element indices to lines and lines to
// (namespace, LBA) addresses. Typed access lives in package array
// (Array[T]) and package kv (Table[K, V]); they build on Object.
//
// # Durability
//
// Every catalog update (CreateObject, DeleteObject, RenameObject,
// SwapObjects, SetObjectMeta) is durable when it returns: the new catalog is
// written to the slot the previous one does not occupy and flushed
// (fdatasync for files). A crash at any point leaves either the old or the
// new catalog, never a corrupt one. Object data follows the contract of the
// layer that writes it (Array.Flush, kv Sync).
//
// # Invariants
//
//   - Namespaces 0..N-1 of one volume carry the same volume UUID, LBA size,
//     line size and catalog geometry; Open refuses anything else with an
//     error naming the file, the field and the expected value.
//   - Extents are line-aligned, lie inside their namespace's data area and
//     never overlap; free space is derived from the catalog alone.
//   - Elements never straddle lines (see Object).
//   - Catalog lookups never block on updates; updates are serialised.
//
// The package must not do data-path I/O itself beyond zeroing new extents:
// reads and writes of object lines go through the engine (nvme.Target, vq,
// gpucache), which receives the store's namespaces.
package bam
