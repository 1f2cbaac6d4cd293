// Package gpuinfo collects the facts `bam info` reports about the machine's
// NVIDIA GPUs: names, memory, BAR1 aperture, PCIe link, compute capability,
// driver and CUDA versions, and which engines this build can use.
//
// Facts come from NVML (github.com/NVIDIA/go-nvml, loaded at run time) and
// from the CUDA driver (internal/cuda); either may be missing. Collecting
// never fails: what cannot be learnt is left zero and explained in Notes,
// so a machine without NVIDIA software reports "CPU engine only" rather
// than an error. Sources are injectable (Collector) so formatting and
// merging are tested with go-nvml's mock DGX servers.
//
// The package only reads; it must not allocate GPU memory, change device
// settings or keep NVML initialised after Collect returns.
package gpuinfo
