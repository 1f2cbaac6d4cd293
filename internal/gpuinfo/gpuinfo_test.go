package gpuinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/bam-go/bam/internal/cuda"
)

// h200Host returns go-nvml's mock DGX H200 with the link and BAR1 facts
// that the stock mock leaves out filled in as an H200 on PCIe Gen5 x16
// reports them.
func h200Host(t *testing.T, gpus int) *server.Server {
	t.Helper()
	s := dgxh200.New()
	s.Devices = s.Devices[:gpus]
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.MemoryInfo.Free = dev.MemoryInfo.Total - 512<<20
		dev.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) {
			return nvml.BAR1Memory{Bar1Total: 256 << 30, Bar1Free: 256<<30 - 32<<20}, nvml.SUCCESS
		}
		dev.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		dev.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		dev.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		dev.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
		bus := uint32(0x18 + i)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			return nvml.PciInfo{Domain: 0, Bus: bus, Device: 0, PciDeviceId: 0x233310de}, nvml.SUCCESS
		}
	}
	return s
}

func cudaWith(devs ...cuda.Props) func() CUDAStatus {
	return func() CUDAStatus { return CUDAStatus{DriverVersion: 12040, Devices: devs} }
}

func cudaFails(err error) func() CUDAStatus {
	return func() CUDAStatus { return CUDAStatus{Err: err} }
}

func TestCollectMockH200(t *testing.T) {
	s := h200Host(t, 2)
	info := Collector{NVML: s, CUDA: cudaWith(
		cuda.Props{Ordinal: 0, Name: "NVIDIA H200", PCIBusID: "0000:18:00.0", Multiprocessors: 132, ComputeMajor: 9},
		cuda.Props{Ordinal: 1, Name: "NVIDIA H200", PCIBusID: "0000:19:00.0", Multiprocessors: 132, ComputeMajor: 9},
	)}.Collect()
	if !info.Driver.Found || info.Driver.Version != "550.54.15" || info.Driver.CUDAVersion != "12.4" {
		t.Errorf("driver %+v", info.Driver)
	}
	if len(info.GPUs) != 2 {
		t.Fatalf("%d GPUs, want 2", len(info.GPUs))
	}
	g := info.GPUs[1]
	want := GPU{Index: 1, Name: "NVIDIA H200 141GB HBM3e", UUID: g.UUID, PCIBusID: "0000:19:00.0",
		ComputeCapability: "9.0", Multiprocessors: 132, MemoryTotal: 144384 << 20, MemoryFree: 144384<<20 - 512<<20,
		BAR1Total: 256 << 30, BAR1Free: 256<<30 - 32<<20, PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16}
	if g != want {
		t.Errorf("GPU 1:\n got %+v\nwant %+v", g, want)
	}
	if !strings.HasPrefix(g.UUID, "GPU-") {
		t.Errorf("uuid %q", g.UUID)
	}
	if !info.GPUEngine() {
		t.Error("GPU engine unavailable with two devices")
	}
	if len(info.Notes) != 0 {
		t.Errorf("notes: %q", info.Notes)
	}

	var b bytes.Buffer
	if err := info.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{
		"Driver: 550.54.15, CUDA 12.4\n",
		"GPU 0: NVIDIA H200 141GB HBM3e (compute capability 9.0, 132 SMs)\n",
		"  bus id     0000:18:00.0\n",
		"  memory     141.0 GiB total, 140.5 GiB free\n",
		"  BAR1       256.0 GiB total, 256.0 GiB free\n",
		"  PCIe link  Gen5 x16 (max Gen5 x16)\n",
		"  cpu  available\n",
		"  gpu  available: 2 device(s) usable through the CUDA driver\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "no NVIDIA") {
		t.Errorf("text claims no GPU:\n%s", text)
	}

	js, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	var back Info
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.GPUs[1] != info.GPUs[1] || back.Driver != info.Driver {
		t.Errorf("JSON round trip changed the report: %s", js)
	}
	for _, key := range []string{`"bar1_total_bytes":274877906944`, `"pcie_gen":5`, `"compute_capability":"9.0"`, `"name":"gpu","available":true`} {
		if !strings.Contains(string(js), key) {
			t.Errorf("JSON lacks %s: %s", key, js)
		}
	}
}

