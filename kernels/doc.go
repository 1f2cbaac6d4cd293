// Package kernels holds the project's CUDA code and hands it to Go as
// embedded PTX.
//
// Layout: include/bam/ is the device library (public headers, details below
// detail/); each *.cu file at this level is one kernel family; ptx/ holds
// the PTX that `make kernels` generates from them with nvcc
// (-ptx -arch=compute_80 -lineinfo, nvcc 11.8: PTX ISA 7.8, which every
// driver from 520 on JIT-compiles for A100, H100 and H200), ptx/sm_90/ the
// same sources built for compute_90 (PTX ISA 8.0, drivers from 525 on),
// loaded on H100 and H200 (PTXFor), and ptx/MANIFEST the SHA-256 of every
// source, header and PTX file of that run. User code compiled with NVRTC
// against the headers follows the build the engine loads (NVRTCOptions).
//
// Invariants: the committed PTX is generated, never edited; the manifest
// matches the embedded sources and PTX (TestManifestCurrent fails otherwise:
// run `make kernels`); kernels are extern "C" and named for what they do;
// headers compile under both nvcc and NVRTC (no standard library includes).
// Helpers mirrored in Go (Mix64, Pattern64) stay bit-identical to their
// device versions.
//
// This package must not load or launch anything: internal/cuda does that.
// include/bam/detail/layout.h is generated from Go layouts by its own tool
// and is not edited here.
package kernels
