package vqbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// BenchmarkID is the benchmark's id in result files.
const BenchmarkID = "Q1-cpu"

const blockSize = 4096

// Params configures Run. Zero fields take the defaults in the comments.
type Params struct {
	Duration   time.Duration // measuring time per point and queue kind; default 1s
	Queues     int           // queue pairs, submitters spread over them; default 1
	Depth      int           // entries per queue (power of two); default 256
	Submitters []int         // submitter goroutine counts; default 1, 4, 16, 64, 256, 1024
	Repeats    int           // runs per point, median kept; default 1
	Workers    int           // Target worker goroutines; default the Target's
	Blocks     uint64        // namespace size in 4 KiB blocks; default 16384 (64 MiB)
	Spin       int           // vq.Options.Spin for both queue kinds; 0 = vq's default
	Yield      int           // vq.Options.Yield for both queue kinds; 0 = vq's default
}

func (p *Params) defaults() error {
	if p.Duration <= 0 {
		p.Duration = time.Second
	}
	if p.Queues <= 0 {
		p.Queues = 1
	}
	if p.Depth == 0 {
		p.Depth = 256
	}
	if p.Depth < 2 || p.Depth > 65536 || p.Depth&(p.Depth-1) != 0 {
		return fmt.Errorf("vqbench: depth %d: want a power of two in 2..65536", p.Depth)
	}
	if p.Queues > 65535 {
		return fmt.Errorf("vqbench: %d queues: at most 65535", p.Queues)
	}
	if len(p.Submitters) == 0 {
		p.Submitters = []int{1, 4, 16, 64, 256, 1024}
	}
	for _, n := range p.Submitters {
		if n <= 0 {
			return fmt.Errorf("vqbench: submitter count %d: want > 0", n)
		}
	}
	if p.Repeats <= 0 {
		p.Repeats = 1
	}
	if p.Blocks == 0 {
		p.Blocks = 16384
	}
	return nil
}

// Point is the measurement at one submitter count.
type Point struct {
	Submitters int
	VQ, Locked float64 // IOPS
	VQStats    vq.Stats
}

// Run measures every submitter count and returns the result: one figure per
// count (vq IOPS against the single-lock queue's) and the Target's own rate
// with the best vq figure as a fraction of it.
func Run(ctx context.Context, p Params) (*bench.Result, error) {
	res, _, err := RunPoints(ctx, p)
	return res, err
}

