// Package hugepages asks the operating system to back large, long-lived,
// randomly read memory regions (cache line data, a memory namespace's
// blocks, benchmark baselines) with transparent huge pages. It only gives
// advice: it never allocates, frees or changes the contents of the memory
// it is handed, and failure is silent because the advice changes nothing
// but speed.
package hugepages
