package gpuengine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// Config sizes the engine. The zero value of every field takes the default
// named in its comment.
type Config struct {
	// Device is the CUDA device ordinal. Default 0.
	Device int
	// LineSize is the cache line size in bytes: a power of two from 512 to
	// 64 KiB, at least the namespaces' LBA size. Default 4096.
	LineSize int
	// CacheBytes is the size of the line data in GPU memory. Default
	// 256 MiB. Rounded down to whole sets.
	CacheBytes uint64
	// Ways is the associativity K. Default 8.
	Ways int
	// QueuePairs is the number of NVMe queue pairs. Default
	// DefaultQueuePairs. Each pair completes commands at a rate of its
	// own that a busy link lowers, while the Target's workers serve the
	// pairs between them: on the H200 host, 4 KiB reads copied into
	// device memory by warps moved 45 GB/s with 64 pairs, 47.6 with 128
	// and 37.5 with 256, where the workers' per-pair costs took over
	// (bench/results/logs/q2-target-side-H200-20261125.txt).
	QueuePairs int
	// ReadAheadQueuePairs is the number of queue pairs each cache keeps,
	// besides its QueuePairs, for Reads of several consecutive lines
	// (slots of ReadAheadReadBytes): those of bam::read_ahead, which
	// leaves them in flight while its warp goes on, so they must not hold
	// entries that other fills wait for (kernels/include/bam/read_ahead.cuh),
	// and those of a warp filling consecutive lines at once (bam::for_range
	// ahead, the engine's range passes; kernels/include/bam/array.cuh,
	// fill_runs). Default DefaultReadAheadQueuePairs; negative: none, and
	// then bam::read_ahead waits for its fills as prefetch_steps does and
	// every fill reads one line.
	ReadAheadQueuePairs int
	// ReadAheadReadBytes is the most one Read on the read-ahead pairs
	// covers: a warp reads the consecutive lines of one grid step that it
	// asks for (bam::read_ahead), or that it fills at once (fill_runs),
	// with one command, so the Target decodes, copies and completes them,
	// and a warp harvests them, once. The read-ahead pairs' staging
	// slots hold that many bytes each, and the pairs have as many fewer
	// entries (at least 2), so their pinned staging stays that of
	// QueueDepth lines. A power of two; below the line size it is the
	// line size, and a Read covers at most 32 lines. Default
	// DefaultReadAheadReadBytes.
	ReadAheadReadBytes int
	// QueueDepth is the entries per queue of every cache (a power of two
	// from 2 to 4096). Default: per cache, DefaultQueueDepth, halved (down
	// to MinAutoQueueDepth) while the cache's pinned staging memory (queue
	// pairs x depth x line size) exceeds DefaultStagingBytes. New's
	// engine reports the depth it chose in Config().QueueDepth (the
	// default cache) and in each CacheConfig.QueueDepth.
	QueueDepth int
	// Timeout bounds every wait of a kernel thread (a completion, a fill by
	// another thread, a set lock). Default 5s.
	Timeout time.Duration
	// RoundRobin selects BaM's round-robin victim choice instead of clock.
	RoundRobin bool
	// FillRoute selects how line data moves between the Target and device
	// memory: staging slots copied by the requesting lanes, the copy engine,
	// or (the default, RouteAuto) the one that measured faster. See
	// FillRoute.
	FillRoute FillRoute
	// FillCopierWarps is the number of warps of the fill copier, a small
	// kernel the engine runs beside every kernel it launches: lanes that
	// own a staging copy with too few lanes to share it (a fill for one
	// lane, a dirty line's write-back) hand it to a copier warp, which
	// copies it with all 32 lanes (kernels/include/bam/copier.cuh). Default
	// DefaultFillCopierWarps, in blocks of four warps, so that a kernel
	// beside it loses at most one block on each of 64 multiprocessors;
	// negative: no copier, such lanes copy alone.
	FillCopierWarps int
	// StagingMirror gives each queue pair's staging slots a mirror in
	// device memory (mirror.go): under load the Target copies runs of
	// consecutive slots into it with the copy engine, and fills copy
	// their line from there instead of across PCIe. Off by default: on
	// the H200 host it measured slower than the staging route (mirror.go
	// says why). Each queue pair then holds as much device memory as
	// staging memory (depth x line size).
	StagingMirror bool
	// MirrorRun is the most bytes the Target joins into one copy into a
	// staging mirror: a power of two from nvme.MirrorMinRun to 16 MiB,
	// used up to half a queue's staging slots (a queue whose half is
	// below nvme.MirrorMinRun gets no mirror). Default DefaultMirrorRun.
	MirrorRun int
	// MirrorStreams is the number of streams the Target's workers copy
	// into staging mirrors on (each worker uses one). Default
	// DefaultMirrorStreams, at most maxMirrorStreams.
	MirrorStreams int
	// TargetWorkers is the number of host threads serving the queues.
	// Default min(GOMAXPROCS, all queue pairs).
	TargetWorkers int
	// MoreCaches adds caches of other line sizes beside the one of
	// LineSize and CacheBytes, each with its own queue pairs.
	// An array chooses its cache by ArraySpec.LineSize: a column scanned
	// whole reads fastest with large lines (fewer commands), one read at a
	// few rows wastes least with small ones. The line sizes must differ.
	MoreCaches []CacheConfig
	// LinkedJIT has the JIT compile each kernel module through the
	// driver's linker, function by function, with ABI calls
	// (cuda.Context.LinkPTX), rather than as one program. For comparisons
	// only: C3's loops of bam::array_ref then keep their values in
	// registers, but a warp may leave the calls diverged, and the scatter
	// pass deadlocked under load (cuda.Context.LinkPTX says more).
	LinkedJIT bool
	// PortablePTX loads the compute_80 build of the kernels on every GPU.
	// By default a GPU of compute capability 9.0 or later gets the sm_90
	// build (kernels.PTXFor), whose queues read each window of completion
	// entries with one bulk copy instead of four loads. For comparisons;
	// $BAM_KERNEL_BUILD=compute_80 sets it too (kernels.BuildEnv).
	PortablePTX bool
	// Faults, when set, is consulted by the Target for every command (tests).
	Faults nvme.FaultHook
	// Logger receives engine events. Default: discard.
	Logger *slog.Logger
}

