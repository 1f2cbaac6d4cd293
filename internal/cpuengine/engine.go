package cpuengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/engine"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// Config configures an Engine. Zero fields take the defaults named.
type Config struct {
	// Namespaces are the store's namespaces by index; namespace k is
	// attached to the Target as NSID k+1. At most 255 (the cache tag's
	// namespace field). The engine does not close them.
	Namespaces []nvme.Namespace
	// LineSize is the store's line size: the cache line and the unit of
	// every NVMe command. Required.
	LineSize int

	// CacheBytes sizes the line cache when Sets is zero: lines =
	// CacheBytes/LineSize (at least 1), Ways = DefaultWays from 64 lines
	// up and min(lines, 4) below (so 1, 2, 4, 8 lines give 1×1, 1×2, 1×4,
	// 2×4), Sets = lines/Ways. Default 64 MiB.
	CacheBytes int64
	// Sets and Ways give the cache geometry explicitly (both or neither).
	Sets, Ways uint32
	// Policy chooses victims (clock by default).
	Policy gpucache.Policy
	// FullSetTimeout bounds how long an access waits for a way of a fully
	// referenced set (gpucache.Config.FullSetTimeout). Default 1s.
	FullSetTimeout time.Duration

	// QueuePairs and QueueDepth size the vq queue pairs. Defaults 4 and 256.
	QueuePairs, QueueDepth int
	// Workers is the number of Target goroutines polling the queues.
	// Default min(GOMAXPROCS, 4).
	Workers int
	// Parallelism bounds the goroutines one batch call (Gather, Scatter,
	// a long ReadAt/WriteAt) runs on. Default GOMAXPROCS.
	Parallelism int
	// Timeout bounds each NVMe command (vq.Options.Timeout). Default
	// vq.DefaultTimeout.
	Timeout time.Duration

	// HostTierBytes, when positive, enables the host-memory tier of clean
	// lines of that many bytes below the line cache. Off by default: it
	// pays only in front of slow namespaces (O_DIRECT files, disks).
	HostTierBytes int64

	// Logger receives diagnostics. Default: discard.
	Logger *slog.Logger
}

// DefaultWays is the associativity picked from CacheBytes.
const DefaultWays = 8

// DefaultCacheBytes is the cache size when neither CacheBytes nor Sets is
// given.
const DefaultCacheBytes = 64 << 20

// Engine is the CPU engine: an nvme.Target over the store's namespaces,
// vq queue pairs, and a gpucache.Cache whose misses become NVMe commands.
// It implements engine.Engine and is safe for concurrent use.
type Engine struct {
	cfg    Config
	target *nvme.Target
	dma    *nvme.DMASpace
	cache  *gpucache.Cache
	be     *backend
	reg    *registry
	qps    []*vq.QueuePair
	total  counters
	par    int
	closed atomic.Bool
	stop   context.CancelFunc
	mu     sync.Mutex // serialises Close
}

var _ engine.Engine = (*Engine)(nil)

