//go:build amd64 || arm64

package prefetch

// lines1 prefetches n cache lines from addr on, LineBytes apart. It never
// faults.
//
//go:noescape
func lines1(addr, n uintptr)
