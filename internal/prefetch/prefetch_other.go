//go:build !amd64 && !arm64

package prefetch

func lines1(addr, n uintptr) {}