// New starts a CPU engine over cfg.Namespaces.
func New(cfg Config) (*Engine, error) {
	if err := normalize(&cfg); err != nil {
		return nil, err
	}
	lba := cfg.Namespaces[0].LBASize()
	nsLines := make([]uint64, len(cfg.Namespaces))
	for k, ns := range cfg.Namespaces {
		if ns.LBASize() != lba {
			return nil, fmt.Errorf("%w: namespace %d has %d-byte blocks, namespace 0 %d-byte blocks", engine.ErrInvalid, k, ns.LBASize(), lba)
		}
		nsLines[k] = ns.Blocks() * uint64(lba) / uint64(cfg.LineSize)
	}
	if cfg.LineSize%lba != 0 {
		return nil, fmt.Errorf("%w: line size %d is not a multiple of the block size %d", engine.ErrInvalid, cfg.LineSize, lba)
	}
	e := &Engine{cfg: cfg, dma: nvme.NewDMASpace(), reg: newRegistry(nsLines, lba, cfg.LineSize), par: cfg.Parallelism}
	ok := false
	defer func() {
		if !ok {
			e.shutdown()
		}
	}()
	var err error
	e.target, err = nvme.NewTarget(nvme.TargetConfig{Workers: cfg.Workers, Logger: cfg.Logger}, e.dma)
	if err != nil {
		return nil, fmt.Errorf("cpuengine: %w", err)
	}
	be := &backend{e: e, lineSize: cfg.LineSize, lpl: uint32(cfg.LineSize / lba)}
	for k, ns := range cfg.Namespaces {
		be.nsids = append(be.nsids, uint32(k+1))
		if err := e.target.AddNamespace(uint32(k+1), ns); err != nil {
			return nil, fmt.Errorf("cpuengine: namespace %d: %w", k, err)
		}
	}
	var subs []vq.Submitter
	for q := range cfg.QueuePairs {
		mem, err := nvme.NewQueuePairMemory(uint16(q+1), uint32(cfg.QueueDepth))
		if err != nil {
			return nil, fmt.Errorf("cpuengine: %w", err)
		}
		if err := e.target.AddQueuePair(mem); err != nil {
			return nil, fmt.Errorf("cpuengine: %w", err)
		}
		qid, tgt := mem.ID, e.target
		qp, err := vq.New(mem, vq.Options{Timeout: cfg.Timeout, Notify: func() { tgt.Kick(qid) }})
		if err != nil {
			return nil, fmt.Errorf("cpuengine: %w", err)
		}
		e.qps = append(e.qps, qp)
		subs = append(subs, qp)
	}
	if be.sub, err = vq.NewMapper(subs...); err != nil {
		return nil, fmt.Errorf("cpuengine: %w", err)
	}
	if cfg.LineSize > 2*pageSize {
		// PRP list pages: one per command in flight at most.
		n := cfg.QueuePairs * cfg.QueueDepth
		slab := alignedBytes(n*pageSize, pageSize)
		base, err := e.dma.RegisterHost(slab)
		if err != nil {
			return nil, fmt.Errorf("cpuengine: register PRP lists: %w", err)
		}
		be.lists = make(chan nvme.PRPListPage, n)
		for i := range n {
			be.lists <- nvme.PRPListPage{Addr: base + uint64(i*pageSize), Bytes: slab[i*pageSize : (i+1)*pageSize]}
		}
	}
	if cfg.HostTierBytes > 0 {
		if be.tier, err = newHostTier(cfg.HostTierBytes, cfg.LineSize); err != nil {
			return nil, err
		}
	}
	e.be = be
	e.cache, err = gpucache.New(gpucache.Config{Sets: cfg.Sets, Ways: cfg.Ways, LineSize: uint32(cfg.LineSize),
		Policy: cfg.Policy, FullSetTimeout: cfg.FullSetTimeout}, be)
	if err != nil {
		return nil, fmt.Errorf("cpuengine: %w", err)
	}
	// Fills and write-backs move data straight between the namespace and
	// the line: the data region is DMA-addressable at its own address.
	data := e.cache.DataRegion()
	if uintptr(unsafe.Pointer(&data[0]))%uintptr(min(cfg.LineSize, pageSize)) != 0 {
		return nil, fmt.Errorf("cpuengine: cache data region is not aligned to %d bytes", min(cfg.LineSize, pageSize))
	}
	if _, err := e.dma.RegisterHost(data); err != nil {
		return nil, fmt.Errorf("cpuengine: register cache lines: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	if err := e.target.Start(ctx); err != nil {
		return nil, fmt.Errorf("cpuengine: %w", err)
	}
	ok = true
	return e, nil
}

func normalize(cfg *Config) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", engine.ErrInvalid, fmt.Sprintf(format, a...))
	}
	if len(cfg.Namespaces) == 0 || len(cfg.Namespaces) > 255 {
		return bad("%d namespaces: want 1..255", len(cfg.Namespaces))
	}
	for k, ns := range cfg.Namespaces {
		if ns == nil {
			return bad("namespace %d is nil", k)
		}
	}
	if cfg.LineSize < gpucache.MinLineSize || cfg.LineSize > gpucache.MaxLineSize || cfg.LineSize&(cfg.LineSize-1) != 0 {
		return bad("line size %d is not a power of two in [%d, %d]", cfg.LineSize, gpucache.MinLineSize, gpucache.MaxLineSize)
	}
	if (cfg.Sets == 0) != (cfg.Ways == 0) {
		return bad("give both Sets and Ways or neither")
	}
	if cfg.Sets == 0 {
		if cfg.CacheBytes == 0 {
			cfg.CacheBytes = DefaultCacheBytes
		}
		if cfg.CacheBytes < 0 {
			return bad("CacheBytes %d is negative", cfg.CacheBytes)
		}
		cfg.Sets, cfg.Ways = Geometry(cfg.CacheBytes, cfg.LineSize)
	}
	if cfg.QueuePairs == 0 {
		cfg.QueuePairs = 4
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 256
	}
	if cfg.QueuePairs < 1 || cfg.QueuePairs > 1024 {
		return bad("QueuePairs %d: want 1..1024", cfg.QueuePairs)
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = runtime.GOMAXPROCS(0)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Geometry returns the sets and ways New picks for a cache of cacheBytes
// with lines of lineSize bytes (see Config.CacheBytes).
func Geometry(cacheBytes int64, lineSize int) (sets, ways uint32) {
	lines := max(cacheBytes/int64(max(lineSize, 1)), 1)
	ways = DefaultWays
	if lines < 64 {
		ways = uint32(min(lines, 4))
	}
	return uint32(min(lines/int64(ways), 1<<31)), ways
}

func alignedBytes(n, align int) []byte {
	b := make([]byte, n+align)
	off := (align - int(uintptr(unsafe.Pointer(&b[0]))%uintptr(align))) % align
	return b[off : off+n : off+n]
}

// Name implements engine.Engine.
func (e *Engine) Name() string { return "cpu" }

// Config returns the configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Cache returns the line cache (for statistics and tests).
func (e *Engine) Cache() *gpucache.Cache { return e.cache }

func (e *Engine) check() error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	return nil
}