// The default queue geometry. Sixteen queues of 1024 entries held about
// 6 M commands/s however many GPU threads submitted: each queue pair
// completed about 375 K commands/s, about one per GPU-host round trip
// (2.8 µs). With the same 16 Ki entries spread over 64 queues, 4 KiB
// reads into pinned memory went from 24.5 to 52.5 GB/s (12 M commands/s
// at 64 Ki threads), and kv batch Gets on a table 4x the cache from 5.5 to
// 6.1 M/s (uniform keys) and 19.3 to 23.3 M/s (Zipf) on the H200 host
// (bench/results, Q1/Q2/K1). Staging memory, depth x line size per queue,
// stays what it was. Below about 4 Ki GPU threads, fewer threads share
// each queue and 16 queues did better (2.6 against 1.6 M commands/s at
// 1 Ki threads).
//
// 256 entries is also the best depth for cold 4 KiB gathers with 64 queue
// pairs and 64 read-ahead pairs (C1's range and random orders, one H200
// machine): the random order moved 49.6-50.0 GB/s at 256, 47.0-48.5 at
// 128, 44.7-46.2 at 64, 49.1-49.3 at 512 and 35-43 at 1024, whose 512 MiB
// of staging is larger than the host's last-level cache and whose Target
// found 180-195 commands waiting at each doorbell
// (bench/results/logs/queue-depth-H200-20261125.txt).
//
// Once the queues delivered 52 GB/s into pinned memory, the fill copier's
// 64 warps became the limit of 4 KiB reads into device memory: 25 GB/s.
// 128 warps copied 37.6 GB/s and 256 warps 36.5 GB/s (Q2, same host);
// with 128, kv's uniform Gets reached 7.6 M/s and Zipf 24.7 M/s (K1).
// Once completions were delivered a window at a time, the queues again
// outran 128 copier warps: with 256, Q2 went from 31-33 to 41.8-42.8
// GB/s (512 warps: 40.7-41.0), while C1's cold 4 KiB gathers (44.8
// against 43.8 GB/s), kv's batch Gets (9.6 and 24.1 M/s against 9.7 and
// 24.3) and the taxi queries (Q5 0.076-0.079 s against 0.081-0.086)
// measured the same or better (H200 host, one machine).
const (
	DefaultQueuePairs      = 64
	DefaultQueueDepth      = 256
	DefaultFillCopierWarps = 256
	// DefaultReadAheadQueuePairs is Config.ReadAheadQueuePairs' default.
	// On the H200 host, a cold range pass over 4 KiB lines whose warps
	// fill three lines ahead (C1's range order) moved 49.8-50.0 GB/s with
	// two lines a Read against 48.3-49.1 with one Read a line on one
	// machine, and about 50 both ways on another; a cold
	// one-element-per-thread pass with bam::read_ahead over 64 KiB lines
	// moved 45.4-46.0 GB/s with 64 pairs against 36.9-42.2 with 32 (4 KiB
	// lines: alike) (bench/results/logs/c1-range-runs-H200-20261125.txt).
	// Each pair holds pinned staging of QueueDepth lines, as many bytes as
	// a pair of QueuePairs.
	DefaultReadAheadQueuePairs = 64
	// DefaultReadAheadReadBytes is Config.ReadAheadReadBytes' default:
	// on the H200 host a cold one-element-per-thread pass over 4 KiB
	// lines moved 46.3-48.5 GB/s with Reads of 8 KiB, 44.3-47.1 with 16
	// KiB and 43.1-47.2 with one line a Read, interleaved
	// (bench/results/logs/c1-read-ahead-runs-H200-20261125.txt).
	DefaultReadAheadReadBytes = 8 << 10
)

// The default depth is lowered for large lines because staging slots
// that outgrow the host's last-level cache cost PCIe bandwidth: the
// Target writes a slot, the GPU reads it across PCIe moments later, and
// while the slots in use fit the cache those reads are served from it;
// beyond, every slot goes out to DRAM and back. Cold 64 KiB gathers (C1,
// H200 host, 64 queue pairs) moved 39.4-40.7 GB/s with 1 GiB of staging
// (depth 256), 45.1-45.3 with 256 MiB (depth 64) and 46.3-48.3 with 64
// MiB (depth 16), while 4 KiB lines measured the same with 64 and 16
// MiB. Sixteen commands of a queue still keep 1 MiB of 64 KiB lines in
// flight per queue pair, far more than PCIe needs.
const (
	DefaultStagingBytes = 64 << 20
	MinAutoQueueDepth   = 16
)

// CacheConfig sizes one of Config.MoreCaches: LineSize as Config.LineSize
// (required), CacheBytes as Config.CacheBytes (default 256 MiB), QueuePairs
// the number of its queue pairs (default Config.QueuePairs), QueueDepth
// the entries of each (default Config.QueueDepth when that is set, else
// chosen as Config.QueueDepth says). Ways are the engine's.
//
// Queue pairs per cache, because what each cache serves wants a different
// number: on the A1 taxi queries (H200 host, 16 KiB scan lines, 1 KiB
// lines for the amounts), the scan of the filter column took 0.051 s with
// 32 queue pairs against 0.068 s with 128, while Q5's 750 K scattered
// amount reads finished sooner with 128 (0.119 s against 0.160 s with 32).
type CacheConfig struct {
	LineSize   int
	CacheBytes uint64
	QueuePairs int
	QueueDepth int
}

// caches returns every cache's configuration, the default one first.
func (c *Config) caches() []CacheConfig {
	first := CacheConfig{LineSize: c.LineSize, CacheBytes: c.CacheBytes, QueuePairs: c.QueuePairs, QueueDepth: c.QueueDepth}
	return append([]CacheConfig{first}, c.MoreCaches...)
}

// autoQueueDepth is the default depth of a cache's queues (see
// Config.QueueDepth).
func autoQueueDepth(lineSize, queuePairs int) int {
	d := DefaultQueueDepth
	for d > MinAutoQueueDepth && uint64(d)*uint64(lineSize)*uint64(queuePairs) > DefaultStagingBytes {
		d /= 2
	}
	return d
}

// totalQueueEntries is the number of queue entries of all caches,
// read-ahead pairs included.
func (c *Config) totalQueueEntries() int {
	n := 0
	for _, cc := range c.caches() {
		n += cc.QueuePairs*cc.QueueDepth + c.aheadPairs()*c.aheadDepth(cc.LineSize, cc.QueueDepth)
	}
	return n
}

// aheadLines is the number of lines a read-ahead Read covers at most in
// the cache of lineSize-byte lines: its staging slots' size in lines.
func (c *Config) aheadLines(lineSize int) int {
	return min(max(c.ReadAheadReadBytes/lineSize, 1), maxAheadLines)
}

// aheadDepth is the depth of the read-ahead pairs of the cache of
// lineSize-byte lines and queueDepth-entry pairs.
func (c *Config) aheadDepth(lineSize, queueDepth int) int {
	return max(queueDepth/c.aheadLines(lineSize), 2)
}

// maxAheadLines is the most lines one read-ahead Read covers (one lane of
// the asking warp per line), and maxAheadRead the most bytes
// Config.ReadAheadReadBytes asks for (the Target's transfer limit).
const (
	maxAheadLines = 32
	maxAheadRead  = 1 << 20
)

// totalQueuePairs is the number of queue pairs of all caches, read-ahead
// pairs included.
func (c *Config) totalQueuePairs() int {
	n := 0
	for _, cc := range c.caches() {
		n += cc.QueuePairs + c.aheadPairs()
	}
	return n
}

// aheadPairs is the number of read-ahead queue pairs of each cache.
func (c *Config) aheadPairs() int { return max(c.ReadAheadQueuePairs, 0) }

