//go:build !linux

package hugepages

// Advise does nothing where transparent huge pages are not known.
func Advise([]byte) {}
