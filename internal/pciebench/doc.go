// Package pciebench measures the memory paths every other GPU benchmark is
// compared with (benchmark id "pcie" of BENCHMARKS.md): pinned host→device
// and device→host copy bandwidth, GPU zero-copy reads of pinned mapped host
// memory, and device-memory (HBM) copy and read bandwidth.
//
// Method: one transfer size well above the L2 (256 MiB by default), warm-up
// runs, then the median of several timed runs; times come from CUDA events
// on one stream; data is a non-zero pattern, and every transfer's result is
// verified (byte comparison or checksum against the host's) before its
// timings count. Figures are compared with the ceilings measured on the
// benchmark host (DESIGN.md §8) as baseline.
//
// The package owns no long-lived GPU state: Run allocates, measures and
// frees everything it used. Tests may run it small to check that it works
// and verifies its data, never to assert how fast it is: benchmarks are not
// timed tests.
package pciebench
