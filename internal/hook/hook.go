// Package hook lets packages of this module reach what the root package
// keeps unexported, without widening its public API: the root package fills
// these variables from an init function. Only packages of this module can
// import it.
package hook

import (
	"github.com/bam-go/bam/internal/gpuengine"
)

// StoreGPU returns the GPU engine of a *bam.Store (started on demand), or an
// error when the store does not run on a GPU.
var StoreGPU func(store any) (*gpuengine.Engine, error)

// DeviceArray binds object (a *bam.Object of store) to the store's GPU
// engine and returns its device view, the argument of a bam::array<T>
// kernel parameter.
var DeviceArray func(store, object any) (*gpuengine.Array, error)
