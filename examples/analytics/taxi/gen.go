package taxi

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam"
	"golang.org/x/sync/errgroup"
)

// GenChunk is the number of rows the generator derives from one random
// stream. Rows depend only on (seed, row / GenChunk), so the output does
// not depend on the number of workers.
const GenChunk = 1 << 16

// Trip-distance distribution targets: the fractions of trips at least 30
// and at least 20 miles long in the 1.7 billion trips the BaM evaluation
// used (0.03 % and 0.47 %), and the fraction of zero-distance trips.
const (
	FracAtLeast30 = 0.0003
	FracAtLeast20 = 0.0047
	FracZero      = 0.005
)

// Time range of generated pickups: 2009-01-01 to 2023-01-01 UTC.
var (
	genStart = time.Date(2009, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	genEnd   = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	year2015 = time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	year2019 = time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
)

// GenOptions configure Generate.
type GenOptions struct {
	Rows      uint64
	Seed      uint64
	Workers   int  // default GOMAXPROCS
	Overwrite bool // replace an existing table of the same name
	// Progress, when set, is called with the rows written so far.
	Progress func(done uint64)
}

// GenerateBatch fills b with rows [start, start+b.N) of the generated
// table with the given seed. start must be a multiple of GenChunk.
func GenerateBatch(b *Batch, seed, start uint64) {
	for lo := 0; lo < b.N; lo += GenChunk {
		hi := min(b.N, lo+GenChunk)
		genChunk(b, lo, hi, seed, (start+uint64(lo))/GenChunk)
	}
}

func genChunk(b *Batch, lo, hi int, seed, chunk uint64) {
	r := rand.New(rand.NewPCG(seed, chunk*0x9e3779b97f4a7c15+1))
	vendor := b.U8(VendorID)
	pick, drop := b.U32(PickupTime), b.U32(DropoffTime)
	pass := b.I8(PassengerCount)
	dist := b.F32(TripDistance)
	pu, do := b.U16(PULocationID), b.U16(DOLocationID)
	pay := b.U8(PaymentType)
	fare, extra, mta := b.F32(FareAmount), b.F32(Extra), b.F32(MTATax)
	tip, tolls, impr := b.F32(TipAmount), b.F32(TollsAmount), b.F32(ImprovementSurcharge)
	cong, total, cab := b.F32(CongestionSurcharge), b.F32(TotalAmount), b.U8(CabType)
	cents := func(v float64) float32 { return float32(math.Round(v*100) / 100) }
	for i := lo; i < hi; i++ {
		d := genDistance(r)
		speed := 7 + 18*r.Float64() // mph
		minutes := 2 + d/speed*60 + r.ExpFloat64()*2
		p := genStart + r.Int64N(genEnd-genStart)
		pick[i] = uint32(p)
		drop[i] = uint32(p + int64(minutes*60))
		dist[i] = float32(math.Round(d*100) / 100)

		if r.Uint32()&1 == 0 {
			vendor[i] = 1
		} else {
			vendor[i] = 2
		}
		switch u := r.IntN(1000); {
		case u < 5:
			pass[i] = NullPassenger
		case u < 20:
			pass[i] = 0
		case u < 720:
			pass[i] = 1
		case u < 860:
			pass[i] = 2
		case u < 900:
			pass[i] = 3
		case u < 920:
			pass[i] = 4
		case u < 970:
			pass[i] = 5
		default:
			pass[i] = 6
		}
		pu[i] = uint16(1 + r.IntN(265))
		do[i] = uint16(1 + r.IntN(265))
		switch u := r.IntN(100); {
		case u < 65:
			pay[i] = 1
		case u < 98:
			pay[i] = 2
		case u < 99:
			pay[i] = 3
		default:
			pay[i] = 4
		}
		f := cents(2.5 + 2.5*float64(dist[i]) + 0.5*minutes)
		fare[i] = f
		var e float32
		switch u := r.IntN(20); {
		case u < 10:
			e = 0
		case u < 15:
			e = 0.5
		case u < 18:
			e = 1
		default:
			e = 2.5
		}
		extra[i] = e
		m := float32(0.5)
		if r.IntN(50) == 0 {
			m = 0
		}
		mta[i] = m
		var tp float32
		if pay[i] == 1 {
			tp = cents(float64(f) * (0.1 + 0.15*r.Float64()))
		}
		tip[i] = tp
		var tl float32
		if r.IntN(20) == 0 || (d > 15 && r.IntN(3) == 0) {
			tl = 6.55
		}
		tolls[i] = tl
		var im float32
		if p >= year2015 {
			im = 0.3
		}
		impr[i] = im
		var cg float32
		if p >= year2019 && r.IntN(10) != 0 {
			cg = 2.5
		}
		cong[i] = cg
		total[i] = cents(float64(f) + float64(e) + float64(m) + float64(tp) + float64(tl) + float64(im) + float64(cg))
		if r.IntN(100) < 85 {
			cab[i] = CabYellow
		} else {
			cab[i] = CabGreen
		}
	}
}

// genDistance draws a trip distance in miles: FracZero exactly zero,
// FracAtLeast30 in [30, 230), FracAtLeast20-FracAtLeast30 in [20, 30), and
// the rest from a log-normal body (median 1.7 mi) cut below 20.
func genDistance(r *rand.Rand) float64 {
	u := r.Float64()
	switch {
	case u < FracZero:
		return 0
	case u < FracZero+FracAtLeast30:
		return min(30+r.ExpFloat64()*8, 229.99)
	case u < FracZero+FracAtLeast20:
		// density falling linearly from 20 to 30 miles
		return 20 + 10*(1-math.Sqrt(r.Float64()))
	}
	for {
		d := math.Exp(math.Log(1.7) + 0.85*r.NormFloat64())
		if d >= 0.01 && d < 19.99 {
			return d
		}
	}
}

// Generate writes a table of opts.Rows generated rows (see GenerateBatch)
// into s as table name, in parallel, and publishes it.
func Generate(ctx context.Context, s *bam.Store, name string, opts GenOptions) (*Table, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	t, err := create(ctx, s, name, opts.Rows, opts.Overwrite)
	if err != nil {
		return nil, err
	}
	const batchRows = 4 * GenChunk
	nb := (opts.Rows + batchRows - 1) / batchRows
	var next, done atomic.Uint64
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			b := NewBatch(batchRows)
			for {
				k := next.Add(1) - 1
				if k >= nb {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				start := k * batchRows
				n := int(min(batchRows, opts.Rows-start))
				bb := b
				if n < batchRows {
					bb = NewBatch(n)
				}
				GenerateBatch(bb, opts.Seed, start)
				if err := t.writeBatch(gctx, start, bb); err != nil {
					return err
				}
				if opts.Progress != nil {
					opts.Progress(done.Add(uint64(n)))
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("taxi: generate %q: %w", name, err)
	}
	if err := t.publish(ctx, map[string]string{metaSource: "generated", "taxi.seed": strconv.FormatUint(opts.Seed, 10)}); err != nil {
		return nil, err
	}
	return t, nil
}
