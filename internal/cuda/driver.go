package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

var (
	openOnce sync.Once
	openErr  error
)

// Open loads the CUDA driver library and initialises it. It is safe to call
// from many goroutines and any number of times: the first call does the
// work and every call returns its result. The error wraps ErrNoDriver when
// the library is missing or cannot initialise, and ErrNoDevice when the
// driver reports no device.
func Open() error {
	openOnce.Do(func() { openErr = open() })
	return openErr
}

// Available reports whether the GPU engine can run here: nil when the
// driver initialises and at least one device exists, otherwise the reason
// (wrapping ErrNoDriver or ErrNoDevice).
func Available() error {
	n, err := DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("cuda: driver reports 0 devices: %w", ErrNoDevice)
	}
	return nil
}

// DriverLibraryEnv names the environment variable that, when set, is the
// path of the driver library to load instead of libcuda.so.1 (a driver in a
// non-standard place, or a missing one to test the CPU fallback).
const DriverLibraryEnv = "BAM_CUDA_LIB"

// MaxConnectionsEnv is the driver's variable for the number of hardware work
// queues a context spreads its streams over (default 8). Streams that share
// a queue run in order, so a copy on one waits behind a kernel on another:
// fatal for the copy-engine fill route, where a running kernel waits for the
// copy. Open raises it to the hardware's 32 unless the user set it.
const MaxConnectionsEnv = "CUDA_DEVICE_MAX_CONNECTIONS"

func open() error {
	if os.Getenv(MaxConnectionsEnv) == "" {
		// Read by the driver when it creates a context; in a cgo program
		// os.Setenv also updates the C environment.
		os.Setenv(MaxConnectionsEnv, "32")
	}
	var msg [512]C.char
	lib := os.Getenv(DriverLibraryEnv)
	path := C.CString(lib)
	defer C.free(unsafe.Pointer(path))
	if C.bam_cu_load(path, &msg[0], C.size_t(len(msg))) != 0 {
		if lib == "" {
			lib = "libcuda.so.1"
		}
		return fmt.Errorf("%w: load %s: %s", ErrNoDriver, lib, C.GoString(&msg[0]))
	}
	return check("cuInit", C.bam_cuInit(0))
}

