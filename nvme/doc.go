// Package nvme owns the NVMe command set as it appears on the wire and a
// software NVMe controller that serves it.
//
// The protocol half encodes and decodes 64-byte submission queue entries
// (Command) and 16-byte completion queue entries (Completion), names the
// opcodes and status codes the project uses, builds PRP entries and PRP lists,
// and does the phase-tag and doorbell arithmetic of a queue pair.
//
// The controller half, Target, serves I/O queue pairs placed in memory it is
// handed (QueuePairMemory: SQ ring, CQ ring, doorbell words). It fetches
// commands in order, moves data through a DMASpace of registered regions, runs
// them against Namespaces (memory, files, block devices), and posts completions
// with the right CID, SQHD, SQID, phase and status. Bad commands complete with
// an NVMe status; nothing a host writes into a queue can make the Target panic.
//
// The package must not know about the clients of a queue pair: ticketing,
// doorbell coalescing and CID allocation belong to package vq.
package nvme
