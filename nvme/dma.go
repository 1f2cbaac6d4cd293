package nvme

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// RegionIO moves bytes in and out of one registered DMA region. Offsets are
// relative to the region's base address. Implementations must be safe for
// concurrent use: the Target moves data for many commands at once.
type RegionIO interface {
	// ReadAt copies len(p) bytes of the region starting at off into p.
	ReadAt(p []byte, off uint64) error
	// WriteAt copies p into the region starting at off.
	WriteAt(p []byte, off uint64) error
}

// HostBytesRegion is implemented by regions whose contents are ordinary
// host-addressable bytes (Go memory, pinned host memory). The Target then
// reads from and writes to a namespace straight into those bytes with no
// bounce copy.
type HostBytesRegion interface {
	RegionIO
	// HostBytes returns the n bytes of the region at off, or false when the
	// range cannot be exposed directly.
	HostBytes(off, n uint64) ([]byte, bool)
}

// Errors returned by DMASpace.
var (
	// ErrDMAUnmapped is returned for a DMA address no registered region covers.
	ErrDMAUnmapped = errors.New("nvme: DMA address not mapped")
	// ErrDMAOverlap is returned by Register for a region that overlaps one
	// already registered.
	ErrDMAOverlap = errors.New("nvme: DMA region overlaps a registered region")
)

// region is one registered range [base, base+size).
type region struct {
	base, size uint64
	io         RegionIO
	host       []byte // non-nil for memory registered with RegisterHost
	hostIO     HostBytesRegion
}

// DMASpace is the set of "DMA addresses" a Target can reach: registered,
// non-overlapping regions, each served by a RegionIO. PRP entries in commands
// name addresses in this space.
//
// Lookups are lock-free: the region table is an immutable sorted slice behind
// an atomic pointer, replaced wholesale (copy on write) by Register and
// Unregister, which are rare. A lookup is one atomic load and a binary search.
type DMASpace struct {
	mu      sync.Mutex // serialises writers of regions
	regions atomic.Pointer[[]region]
}

// NewDMASpace returns an empty DMA address space.
func NewDMASpace() *DMASpace {
	d := &DMASpace{}
	d.regions.Store(&[]region{})
	return d
}

// Register maps [base, base+size) to r. If r also implements
// HostBytesRegion, transfers use its bytes directly.
func (d *DMASpace) Register(base, size uint64, r RegionIO) error {
	if r == nil {
		return fmt.Errorf("nvme: register DMA region %#x: nil RegionIO", base)
	}
	reg := region{base: base, size: size, io: r}
	if h, ok := r.(HostBytesRegion); ok {
		reg.hostIO = h
	}
	if hr, ok := r.(*hostRegion); ok {
		reg.host = hr.b
	}
	return d.insert(reg)
}

