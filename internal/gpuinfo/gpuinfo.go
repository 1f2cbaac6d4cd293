package gpuinfo

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/bam-go/bam/internal/cuda"
)

// Info is everything `bam info` reports.
type Info struct {
	Driver  Driver   `json:"driver"`
	GPUs    []GPU    `json:"gpus"`
	Engines []Engine `json:"engines"`
	Notes   []string `json:"notes,omitempty"` // what could not be learnt, and why
}

// Driver describes the NVIDIA driver.
type Driver struct {
	Found       bool   `json:"found"`                  // a usable driver answered (NVML or CUDA)
	Version     string `json:"version,omitempty"`      // e.g. "570.86.15" (NVML)
	CUDAVersion string `json:"cuda_version,omitempty"` // highest CUDA version it supports, e.g. "13.0"
	NVMLVersion string `json:"nvml_version,omitempty"`
}

// GPU describes one device. Zero fields were not available.
type GPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid,omitempty"`
	PCIBusID          string `json:"pci_bus_id,omitempty"` // dddd:bb:dd.f, lower case
	ComputeCapability string `json:"compute_capability,omitempty"`
	Multiprocessors   int    `json:"multiprocessors,omitempty"`
	MemoryTotal       uint64 `json:"memory_total_bytes"`
	MemoryFree        uint64 `json:"memory_free_bytes,omitempty"`
	BAR1Total         uint64 `json:"bar1_total_bytes,omitempty"`
	BAR1Free          uint64 `json:"bar1_free_bytes,omitempty"`
	PCIeGen           int    `json:"pcie_gen,omitempty"`
	PCIeGenMax        int    `json:"pcie_gen_max,omitempty"`
	PCIeWidth         int    `json:"pcie_width,omitempty"`
	PCIeWidthMax      int    `json:"pcie_width_max,omitempty"`
}

// Engine says whether one execution engine can run here.
type Engine struct {
	Name      string `json:"name"` // "cpu" or "gpu"
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// CUDAStatus is what the CUDA driver said: Err when it could not be used,
// else its version and the devices' properties.
type CUDAStatus struct {
	Err           error
	DriverVersion int // 1000*major + 10*minor
	Devices       []cuda.Props
}

// Collector gathers Info from injectable sources.
type Collector struct {
	// NVML is the management library; nil skips NVML.
	NVML nvml.Interface
	// CUDA probes the CUDA driver; nil skips it (the GPU engine is then
	// reported unavailable).
	CUDA func() CUDAStatus
}

// Collect gathers Info from the real NVML and CUDA driver of this machine.
func Collect() *Info {
	return Collector{NVML: nvml.New(), CUDA: ProbeCUDA}.Collect()
}

// ProbeCUDA asks the CUDA driver for its version and devices.
func ProbeCUDA() CUDAStatus {
	var st CUDAStatus
	n, err := cuda.DeviceCount()
	if err != nil {
		st.Err = err
		return st
	}
	if st.DriverVersion, err = cuda.DriverVersion(); err != nil {
		st.Err = err
		return st
	}
	for i := range n {
		d, err := cuda.GetDevice(i)
		if err != nil {
			st.Err = err
			return st
		}
		p, err := d.Props()
		if err != nil {
			st.Err = err
			return st
		}
		st.Devices = append(st.Devices, p)
	}
	return st
}

// Collect gathers Info; it never fails (see Notes).
func (c Collector) Collect() *Info {
	info := &Info{GPUs: []GPU{}}
	nvmlOK := false
	if c.NVML != nil {
		nvmlOK = info.fromNVML(c.NVML)
	}
	var st CUDAStatus
	if c.CUDA != nil {
		st = c.CUDA()
	} else {
		st.Err = fmt.Errorf("%w: CUDA probing disabled", cuda.ErrNoDriver)
	}
	if st.Err == nil {
		info.Driver.Found = true
		if info.Driver.CUDAVersion == "" {
			info.Driver.CUDAVersion = cudaVersionString(st.DriverVersion)
		}
		info.mergeCUDA(st.Devices, nvmlOK)
	} else {
		info.Notes = append(info.Notes, "CUDA driver: "+st.Err.Error())
	}

	info.Engines = append(info.Engines, Engine{Name: "cpu", Available: true})
	gpu := Engine{Name: "gpu"}
	switch {
	case st.Err != nil:
		gpu.Reason = st.Err.Error()
	case len(st.Devices) == 0:
		gpu.Reason = "the CUDA driver reports no device"
	default:
		gpu.Available = true
		gpu.Reason = fmt.Sprintf("%d device(s) usable through the CUDA driver", len(st.Devices))
	}
	info.Engines = append(info.Engines, gpu)
	return info
}

// GPUEngine reports whether the GPU engine can run.
func (i *Info) GPUEngine() bool {
	for _, e := range i.Engines {
		if e.Name == "gpu" {
			return e.Available
		}
	}
	return false
}

func cudaVersionString(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// normBusID writes PCI addresses one way: 4-digit domain, lower case.
// NVML says 00000000:18:00.0, CUDA 0000:18:00.0.
func normBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Count(rest, ":") != 1 {
		return s
	}
	dom = strings.TrimLeft(dom, "0")
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}

func (i *Info) note(format string, args ...any) {
	i.Notes = append(i.Notes, fmt.Sprintf(format, args...))
}

// fromNVML fills driver and per-GPU facts from NVML; it reports whether
// NVML answered.
func (i *Info) fromNVML(lib nvml.Interface) bool {
	if r := lib.Init(); r != nvml.SUCCESS {
		i.note("NVML: %s", nvmlErr(lib, r))
		return false
	}
	defer lib.Shutdown()
	i.Driver.Found = true
	if v, r := lib.SystemGetDriverVersion(); r == nvml.SUCCESS {
		i.Driver.Version = v
	}
	if v, r := lib.SystemGetNVMLVersion(); r == nvml.SUCCESS {
		i.Driver.NVMLVersion = v
	}
	if v, r := lib.SystemGetCudaDriverVersion(); r == nvml.SUCCESS {
		i.Driver.CUDAVersion = cudaVersionString(v)
	}
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		i.note("NVML device count: %s", nvmlErr(lib, r))
		return true
	}
	for idx := range n {
		d, r := lib.DeviceGetHandleByIndex(idx)
		if r != nvml.SUCCESS {
			i.note("NVML device %d: %s", idx, nvmlErr(lib, r))
			continue
		}
		i.GPUs = append(i.GPUs, deviceFacts(lib, idx, d, i))
	}
	return true
}

