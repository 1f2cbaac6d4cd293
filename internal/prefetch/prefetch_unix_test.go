//go:build unix

package prefetch

import (
	"syscall"
	"testing"
)

// TestBytesNeverFaults prefetches a mapping whose pages may not be
// touched (PROT_NONE): a prefetch is a hint and must not fault.
func TestBytesNeverFaults(t *testing.T) {
	m, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_NONE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Munmap(m)
	Bytes(m, len(m), len(m)/LineBytes)
}
