package gpucache

import (
	"context"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/internal/hugepages"
)

// Backend moves whole lines between the cache and storage. The cache calls
// it without holding any lock, from many goroutines at once, but never with
// two calls for one tag in flight together: a tag is read only while no
// write-back of it is in flight, and written back by one owner at a time.
//
// dst and src are the line's own bytes in the cache's data region (zero
// copy: an NVMe backend builds a PRP that names them). A backend must not
// keep them after it returns.
type Backend interface {
	// ReadLine fills dst (LineSize bytes) with the line named by tag.
	ReadLine(ctx context.Context, tag uint64, dst []byte) error
	// WriteLine stores src (LineSize bytes) as the line named by tag.
	WriteLine(ctx context.Context, tag uint64, src []byte) error
	// Flush makes every completed WriteLine durable.
	Flush(ctx context.Context) error
}

// Policy chooses the victim way of a set on a miss.
type Policy int

const (
	// PolicyClock is CLOCK with one reference bit per way: hits set the
	// bit; the set's hand clears set bits as it passes and takes the first
	// unreferenced way whose bit is clear.
	PolicyClock Policy = iota
	// PolicyRoundRobin is BaM's plain rotation: the hand takes the next
	// unreferenced, not busy way, whatever its recent use.
	PolicyRoundRobin
)

func (p Policy) String() string {
	switch p {
	case PolicyClock:
		return "clock"
	case PolicyRoundRobin:
		return "round-robin"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Config is the geometry and the bounds of a cache.
type Config struct {
	Sets     uint32 // number of sets N (> 0)
	Ways     uint32 // ways per set K (1..MaxWays)
	LineSize uint32 // bytes per line, a power of two in [MinLineSize, MaxLineSize]
	Policy   Policy // victim choice; PolicyClock by default

	// WaitTimeout bounds the total time one call waits for other callers:
	// for a fill or write-back of its line, or for a set lock. Default 30s.
	WaitTimeout time.Duration
	// FullSetTimeout bounds how long an Acquire waits for a way of its set
	// to become evictable, while no way of the set is claimed for another
	// line, before it fails with ErrCacheTooSmall. Default 1s.
	FullSetTimeout time.Duration
	// FlushParallelism bounds the write-backs Flush keeps in flight.
	// Default 16.
	FlushParallelism int
}

const (
	defaultWaitTimeout      = 30 * time.Second
	defaultFullSetTimeout   = time.Second
	defaultFlushParallelism = 16
)

func (cfg Config) withDefaults() Config {
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = defaultWaitTimeout
	}
	if cfg.FullSetTimeout == 0 {
		cfg.FullSetTimeout = defaultFullSetTimeout
	}
	if cfg.FlushParallelism == 0 {
		cfg.FlushParallelism = defaultFlushParallelism
	}
	return cfg
}

// Validate reports the first field of cfg out of range, wrapping
// ErrInvalidConfig.
func (cfg Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case cfg.Sets == 0:
		return bad("sets must be positive")
	case cfg.Ways == 0 || cfg.Ways > MaxWays:
		return bad("ways %d not in [1, %d]", cfg.Ways, MaxWays)
	case cfg.LineSize < MinLineSize || cfg.LineSize > MaxLineSize || cfg.LineSize&(cfg.LineSize-1) != 0:
		return bad("line size %d is not a power of two in [%d, %d]", cfg.LineSize, MinLineSize, MaxLineSize)
	case cfg.Policy != PolicyClock && cfg.Policy != PolicyRoundRobin:
		return bad("unknown policy %d", int(cfg.Policy))
	case cfg.WaitTimeout < 0 || cfg.FullSetTimeout < 0 || cfg.FlushParallelism < 0:
		return bad("negative timeout or parallelism")
	}
	lines := uint64(cfg.Sets) * uint64(cfg.Ways)
	if lines > 1<<32 {
		return bad("%d lines exceed 2^32", lines)
	}
	if lines*uint64(cfg.LineSize) > 1<<46 {
		return bad("data region of %d bytes is too large", lines*uint64(cfg.LineSize))
	}
	return nil
}

// Cache is a set-associative, write-back line cache with reference counted
// ways. It is safe for concurrent use. See the package documentation for the
// protocol.
type Cache struct {
	cfg     Config
	backend Backend
	r       *region
	data    []byte
	shift   uint   // log2(LineSize)
	setMask uint64 // Sets-1 when Sets is a power of two, else 0
	setBits uint   // log2(Sets) when Sets is a power of two
	errs    []atomic.Pointer[fillError]
	stats   counters
}