func (d *DMASpace) insert(reg region) error {
	if reg.size == 0 {
		return fmt.Errorf("nvme: register DMA region %#x: zero size", reg.base)
	}
	if reg.base+reg.size < reg.base {
		return fmt.Errorf("nvme: register DMA region %#x+%#x: wraps the address space", reg.base, reg.size)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.regions.Load()
	i := sort.Search(len(old), func(i int) bool { return old[i].base >= reg.base })
	if i > 0 && old[i-1].base+old[i-1].size > reg.base {
		return fmt.Errorf("%w: [%#x, %#x) meets [%#x, %#x)", ErrDMAOverlap,
			reg.base, reg.base+reg.size, old[i-1].base, old[i-1].base+old[i-1].size)
	}
	if i < len(old) && reg.base+reg.size > old[i].base {
		return fmt.Errorf("%w: [%#x, %#x) meets [%#x, %#x)", ErrDMAOverlap,
			reg.base, reg.base+reg.size, old[i].base, old[i].base+old[i].size)
	}
	next := make([]region, 0, len(old)+1)
	next = append(next, old[:i]...)
	next = append(next, reg)
	next = append(next, old[i:]...)
	d.regions.Store(&next)
	return nil
}

// Unregister removes the region that starts at base. Transfers already
// running against it may still complete; the caller must not free the
// region's memory while commands naming it are in flight.
func (d *DMASpace) Unregister(base uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.regions.Load()
	i := sort.Search(len(old), func(i int) bool { return old[i].base >= base })
	if i == len(old) || old[i].base != base {
		return fmt.Errorf("nvme: unregister DMA region %#x: %w", base, ErrDMAUnmapped)
	}
	next := make([]region, 0, len(old)-1)
	next = append(next, old[:i]...)
	next = append(next, old[i+1:]...)
	d.regions.Store(&next)
	return nil
}

// RegisterHost maps buf at a DMA address equal to its own virtual address
// and returns that address. Transfers to and from it are plain memory copies
// (or reads straight into buf), with no RegionIO call.
//
// Using the virtual address is safe because Go's garbage collector never
// moves heap objects, and buf is on the heap: the region keeps a reference
// to it, so it escapes, and that reference also keeps it alive until
// Unregister. Distinct live buffers have distinct addresses, so two
// registrations can only overlap if they share memory. The caller must keep
// using buf only in ways that tolerate concurrent device access while
// commands naming it are in flight.
func (d *DMASpace) RegisterHost(buf []byte) (uint64, error) {
	if len(buf) == 0 {
		return 0, fmt.Errorf("nvme: register host buffer: empty")
	}
	base := uint64(uintptr(unsafe.Pointer(&buf[0])))
	hr := &hostRegion{b: buf}
	return base, d.insert(region{base: base, size: uint64(len(buf)), io: hr, hostIO: hr, host: buf})
}

// find returns the region containing addr.
func (d *DMASpace) find(addr uint64) (*region, bool) {
	regs := *d.regions.Load()
	// First region whose end is beyond addr.
	lo, hi := 0, len(regs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if regs[m].base+regs[m].size <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(regs) && regs[lo].base <= addr {
		return &regs[lo], true
	}
	return nil, false
}

// Bytes returns the host bytes of [addr, addr+n) when one host-memory region
// covers the whole range.
func (d *DMASpace) Bytes(addr uint64, n int) ([]byte, bool) {
	r, ok := d.find(addr)
	if !ok || n < 0 {
		return nil, false
	}
	off := addr - r.base
	if uint64(n) > r.size-off {
		return nil, false
	}
	if r.host != nil {
		return r.host[off : off+uint64(n) : off+uint64(n)], true
	}
	if r.hostIO != nil {
		return r.hostIO.HostBytes(off, uint64(n))
	}
	return nil, false
}

// Read copies len(p) bytes at DMA address addr into p (the device reading
// host memory, as for a Write command). The range may span adjacent regions.
func (d *DMASpace) Read(addr uint64, p []byte) error {
	return d.transfer(addr, p, false)
}

// Write copies p to DMA address addr (the device writing host memory, as for
// a Read command). The range may span adjacent regions.
func (d *DMASpace) Write(addr uint64, p []byte) error {
	return d.transfer(addr, p, true)
}

func (d *DMASpace) transfer(addr uint64, p []byte, toRegion bool) error {
	for len(p) > 0 {
		r, ok := d.find(addr)
		if !ok {
			return fmt.Errorf("%w: %#x", ErrDMAUnmapped, addr)
		}
		off := addr - r.base
		n := uint64(len(p))
		if rem := r.size - off; n > rem {
			n = rem
		}
		var err error
		switch {
		case r.host != nil && toRegion:
			copy(r.host[off:], p[:n])
		case r.host != nil:
			copy(p[:n], r.host[off:off+n])
		case toRegion:
			err = r.io.WriteAt(p[:n], off)
		default:
			err = r.io.ReadAt(p[:n], off)
		}
		if err != nil {
			return fmt.Errorf("nvme: DMA %#x+%d: %w", addr, n, err)
		}
		p = p[n:]
		addr += n
	}
	return nil
}

// Len returns the number of registered regions.
func (d *DMASpace) Len() int { return len(*d.regions.Load()) }

// hostRegion is Go or pinned host memory registered by RegisterHost.
type hostRegion struct{ b []byte }

func (h *hostRegion) ReadAt(p []byte, off uint64) error {
	if off > uint64(len(h.b)) || uint64(len(p)) > uint64(len(h.b))-off {
		return fmt.Errorf("nvme: host region read %d+%d beyond %d bytes", off, len(p), len(h.b))
	}
	copy(p, h.b[off:])
	return nil
}

func (h *hostRegion) WriteAt(p []byte, off uint64) error {
	if off > uint64(len(h.b)) || uint64(len(p)) > uint64(len(h.b))-off {
		return fmt.Errorf("nvme: host region write %d+%d beyond %d bytes", off, len(p), len(h.b))
	}
	copy(h.b[off:], p)
	return nil
}

func (h *hostRegion) HostBytes(off, n uint64) ([]byte, bool) {
	if off > uint64(len(h.b)) || n > uint64(len(h.b))-off {
		return nil, false
	}
	return h.b[off : off+n : off+n], true
}

// HostRegion wraps bytes (for example pinned host memory obtained from the
// CUDA driver) as a RegionIO with direct host access, for Register at a DMA
// address of the caller's choosing.
func HostRegion(b []byte) HostBytesRegion { return &hostRegion{b: b} }
