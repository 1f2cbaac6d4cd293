//go:build !amd64 || race

package cpuengine

// optimisticReads is off: see optimistic.go.
const optimisticReads = false