// fillError carries a failed fill's error to the callers waiting on it.
type fillError struct{ err error }

// New allocates a cache of cfg's geometry over backend. The data region
// (Sets*Ways*LineSize bytes) is aligned to the larger of LineSize and 4 KiB.
func New(cfg Config, backend Backend) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if backend == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	lines := uint64(cfg.Sets) * uint64(cfg.Ways)
	align := uint64(max(cfg.LineSize, 4096))
	size := lines * uint64(cfg.LineSize)
	buf := make([]byte, size+align)
	off := (align - uint64(uintptr(unsafe.Pointer(&buf[0])))%align) % align
	c := &Cache{
		cfg:     cfg,
		backend: backend,
		r:       newRegion(cfg.Sets, cfg.Ways),
		data:    buf[off : off+size : off+size],
		errs:    make([]atomic.Pointer[fillError], lines),
	}
	hugepages.Advise(c.data)
	if cfg.Sets&(cfg.Sets-1) == 0 {
		c.setMask = uint64(cfg.Sets) - 1
		c.setBits = uint(bits.TrailingZeros32(cfg.Sets))
	}
	for c.shift = 0; 1<<c.shift < cfg.LineSize; c.shift++ {
	}
	return c, nil
}

// Config returns the cache's configuration with defaults filled in.
func (c *Cache) Config() Config { return c.cfg }

// LineSize is the size of one line in bytes.
func (c *Cache) LineSize() int { return int(c.cfg.LineSize) }

// Lines is the number of lines (ways) in the cache: Sets*Ways.
func (c *Cache) Lines() int { return len(c.errs) }

// DataRegion is the memory of every line, way index g at
// [g*LineSize, (g+1)*LineSize). An engine registers it for DMA so that fills
// land in the line directly.
func (c *Cache) DataRegion() []byte { return c.data }

// Metadata is the metadata region (layout.go) as bytes: what device code
// operates on. It aliases live atomics; read it only while the cache is
// quiescent.
func (c *Cache) Metadata() []byte { return c.r.bytes() }

// Stats returns the event counters.
func (c *Cache) Stats() Stats { return c.stats.snapshot() }

func (c *Cache) line(g uintptr) []byte {
	off := g << c.shift
	return c.data[off : off+uintptr(c.cfg.LineSize) : off+uintptr(c.cfg.LineSize)]
}

// Handle is count references to one resident line, returned by Acquire.
// While they are held the line cannot be evicted or refilled, so Line's bytes
// are the tag's data. A Handle is released exactly once, with Release or
// ReleaseDirty; copies of a Handle share its references.
type Handle struct {
	c     *Cache
	g     uintptr
	tag   uint64
	count uint32
}

// Line is the line's bytes in the data region. Writers must call MarkDirty
// or ReleaseDirty after their stores.
func (h Handle) Line() []byte { return h.c.line(h.g) }

// Tag is the line's tag.
func (h Handle) Tag() uint64 { return h.tag }

// Way is the line's way index (set*Ways + way); its bytes start at
// Way*LineSize in the data region.
func (h Handle) Way() int { return int(h.g) }

// Count is the number of references the handle holds.
func (h Handle) Count() uint32 { return h.count }

// MarkDirty records that the line was modified. Call it after the stores it
// covers: a Flush that wrote the line back before them must see DIRTY again.
func (h Handle) MarkDirty() {
	p := h.c.r.state(h.g)
	if atomic.LoadUint32(p)&StateDirty == 0 {
		atomic.OrUint32(p, StateDirty)
	}
}

// Release drops the handle's references (fetch_sub(count), release order).
// It does not mark the line dirty.
func (h Handle) Release() { subRefs(h.c.r.state(h.g), h.count) }

// ReleaseDirty marks the line dirty and drops the handle's references.
func (h Handle) ReleaseDirty() {
	h.MarkDirty()
	h.Release()
}

// setOf is SetIndex(tag, Sets) without a division when Sets is a power of
// two (the common geometry).
func (c *Cache) setOf(tag uint64) uint32 {
	if c.setMask != 0 {
		h := setHash(tag)
		return uint32((h + setSkew(h>>c.setBits)) & c.setMask)
	}
	return SetIndex(tag, c.cfg.Sets)
}
