package bam

import (
	"fmt"
	"log/slog"
	"runtime"
	"syscall"

	"github.com/bam-go/bam/internal/format"
)

// Engine selects who runs an object's accesses.
type Engine int

// Engines.
const (
	// EngineAuto uses the GPU engine when a usable GPU is present and the
	// CPU engine otherwise.
	EngineAuto Engine = iota
	// EngineCPU runs accesses on goroutines; no GPU is needed.
	EngineCPU
	// EngineGPU requires a GPU and fails to open without one.
	EngineGPU
)

func (e Engine) String() string {
	switch e {
	case EngineAuto:
		return "auto"
	case EngineCPU:
		return "cpu"
	case EngineGPU:
		return "gpu"
	}
	return fmt.Sprintf("engine(%d)", int(e))
}

// Defaults applied by Options for zero fields.
const (
	DefaultLineSize    = 4 << 10
	DefaultLBASize     = 4 << 10
	DefaultCacheBytes  = 256 << 20
	DefaultQueuePairs  = 8
	DefaultQueueDepth  = 256
	DefaultCatalogSize = 1 << 20
)

// Options configure Open (and, through CreateOptions, Create). The zero
// value is ready to use.
type Options struct {
	// Devices, when set, lists the namespaces of a store kept on block
	// devices (or preexisting files), in any order; the dir argument of
	// Open and Create must then be empty.
	Devices []string

	// ReadOnly opens the namespaces read-only; catalog updates fail with
	// ErrReadOnly. Several read-only opens may share a store.
	ReadOnly bool

	// DirectIO opens namespaces with O_DIRECT, bypassing the page cache.
	DirectIO bool

	// CacheBytes is the size of the line cache. Default 256 MiB, capped
	// at a quarter of the machine's memory.
	CacheBytes int64

	// HostTierBytes, when positive, keeps up to that many bytes of clean
	// lines in host memory below the line cache (CPU engine), for slow
	// namespaces: O_DIRECT files, disks. Off by default.
	HostTierBytes int64

	// QueuePairs and QueueDepth size the I/O queues of the engine.
	// QueueDepth must be a power of two. Defaults 8 and 256 on the CPU
	// engine; the GPU engine, when they are left zero, takes its own
	// measured defaults (64 queue pairs of 256 entries, fewer entries for
	// lines over 4 KiB so that pinned staging stays within the host's
	// last-level cache: on the H200 host each queue pair completed only
	// about 375 K GPU commands a second, so the GPU wants many more queues
	// than host goroutines do).
	QueuePairs int
	QueueDepth int

	// ReadAheadQueuePairs, on the GPU engine, gives the cache that many
	// more queue pairs for Reads of several consecutive lines: those of
	// bam::read_ahead, which then goes on while they are in flight
	// instead of waiting for them, and those of range passes (ReadRange,
	// Sum, bam::for_range) whose warps fill consecutive lines at once.
	// Default 64, each holding as much pinned staging memory as one of
	// QueuePairs; negative: none.
	ReadAheadQueuePairs int

	// ReadAheadReadBytes, on the GPU engine, is the most one Read on the
	// read-ahead pairs covers (consecutive lines read with one command):
	// a power of two up to 1 MiB. Default 8 KiB.
	ReadAheadReadBytes int

	// Engine picks the CPU or GPU engine. Default EngineAuto.
	Engine Engine

	// Workers is the number of host goroutines serving queues (CPU
	// engine) or proxying NVMe commands (GPU engine). Default GOMAXPROCS.
	Workers int

	// Logger receives the store's diagnostics. Default: discard.
	Logger *slog.Logger

	// gpuQueuePairs and gpuQueueDepth are QueuePairs and QueueDepth as
	// the caller gave them, before defaults: zero lets the GPU engine
	// choose. defaulted marks options withDefaults has already filled.
	gpuQueuePairs, gpuQueueDepth int
	defaulted                    bool
}

