// Package vqbench measures the vq queue protocol on the CPU: 4 KiB random
// reads through vq.QueuePair clients against a memory-backed nvme.Target,
// compared in the same run with the single-lock baseline (vq.Locked) and
// with the Target's own 4 KiB rate (nvme.MeasureTargetIOPS, a
// single-goroutine client per queue that keeps it full).
//
// It owns only measurement: it builds a fresh Target and fresh queue pairs
// for every point, checks the data of every submitter's last read against
// the namespace's pattern, and returns a *bench.Result. It must not change
// the protocol it measures.
package vqbench
