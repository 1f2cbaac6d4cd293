package gpu_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"math"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/gpu"
)

// A kernel written for a device pointer, with const float* changed to
// bam::array<float>: it reads the array through the store's GPU cache,
// its misses read by the GPU threads themselves. (Needs a GPU and NVRTC;
// not run as a test.)
func ExampleCompile() {
	ctx := context.Background()
	s, err := bam.Open(ctx, "/data/store", bam.Options{Engine: bam.EngineGPU})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	a, err := array.Open[float32](s, "features")
	if err != nil {
		log.Fatal(err)
	}

	const src = `
#include "bam/array.cuh"
extern "C" __global__ void sum(bam::array<float> a, unsigned long long n, double *out) {
	double s = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
	     i += (unsigned long long)gridDim.x * blockDim.x)
		s += a[i];
	atomicAdd(out, s);
}`
	m, err := gpu.Compile(s, "sum.cu", src)
	if err != nil {
		log.Fatal(err) // a compile error carries NVRTC's log
	}
	defer m.Close()
	out, err := gpu.NewBuffer(s, 8)
	if err != nil {
		log.Fatal(err)
	}
	defer out.Free()
	if err := out.Write(make([]byte, 8)); err != nil {
		log.Fatal(err)
	}
	// Errors of the kernel's reads (an NVMe error, a timeout, an index past
	// the end) come back here.
	if err := m.Launch(ctx, "sum", gpu.Grid(a.Len(), 256), a, a.Len(), out); err != nil {
		log.Fatal(err)
	}
	b := make([]byte, 8)
	if err := out.Read(b); err != nil {
		log.Fatal(err)
	}
	fmt.Println(math.Float64frombits(binary.LittleEndian.Uint64(b)))
}
