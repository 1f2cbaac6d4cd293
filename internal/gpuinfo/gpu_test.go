package gpuinfo

// Checks of the real NVML and CUDA paths; they need a GPU (see
// internal/cuda/cudatest) and run in the GPU bundle because this file exists.

import (
	"bytes"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
)

func TestGPUCollectReal(t *testing.T) {
	cudatest.Device(t)
	info := Collect()
	var b bytes.Buffer
	if err := info.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", b.String())
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if !info.GPUEngine() || !info.Driver.Found || info.Driver.CUDAVersion == "" {
		t.Errorf("engine %v, driver %+v", info.GPUEngine(), info.Driver)
	}
	if len(info.GPUs) < n {
		t.Fatalf("%d GPUs reported, CUDA sees %d", len(info.GPUs), n)
	}
	for _, note := range info.Notes {
		t.Logf("note: %s", note)
	}
	for _, g := range info.GPUs {
		if g.Name == "" || g.MemoryTotal == 0 || g.ComputeCapability == "" {
			t.Errorf("GPU %d lacks basics: %+v", g.Index, g)
		}
		// Facts NVML reports for every data-center GPU; the CUDA-only
		// fallback (no NVML) has none of them, and says so in Notes.
		if info.Driver.Version != "" {
			if g.BAR1Total == 0 || g.PCIeGenMax == 0 || g.PCIeWidthMax == 0 {
				t.Errorf("GPU %d: BAR1 %d, PCIe max Gen%d x%d", g.Index, g.BAR1Total, g.PCIeGenMax, g.PCIeWidthMax)
			}
		}
		if g.Multiprocessors == 0 {
			t.Errorf("GPU %d (%s): SM count not merged from CUDA (bus ids differ?)", g.Index, g.PCIBusID)
		}
	}
}
