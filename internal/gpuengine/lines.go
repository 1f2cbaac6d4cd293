package gpuengine

import (
	"errors"
	"fmt"

	"github.com/bam-go/bam/internal/cuda"
)

// FillRoute selects how line data moves between the Target and the cache's
// device memory (DESIGN.md §3).
type FillRoute int

const (
	// RouteAuto is the route that measured faster on the H200 host: today
	// RouteBounce for fills and write-backs alike. The copy engine costs a
	// driver call, a copy and a stream synchronisation per command: at
	// queue depth 1 it has a 4 KiB line in device memory in 33 µs, where
	// the bounce route takes 24 µs through the fill copier (184 µs for a
	// lane copying alone), and under load it moved 0.74 GB/s of 4 KiB
	// lines against 20.8 GB/s through the fill copier and 10-18 GB/s (45
	// at 64 KiB) for warps copying their line together (bench/results C1,
	// L1, Q2, 16 queues). With the default 64 queues the gap grew: 0.43
	// GB/s against 37 GB/s through the fill copier.
	RouteAuto FillRoute = iota
	// RouteBounce reads into pinned staging slots; the lanes of the warp
	// group that asked for the line copy the slot into it together with
	// 16-byte loads across PCIe, or, for a group of fewer than
	// DefaultCopyBelow lanes, hand the copy to the fill copier (see
	// Config.FillCopierWarps); write-backs go out through a slot too.
	RouteBounce
	// RouteCopyEngine names the line itself in the PRPs: the Target moves
	// the data with the GPU's copy engine before it posts the completion,
	// for fills and write-backs. Experimental, for measurement. A command
	// that outlives Config.Timeout (a stalled namespace) may still copy
	// into or out of its line later, so its way stays BUSY until the
	// queues are reset and no straggler is left (doc.go, Errors): without
	// that, a late Write copied out the data of another line that had
	// taken the way since (TestGPUWriteBackQuarantine). With the default
	// 64 queues, C1's scattered 8-byte lookups
	// on this route ended in wait timeouts (errors after Config.Timeout,
	// not hangs) although 16 Ki commands at its 0.1-0.3 M fills/s should
	// wait well under a second; the cause is not known yet. With 16 queues
	// of 1024 entries the same run completed.
	RouteCopyEngine
)

func (r FillRoute) String() string {
	switch r {
	case RouteAuto:
		return "auto"
	case RouteBounce:
		return "bounce"
	case RouteCopyEngine:
		return "copy-engine"
	}
	return fmt.Sprintf("FillRoute(%d)", int(r))
}

// ParseFillRoute parses the names String returns.
func ParseFillRoute(s string) (FillRoute, error) {
	for _, r := range []FillRoute{RouteAuto, RouteBounce, RouteCopyEngine} {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("gpuengine: fill route %q: want auto, bounce or copy-engine", s)
}

// directBelow is the descriptor value for the route: fills by groups of
// fewer lanes than this go through the copy engine, and write-backs do
// whenever it is not 0.
func (r FillRoute) directBelow() (uint64, error) {
	switch r {
	case RouteAuto, RouteBounce:
		return 0, nil
	case RouteCopyEngine:
		return 33, nil // every group: a warp has 32 lanes
	}
	return 0, fmt.Errorf("gpuengine: unknown fill route %d", int(r))
}

// copierPool is the engine's copy-engine route: a fixed set of streams,
// each with a pinned buffer. At most len(all) copies run at once; a
// transfer waits for a free copier. The pool is small and made right after
// the launch stream: the driver spreads a context's streams over
// cuda.MaxConnectionsEnv hardware queues in order of creation, and a copy
// on a stream that shares its queue with a running kernel would wait for the
// kernel, which waits for the copy.
type copierPool struct {
	free chan *copier
	all  []*copier
}

type copier struct {
	stream *cuda.Stream
	buf    *cuda.HostMem
}

// maxCopiers bounds the pool: together with the launch stream it stays
// within the 32 hardware queues of cuda.MaxConnectionsEnv.
const maxCopiers = 16

func newCopierPool(ctx *cuda.Context, copiers int, bufBytes uint64) (*copierPool, error) {
	copiers = max(1, min(copiers, maxCopiers))
	p := &copierPool{free: make(chan *copier, copiers)}
	for range copiers {
		s, err := ctx.NewStream()
		if err != nil {
			return nil, errors.Join(err, p.close())
		}
		b, err := ctx.AllocPinned(bufBytes)
		if err != nil {
			return nil, errors.Join(err, s.Destroy(), p.close())
		}
		c := &copier{stream: s, buf: b}
		p.all = append(p.all, c)
		p.free <- c
	}
	return p, nil
}

// close releases every copier; no transfer may be running.
func (p *copierPool) close() error {
	var errs []error
	for _, c := range p.all {
		errs = append(errs, c.stream.Destroy(), c.buf.Free())
	}
	p.all = nil
	return errors.Join(errs...)
}

// lineRegion is device memory (the cache's line data, or a benchmark's
// buffer) as a region of the Target's DMA space: the copy-engine route. A
// Read whose PRPs name it lands in a copier's pinned buffer and is copied
// into device memory, and the Target posts the completion only after the
// copy finished; a Write (write-back) is copied out the same way before the
// namespace sees it.
type lineRegion struct {
	base cuda.DevicePtr
	size uint64
	pool *copierPool
}

// WriteAt copies p into the region at off (a Read command's data).
func (r *lineRegion) WriteAt(p []byte, off uint64) error {
	return r.transfer(p, off, true)
}

// ReadAt copies the region at off into p (a Write command's data).
func (r *lineRegion) ReadAt(p []byte, off uint64) error {
	return r.transfer(p, off, false)
}

func (r *lineRegion) transfer(p []byte, off uint64, toDevice bool) error {
	if off > r.size || uint64(len(p)) > r.size-off {
		return fmt.Errorf("gpuengine: copy of %d bytes at offset %d beyond a %d-byte device region", len(p), off, r.size)
	}
	c := <-r.pool.free
	defer func() { r.pool.free <- c }()
	step := c.buf.Size()
	for done := uint64(0); done < uint64(len(p)); done += step {
		n := min(step, uint64(len(p))-done)
		dev := r.base.Add(off + done)
		if toDevice {
			copy(c.buf.Bytes(), p[done:done+n])
			if err := c.stream.CopyHtoD(dev, c.buf, 0, n); err != nil {
				return err
			}
			if err := c.stream.Synchronize(); err != nil {
				return err
			}
		} else {
			if err := c.stream.CopyDtoH(c.buf, 0, dev, n); err != nil {
				return err
			}
			if err := c.stream.Synchronize(); err != nil {
				return err
			}
			copy(p[done:done+n], c.buf.Bytes())
		}
	}
	return nil
}
