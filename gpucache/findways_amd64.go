package gpucache

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// haveFindWays8 reports whether findWays8 may run here: it compares a
// set's eight tag words with two 256-bit AVX2 compares.
var haveFindWays8 = cpu.X86.HasAVX2

// findWays8 is findWays for sets of eight ways, in assembly: about half
// the instructions a request of the unrolled Go loop, which spills
// registers around its eight conditional moves.
//
//go:noescape
func findWays8(tagBase unsafe.Pointer, tags, offs []uint64, ways []uintptr, shift uint, lineMax uint64)
