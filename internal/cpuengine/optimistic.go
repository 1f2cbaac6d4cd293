//go:build amd64 && !race

package cpuengine

// optimisticReads lets batched reads copy hits without taking a reference
// (gpucache.Peek and Valid). The copy is an unsynchronised read of a line
// that an evictor may be refilling, which Valid then rejects; amd64 keeps
// loads in order, and the race detector would report the discarded read, so
// race builds and other architectures take references.
const optimisticReads = true
