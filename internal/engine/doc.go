// Package engine defines the contract between the store and the engines that
// move object bytes: the CPU engine (package internal/cpuengine, goroutines
// over an nvme.Target) and the GPU engine (CUDA kernels over the same
// protocols).
//
// An engine sees an object only as an Object descriptor: plain data taken
// from the catalog (element size, length, line size, layout and extents) and
// the layout math that maps an element to its line and a line to its
// (namespace, LBA) address. The descriptor is plain data so that a GPU engine
// can copy it to the device unchanged.
//
// Offsets given to ReadAt and WriteAt address the object's element bytes:
// byte off is byte off%ElemSize of element off/ElemSize. Line padding (the
// LineSize mod ElemSize bytes at the end of every line when the element size
// does not divide the line size) is never visible.
//
// # Invariants
//
//   - An engine only reads and writes lines inside the extents of the
//     objects it is handed; it never touches superblocks or catalog slots.
//   - Every operation is bounded by its context and by the engine's own
//     timeouts; none panics on bad input (indices out of range, short
//     buffers) but returns an error wrapping ErrOutOfRange or ErrInvalid.
//   - Flush returns after every line dirtied before the call is on its
//     namespace and the namespaces have flushed (DESIGN.md §7).
//
// The package holds only types and the layout math; it must not import the
// store, the cache or the queues.
package engine
