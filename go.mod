module github.com/bam-go/bam

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
