// Package cpuengine is the CPU engine: it runs the store's data path on
// goroutines with exactly the protocols the GPU engine runs on the device.
//
// It owns, for one open store:
//
//   - an nvme.Target serving the store's namespaces (namespace k as NSID
//     k+1) and a DMA space in which the line cache's data region is
//     registered at its own address, so an NVMe Read or Write moves data
//     straight into or out of a cache line (no copy);
//   - vq queue pairs to the Target behind a vq.Mapper;
//   - a gpucache.Cache whose Backend turns a line tag into an NVMe Read or
//     Write (PRPs naming the line, a PRP list page for lines over two
//     pages) and whose Flush is an NVMe Flush on every namespace;
//   - optionally a host-memory tier of clean lines (ristretto) below the
//     cache, for slow namespaces;
//   - a registry of the objects it has served, to attribute I/O to objects
//     and to find the copies of replicated lines.
//
// Cache tags are namespace-qualified namespace lines (gpucache.MakeTag's
// encoding): physical, so two objects never share a tag while their extents
// are disjoint, and a GPU thread can compute (NSID, LBA) from a tag alone.
// Lines of replicated objects are cached under their copy on namespace 0;
// reads go to the copies round robin and write-backs go to every copy.
//
// Gather and Scatter group each window of 256 consecutive requests by line
// and acquire every distinct line once with the group's size as the
// reference count (the CPU analogue of warp coalescing); windows and long
// ranges are spread over at most Config.Parallelism goroutines. In amd64
// builds without the race detector, Gather first serves the requests whose
// lines are resident without references (gpucache.PeekMany: copy, then
// check the way's generation and state did not change) and groups only the
// rest. Element and namespace indices are split with precomputed
// reciprocals (divider) rather than hardware divisions.
//
// # Invariants
//
//   - Only lines inside registered objects' extents are read or written.
//   - Data of a line is written only under a reference from Acquire; writers
//     release with ReleaseDirty after their stores. It is read under a
//     reference, or by PeekMany, whose copies are used only when the way's
//     sequence check passes after the copy.
//   - The host tier holds only copies equal to storage: a write-back deletes
//     the copy before writing, and the cache never reads a tag while its
//     write-back is in flight.
//   - Every wait is bounded: NVMe commands by vq's timeout, cache waits by
//     gpucache's, everything by the caller's context.
//
// The package must not know the catalog or the on-disk format (the store
// hands it engine.Object descriptors) and must not write below a
// namespace's data area.
package cpuengine
