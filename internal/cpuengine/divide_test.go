package cpuengine

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDivider checks divider against the hardware division for divisors
// and dividends near the edges (powers of two, their neighbours, the
// largest values) and at random.
func TestDivider(t *testing.T) {
	var ds, xs []uint64
	for k := range 64 {
		p := uint64(1) << k
		ds = append(ds, p-1, p, p+1)
		xs = append(xs, p-1, p, p+1)
	}
	ds = append(ds, 3, 5, 7, 12, 341, 1365, math.MaxUint64, math.MaxUint64-1, math.MaxUint64/3)
	xs = append(xs, 0, math.MaxUint64, math.MaxUint64-1, math.MaxUint64/3)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		ds = append(ds, rng.Uint64()>>rng.IntN(64))
		xs = append(xs, rng.Uint64()>>rng.IntN(64))
	}
	for _, d := range ds {
		if d == 0 {
			continue
		}
		v := newDivider(d)
		for _, x := range xs {
			q, r := v.divMod(x)
			if q != x/d || r != x%d {
				t.Fatalf("%d / %d: got %d rem %d, want %d rem %d", x, d, q, r, x/d, x%d)
			}
		}
		for range 200 {
			x := rng.Uint64()
			if q := v.div(x); q != x/d {
				t.Fatalf("%d / %d: got %d, want %d", x, d, q, x/d)
			}
		}
	}
}

// FuzzDivider compares divider with the hardware division.
func FuzzDivider(f *testing.F) {
	f.Add(uint64(7), uint64(100))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64))
	f.Add(uint64(341), uint64(1<<40+5))
	f.Fuzz(func(t *testing.T, d, x uint64) {
		if d == 0 {
			return
		}
		if q, r := newDivider(d).divMod(x); q != x/d || r != x%d {
			t.Fatalf("%d / %d: got %d rem %d, want %d rem %d", x, d, q, r, x/d, x%d)
		}
	})
}
