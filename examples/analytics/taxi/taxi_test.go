package taxi

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/bam-go/bam"
)

func newStore(t testing.TB, line int) *bam.Store {
	t.Helper()
	s, err := bam.Create(context.Background(), t.TempDir(), bam.CreateOptions{
		NamespaceSize: 256 << 20, LineSize: line, LBASize: 512,
		Options: bam.Options{CacheBytes: 4 << 20, Engine: bam.EngineCPU},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// refKey is the oracle's group key: the fields by name, NULL as a flag.
type refKey struct {
	cab, pc, year int
	dist          int64
	distNull      bool
}

type refAgg struct {
	count, nn uint64
	sum       float64
}

// reference computes q the straightforward way, row by row.
func reference(q Query, b *Batch) (count uint64, value float64, groups map[refKey]refAgg) {
	groups = map[refKey]refAgg{}
	var sd, sa float64
	for i := 0; i < b.N; i++ {
		d := b.F32(TripDistance)[i]
		if q.Selective() {
			if math.IsNaN(float64(d)) || float64(d) < q.Threshold {
				continue
			}
			count++
			sd += float64(d)
			for _, c := range q.Amounts() {
				if v := b.F32(c)[i]; !math.IsNaN(float64(v)) {
					sa += float64(v)
				}
			}
			continue
		}
		var k refKey
		switch q.ID {
		case B1:
			k.cab = int(b.U8(CabType)[i])
		case B2, B3, B4:
			k.pc = int(b.I8(PassengerCount)[i])
			if q.ID != B2 {
				if p := b.U32(PickupTime)[i]; p != 0 {
					k.year = time.Unix(int64(p), 0).UTC().Year()
				}
			}
			if q.ID == B4 {
				if math.IsNaN(float64(d)) {
					k.distNull = true
				} else {
					k.dist = int64(math.Round(float64(d)))
				}
			}
		}
		a := groups[k]
		a.count++
		if v := b.F32(TotalAmount)[i]; q.ID == B2 && !math.IsNaN(float64(v)) {
			a.nn++
			a.sum += float64(v)
		}
		groups[k] = a
	}
	switch {
	case q.ID == Q0:
		value = float64(count)
	case count == 0:
		value = math.NaN()
	default:
		value = sa / sd
	}
	return count, value, groups
}

func close(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

// checkResult compares r with the oracle on b.
func checkResult(t *testing.T, q Query, b *Batch, r *Result) {
	t.Helper()
	count, value, groups := reference(q, b)
	if q.Selective() {
		if r.Count != count || !close(r.Value, value) {
			t.Errorf("%s %s (D=%g): count %d value %v, want %d %v", r.Engine, q.ID, q.Threshold, r.Count, r.Value, count, value)
		}
		return
	}
	if len(r.Groups) != len(groups) {
		t.Errorf("%s %s: %d groups, want %d", r.Engine, q.ID, len(r.Groups), len(groups))
	}
	for _, g := range r.Groups {
		var k refKey
		switch q.ID {
		case B1:
			k.cab = g.CabType
		case B2, B3, B4:
			k.pc = g.Passengers
			if q.ID != B2 {
				k.year = g.Year
			}
			if q.ID == B4 {
				k.distNull = g.Distance == DistNull
				if !k.distNull {
					k.dist = g.Distance
				}
			}
		}
		want, ok := groups[k]
		if !ok {
			t.Errorf("%s %s: unexpected group %+v", r.Engine, q.ID, g)
			continue
		}
		wantAvg := math.NaN()
		if want.nn > 0 {
			wantAvg = want.sum / float64(want.nn)
		}
		if g.Count != want.count || (q.ID == B2 && !close(g.Avg, wantAvg)) {
			t.Errorf("%s %s: group %+v: count %d avg %v, want %d %v", r.Engine, q.ID, k, g.Count, g.Avg, want.count, wantAvg)
		}
	}
}

func allQueries(thresholds ...float64) []Query {
	var qs []Query
	for _, id := range AllQueries {
		if id[0] == 'q' {
			for _, d := range thresholds {
				qs = append(qs, Query{ID: id, Threshold: d})
			}
		} else {
			qs = append(qs, Query{ID: id})
		}
	}
	return qs
}

func TestGeneratedQueries(t *testing.T) {
	ctx := context.Background()
	for _, line := range []int{512, 4096} {
		s := newStore(t, line)
		rows := uint64(3*GenChunk + 1234)
		tb, err := Generate(ctx, s, "trips", GenOptions{Rows: rows, Seed: 7, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		b, err := tb.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range allQueries(0.5, 20, 30) {
			r, err := RunCPU(ctx, tb, q, 3)
			if err != nil {
				t.Fatalf("%s: %v", q.ID, err)
			}
			checkResult(t, q, b, r)
			m, err := RunMemory(ctx, q, b, 2)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, q, b, m)
			if r.BytesNeeded != m.BytesNeeded {
				t.Errorf("%s: bytes needed %d (cpu) vs %d (memory)", q.ID, r.BytesNeeded, m.BytesNeeded)
			}
		}
	}
}

func TestGeneratorDeterministic(t *testing.T) {
	a, b := NewBatch(2*GenChunk), NewBatch(GenChunk)
	GenerateBatch(a, 3, 0)
	GenerateBatch(b, 3, GenChunk)
	for c := range NumCols {
		sz := Schema[c].Type.Size()
		if string(a.Raw[c][GenChunk*sz:]) != string(b.Raw[c]) {
			t.Errorf("column %s differs between a batch at row 0 and one at row %d", Schema[c].Name, GenChunk)
		}
	}
}

func TestGeneratorDistances(t *testing.T) {
	n := 64 * GenChunk
	if testing.Short() {
		n = 16 * GenChunk
	}
	b := NewBatch(n)
	GenerateBatch(b, 1, 0)
	var ge20, ge30, zero int
	for _, d := range b.F32(TripDistance) {
		switch {
		case d >= 30:
			ge30++
			ge20++
		case d >= 20:
			ge20++
		case d == 0:
			zero++
		}
	}
	check := func(name string, got int, frac float64) {
		want := frac * float64(n)
		if sd := math.Sqrt(want); math.Abs(float64(got)-want) > 5*sd+1 {
			t.Errorf("%s: %d of %d trips, want about %.0f", name, got, n, want)
		}
	}
	check(">= 30 mi", ge30, FracAtLeast30)
	check(">= 20 mi", ge20, FracAtLeast20)
	check("zero", zero, FracZero)
	for i, v := range b.F32(TotalAmount) {
		if !(v > 0) {
			t.Fatalf("row %d: total %v", i, v)
		}
	}
}

func TestQueryValidate(t *testing.T) {
	for _, d := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := (Query{ID: Q1, Threshold: d}).Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("threshold %v: %v, want ErrInvalid", d, err)
		}
	}
	if _, err := ParseQueryID("q9"); !errors.Is(err, ErrInvalid) {
		t.Errorf("q9: %v", err)
	}
	if id, err := ParseQueryID("B4"); err != nil || id != B4 {
		t.Errorf("B4: %v %v", id, err)
	}
}
