package taxi

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam"
	"golang.org/x/sync/errgroup"
)

// scanChunk is the number of rows a worker of the CPU engines takes at a
// time.
const scanChunk = 1 << 18

// partial is a worker's share of a query.
type partial struct {
	count  uint64
	sd, sa float64
	groups *aggTable
}

func (p *partial) add(o *partial) {
	p.count += o.count
	p.sd += o.sd
	p.sa += o.sa
}

// columns are one chunk's views of the columns a query reads; nil for
// columns it does not read.
type columns struct {
	cab    []uint8
	pc     []int8
	pickup []uint32
	dist   []float32
	total  []float32
}

// aggregate adds rows of cols to t for a grouped query.
func aggregate(t *aggTable, mask uint8, avg bool, cols columns, n int) {
	var cab uint8
	var pc int8
	var pickup uint32
	var dist float32
	var last uint64 = EmptyKey
	var cur *Agg
	for i := range n {
		if cols.cab != nil {
			cab = cols.cab[i]
		}
		if cols.pc != nil {
			pc = cols.pc[i]
		}
		if cols.pickup != nil {
			pickup = cols.pickup[i]
		}
		if cols.dist != nil {
			dist = cols.dist[i]
		}
		k := groupKey(mask, cab, pc, pickup, dist)
		if k != last {
			cur = t.at(k)
			last = k
		}
		cur.Count++
		if avg {
			if v := cols.total[i]; v == v {
				cur.NonNull++
				cur.Sum += float64(v)
			}
		}
	}
}

// runChunks runs fn over [0, rows) in chunks of scanChunk rows on workers
// goroutines, each with its own partial, and returns the partials.
func runChunks(ctx context.Context, rows uint64, workers int, fn func(ctx context.Context, p *partial, lo, hi uint64) error) ([]*partial, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	nchunks := (rows + scanChunk - 1) / scanChunk
	workers = int(max(1, min(uint64(workers), nchunks)))
	parts := make([]*partial, workers)
	var next atomic.Uint64
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		p := &partial{groups: newAggTable()}
		parts[w] = p
		g.Go(func() error {
			for {
				k := next.Add(1) - 1
				if k >= nchunks {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				lo := k * scanChunk
				if err := fn(gctx, p, lo, min(rows, lo+scanChunk)); err != nil {
					return err
				}
			}
		})
	}
	return parts, g.Wait()
}

func finish(q Query, parts []*partial, r *Result) {
	var tot partial
	m := map[uint64]Agg{}
	for _, p := range parts {
		tot.add(p)
		p.groups.mergeInto(m)
	}
	if q.Selective() {
		r.Count, r.SumDistance, r.SumAmount = tot.count, tot.sd, tot.sa
		r.finishSelective(q)
	} else {
		r.Groups = groupsFromMap(q, m)
	}
}

// RunMemory runs q over a batch in host memory with workers goroutines
// (default GOMAXPROCS): the parallel Go columnar scan baseline. Columns
// the query does not read may be empty in b.
func RunMemory(ctx context.Context, q Query, b *Batch, workers int) (*Result, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	for _, c := range q.Columns() {
		if len(b.Raw[c]) != b.N*Schema[c].Type.Size() {
			return nil, fmt.Errorf("%w: batch lacks column %s", ErrInvalid, Schema[c].Name)
		}
	}
	r := &Result{Query: q.ID, Text: q.String(), Threshold: q.Threshold, Engine: "memory"}
	start := time.Now()
	mask, avg := q.groupMask()
	amounts := q.Amounts()
	D := threshold32(q.Threshold)
	dist := b.F32(TripDistance)
	am := make([][]float32, len(amounts))
	for k, c := range amounts {
		am[k] = b.F32(c)
	}
	parts, err := runChunks(ctx, uint64(b.N), workers, func(_ context.Context, p *partial, lo, hi uint64) error {
		if q.Selective() {
			var vals [5]float32
			for i := lo; i < hi; i++ {
				d := dist[i]
				if !(d >= D) {
					continue
				}
				p.count++
				p.sd += float64(d)
				for k := range am {
					vals[k] = am[k][i]
				}
				p.sa += rowAmount(vals[:len(am)])
			}
			return nil
		}
		aggregate(p.groups, mask, avg, chunkColumns(b, q, lo, hi), int(hi-lo))
		return nil
	})
	if err != nil {
		return nil, err
	}
	finish(q, parts, r)
	r.Seconds = time.Since(start).Seconds()
	r.BytesNeeded = bytesNeeded(q, uint64(b.N), r.Count)
	r.BytesRead = r.BytesNeeded
	return r, nil
}

