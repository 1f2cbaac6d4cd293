package cuda

/*
#include "driver.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// DevicePtr is a device virtual address (CUdeviceptr).
type DevicePtr uint64

// Add returns p offset by n bytes.
func (p DevicePtr) Add(n uint64) DevicePtr { return p + DevicePtr(n) }

// Plain is the set of element types that may be copied to and from device
// memory as raw bytes: fixed-size numbers with no Go pointers inside.
type Plain interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// AsBytes views a slice of plain values as its bytes (no copy).
func AsBytes[T Plain](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// DeviceMem is an allocation of device memory.
type DeviceMem struct {
	ctx   *Context
	ptr   DevicePtr
	size  uint64
	freed atomic.Bool
}

// Alloc allocates n bytes of device memory. When the device cannot satisfy
// the request the error wraps ErrOutOfMemory and says how much was free.
func (c *Context) Alloc(n uint64) (*DeviceMem, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("cuda: allocate 0 bytes of device memory")
	}
	var p C.bam_CUdeviceptr
	if err := check("cuMemAlloc_v2", C.bam_cuMemAlloc(h, &p, C.size_t(n))); err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			free, total, ierr := c.MemInfo()
			if ierr == nil {
				return nil, fmt.Errorf("cuda: allocate %s of device memory on device %d (%s free of %s): %w",
					FormatBytes(n), c.dev.ordinal, FormatBytes(free), FormatBytes(total), err)
			}
		}
		return nil, fmt.Errorf("cuda: allocate %s of device memory on device %d: %w", FormatBytes(n), c.dev.ordinal, err)
	}
	return &DeviceMem{ctx: c, ptr: DevicePtr(p), size: n}, nil
}

// Ptr returns the allocation's device address.
func (m *DeviceMem) Ptr() DevicePtr { return m.ptr }

// Size returns the allocation's size in bytes.
func (m *DeviceMem) Size() uint64 { return m.size }

// Free releases the allocation. Freeing twice is a no-op.
func (m *DeviceMem) Free() error {
	if m == nil || m.freed.Swap(true) {
		return nil
	}
	h, err := m.ctx.handle()
	if err != nil {
		return err
	}
	return check("cuMemFree_v2", C.bam_cuMemFree(h, C.bam_CUdeviceptr(m.ptr)))
}

func (m *DeviceMem) span(off, n uint64) (DevicePtr, error) {
	if m.freed.Load() {
		return 0, ErrClosed
	}
	if off > m.size || n > m.size-off {
		return 0, fmt.Errorf("cuda: range [%d, %d) outside device allocation of %d bytes", off, off+n, m.size)
	}
	return m.ptr.Add(off), nil
}

// Write copies src into the allocation at byte offset off (synchronous).
func (m *DeviceMem) Write(off uint64, src []byte) error {
	p, err := m.span(off, uint64(len(src)))
	if err != nil {
		return err
	}
	return m.ctx.CopyHtoD(p, src)
}

// Read copies len(dst) bytes from byte offset off into dst (synchronous).
func (m *DeviceMem) Read(off uint64, dst []byte) error {
	p, err := m.span(off, uint64(len(dst)))
	if err != nil {
		return err
	}
	return m.ctx.CopyDtoH(dst, p)
}

// Memset8 sets every byte of the allocation to v (synchronous).
func (m *DeviceMem) Memset8(v byte) error {
	if _, err := m.span(0, m.size); err != nil {
		return err
	}
	return m.ctx.MemsetD8(m.ptr, v, m.size)
}

// CopyHtoD copies src to device address dst and returns when done. src may
// be any Go memory without pointers; the driver stages pageable memory.
func (c *Context) CopyHtoD(dst DevicePtr, src []byte) error {
	h, err := c.handle()
	if err != nil || len(src) == 0 {
		return err
	}
	return check("cuMemcpyHtoD_v2", C.bam_cuMemcpyHtoD(h, C.bam_CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// CopyDtoH copies len(dst) bytes from device address src into dst and
// returns when done.
func (c *Context) CopyDtoH(dst []byte, src DevicePtr) error {
	h, err := c.handle()
	if err != nil || len(dst) == 0 {
		return err
	}
	return check("cuMemcpyDtoH_v2", C.bam_cuMemcpyDtoH(h, unsafe.Pointer(&dst[0]), C.bam_CUdeviceptr(src), C.size_t(len(dst))))
}

// CopyDtoD copies n bytes between device addresses and returns when done,
// so that a kernel launched afterwards on any stream sees them.
func (c *Context) CopyDtoD(dst, src DevicePtr, n uint64) error {
	h, err := c.handle()
	if err != nil || n == 0 {
		return err
	}
	return check("cuMemcpyDtoD_v2", C.bam_cuMemcpyDtoD(h, C.bam_CUdeviceptr(dst), C.bam_CUdeviceptr(src), C.size_t(n)))
}

// MemsetD8 sets n bytes at p to v and returns when done, so that a kernel
// launched afterwards on any stream (the engine's are non-blocking, and do
// not wait for the legacy stream these run on) sees them.
func (c *Context) MemsetD8(p DevicePtr, v byte, n uint64) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return check("cuMemsetD8_v2", C.bam_cuMemsetD8(h, C.bam_CUdeviceptr(p), C.uchar(v), C.size_t(n)))
}

// MemsetD32 sets count 32-bit words at p (4-byte aligned) to v and returns
// when done, as MemsetD8.
func (c *Context) MemsetD32(p DevicePtr, v uint32, count uint64) error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return check("cuMemsetD32_v2", C.bam_cuMemsetD32(h, C.bam_CUdeviceptr(p), C.uint(v), C.size_t(count)))
}

// HostAllocFlags are cuMemHostAlloc flags.
type HostAllocFlags uint32

// Flags of AllocHost (CU_MEMHOSTALLOC_*).
const (
	HostAllocPortable      HostAllocFlags = 0x01 // pinned for every context, not only this one
	HostAllocDeviceMap     HostAllocFlags = 0x02 // mapped into the device address space
	HostAllocWriteCombined HostAllocFlags = 0x04 // write-combined: fast for the GPU to read, slow for the CPU to read
)

// RegisterFlags are cuMemHostRegister flags.
type RegisterFlags uint32

// Flags of RegisterHost (CU_MEMHOSTREGISTER_*).
const (
	RegisterPortable  RegisterFlags = 0x01
	RegisterDeviceMap RegisterFlags = 0x02
	// RegisterIOMemory registers memory-mapped I/O space (a PCIe BAR mapped
	// into the process), e.g. an NVMe controller's doorbells.
	RegisterIOMemory RegisterFlags = 0x04
	RegisterReadOnly RegisterFlags = 0x08
)

// HostMem is page-locked (pinned) host memory, allocated by AllocHost or
// registered by RegisterHost. Its bytes are C memory: they may be handed to
// the driver for asynchronous copies and mapped into the device.
type HostMem struct {
	ctx        *Context
	p          unsafe.Pointer
	size       uint64
	registered bool
	mapped     bool
	keep       []byte // registered memory stays reachable while registered
	freed      atomic.Bool
}

// AllocPinned allocates n bytes of pinned host memory that every context can
// use and the device can address (PORTABLE | DEVICEMAP).
func (c *Context) AllocPinned(n uint64) (*HostMem, error) {
	return c.AllocHost(n, HostAllocPortable|HostAllocDeviceMap)
}

// AllocHost allocates n bytes of pinned host memory with the given flags.
// The memory is zeroed.
func (c *Context) AllocHost(n uint64, flags HostAllocFlags) (*HostMem, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("cuda: allocate 0 bytes of pinned host memory")
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.bam_cuMemHostAlloc(h, &p, C.size_t(n), C.uint(flags))); err != nil {
		return nil, fmt.Errorf("cuda: allocate %s of pinned host memory: %w", FormatBytes(n), err)
	}
	m := &HostMem{ctx: c, p: p, size: n, mapped: flags&HostAllocDeviceMap != 0}
	clear(m.Bytes())
	return m, nil
}

// RegisterHost page-locks existing memory b so the driver can DMA to and
// from it and, with RegisterDeviceMap, the device can address it. b must not
// be memory of the Go heap that moves or is freed while registered: use
// memory from syscall.Mmap (or a BAR mapping, with RegisterIOMemory). b's
// start and length should be page-aligned. Free unregisters it.
func (c *Context) RegisterHost(b []byte, flags RegisterFlags) (*HostMem, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("cuda: register 0 bytes of host memory")
	}
	p := unsafe.Pointer(&b[0])
	if err := check("cuMemHostRegister_v2", C.bam_cuMemHostRegister(h, p, C.size_t(len(b)), C.uint(flags))); err != nil {
		return nil, fmt.Errorf("cuda: register %s of host memory at %p (flags %#x): %w", FormatBytes(uint64(len(b))), p, uint32(flags), err)
	}
	return &HostMem{ctx: c, p: p, size: uint64(len(b)), registered: true,
		mapped: flags&(RegisterDeviceMap|RegisterIOMemory) != 0, keep: b}, nil
}

// Bytes returns the memory as a byte slice. It must not be used after Free.
func (h *HostMem) Bytes() []byte { return unsafe.Slice((*byte)(h.p), h.size) }

// Ptr returns the host address of the memory.
func (h *HostMem) Ptr() unsafe.Pointer { return h.p }

// Size returns the size in bytes.
func (h *HostMem) Size() uint64 { return h.size }

// Addr returns the host address of byte off, for batched copies. An offset
// past the end yields 0, an address every copy rejects with an error.
func (h *HostMem) Addr(off uint64) uint64 {
	if off > h.size {
		return 0
	}
	return uint64(uintptr(h.p)) + off
}

// DevicePtr returns the device address of the memory, for kernels that
// read or write it over PCIe. The memory must be mapped (DEVICEMAP).
func (h *HostMem) DevicePtr() (DevicePtr, error) {
	if h.freed.Load() {
		return 0, ErrClosed
	}
	if !h.mapped {
		return 0, errors.New("cuda: pinned host memory is not mapped into the device (allocate with HostAllocDeviceMap)")
	}
	ch, err := h.ctx.handle()
	if err != nil {
		return 0, err
	}
	var d C.bam_CUdeviceptr
	if err := check("cuMemHostGetDevicePointer_v2", C.bam_cuMemHostGetDevicePointer(ch, &d, h.p)); err != nil {
		return 0, err
	}
	return DevicePtr(d), nil
}

// Free releases (or unregisters) the memory. Freeing twice is a no-op.
func (h *HostMem) Free() error {
	if h == nil || h.freed.Swap(true) {
		return nil
	}
	ch, err := h.ctx.handle()
	if err != nil {
		return err
	}
	if h.registered {
		err = check("cuMemHostUnregister", C.bam_cuMemHostUnregister(ch, h.p))
		h.keep = nil
		return err
	}
	return check("cuMemFreeHost", C.bam_cuMemFreeHost(ch, h.p))
}

func (h *HostMem) span(off, n uint64) (unsafe.Pointer, error) {
	if h.freed.Load() {
		return nil, ErrClosed
	}
	if off > h.size || n > h.size-off {
		return nil, fmt.Errorf("cuda: range [%d, %d) outside pinned memory of %d bytes", off, off+n, h.size)
	}
	return unsafe.Add(h.p, off), nil
}

// FormatBytes formats a byte count with binary units, e.g. "1.5 GiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
