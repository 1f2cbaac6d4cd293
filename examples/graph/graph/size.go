package graph

import (
	"sync/atomic"
	"unsafe"
)

// sizeOf is the size of T's values.
func sizeOf[T any](T) uintptr {
	var z T
	return unsafe.Sizeof(z)
}

func atomicOr(p *uint64, m uint64) { atomic.OrUint64(p, m) }

// bytesOf views a slice of plain values as bytes (host byte order).
func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}
