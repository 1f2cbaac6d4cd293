package gpucache

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// naiveFindWays is findWays's contract written plainly.
func naiveFindWays(tw []uint64, k uintptr, tags, offs []uint64, ways []uintptr, shift uint, lineMax uint64) {
	for i, tag := range tags {
		g := ^uintptr(0)
		for w := ways[i]; w < ways[i]+k; w++ {
			if tw[w]&TagMask == tag {
				g = w
				break
			}
		}
		if g == ^uintptr(0) || offs[i] > lineMax || tag >= TagMask {
			ways[i] = ^uintptr(0)
		} else {
			ways[i] = g<<shift + uintptr(offs[i])
		}
	}
}

// TestFindWays runs PeekMany's way searches (the plain one at several
// associativities, and the eight-way one where this machine has it)
// against naiveFindWays over random sets: tag words with clock bits and
// generations set, empty and cleared ways, tags found twice in a set,
// tags found nowhere, invalid tags and offsets past the line.
func TestFindWays(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	const sets, shift, lineMax = 64, 12, 4096 - 8
	for _, k := range []uintptr{1, 4, 8, 16} {
		words := make([]uint64, sets*int(k)+16)
		tagBase := unsafe.Pointer(&words[8]) // any 8-byte alignment must do
		tw := unsafe.Slice((*uint64)(tagBase), sets*int(k))
		for round := range 100 {
			for i := range tw {
				gen := uint64(rng.IntN(1<<TagWordGenBits)) << TagWordGenShift
				switch rng.IntN(8) {
				case 0:
					tw[i] = TagEmpty
				case 1:
					tw[i] = TagMask | gen // a cleared tag keeps its generation
				default:
					tw[i] = uint64(rng.IntN(32)) | uint64(rng.IntN(2))*TagWordClockBit | gen
				}
			}
			n := 1 + rng.IntN(300)
			tags, offs := make([]uint64, n), make([]uint64, n)
			want, got, got8 := make([]uintptr, n), make([]uintptr, n), make([]uintptr, n)
			for i := range tags {
				tags[i] = uint64(rng.IntN(40))
				switch rng.IntN(20) {
				case 0:
					tags[i] = TagMask
				case 1:
					tags[i] = TagMask + 1 + uint64(rng.IntN(100))
				case 2:
					tags[i] = ^uint64(0)
				}
				offs[i] = uint64(rng.IntN(4096/8)) * 8
				if rng.IntN(20) == 0 {
					offs[i] = lineMax + 1 + uint64(rng.IntN(100))
				}
				want[i] = uintptr(rng.IntN(sets)) * k
			}
			copy(got, want)
			copy(got8, want)
			naiveFindWays(tw, k, tags, offs, want, shift, lineMax)
			findWays(tagBase, k, tags, offs, got, shift, lineMax)
			if k == 8 && haveFindWays8 {
				findWays8(tagBase, tags, offs, got8, shift, lineMax)
			} else {
				copy(got8, want)
			}
			for i := range want {
				if got[i] != want[i] || got8[i] != want[i] {
					t.Fatalf("%d ways, round %d, request %d (tag %#x, offset %d): findWays gave %#x, findWays8 %#x, want %#x",
						k, round, i, tags[i], offs[i], got[i], got8[i], want[i])
				}
			}
		}
	}
}
