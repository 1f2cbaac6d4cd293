//go:build !amd64

package gpucache

import "unsafe"

const haveFindWays8 = false

func findWays8(tagBase unsafe.Pointer, tags, offs []uint64, ways []uintptr, shift uint, lineMax uint64) {
	findWays(tagBase, 8, tags, offs, ways, shift, lineMax)
}