// resultText returns the driver's name and description of a result code.
// It falls back to the package's own text when the driver is not loaded or
// does not know the code.
func resultText(r int) (name, msg string) {
	switch r {
	case resultNotLoaded:
		return "BAM_DRIVER_NOT_LOADED", "the CUDA driver library is not loaded"
	case resultNoSymbol:
		return "BAM_DRIVER_SYMBOL_MISSING", "the CUDA driver library lacks a required entry point"
	}
	var s *C.char
	if C.bam_cuGetErrorName(C.bam_CUresult(r), &s) == 0 && s != nil {
		name = C.GoString(s)
	}
	s = nil
	if C.bam_cuGetErrorString(C.bam_CUresult(r), &s) == 0 && s != nil {
		msg = C.GoString(s)
	}
	return name, msg
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Open(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", C.bam_cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Open(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.bam_cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device is a CUDA device, named by its ordinal.
type Device struct {
	ordinal int
	h       C.bam_CUdevice
}

// GetDevice returns the device with the given ordinal (0-based).
func GetDevice(ordinal int) (Device, error) {
	n, err := DeviceCount()
	if err != nil {
		return Device{}, err
	}
	if ordinal < 0 || ordinal >= n {
		return Device{}, fmt.Errorf("cuda: device %d of %d: %w", ordinal, n, ErrNoDevice)
	}
	var h C.bam_CUdevice
	if err := check("cuDeviceGet", C.bam_cuDeviceGet(&h, C.int(ordinal))); err != nil {
		return Device{}, err
	}
	return Device{ordinal: ordinal, h: h}, nil
}

// Ordinal returns the device's index.
func (d Device) Ordinal() int { return d.ordinal }

// Attribute is a CUdevice_attribute value.
type Attribute int

// Device attributes this package names (values of CUdevice_attribute).
const (
	AttrMaxThreadsPerBlock             Attribute = 1
	AttrWarpSize                       Attribute = 10
	AttrMultiprocessorCount            Attribute = 16
	AttrCanMapHostMemory               Attribute = 19
	AttrPCIBusID                       Attribute = 33
	AttrPCIDeviceID                    Attribute = 34
	AttrL2CacheSize                    Attribute = 38
	AttrMaxThreadsPerMultiprocessor    Attribute = 39
	AttrAsyncEngineCount               Attribute = 40
	AttrUnifiedAddressing              Attribute = 41
	AttrPCIDomainID                    Attribute = 50
	AttrComputeCapabilityMajor         Attribute = 75
	AttrComputeCapabilityMinor         Attribute = 76
	AttrPageableMemoryAccess           Attribute = 88
	AttrCanUseHostPointerForRegistered Attribute = 91
	AttrMaxSharedMemoryPerBlockOptin   Attribute = 97
	AttrHostRegisterSupported          Attribute = 99
	AttrGPUDirectRDMASupported         Attribute = 116
)

// Attribute returns one device attribute.
func (d Device) Attribute(a Attribute) (int, error) {
	var v C.int
	if err := check("cuDeviceGetAttribute", C.bam_cuDeviceGetAttribute(&v, C.int(a), d.h)); err != nil {
		return 0, fmt.Errorf("device %d attribute %d: %w", d.ordinal, int(a), err)
	}
	return int(v), nil
}

// Name returns the device's marketing name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	var b [256]C.char
	if err := check("cuDeviceGetName", C.bam_cuDeviceGetName(&b[0], C.int(len(b)), d.h)); err != nil {
		return "", err
	}
	return C.GoString(&b[0]), nil
}

// TotalMem returns the device memory size in bytes.
func (d Device) TotalMem() (uint64, error) {
	var n C.size_t
	if err := check("cuDeviceTotalMem_v2", C.bam_cuDeviceTotalMem(&n, d.h)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// PCIBusID returns the device's PCI address, e.g. "0000:18:00.0".
func (d Device) PCIBusID() (string, error) {
	var b [64]C.char
	if err := check("cuDeviceGetPCIBusId", C.bam_cuDeviceGetPCIBusId(&b[0], C.int(len(b)), d.h)); err != nil {
		return "", err
	}
	return C.GoString(&b[0]), nil
}

// Props are the facts about a device the library uses.
type Props struct {
	Ordinal                int
	Name                   string
	PCIBusID               string
	TotalMem               uint64
	ComputeMajor           int
	ComputeMinor           int
	Multiprocessors        int
	MaxThreadsPerBlock     int
	MaxThreadsPerSM        int
	WarpSize               int
	L2CacheBytes           int
	SharedMemPerBlockOptin int
	AsyncEngines           int
	UnifiedAddressing      bool
	CanMapHostMemory       bool
	HostRegisterSupported  bool
	GPUDirectRDMA          bool
}

// Props collects the device's facts.
func (d Device) Props() (Props, error) {
	p := Props{Ordinal: d.ordinal}
	var err error
	if p.Name, err = d.Name(); err != nil {
		return p, err
	}
	if p.PCIBusID, err = d.PCIBusID(); err != nil {
		return p, err
	}
	if p.TotalMem, err = d.TotalMem(); err != nil {
		return p, err
	}
	ints := []struct {
		a   Attribute
		dst *int
	}{
		{AttrComputeCapabilityMajor, &p.ComputeMajor},
		{AttrComputeCapabilityMinor, &p.ComputeMinor},
		{AttrMultiprocessorCount, &p.Multiprocessors},
		{AttrMaxThreadsPerBlock, &p.MaxThreadsPerBlock},
		{AttrMaxThreadsPerMultiprocessor, &p.MaxThreadsPerSM},
		{AttrWarpSize, &p.WarpSize},
		{AttrL2CacheSize, &p.L2CacheBytes},
		{AttrMaxSharedMemoryPerBlockOptin, &p.SharedMemPerBlockOptin},
		{AttrAsyncEngineCount, &p.AsyncEngines},
	}
	for _, x := range ints {
		if *x.dst, err = d.Attribute(x.a); err != nil {
			return p, err
		}
	}
	bools := []struct {
		a   Attribute
		dst *bool
	}{
		{AttrUnifiedAddressing, &p.UnifiedAddressing},
		{AttrCanMapHostMemory, &p.CanMapHostMemory},
		{AttrHostRegisterSupported, &p.HostRegisterSupported},
		{AttrGPUDirectRDMASupported, &p.GPUDirectRDMA},
	}
	for _, x := range bools {
		v, err := d.Attribute(x.a)
		if err != nil {
			return p, err
		}
		*x.dst = v != 0
	}
	return p, nil
}