func (c *Config) fill() error {
	portable, err := kernels.PortableFromEnv()
	if err != nil {
		return fmt.Errorf("gpuengine: %w", err)
	}
	c.PortablePTX = c.PortablePTX || portable
	if c.LineSize == 0 {
		c.LineSize = 4096
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = 256 << 20
	}
	if c.Ways == 0 {
		c.Ways = 8
	}
	if c.QueuePairs == 0 {
		c.QueuePairs = DefaultQueuePairs
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	c.MoreCaches = slices.Clone(c.MoreCaches) // defaults go into the engine's copy, not the caller's
	for i := range c.MoreCaches {
		if c.MoreCaches[i].CacheBytes == 0 {
			c.MoreCaches[i].CacheBytes = 256 << 20
		}
		if c.MoreCaches[i].QueuePairs == 0 {
			c.MoreCaches[i].QueuePairs = c.QueuePairs
		}
		if c.MoreCaches[i].QueueDepth == 0 {
			c.MoreCaches[i].QueueDepth = c.QueueDepth
		}
		if c.MoreCaches[i].QueueDepth == 0 && c.MoreCaches[i].QueuePairs > 0 {
			c.MoreCaches[i].QueueDepth = autoQueueDepth(c.MoreCaches[i].LineSize, c.MoreCaches[i].QueuePairs)
		}
	}
	if c.QueueDepth == 0 && c.QueuePairs > 0 {
		c.QueueDepth = autoQueueDepth(c.LineSize, c.QueuePairs)
	}
	if c.MirrorRun == 0 {
		c.MirrorRun = DefaultMirrorRun
	}
	if c.ReadAheadQueuePairs == 0 {
		c.ReadAheadQueuePairs = DefaultReadAheadQueuePairs
	}
	if c.ReadAheadReadBytes == 0 {
		c.ReadAheadReadBytes = DefaultReadAheadReadBytes
	}
	if c.ReadAheadReadBytes < 0 || c.ReadAheadReadBytes > maxAheadRead || c.ReadAheadReadBytes&(c.ReadAheadReadBytes-1) != 0 {
		return fmt.Errorf("gpuengine: read-ahead Reads of %d bytes: want a power of two up to %d", c.ReadAheadReadBytes, maxAheadRead)
	}
	if c.MirrorRun < nvme.MirrorMinRun || c.MirrorRun > 16<<20 || c.MirrorRun&(c.MirrorRun-1) != 0 {
		return fmt.Errorf("gpuengine: mirror runs of %d bytes: want a power of two from %d to %d", c.MirrorRun, nvme.MirrorMinRun, 16<<20)
	}
	if c.MirrorStreams == 0 {
		c.MirrorStreams = DefaultMirrorStreams
	}
	if c.MirrorStreams < 1 || c.MirrorStreams > maxMirrorStreams {
		return fmt.Errorf("gpuengine: %d mirror streams: want 1 to %d", c.MirrorStreams, maxMirrorStreams)
	}
	if c.TargetWorkers == 0 {
		c.TargetWorkers = min(runtime.GOMAXPROCS(0), c.totalQueuePairs())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Ways < 1 || c.Ways > gpucache.MaxWays {
		return fmt.Errorf("gpuengine: %d ways: want 1 to %d", c.Ways, gpucache.MaxWays)
	}
	seen := map[int]bool{}
	for _, cc := range c.caches() {
		switch {
		case cc.LineSize < gpucache.MinLineSize || cc.LineSize > gpucache.MaxLineSize || cc.LineSize&(cc.LineSize-1) != 0:
			return fmt.Errorf("gpuengine: line size %d: want a power of two from %d to %d", cc.LineSize, gpucache.MinLineSize, gpucache.MaxLineSize)
		case seen[cc.LineSize]:
			return fmt.Errorf("gpuengine: two caches of %d-byte lines", cc.LineSize)
		case cc.CacheBytes < uint64(cc.LineSize*c.Ways):
			return fmt.Errorf("gpuengine: cache of %d bytes holds less than one set of %d ways of %d bytes", cc.CacheBytes, c.Ways, cc.LineSize)
		case cc.QueuePairs < 1:
			return fmt.Errorf("gpuengine: %d queue pairs for the cache of %d-byte lines: want at least 1", cc.QueuePairs, cc.LineSize)
		case cc.QueueDepth < 2 || cc.QueueDepth > 4096 || cc.QueueDepth&(cc.QueueDepth-1) != 0:
			return fmt.Errorf("gpuengine: queue depth %d for the cache of %d-byte lines: want a power of two from 2 to 4096", cc.QueueDepth, cc.LineSize)
		}
		seen[cc.LineSize] = true
	}
	switch {
	case c.FillCopierWarps > 4096:
		return fmt.Errorf("gpuengine: %d fill copier warps: want at most 4096 (negative for none)", c.FillCopierWarps)
	case c.totalQueuePairs() > 1024:
		return fmt.Errorf("gpuengine: %d queue pairs over %d caches: want at most 1024 in all", c.totalQueuePairs(), 1+len(c.MoreCaches))
	}
	if _, err := c.FillRoute.directBelow(); err != nil {
		return err
	}
	return nil
}

// Engine is the GPU engine of one device. Launches are serialised (each
// owns the error record while it runs); copies and binds may run at any time.
type Engine struct {
	cfg    Config
	ctx    *cuda.Context
	mod    *cuda.Module
	stream *cuda.Stream
	caches []*lineCache // caches[0] is the default one (Config.LineSize)

	copiers    *copierPool
	mirrors    *mirrorStreams // nil unless Config.StagingMirror
	fillCopier *fillCopier    // nil when Config.FillCopierWarps < 0
	errRec     *cuda.DeviceMem
	// launchBack receives, at the end of every launch, the error record
	// (at 0) and the fill copier's job counts (at launchCountsAt), copied
	// on the streams behind the kernel and the copier: reading them
	// synchronously afterwards cost some 30 µs a launch (H200).
	launchBack *cuda.HostMem
	// recClean is set while the device's error record is known to be all
	// zeros (the last launch read it back so), so the next launch need
	// not clear it.
	recClean bool
	aborter  *aborter     // stops a launch whose context ended
	queues   []*queuePair // every cache's, in queue ID order

	dma        *nvme.DMASpace
	target     *nvme.Target
	namespaces []nvme.Namespace

	passNext *cuda.DeviceMem // the pass kernels' work counter (launchPass), under launchMu
	// quarantined is set, under launchMu, from a reset after a timeout
	// until settle has cleared BUSY on the ways whose commands timed out;
	// resetErr holds the error of such a reset that failed, which settle
	// retries before anything else.
	quarantined bool
	resetErr    error
	// boundForTest, when not zero, replaces launchBound's bound (tests of
	// a kernel stopped at its bound).
	boundForTest time.Duration
	// stuck is set, under launchMu, when a kernel did not stop even after
	// its abort: every later launch fails with it, and Close leaves the
	// device memory alone (waitKernel).
	stuck error

	launchMu sync.Mutex
	mu       sync.Mutex
	closed   bool
	fns      map[string]*cuda.Function
	resident map[*cuda.Function]uint32 // blocks of passBlock threads the device keeps resident (passGrid)
	sms      int                       // multiprocessors (passGrid)
	ccMajor  int                       // compute capability, major (familyPTX)
	arrays   map[*Array]struct{}
	// freed, set by a Close that returned with commands still running in
	// their namespaces, is closed once the engine has been freed after
	// them (tests).
	freed chan struct{}
}

// lineCache is one set-associative cache of one line size, with the queue
// pairs its misses and write-backs go through and its own counters.
type lineCache struct {
	lineSize   int
	lineShift  uint
	lbaShift   uint // log2 of LBAs per line
	sets       uint64
	ways       int
	queuePairs int
	queueDepth int
	aheadLines int // lines per read-ahead Read and read-ahead staging slot
	aheadDepth int // entries per read-ahead pair

	meta, data *cuda.DeviceMem
	lineBase   cuda.DevicePtr // first line: data rounded up to a page
	lineBytes  uint64
	lines      *lineRegion // the line data as a DMA region: the copy-engine route
	stats      *cuda.DeviceMem
	queues     []*queuePair
	queueDescs *cuda.DeviceMem
	cacheDesc  *cuda.DeviceMem // array descriptor with only the cache and queue fields, for write-back
}

// cacheFor returns the cache of lineSize bytes (0: the default one).
func (e *Engine) cacheFor(lineSize int) (*lineCache, bool) {
	if lineSize == 0 {
		return e.caches[0], true
	}
	for _, c := range e.caches {
		if c.lineSize == lineSize {
			return c, true
		}
	}
	return nil, false
}

// New starts a GPU engine over the namespaces (NSID i+1 is namespaces[i]).
// All namespaces must share one LBA size. The engine does not close them.
func New(cfg Config, namespaces []nvme.Namespace) (*Engine, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if len(namespaces) == 0 || len(namespaces) > 255 {
		return nil, fmt.Errorf("gpuengine: %d namespaces: want 1 to 255", len(namespaces))
	}
	lba := namespaces[0].LBASize()
	for i, ns := range namespaces {
		if ns.LBASize() != lba {
			return nil, fmt.Errorf("gpuengine: namespace %d has %d-byte LBAs, namespace 0 has %d", i, ns.LBASize(), lba)
		}
	}
	for _, cc := range cfg.caches() {
		if cc.LineSize < lba {
			return nil, fmt.Errorf("gpuengine: line size %d is smaller than the LBA size %d", cc.LineSize, lba)
		}
		// A line's tag holds its namespace line in TagLineMask's bits.
		for i, ns := range namespaces {
			if lines := ns.Blocks() * uint64(lba) / uint64(cc.LineSize); lines > gpucache.TagLineMask+1 {
				return nil, fmt.Errorf("gpuengine: namespace %d has %d lines of %d bytes; cache tags hold at most %d a namespace: use larger lines",
					i, lines, cc.LineSize, uint64(gpucache.TagLineMask)+1)
			}
		}
	}
	if err := cuda.Open(); err != nil {
		return nil, err
	}
	cctx, err := cuda.Primary(cfg.Device)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:        cfg,
		ctx:        cctx,
		namespaces: namespaces,
		fns:        map[string]*cuda.Function{},
		resident:   map[*cuda.Function]uint32{},
		arrays:     map[*Array]struct{}{},
	}
	for _, cc := range cfg.caches() {
		e.caches = append(e.caches, &lineCache{
			lineSize:   cc.LineSize,
			lineShift:  uint(bits.TrailingZeros(uint(cc.LineSize))),
			lbaShift:   uint(bits.TrailingZeros(uint(cc.LineSize / lba))),
			sets:       cc.CacheBytes / uint64(cc.LineSize) / uint64(cfg.Ways),
			ways:       cfg.Ways,
			queuePairs: cc.QueuePairs,
			queueDepth: cc.QueueDepth,
			aheadLines: cfg.aheadLines(cc.LineSize),
			aheadDepth: cfg.aheadDepth(cc.LineSize, cc.QueueDepth),
		})
	}
	if err := e.init(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Engine) init() error {
	sms, err := e.ctx.Device().Attribute(cuda.AttrMultiprocessorCount)
	if err != nil {
		return fmt.Errorf("gpuengine: %w", err)
	}
	e.sms = max(sms, 1)
	if e.ccMajor, err = e.ctx.Device().Attribute(cuda.AttrComputeCapabilityMajor); err != nil {
		return fmt.Errorf("gpuengine: %w", err)
	}
	ptx, err := e.familyPTX(kernels.FamilyArray)
	if err != nil {
		return err
	}
	if e.mod, err = e.loadPTX(ptx); err != nil {
		return fmt.Errorf("gpuengine: load array kernels: %w", err)
	}
	if e.stream, err = e.ctx.NewStream(); err != nil {
		return err
	}
	if e.cfg.FillCopierWarps >= 0 {
		warps := e.cfg.FillCopierWarps
		if warps == 0 {
			warps = DefaultFillCopierWarps
		}
		// Four slots per queue entry: a copy is posted by the owner of a
		// queue entry, so at most one per entry is outstanding, and posts
		// withdrawn when a copier stopped wait in the ring for the next.
		slots := uint64(1024)
		for slots < uint64(4*e.cfg.totalQueueEntries()) {
			slots <<= 1
		}
		if e.fillCopier, err = newFillCopier(e.ctx, e.mod, slots, warps); err != nil {
			return fmt.Errorf("gpuengine: %w", err)
		}
	}
	// The copy-engine route's streams, right after the launch stream (see
	// copierPool).
	maxLine := 0
	for _, c := range e.caches {
		maxLine = max(maxLine, c.lineSize)
	}
	if e.copiers, err = newCopierPool(e.ctx, 2*e.cfg.TargetWorkers, uint64(max(maxLine, 64<<10))); err != nil {
		return fmt.Errorf("gpuengine: copy-engine route: %w", err)
	}
	if e.cfg.StagingMirror {
		if e.mirrors, err = newMirrorStreams(e.ctx, min(e.cfg.TargetWorkers, e.cfg.MirrorStreams)); err != nil {
			return fmt.Errorf("gpuengine: staging mirror: %w", err)
		}
	}
	for _, c := range e.caches {
		if err := c.alloc(e.ctx); err != nil {
			return err
		}
	}
	if e.errRec, err = e.ctx.Alloc(ErrorRecordBytes); err != nil {
		return err
	}
	if e.launchBack, err = e.ctx.AllocPinned(launchCountsAt + 16); err != nil {
		return err
	}
	if e.aborter, err = newAborter(e.ctx); err != nil {
		return err
	}
	// Queues and the Target that serves them.
	e.dma = nvme.NewDMASpace()
	if e.target, err = nvme.NewTarget(nvme.TargetConfig{
		Workers:     e.cfg.TargetWorkers,
		Executors:   max(64, e.cfg.totalQueueEntries()/4),
		MaxTransfer: max(maxLine, 1<<20),
		Spin:        2 * time.Millisecond,
		IdlePoll:    200 * time.Microsecond,
		Faults:      e.cfg.Faults,
		Logger:      e.cfg.Logger,
	}, e.dma); err != nil {
		return err
	}
	for i, ns := range e.namespaces {
		if err := e.target.AddNamespace(uint32(i+1), ns); err != nil {
			return err
		}
	}
	for _, c := range e.caches {
		// The line data is DMA-addressable at its device address (the
		// copy-engine route), served by the copier pool.
		c.lines = &lineRegion{base: c.lineBase, size: c.lineBytes, pool: e.copiers}
		if err := e.dma.Register(uint64(c.lineBase), c.lineBytes, c.lines); err != nil {
			return err
		}
		// The cache's queue pairs, then its read-ahead pairs.
		pairs := c.queuePairs + e.cfg.aheadPairs()
		descs := make([]byte, pairs*QueueDescBytes)
		for i := 0; i < pairs; i++ {
			slot, depth, mirror := c.lineSize, c.queueDepth, true
			if i >= c.queuePairs {
				// A read-ahead pair: slots of aheadLines lines, no
				// mirror (its Reads never ask for one).
				slot, depth, mirror = c.lineSize*c.aheadLines, c.aheadDepth, false
			}
			q, err := newQueuePair(e, uint16(len(e.queues)+1), slot, depth, mirror)
			if err != nil {
				return err
			}
			e.queues = append(e.queues, q)
			c.queues = append(c.queues, q)
			q.encode(descs[i*QueueDescBytes:])
			if err := e.target.AddQueuePair(q.mem); err != nil {
				return err
			}
		}
		if c.queueDescs, err = e.ctx.Alloc(uint64(len(descs))); err != nil {
			return err
		}
		if err := c.queueDescs.Write(0, descs); err != nil {
			return err
		}
	}
	if err := e.target.Start(context.Background()); err != nil {
		return err
	}
	// The cache-only descriptors used by write-back.
	for _, c := range e.caches {
		if c.cacheDesc, err = e.ctx.Alloc(ArrayDescBytes); err != nil {
			return err
		}
		if err := c.cacheDesc.Write(0, e.encodeDesc(c, 1, 1, 0, 0, 0, 0)); err != nil {
			return err
		}
	}
	return nil
}

// alloc allocates the cache's line data, metadata (emptied) and counters.
func (c *lineCache) alloc(ctx *cuda.Context) error {
	K := uint32(c.ways)
	N := uint32(c.sets)
	// Lines are page aligned: the copy-engine route names them in PRPs,
	// whose entries after the first must be page aligned, and the driver
	// aligns small allocations to less than a page.
	lineBytes := c.sets * uint64(K) << c.lineShift
	var err error
	if c.data, err = ctx.Alloc(lineBytes + pageSize); err != nil {
		return fmt.Errorf("gpuengine: cache lines (%d-byte lines): %w", c.lineSize, err)
	}
	c.lineBase = c.data.Ptr().Add((pageSize - uint64(c.data.Ptr())%pageSize) % pageSize)
	c.lineBytes = lineBytes
	if c.meta, err = ctx.Alloc(gpucache.RegionBytes(N, K)); err != nil {
		return fmt.Errorf("gpuengine: cache metadata (%d-byte lines): %w", c.lineSize, err)
	}
	if err := c.reset(ctx); err != nil {
		return err
	}
	if c.stats, err = ctx.Alloc(StatsSlots * StatsCounters * 8); err != nil {
		return err
	}
	return c.stats.Memset8(0)
}

// reset empties the cache: all metadata zero, both tag arrays TagEmpty.
func (c *lineCache) reset(ctx *cuda.Context) error {
	K := uint32(c.ways)
	N := uint32(c.sets)
	if err := c.meta.Memset8(0); err != nil {
		return err
	}
	from := c.meta.Ptr().Add(gpucache.TagsOffset(N, K))
	n := gpucache.WaysOffset(N, K) - gpucache.TagsOffset(N, K)
	return ctx.MemsetD8(from, 0xFF, n)
}

func (c *lineCache) free() []error {
	var errs []error
	for _, m := range []*cuda.DeviceMem{c.meta, c.data, c.stats, c.queueDescs, c.cacheDesc} {
		if m != nil {
			errs = append(errs, m.Free())
		}
	}
	return errs
}

// encodeDesc builds an array descriptor (see layout.go) for an array in
// cache c whose stripe arrays are at stripeStart/stripeIndex; firstTag is
// the tag of line 0 when nns is 1.
func (e *Engine) encodeDesc(c *lineCache, elemSize, elemCount, nns uint64, stripeStart, stripeIndex cuda.DevicePtr, firstTag uint64) []byte {
	b := make([]byte, ArrayDescBytes)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	K := uint32(c.ways)
	N := uint32(c.sets)
	put(ArrayCacheMetaOffset, uint64(c.meta.Ptr()))
	put(ArrayCacheDataOffset, uint64(c.lineBase))
	put(ArraySetsOffset, c.sets)
	put(ArrayWaysOffset, uint64(K))
	put(ArrayLineShiftOffset, uint64(c.lineShift))
	put(ArrayTagsOffset, gpucache.TagsOffset(N, K))
	put(ArrayWBTagsOffset, gpucache.WriteBackTagsOffset(N, K))
	put(ArrayWaysRecOffset, gpucache.WaysOffset(N, K))
	put(ArrayQueuesOffset, uint64(c.queueDescs.Ptr()))
	put(ArrayNQueuesOffset, uint64(c.queuePairs))
	put(ArrayAheadQueuesOffset, uint64(len(c.queues)-c.queuePairs))
	put(ArrayAheadLinesOffset, uint64(c.aheadLines))
	put(ArrayErrorOffset, uint64(e.errRec.Ptr()))
	put(ArrayTimeoutOffset, uint64(e.cfg.Timeout.Nanoseconds()))
	put(ArrayNNSOffset, nns)
	put(ArrayNSStartOffset, uint64(stripeStart))
	put(ArrayNSIndexOffset, uint64(stripeIndex))
	if nns == 1 {
		put(ArrayFirstTagOffset, firstTag)
	}
	put(ArrayLBAShiftOffset, uint64(c.lbaShift))
	put(ArrayElemCountOffset, elemCount)
	put(ArrayElemSizeOffset, elemSize)
	put(ArrayStatsOffset, uint64(c.stats.Ptr()))
	policy := uint64(PolicyClock)
	if e.cfg.RoundRobin {
		policy = PolicyRoundRobin
	}
	put(ArrayPolicyOffset, policy)
	below, _ := e.cfg.FillRoute.directBelow() // checked by Config.fill
	put(ArrayDirectBelowOffset, below)
	if e.fillCopier != nil {
		put(ArrayCopierOffset, uint64(e.fillCopier.ptr()))
		put(ArrayCopyBelowOffset, DefaultCopyBelow)
	}
	return b
}

// Context returns the CUDA context the engine runs in.
func (e *Engine) Context() *cuda.Context { return e.ctx }

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Sets returns the number of sets of the default cache.
func (e *Engine) Sets() uint64 { return e.caches[0].sets }

// Module loads the module of a kernel family other than "array" (the
// engine's own) into the engine's context. Each call loads a new copy,
// which the caller owns and unloads.
func (e *Engine) Module(family string) (*cuda.Module, error) {
	ptx, err := e.familyPTX(family)
	if err != nil {
		return nil, err
	}
	return e.loadPTX(ptx)
}

// familyPTX is the build of a kernel family for this engine's GPU
// (Config.PortablePTX).
func (e *Engine) familyPTX(family string) ([]byte, error) {
	if e.cfg.PortablePTX {
		return kernels.PTX(family)
	}
	return kernels.PTXFor(family, e.ccMajor)
}

// KernelBuild names the build of the kernels the engine loads: "sm_90"
// or "compute_80" (Config.PortablePTX).
func (e *Engine) KernelBuild() string {
	if !e.cfg.PortablePTX && e.ccMajor >= 9 {
		return kernels.BuildSM90
	}
	return kernels.BuildPortable
}

// loadPTX loads a module the way Config.LinkedJIT says.
func (e *Engine) loadPTX(ptx []byte) (*cuda.Module, error) {
	if e.cfg.LinkedJIT {
		return e.ctx.LinkPTX(ptx)
	}
	return e.ctx.LoadPTX(ptx)
}

func (e *Engine) function(name string) (*cuda.Function, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if f, ok := e.fns[name]; ok {
		return f, nil
	}
	f, err := e.mod.Function(name)
	if err != nil {
		return nil, err
	}
	e.fns[name] = f
	return f, nil
}

// Launch runs a kernel that uses arrays bound to this engine on the engine's
// stream, with the fill copier's warps beside it, waits for it (bounded by
// a multiple of the device timeout, since every device wait is bounded),
// and returns the failure the kernel recorded (DeviceError says which) as
// a *DeviceError.
// When ctx ends first, Launch sets the launch's abort word, which every
// device wait reads with its deadline, waits until the kernel has stopped
// and returns an error wrapping ctx.Err(). After a timeout or an abort the
// queue pairs and the copier ring are reset.
func (e *Engine) Launch(ctx context.Context, fn *cuda.Function, cfg cuda.LaunchConfig, args ...cuda.Arg) error {
	_, err := e.launch(ctx, false, false, fn, cfg, args...)
	return err
}

// launchBound is how long a launch may run before the host stops it with
// its abort word: a multiple of the device timeout, since every device
// wait is bounded by it, and time for the kernel's work.
func (e *Engine) launchBound() time.Duration {
	if e.boundForTest > 0 {
		return e.boundForTest
	}
	return 4*e.cfg.Timeout + 30*time.Second
}

// passBlock is the block size of the pass kernels (BAM_ARRAY_BOUNDS).
const passBlock = 256

// passGrid is the launch of pass kernel fn over n positions: a thread a
// position, but no more blocks than the device keeps resident at once. A
// pass's warps take their work from its counter as they finish
// (bam::for_range), so blocks beyond those resident would only start to
// find the counter spent; and for_range sizes how many lines each warp
// fills ahead by the grid's warps, so those blocks would cut it for
// nothing (four times the resident blocks gave 4 KiB lines no read-ahead
// through caches under 264 MiB).
func (e *Engine) passGrid(fn *cuda.Function, n uint64) (cuda.LaunchConfig, error) {
	e.mu.Lock()
	per, ok := e.resident[fn]
	e.mu.Unlock()
	if !ok {
		p, err := fn.MaxActiveBlocksPerSM(passBlock, 0)
		if err != nil {
			return cuda.LaunchConfig{}, fmt.Errorf("gpuengine: %w", err)
		}
		per = uint32(max(p, 1))
		e.mu.Lock()
		e.resident[fn] = per
		e.mu.Unlock()
	}
	return cuda.Linear(n, passBlock, per*uint32(e.sms)), nil
}

// launchPass is Launch for a pass kernel of kernels/array.cu, whose last
// argument, appended here, is its work counter (bam::for_range's next): one
// word of the engine's, zeroed on the stream before each launch. Launches
// are serialized, so no two kernels share it.
func (e *Engine) launchPass(ctx context.Context, fn *cuda.Function, cfg cuda.LaunchConfig, args ...cuda.Arg) error {
	_, err := e.launch(ctx, false, true, fn, cfg, args...)
	return err
}

// launch is Launch, with the kernel's device time measured by events around
// it when timed, and the work counter appended to args when pass.
func (e *Engine) launch(ctx context.Context, timed, pass bool, fn *cuda.Function, cfg cuda.LaunchConfig, args ...cuda.Arg) (time.Duration, error) {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if e.stuck != nil {
		return 0, e.stuck
	}
	// A call whose context has already ended does no work, whatever its
	// size (a small kernel would finish before the wait looks at ctx).
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := e.settle(ctx); err != nil {
		return 0, fmt.Errorf("gpuengine: %s: %w", fn.Name(), err)
	}
	var start, end *cuda.Event
	if timed {
		var err error
		if start, err = e.ctx.NewEvent(); err != nil {
			return 0, err
		}
		defer start.Destroy()
		if end, err = e.ctx.NewEvent(); err != nil {
			return 0, err
		}
		defer end.Destroy()
	}
	if !e.recClean {
		if err := e.stream.MemsetD8(e.errRec.Ptr(), 0, ErrorRecordBytes); err != nil {
			return 0, err
		}
	}
	if pass {
		if e.passNext == nil {
			m, err := e.ctx.Alloc(8)
			if err != nil {
				return 0, err
			}
			e.passNext = m
		}
		if err := e.stream.MemsetD8(e.passNext.Ptr(), 0, 8); err != nil {
			return 0, err
		}
		args = append(args[:len(args):len(args)], cuda.Ptr(e.passNext.Ptr()))
	}
	// Whatever happens now, the record is read back before it is trusted
	// again.
	e.recClean = false
	for _, q := range e.queues {
		e.target.Kick(q.id)
	}
	bound := e.launchBound()
	kerr := e.runKernel(ctx, bound, start, end, fn, cfg, args...)
	if kerr == nil {
		// The kernel has ended, so no doorbell rings before the next
		// launch's Kick: the Target's workers park now instead of polling
		// every core for their Spin while the caller goes on.
		e.target.Rest()
	}
	var aborted *abortedError
	if errors.As(kerr, &aborted) {
		// The kernel has stopped; its waits may have abandoned commands
		// and copier jobs, as after a timeout. A kernel stopped at its
		// bound reports the first failure it recorded too: what made it
		// overrun, as a rule.
		de, err := e.recoverAfterAbort(context.WithoutCancel(ctx), fn.Name())
		var over *overrunError
		if de == nil || !errors.As(kerr, &over) {
			return 0, errors.Join(fmt.Errorf("gpuengine: %s: %w", fn.Name(), kerr), err)
		}
		return 0, errors.Join(fmt.Errorf("gpuengine: %s: %w", fn.Name(), kerr), de, err)
	}
	if kerr != nil {
		return 0, fmt.Errorf("gpuengine: %s: %w", fn.Name(), kerr)
	}
	var d time.Duration
	if timed {
		var err error
		if d, err = cuda.Elapsed(start, end); err != nil {
			return 0, err
		}
	}
	rec := e.launchBack.Bytes()[:ErrorRecordBytes]
	de := decodeError(rec)
	if de == nil {
		e.recClean = allZero(rec)
		return d, nil
	}
	de.Kernel = fn.Name()
	if de.abandons() {
		if err := e.resetAfterTimeout(ctx); err != nil {
			return 0, errors.Join(de, err)
		}
	}
	return 0, de
}

// resetAfterTimeout resets the queue pairs and the fill copier's ring,
// whose tickets and commands timed-out waits abandoned, and ends the
// quarantine of the ways those commands were for once storage has finished
// them (settle).
func (e *Engine) resetAfterTimeout(ctx context.Context) error {
	e.quarantined = true
	e.resetErr = e.resetQueues(ctx)
	if e.resetErr != nil {
		e.resetErr = fmt.Errorf("gpuengine: reset queues after timeout: %w", e.resetErr)
		return e.resetErr
	}
	if e.fillCopier != nil {
		if err := e.fillCopier.reset(); err != nil {
			e.resetErr = fmt.Errorf("gpuengine: reset fill copier after timeout: %w", err)
			return e.resetErr
		}
	}
	if e.target.Stragglers() == 0 {
		return e.releaseQuarantine(ctx)
	}
	return nil
}

// settle runs before every launch. A command that timed out may still run
// in storage: its queue pair was reset without it (resetQueues gives up
// after a bound), but a Write among them lands when it lands, and a Read
// moves data into memory the queues use again. Until the Target reports no
// such stragglers, no kernel may run: settle waits for them up to the
// engine's timeout (bounded by ctx too) and then fails with ErrStragglers.
// Once there are none, it releases the ways the device quarantined (left
// BUSY) when their commands timed out, so that they can be written back
// and evicted again: written back earlier, an older Write still on its way
// could have landed over a newer one.
func (e *Engine) settle(ctx context.Context) error {
	if e.resetErr != nil {
		// Commands given up on may still sit in queues the failed reset
		// did not take from the Target: reset again first.
		if err := e.resetAfterTimeout(ctx); err != nil {
			return err
		}
	}
	if n := e.target.Stragglers(); n > 0 {
		wctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		defer cancel()
		for d := 50 * time.Microsecond; n > 0; n = e.target.Stragglers() {
			select {
			case <-wctx.Done():
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%w: %d after %v more (%w)", ErrStragglers, n, e.cfg.Timeout, vq.ErrTimeout)
			case <-time.After(d):
			}
			d = min(2*d, 5*time.Millisecond)
		}
	}
	if !e.quarantined {
		return nil
	}
	return e.releaseQuarantine(ctx)
}

// releaseQuarantine clears BUSY on the ways of every cache that hold it
// (bam_cache_release_quarantine), between launches, with no abandoned
// command left in storage.
func (e *Engine) releaseQuarantine(ctx context.Context) error {
	fn, err := e.function("bam_cache_release_quarantine")
	if err != nil {
		return err
	}
	out, err := e.ctx.Alloc(8) // not e.alloc: launchMu is held
	if err != nil {
		return err
	}
	defer out.Free()
	if err := e.stream.MemsetD8(out.Ptr(), 0, 8); err != nil {
		return err
	}
	for _, c := range e.caches {
		cfg := cuda.Linear(c.sets*uint64(c.ways), 256, 4096)
		cfg.Stream = e.stream
		if err := fn.Launch(cfg, cuda.Ptr(c.cacheDesc.Ptr()), cuda.Ptr(out.Ptr())); err != nil {
			return fmt.Errorf("gpuengine: release quarantined ways: %w", err)
		}
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.stream.Wait(wctx); err != nil {
		return fmt.Errorf("gpuengine: release quarantined ways: %w", err)
	}
	b := make([]byte, 8)
	if err := out.Read(0, b); err != nil {
		return err
	}
	e.quarantined = false
	if n := binary.LittleEndian.Uint64(b); n > 0 {
		e.cfg.Logger.Info("gpuengine: ways released from quarantine after a timeout", "ways", n)
	}
	return nil
}

// recoverAfterAbort reads the error record of a launch of kernel fn
// stopped by its abort word, returns its first failure (nil for none) and
// resets what its waits abandoned.
func (e *Engine) recoverAfterAbort(ctx context.Context, fn string) (*DeviceError, error) {
	rec := make([]byte, ErrorRecordBytes)
	if err := e.errRec.Read(0, rec); err != nil {
		return nil, err
	}
	de := decodeError(rec)
	if de == nil {
		return nil, nil
	}
	de.Kernel = fn
	if de.abandons() {
		return de, e.resetAfterTimeout(ctx)
	}
	return de, nil
}

// runKernel launches the fill copier, then fn on the engine's stream (with
// events around it when start is not nil), stops the copier behind fn, and
// waits for both (waitKernel: each at most bound, fn stopped when ctx
// ends).
func (e *Engine) runKernel(ctx context.Context, bound time.Duration, start, end *cuda.Event, fn *cuda.Function, cfg cuda.LaunchConfig, args ...cuda.Arg) error {
	copier := e.fillCopier != nil && e.fillCopier.want(fn)
	var epoch uint32
	if copier {
		var err error
		if epoch, err = e.fillCopier.start(); err != nil {
			return err
		}
	}
	cfg.Stream = e.stream
	err := func() error {
		if start != nil {
			if err := start.Record(e.stream); err != nil {
				return err
			}
		}
		if err := fn.Launch(cfg, args...); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		if end != nil {
			return end.Record(e.stream)
		}
		return nil
	}()
	if copier {
		// Even when the launch failed: the copier warps must stop.
		err = errors.Join(err, e.fillCopier.stopAfter(e.stream, epoch))
	}
	if err == nil {
		// The error record and the copier's counts come back behind
		// the kernel (the counts behind the copier, whose warps count
		// the jobs they copied, when it ran).
		err = e.stream.CopyDtoH(e.launchBack, 0, e.errRec.Ptr(), ErrorRecordBytes)
		if err == nil && e.fillCopier != nil {
			s := e.stream
			if copier {
				s = e.fillCopier.stream
			}
			err = s.CopyDtoH(e.launchBack, launchCountsAt, e.fillCopier.ring.Ptr().Add(CopierJobsOffset), 16)
		}
	}
	if err != nil {
		if copier {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
			err = errors.Join(err, e.stream.Wait(cctx), e.fillCopier.wait(cctx))
			cancel()
		}
		return err
	}
	kerr := e.waitKernel(ctx, bound)
	var aborted *abortedError
	if kerr != nil && !errors.As(kerr, &aborted) {
		return kerr
	}
	if copier {
		// The copier stops behind fn: wait for it even after an abort.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		err := e.fillCopier.wait(cctx)
		cancel()
		if err != nil {
			return errors.Join(kerr, err)
		}
	}
	if kerr != nil {
		return kerr
	}
	if e.fillCopier != nil {
		e.fillCopier.note(fn, e.launchBack.Bytes()[launchCountsAt:launchCountsAt+16])
	}
	return nil
}

// launchCountsAt is where the fill copier's counts land in launchBack.
const launchCountsAt = (ErrorRecordBytes + 15) / 16 * 16

// allZero reports whether b holds only zeros.
func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

func decodeError(rec []byte) *DeviceError {
	le := binary.LittleEndian
	code := le.Uint32(rec[ErrorCodeOffset:])
	count := le.Uint32(rec[ErrorCountOffset:])
	if code == ErrCodeNone && count == 0 {
		return nil
	}
	e := &DeviceError{
		Code:   code,
		Status: nvme.Status(le.Uint32(rec[ErrorStatusOffset:])),
		Index:  le.Uint64(rec[ErrorIndexOffset:]),
		LBA:    le.Uint64(rec[ErrorLBAOffset:]),
		NSID:   uint32(le.Uint64(rec[ErrorNSIDOffset:])),
		Count:  count,

		abandoned: le.Uint32(rec[ErrorAbandonedOffset:]) != 0,
	}
	if (code == ErrCodeTimeout || code == ErrCodeAborted) && e.Status&TimeoutStatus != 0 {
		e.Wait = WaitKind(e.Status & WaitKindMask)
	}
	return e
}

// resetQueues takes every queue pair away from the Target, zeroes its rings
// and metadata and hands it back: what a controller reset does, after
// commands were abandoned by timed-out threads.
func (e *Engine) resetQueues(ctx context.Context) error {
	for _, q := range e.queues {
		rctx, cancel := context.WithTimeout(ctx, 2*e.cfg.Timeout+time.Second)
		err := e.target.RemoveQueuePair(rctx, q.id)
		cancel()
		// ErrNoQueue: an earlier reset that failed took it away.
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nvme.ErrNoQueue) {
			return err
		}
		if err := q.reset(); err != nil {
			return err
		}
		if err := e.target.AddQueuePair(q.mem); err != nil {
			return err
		}
	}
	e.cfg.Logger.Warn("gpuengine: queue pairs reset after a timeout", "queues", len(e.queues))
	return nil
}

// Flush writes every dirty line of every cache back (a kernel, one thread
// per way) and then flushes every namespace: on return, every write made
// before the call is durable (DESIGN.md §7).
func (e *Engine) Flush(ctx context.Context) error {
	fn, err := e.function("bam_cache_write_back")
	if err != nil {
		return err
	}
	for _, c := range e.caches {
		ways := c.sets * uint64(c.ways)
		if err := e.Launch(ctx, fn, cuda.Linear(ways, 256, 4096), cuda.Ptr(c.cacheDesc.Ptr())); err != nil {
			return fmt.Errorf("gpuengine: flush: %w", err)
		}
	}
	for i, ns := range e.namespaces {
		if err := ns.Flush(); err != nil {
			return fmt.Errorf("gpuengine: flush namespace %d: %w", i, err)
		}
	}
	return nil
}

// DirtyLines counts the VALID and DIRTY lines of all caches.
func (e *Engine) DirtyLines(ctx context.Context) (uint64, error) {
	fn, err := e.function("bam_cache_dirty_count")
	if err != nil {
		return 0, err
	}
	out, err := e.alloc(8)
	if err != nil {
		return 0, err
	}
	defer e.free(out)
	if err := out.Memset8(0); err != nil {
		return 0, err
	}
	for _, c := range e.caches {
		ways := c.sets * uint64(c.ways)
		if err := e.Launch(ctx, fn, cuda.Linear(ways, 256, 4096), cuda.Ptr(c.cacheDesc.Ptr()), cuda.Ptr(out.Ptr())); err != nil {
			return 0, err
		}
	}
	b := make([]byte, 8)
	if err := out.Read(0, b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// Invalidate writes dirty lines back and empties the caches (a cold start
// for benchmarks).
func (e *Engine) Invalidate(ctx context.Context) error {
	if err := e.Flush(ctx); err != nil {
		return err
	}
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	if err := e.stream.Synchronize(); err != nil {
		return err
	}
	for _, c := range e.caches {
		if err := c.reset(e.ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stats are the device counters summed over multiprocessors.
type Stats struct {
	Misses     uint64 // acquires that found no valid line
	Fills      uint64 // lines read from storage
	WriteBacks uint64 // lines written to storage
	Commands   uint64 // NVMe commands submitted
	Retries    uint64 // acquires restarted after a tag changed under them
	Acquires   uint64 // line acquisitions, one per coalesced group
	Offloads   uint64 // staging copies (fills and write-backs) done by the fill copier
	// Posts to the fill copier that found their ring slot still taken and
	// waited, and posts withdrawn untaken (the copier stopped; the posting
	// lanes copied them themselves).
	CopierWaited, CopierDropped uint64
	LineSize                    int    // the default cache's
	FilledBytes                 uint64 // bytes of lines read from storage, over all caches
	// Caches are the counters of each cache, the default one first; the
	// fields above sum them.
	Caches []CacheStats
	Target nvme.TargetStats
}

// CacheStats are the counters of one cache.
type CacheStats struct {
	LineSize                                 int
	Misses, Fills, WriteBacks, Commands      uint64
	Retries, Acquires, Offloads, FilledBytes uint64
}

// Stats reads the device counters.
func (e *Engine) Stats() (Stats, error) {
	var sum [StatsCounters]uint64
	var caches []CacheStats
	var filled uint64
	b := make([]byte, StatsSlots*StatsCounters*8)
	for _, c := range e.caches {
		if err := c.stats.Read(0, b); err != nil {
			return Stats{}, err
		}
		var one [StatsCounters]uint64
		for s := 0; s < StatsSlots; s++ {
			for k := 0; k < StatsCounters; k++ {
				one[k] += binary.LittleEndian.Uint64(b[(s*StatsCounters+k)*8:])
			}
		}
		for k := range one {
			sum[k] += one[k]
		}
		cs := CacheStats{LineSize: c.lineSize, Misses: one[StatMisses], Fills: one[StatFills], WriteBacks: one[StatWriteBacks],
			Commands: one[StatCommands], Retries: one[StatRetries], Acquires: one[StatAcquires], Offloads: one[StatOffloads],
			FilledBytes: one[StatFills] * uint64(c.lineSize)}
		filled += cs.FilledBytes
		caches = append(caches, cs)
	}
	var waited, dropped uint64
	if e.fillCopier != nil {
		var err error
		if waited, dropped, err = e.fillCopier.counts(); err != nil {
			return Stats{}, err
		}
	}
	return Stats{
		CopierWaited: waited, CopierDropped: dropped,
		Misses: sum[StatMisses], Fills: sum[StatFills], WriteBacks: sum[StatWriteBacks],
		Commands: sum[StatCommands], Retries: sum[StatRetries], Acquires: sum[StatAcquires], Offloads: sum[StatOffloads], LineSize: e.cfg.LineSize,
		FilledBytes: filled, Caches: caches,
		Target: e.target.Stats(),
	}, nil
}

// SetFaultHook replaces the Target's fault hook (tests).
func (e *Engine) SetFaultHook(h nvme.FaultHook) { e.target.SetFaultHook(h) }

// Close stops the Target and frees device and pinned memory. Bound arrays
// become unusable. It waits for commands running in their namespaces at
// most the engine's Timeout: past it, it returns an error wrapping
// nvme.ErrStillRunning, and the memory those commands may still move data
// into (the queues' staging slots, the mirrors, cache lines on the
// copy-engine route) is freed, with the rest, only once they return.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	arrays := e.arrays
	e.arrays = nil
	e.mu.Unlock()
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	var errs []error
	if e.stuck != nil {
		// Synchronizing or freeing would wait for the kernel, for ever.
		e.cfg.Logger.Error("gpuengine: closed with a kernel that did not stop; its device memory stays allocated until the process exits", "err", e.stuck)
		if e.target != nil {
			ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
			errs = append(errs, e.target.Shutdown(ctx))
			cancel()
		}
		return errors.Join(append(errs, fmt.Errorf("gpuengine: close: %w", e.stuck))...)
	}
	if e.stream != nil {
		errs = append(errs, e.stream.Synchronize())
	}
	if e.target != nil {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
		err := e.target.Shutdown(ctx)
		cancel()
		if err != nil {
			e.cfg.Logger.Warn("gpuengine: closed with commands still running in their namespaces; memory freed when they return", "err", err)
			e.freed = make(chan struct{})
			go func() {
				defer close(e.freed)
				<-e.target.Done()
				e.launchMu.Lock()
				defer e.launchMu.Unlock()
				if err := e.freeClosed(arrays); err != nil {
					e.cfg.Logger.Warn("gpuengine: freeing after the last command returned", "err", err)
				}
			}()
			return errors.Join(append(errs, fmt.Errorf("gpuengine: close: %w", err))...)
		}
	}
	return errors.Join(append(errs, e.freeClosed(arrays))...)
}

// freeClosed frees a closed engine's arrays and all it holds but the Target,
// which has stopped. The caller holds launchMu.
func (e *Engine) freeClosed(arrays map[*Array]struct{}) error {
	var errs []error
	if e.mirrors != nil {
		errs = append(errs, e.mirrors.close()) // before the mirrors' memory goes
	}
	for a := range arrays {
		a.freeLocked()
	}
	for _, q := range e.queues {
		errs = append(errs, q.free())
	}
	if e.copiers != nil {
		errs = append(errs, e.copiers.close())
	}
	if e.fillCopier != nil {
		errs = append(errs, e.fillCopier.close())
	}
	for _, c := range e.caches {
		errs = append(errs, c.free()...)
	}
	if e.errRec != nil {
		errs = append(errs, e.errRec.Free())
	}
	if e.passNext != nil {
		errs = append(errs, e.passNext.Free())
	}
	if e.launchBack != nil {
		errs = append(errs, e.launchBack.Free())
	}
	if e.aborter != nil {
		errs = append(errs, e.aborter.close())
	}
	if e.mod != nil {
		errs = append(errs, e.mod.Unload())
	}
	if e.stream != nil {
		errs = append(errs, e.stream.Destroy())
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx.Close())
	}
	return errors.Join(errs...)
}
