// Package layout renders memory layouts shared by Go and CUDA into a C++
// header.
//
// A package whose metadata is read and written by both Go code and CUDA
// kernels (vq, gpucache) defines its layout once, in Go, as constants:
// sizes, offsets, strides, bit positions and padding. It exposes them as a
// Group of Const values; the genlayout command collects every group and
// writes kernels/include/bam/detail/layout.h with WriteHeader. A test beside
// the generator fails when the committed header is stale.
//
// Invariants: a rendered header depends only on its groups (no dates, no
// paths), so regeneration is byte-for-byte reproducible; every name is a valid
// C++ identifier, unique within its group.
//
// The package holds no layout of its own and must not import the packages
// whose layouts it renders.
package layout

//go:generate go run ./genlayout -o ../../kernels/include/bam/detail/layout.h