// field records an NVML query's failure unless the device simply does not
// support it.
func field(lib nvml.Interface, info *Info, idx int, what string, r nvml.Return) bool {
	if r == nvml.SUCCESS {
		return true
	}
	if r != nvml.ERROR_NOT_SUPPORTED {
		info.note("NVML device %d %s: %s", idx, what, nvmlErr(lib, r))
	}
	return false
}

func deviceFacts(lib nvml.Interface, idx int, d nvml.Device, info *Info) GPU {
	g := GPU{Index: idx}
	var r nvml.Return
	if g.Name, r = d.GetName(); !field(lib, info, idx, "name", r) {
		g.Name = fmt.Sprintf("GPU %d", idx)
	}
	if v, r := d.GetUUID(); field(lib, info, idx, "UUID", r) {
		g.UUID = v
	}
	if p, r := d.GetPciInfo(); field(lib, info, idx, "PCI info", r) {
		if s := int8String(p.BusId[:]); s != "" {
			g.PCIBusID = normBusID(s)
		} else {
			g.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
		}
	}
	if ma, mi, r := d.GetCudaComputeCapability(); field(lib, info, idx, "compute capability", r) {
		g.ComputeCapability = fmt.Sprintf("%d.%d", ma, mi)
	}
	if m, r := d.GetMemoryInfo(); field(lib, info, idx, "memory", r) {
		g.MemoryTotal, g.MemoryFree = m.Total, m.Free
	}
	if b, r := d.GetBAR1MemoryInfo(); field(lib, info, idx, "BAR1", r) {
		g.BAR1Total, g.BAR1Free = b.Bar1Total, b.Bar1Free
	}
	if v, r := d.GetCurrPcieLinkGeneration(); field(lib, info, idx, "PCIe generation", r) {
		g.PCIeGen = v
	}
	if v, r := d.GetMaxPcieLinkGeneration(); field(lib, info, idx, "PCIe max generation", r) {
		g.PCIeGenMax = v
	}
	if v, r := d.GetCurrPcieLinkWidth(); field(lib, info, idx, "PCIe width", r) {
		g.PCIeWidth = v
	}
	if v, r := d.GetMaxPcieLinkWidth(); field(lib, info, idx, "PCIe max width", r) {
		g.PCIeWidthMax = v
	}
	return g
}

// mergeCUDA adds what only CUDA knows (SM count) to the NVML GPUs, matched
// by PCI address, or builds the GPU list from CUDA when NVML is absent.
func (i *Info) mergeCUDA(devs []cuda.Props, nvmlOK bool) {
	for _, p := range devs {
		bus := normBusID(p.PCIBusID)
		matched := false
		for k := range i.GPUs {
			if i.GPUs[k].PCIBusID == bus {
				i.GPUs[k].Multiprocessors = p.Multiprocessors
				if i.GPUs[k].ComputeCapability == "" {
					i.GPUs[k].ComputeCapability = fmt.Sprintf("%d.%d", p.ComputeMajor, p.ComputeMinor)
				}
				matched = true
			}
		}
		if !matched && !nvmlOK {
			i.GPUs = append(i.GPUs, GPU{
				Index:             p.Ordinal,
				Name:              p.Name,
				PCIBusID:          bus,
				ComputeCapability: fmt.Sprintf("%d.%d", p.ComputeMajor, p.ComputeMinor),
				Multiprocessors:   p.Multiprocessors,
				MemoryTotal:       p.TotalMem,
			})
		}
	}
}

func int8String(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func nvmlErr(_ nvml.Interface, r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "libnvidia-ml.so.1 not found"
	}
	return r.Error()
}

// noGPUHeadline is the first line of the report when the GPU engine cannot
// run: it says whether the driver or the device is missing.
func (i *Info) noGPUHeadline() string {
	var cudaErr string
	for _, e := range i.Engines {
		if e.Name == "gpu" {
			cudaErr = e.Reason
		}
	}
	if !i.Driver.Found || strings.Contains(cudaErr, cuda.ErrNoDriver.Error()) {
		return "no NVIDIA driver found: the CPU engine is available"
	}
	return "no NVIDIA GPU found: the CPU engine is available"
}
