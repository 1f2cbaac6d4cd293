// Package prefetch asks the processor to start loading memory that code
// is about to read, so that the loads of several independent copies
// overlap instead of each waiting in turn for its cache and TLB misses.
// It owns no memory and changes none: a prefetch is a hint that never
// faults, even on an address that is not mapped, and on architectures
// without an implementation here it does nothing.
package prefetch