// withDefaults returns o with zero fields set to their defaults, or an
// error wrapping ErrInvalid.
func (o Options) withDefaults() (Options, error) {
	if !o.defaulted {
		o.gpuQueuePairs, o.gpuQueueDepth = o.QueuePairs, o.QueueDepth
		o.defaulted = true
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
		if ram := totalRAM(); ram > 0 && uint64(o.CacheBytes) > ram/4 {
			o.CacheBytes = int64(ram / 4)
		}
	}
	if o.QueuePairs == 0 {
		o.QueuePairs = DefaultQueuePairs
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.CacheBytes < 0:
		return o, invalidf("CacheBytes %d is negative", o.CacheBytes)
	case o.HostTierBytes < 0:
		return o, invalidf("HostTierBytes %d is negative", o.HostTierBytes)
	case o.QueuePairs < 1 || o.QueuePairs > 1024:
		return o, invalidf("QueuePairs %d: want 1..1024", o.QueuePairs)
	case o.QueueDepth < 2 || o.QueueDepth > 65536 || o.QueueDepth&(o.QueueDepth-1) != 0:
		return o, invalidf("QueueDepth %d: want a power of two in [2, 65536]", o.QueueDepth)
	case o.Workers < 1:
		return o, invalidf("Workers %d: want at least 1", o.Workers)
	case o.Engine < EngineAuto || o.Engine > EngineGPU:
		return o, invalidf("Engine %d: want EngineAuto, EngineCPU or EngineGPU", o.Engine)
	}
	return o, nil
}

// CreateOptions configure Create.
type CreateOptions struct {
	Options

	// Namespaces is the number of namespace files ns-000.bam, ns-001.bam,
	// ... created in the store directory. Default 1. Ignored with Devices.
	Namespaces int

	// NamespaceSize is the size in bytes of each namespace file, created
	// sparse. Required for directory stores. With Devices, zero means the
	// whole device and a positive value caps the space used on each.
	NamespaceSize int64

	// LineSize is the cache line and stripe unit: a power of two from
	// 512 B to 64 KiB, at least the LBA size. Default 4 KiB.
	LineSize int

	// LBASize is the logical block size of file namespaces, 512 or 4096.
	// Default 4096. Block devices use their own logical block size.
	LBASize int

	// CatalogSize is the size of each of the two catalog slots, rounded
	// up to a multiple of the line size. Default 1 MiB (about 5000
	// objects striped over 8 namespaces).
	CatalogSize int64

	// Overwrite lets Create reuse devices that already hold a store.
	// Directory stores are never overwritten.
	Overwrite bool
}

func (o CreateOptions) withDefaults() (CreateOptions, error) {
	var err error
	if o.Options, err = o.Options.withDefaults(); err != nil {
		return o, err
	}
	if o.Namespaces == 0 {
		o.Namespaces = 1
	}
	if o.LineSize == 0 {
		o.LineSize = DefaultLineSize
	}
	if o.LBASize == 0 {
		o.LBASize = DefaultLBASize
		if o.LineSize < o.LBASize {
			o.LBASize = 512
		}
	}
	if o.CatalogSize == 0 {
		o.CatalogSize = DefaultCatalogSize
	}
	if o.Namespaces < 1 || o.Namespaces > format.MaxNamespaces {
		return o, invalidf("Namespaces %d: want 1..%d", o.Namespaces, format.MaxNamespaces)
	}
	if o.LBASize != 512 && o.LBASize != 4096 {
		return o, invalidf("LBASize %d: want 512 or 4096", o.LBASize)
	}
	if err := format.ValidateGeometry(uint64(o.LBASize), uint64(o.LineSize)); err != nil {
		return o, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if o.CatalogSize < 0 || o.CatalogSize > 1<<32 {
		return o, invalidf("CatalogSize %d: want at most 4 GiB", o.CatalogSize)
	}
	o.CatalogSize = (o.CatalogSize + int64(o.LineSize) - 1) / int64(o.LineSize) * int64(o.LineSize)
	if o.NamespaceSize < 0 {
		return o, invalidf("NamespaceSize %d is negative", o.NamespaceSize)
	}
	return o, nil
}

// totalRAM returns the machine's memory in bytes, or 0 when unknown.
func totalRAM() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