// RunPoints is Run that also returns the raw points.
func RunPoints(ctx context.Context, p Params) (*bench.Result, []Point, error) {
	if err := p.defaults(); err != nil {
		return nil, nil, err
	}
	r := bench.NewResult(BenchmarkID, "cpu")
	r.Params["block_size"] = blockSize
	r.Params["queues"] = p.Queues
	r.Params["depth"] = p.Depth
	r.Params["duration_s"] = p.Duration.Seconds()
	r.Params["repeats"] = p.Repeats
	r.Params["submitters"] = p.Submitters
	r.Params["gomaxprocs"] = runtime.GOMAXPROCS(0)
	r.Params["namespace"] = "memory"
	r.Params["spin"] = p.Spin
	r.Params["yield"] = p.Yield

	var points []Point
	best := 0.0
	for _, n := range p.Submitters {
		pt := Point{Submitters: n}
		var vqs, lks []float64
		for range p.Repeats {
			v, st, err := measure(ctx, p, n, false)
			if err != nil {
				return nil, nil, err
			}
			l, _, err := measure(ctx, p, n, true)
			if err != nil {
				return nil, nil, err
			}
			vqs, lks = append(vqs, v), append(lks, l)
			pt.VQStats = st
		}
		pt.VQ, pt.Locked = median(vqs), median(lks)
		best = max(best, pt.VQ)
		points = append(points, pt)
		r.Add(fmt.Sprintf("read_iops_4k_%d_submitters", n), pt.VQ, "IOPS", "single-lock queue", pt.Locked, false, "")
	}
	var ceil []float64
	for range p.Repeats {
		v, err := nvme.MeasureTargetIOPS(ctx, nvme.IOPSOptions{
			Submitters: p.Queues, QueueDepth: p.Depth - 1, Duration: p.Duration, Workers: p.Workers,
			Blocks: p.Blocks, Kick: true,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("vqbench: target ceiling: %w", err)
		}
		ceil = append(ceil, v)
	}
	target := median(ceil)
	r.Add("read_iops_4k_best_vs_target", best, "IOPS", "Target's own 4 KiB read IOPS (one simple client per queue)", target, false, "")
	return r, points, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// pattern is the first word of block lba in the namespace.
func pattern(lba uint64) uint64 { return lba*0x9e3779b97f4a7c15 | 1 }

// measure runs n submitters doing random 4 KiB reads for p.Duration on a
// fresh Target and returns completions per second.
func measure(ctx context.Context, p Params, n int, locked bool) (float64, vq.Stats, error) {
	ns, err := nvme.NewMemoryNamespace(blockSize, p.Blocks)
	if err != nil {
		return 0, vq.Stats{}, err
	}
	defer ns.Close()
	data := ns.Bytes()
	for lba := uint64(0); lba < p.Blocks; lba++ {
		binary.LittleEndian.PutUint64(data[lba*blockSize:], pattern(lba))
	}
	dma := nvme.NewDMASpace()
	tg, err := nvme.NewTarget(nvme.TargetConfig{Workers: p.Workers}, dma)
	if err != nil {
		return 0, vq.Stats{}, err
	}
	defer tg.Close()
	if err := tg.AddNamespace(1, ns); err != nil {
		return 0, vq.Stats{}, err
	}
	subs := make([]vq.Submitter, p.Queues)
	var qps []*vq.QueuePair
	for i := range subs {
		mem, err := nvme.NewQueuePairMemory(uint16(i+1), uint32(p.Depth))
		if err != nil {
			return 0, vq.Stats{}, err
		}
		if err := tg.AddQueuePair(mem); err != nil {
			return 0, vq.Stats{}, err
		}
		qid := mem.ID
		opts := vq.Options{Notify: func() { tg.Kick(qid) }, Spin: p.Spin, Yield: p.Yield}
		if locked {
			subs[i], err = vq.NewLocked(mem, opts)
		} else {
			var q *vq.QueuePair
			q, err = vq.New(mem, opts)
			qps = append(qps, q)
			subs[i] = q
		}
		if err != nil {
			return 0, vq.Stats{}, err
		}
	}
	m, err := vq.NewMapper(subs...)
	if err != nil {
		return 0, vq.Stats{}, err
	}
	raw := make([]byte, (n+1)*blockSize)
	off := (blockSize - int(uintptr(unsafe.Pointer(&raw[0]))%blockSize)) % blockSize
	bufs := raw[off : off+n*blockSize]
	base, err := dma.RegisterHost(bufs)
	if err != nil {
		return 0, vq.Stats{}, err
	}
	if err := tg.Start(ctx); err != nil {
		return 0, vq.Stats{}, err
	}

	var (
		stop     atomic.Bool
		counting atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		total    atomic.Uint64
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		stop.Store(true)
	}
	for g := range n {
		wg.Go(func() {
			s := m.Queue(uint64(g))
			buf := bufs[g*blockSize : (g+1)*blockSize]
			addr := base + uint64(g*blockSize)
			x := uint64(g)*0x9e3779b97f4a7c15 + 1
			var count, lastLBA uint64
			have := false
			for !stop.Load() {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				lba := x % p.Blocks
				cmd := nvme.ReadWrite(nvme.OpRead, 1, lba, 1, addr, 0)
				if _, err := s.Submit(ctx, &cmd); err != nil {
					fail(fmt.Errorf("vqbench: submitter %d: %w", g, err))
					return
				}
				if counting.Load() {
					count++
				}
				lastLBA, have = lba, true
			}
			if have {
				if got := binary.LittleEndian.Uint64(buf); got != pattern(lastLBA) {
					fail(fmt.Errorf("vqbench: submitter %d: read of lba %d returned %#x, want %#x", g, lastLBA, got, pattern(lastLBA)))
				}
			}
			total.Add(count)
		})
	}
	// Warm up, then count for the duration.
	warm := min(p.Duration/5, 200*time.Millisecond)
	sleepCtx(ctx, warm)
	counting.Store(true)
	start := time.Now()
	sleepCtx(ctx, p.Duration)
	counting.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return 0, vq.Stats{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, vq.Stats{}, err
	}
	var st vq.Stats
	for _, q := range qps {
		s := q.Stats()
		st.Submitted += s.Submitted
		st.Completed += s.Completed
		st.SQDoorbells += s.SQDoorbells
		st.CQDoorbells += s.CQDoorbells
	}
	return float64(total.Load()) / elapsed.Seconds(), st, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