// Flush implements engine.Engine: every dirty line is written back, then
// every namespace gets an NVMe Flush.
func (e *Engine) Flush(ctx context.Context) error {
	if err := e.check(); err != nil {
		return err
	}
	e.total.flushes.Add(1)
	if err := e.cache.Flush(ctx); err != nil {
		return fmt.Errorf("cpuengine: flush: %w", err)
	}
	return nil
}

// Evict implements engine.Engine.
func (e *Engine) Evict(ctx context.Context, o *engine.Object) error {
	if err := e.check(); err != nil {
		return err
	}
	st, err := e.reg.get(o)
	if err != nil {
		return err
	}
	for line := range st.lines {
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		tag := st.tag(line)
		if err := e.cache.Invalidate(ctx, tag); err != nil {
			return fmt.Errorf("cpuengine: evict %q line %d: %w", o.Name, line, err)
		}
		if e.be.tier != nil {
			e.be.tier.del(tag)
		}
	}
	if e.be.tier != nil {
		e.be.tier.sync()
	}
	e.reg.remove(o.ID)
	return nil
}

// Stats implements engine.Engine.
func (e *Engine) Stats() engine.Stats { return e.total.snapshot() }

// ObjectStats implements engine.Engine.
func (e *Engine) ObjectStats(o *engine.Object) engine.Stats {
	if v, ok := e.reg.byID.Load(o.ID); ok {
		return v.(*objState).st.snapshot()
	}
	return engine.Stats{}
}

// Detail is everything the engine counts, for `bam stat` and benchmarks.
type Detail struct {
	Engine engine.Stats     `json:"engine"`
	Cache  gpucache.Stats   `json:"cache"`
	Tier   TierStats        `json:"host_tier"`
	Target nvme.TargetStats `json:"target"`
	Queues []vq.Stats       `json:"queues"`
	Sets   uint32           `json:"sets"`
	Ways   uint32           `json:"ways"`
	Line   int              `json:"line_size"`
}

// Detail returns the engine's, cache's, tier's, Target's and queues'
// counters.
func (e *Engine) Detail() Detail {
	d := Detail{Engine: e.Stats(), Cache: e.cache.Stats(), Tier: e.be.tier.stats(), Target: e.target.Stats(),
		Sets: e.cfg.Sets, Ways: e.cfg.Ways, Line: e.cfg.LineSize}
	for _, q := range e.qps {
		d.Queues = append(d.Queues, q.Stats())
	}
	return d
}

// Close stops the Target. Dirty lines are not written back: Flush first.
// Closing twice returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	return e.shutdown()
}

func (e *Engine) shutdown() error {
	var errs []error
	if e.target != nil {
		errs = append(errs, e.target.Close())
	}
	if e.stop != nil {
		e.stop()
	}
	if e.be != nil && e.be.tier != nil {
		e.be.tier.close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cpuengine: close: %w", err)
	}
	return nil
}