func TestCollectMockH100WithoutOptionalFacts(t *testing.T) {
	// The stock mock answers name, memory, PCI and compute capability only;
	// make the rest "not supported", as on parts that lack them.
	s := dgxh100.New()
	for _, d := range s.Devices {
		dev := d.(*server.Device)
		ns := func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		dev.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) { return nvml.BAR1Memory{}, nvml.ERROR_NOT_SUPPORTED }
		dev.GetCurrPcieLinkGenerationFunc, dev.GetMaxPcieLinkGenerationFunc = ns, ns
		dev.GetCurrPcieLinkWidthFunc, dev.GetMaxPcieLinkWidthFunc = ns, ns
	}
	info := Collector{NVML: s, CUDA: cudaFails(fmt.Errorf("cuInit: %w", cuda.ErrNoDevice))}.Collect()
	if len(info.GPUs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(info.GPUs))
	}
	if g := info.GPUs[0]; g.BAR1Total != 0 || g.PCIeGen != 0 || g.ComputeCapability != "9.0" || !strings.Contains(g.Name, "H100") {
		t.Errorf("GPU 0 %+v", g)
	}
	if info.GPUEngine() {
		t.Error("GPU engine available although CUDA failed")
	}
	// "Not supported" is not a problem worth a note; the CUDA failure is.
	if len(info.Notes) != 1 || !strings.Contains(info.Notes[0], "CUDA driver") {
		t.Errorf("notes %q", info.Notes)
	}
	var b bytes.Buffer
	if err := info.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "BAR1") || strings.Contains(b.String(), "PCIe link") {
		t.Errorf("text shows facts that are not known:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "gpu  unavailable: cuInit") {
		t.Errorf("text does not explain the GPU engine:\n%s", b.String())
	}
}

func TestCollectNoDriver(t *testing.T) {
	tests := []struct {
		name     string
		nvml     nvml.Interface
		cudaErr  error
		headline string
	}{
		{"nothing installed", failingNVML(nvml.ERROR_LIBRARY_NOT_FOUND),
			fmt.Errorf("%w: load libcuda.so.1: not found", cuda.ErrNoDriver), "no NVIDIA driver found: the CPU engine is available"},
		{"libraries but no kernel module", failingNVML(nvml.ERROR_DRIVER_NOT_LOADED),
			&cuda.Error{Call: "cuInit", Result: 100, Name: "CUDA_ERROR_NO_DEVICE", Msg: "no CUDA-capable device is detected"},
			"no NVIDIA driver found: the CPU engine is available"},
		{"no NVML at all", nil, fmt.Errorf("%w: x", cuda.ErrNoDriver), "no NVIDIA driver found: the CPU engine is available"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := Collector{NVML: tc.nvml, CUDA: cudaFails(tc.cudaErr)}.Collect()
			if info.Driver.Found || len(info.GPUs) != 0 || info.GPUEngine() {
				t.Errorf("info %+v", info)
			}
			var b bytes.Buffer
			if err := info.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if first, _, _ := strings.Cut(b.String(), "\n"); first != tc.headline {
				t.Errorf("first line %q, want %q\n%s", first, tc.headline, b.String())
			}
			if !strings.Contains(b.String(), "cpu  available") {
				t.Errorf("CPU engine not listed:\n%s", b.String())
			}
		})
	}
}

func TestCollectCUDAOnly(t *testing.T) {
	// NVML missing (containers without it), CUDA working: GPUs come from
	// CUDA alone.
	info := Collector{NVML: failingNVML(nvml.ERROR_LIBRARY_NOT_FOUND), CUDA: cudaWith(
		cuda.Props{Ordinal: 0, Name: "NVIDIA H100 80GB HBM3", PCIBusID: "0000:1A:00.0", TotalMem: 80 << 30,
			ComputeMajor: 9, Multiprocessors: 132})}.Collect()
	if len(info.GPUs) != 1 || info.GPUs[0].PCIBusID != "0000:1a:00.0" || info.GPUs[0].MemoryTotal != 80<<30 {
		t.Fatalf("GPUs %+v", info.GPUs)
	}
	if !info.Driver.Found || info.Driver.CUDAVersion != "12.4" || !info.GPUEngine() {
		t.Errorf("driver %+v engine %v", info.Driver, info.GPUEngine())
	}
	if len(info.Notes) != 1 || !strings.Contains(info.Notes[0], "libnvidia-ml.so.1 not found") {
		t.Errorf("notes %q", info.Notes)
	}
}

func TestNormBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:18:00.0": "0000:18:00.0",
		"0000:1A:00.0":     "0000:1a:00.0",
		"0001:01:00.0":     "0001:01:00.0",
		"weird":            "weird",
		"":                 "",
	} {
		if got := normBusID(in); got != want {
			t.Errorf("normBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCollectRealMachine(t *testing.T) {
	// Whatever this machine has, collecting must not fail or panic, and the
	// CPU engine is always there.
	info := Collect()
	if len(info.Engines) != 2 || !info.Engines[0].Available {
		t.Fatalf("engines %+v", info.Engines)
	}
	if !info.GPUEngine() {
		err := cuda.Available()
		if err == nil {
			t.Fatal("GPU engine unavailable but cuda.Available is nil")
		}
		if !errors.Is(err, cuda.ErrNoDriver) && !errors.Is(err, cuda.ErrNoDevice) {
			t.Logf("CUDA unavailable for another reason: %v", err)
		}
	}
}

// failingNVML is an NVML whose Init fails with r.
func failingNVML(r nvml.Return) nvml.Interface {
	s := dgxh100.New()
	s.InitFunc = func() nvml.Return { return r }
	return s
}
