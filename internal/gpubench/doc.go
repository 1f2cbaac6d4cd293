// Package gpubench measures the GPU data path on a GPU: the device queues
// (Q1, Q2, L1 of BENCHMARKS.md), the cache on misses and its ablations (C1,
// C4) and the all-hit array paths (C2, C3). Each Run* function returns one
// *bench.Result per benchmark id, with every figure's baseline or ceiling
// measured in the same run.
//
// Method (BENCHMARKS.md, "Method (GPU)"): namespaces are memory-backed and
// filled with kernels.Pattern64, never zeros; every kernel's output (sums,
// completed and failed command counts, mismatched words) is checked against
// a host reference before and during timing, and a run that fails a check
// is an error, not a number; warm-up runs precede the timed ones, device
// time comes from CUDA events, and each figure is the median of Config.Runs
// runs. Data sets are larger than the L2 cache where the figure is about
// memory, and random index sets rotate between runs.
//
// Invariants: every device wait is bounded (the engine's timeout, plus a
// per-run time box for the queue sweeps); everything a run allocates is
// freed before it returns. The kernels live in kernels/bench.cu (family
// "bench") and exist only for these measurements.
//
// The package must not change engine behaviour: it drives
// internal/gpuengine through its public API and the hooks of
// bench_hooks.go only, and does not import the store or the CPU engine.
package gpubench