func chunkColumns(b *Batch, q Query, lo, hi uint64) columns {
	var c columns
	for _, col := range q.Columns() {
		switch col {
		case CabType:
			c.cab = b.U8(CabType)[lo:hi]
		case PassengerCount:
			c.pc = b.I8(PassengerCount)[lo:hi]
		case PickupTime:
			c.pickup = b.U32(PickupTime)[lo:hi]
		case TripDistance:
			c.dist = b.F32(TripDistance)[lo:hi]
		case TotalAmount:
			c.total = b.F32(TotalAmount)[lo:hi]
		}
	}
	return c
}

// threshold32 is the smallest float32 d with float64(d) >= D: comparing a
// float32 distance with it equals comparing in float64 with D.
func threshold32(D float64) float32 {
	t := float32(D)
	if float64(t) < D {
		t = math.Nextafter32(t, float32(math.Inf(1)))
	}
	return t
}

// RunCPU runs q over the table through the store's CPU engine: workers
// read the scanned columns in ranges and, for Q1–Q5, gather the dependent
// columns of matching rows only. BytesRead is what the engine read from
// storage for the query's columns while it ran.
func RunCPU(ctx context.Context, t *Table, q Query, workers int) (*Result, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	r := &Result{Query: q.ID, Text: q.String(), Threshold: q.Threshold, Engine: "cpu"}
	cols := q.Columns()
	before := make([]bam.DataStats, len(cols))
	for k, c := range cols {
		before[k] = t.cols[c].Stats()
	}
	start := time.Now()
	mask, avg := q.groupMask()
	amounts := q.Amounts()
	D := threshold32(q.Threshold)
	pool := sync.Pool{New: func() any { return NewBatch(scanChunk) }}
	parts, err := runChunks(ctx, t.Rows, workers, func(ctx context.Context, p *partial, lo, hi uint64) error {
		b := pool.Get().(*Batch)
		defer pool.Put(b)
		n := int(hi - lo)
		if q.Selective() {
			dist := b.F32(TripDistance)[:n]
			if err := t.readColumn(ctx, TripDistance, lo, b.Raw[TripDistance][:4*n]); err != nil {
				return err
			}
			var idx []uint64
			var hit []int
			for i, d := range dist {
				if d >= D {
					idx = append(idx, lo+uint64(i))
					hit = append(hit, i)
				}
			}
			if len(idx) == 0 {
				return nil
			}
			vals := make([][]float32, len(amounts))
			for k, c := range amounts {
				vals[k] = make([]float32, len(idx))
				if err := t.cols[c].Gather(ctx, idx, bytesOf(vals[k])); err != nil {
					return fmt.Errorf("taxi: table %q: gather %s: %w", t.Name, Schema[c].Name, err)
				}
			}
			var row [5]float32
			for j, i := range hit {
				p.count++
				p.sd += float64(dist[i])
				for k := range vals {
					row[k] = vals[k][j]
				}
				p.sa += rowAmount(row[:len(vals)])
			}
			return nil
		}
		for _, c := range cols {
			sz := Schema[c].Type.Size()
			if err := t.readColumn(ctx, c, lo, b.Raw[c][:n*sz]); err != nil {
				return err
			}
		}
		aggregate(p.groups, mask, avg, chunkColumns(b, q, 0, uint64(n)), n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	finish(q, parts, r)
	r.Seconds = time.Since(start).Seconds()
	r.BytesNeeded = bytesNeeded(q, t.Rows, r.Count)
	for k, c := range cols {
		r.BytesRead += t.cols[c].Stats().BytesRead - before[k].BytesRead
	}
	return r, nil
}
