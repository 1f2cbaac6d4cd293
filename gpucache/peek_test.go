package gpucache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// patternBackend fills line tag with pattern(tag, offset) bytes and ignores
// writes: a reader can check any byte it got against the tag it asked for.
type patternBackend struct{ torn func() }

func pattern(tag uint64, off int) byte {
	x := (tag+1)*0x9E3779B97F4A7C15 ^ uint64(off/8)*0xBF58476D1CE4E5B9
	return byte(x >> (8 * (off % 8)))
}

func (p patternBackend) ReadLine(_ context.Context, tag uint64, dst []byte) error {
	half := len(dst) / 2
	for i := range dst[:half] {
		dst[i] = pattern(tag, i)
	}
	if p.torn != nil {
		p.torn() // a reader may copy the half-filled line now
	}
	for i := half; i < len(dst); i++ {
		dst[i] = pattern(tag, i)
	}
	return nil
}
func (patternBackend) WriteLine(context.Context, uint64, []byte) error { return nil }
func (patternBackend) Flush(context.Context) error                     { return nil }

// TestPeekManyOracle checks PeekMany against Peek, one request at a time,
// on a quiescent cache: a request is served exactly when its tag is
// resident and its bytes lie inside the line, and served bytes are the
// line's. The geometries cover the unrolled eight-way scan, other
// associativities, and set counts that are not powers of two.
func TestPeekManyOracle(t *testing.T) {
	geoms := []Config{
		{Sets: 1, Ways: 1}, {Sets: 3, Ways: 2}, {Sets: 4, Ways: 8}, {Sets: 5, Ways: 8},
		{Sets: 2, Ways: 16}, {Sets: 7, Ways: 3}, {Sets: 1, Ways: 64},
	}
	ctx := context.Background()
	for _, cfg := range geoms {
		for _, es := range []int{1, 4, 8, 12, 16, 512} {
			t.Run(fmt.Sprintf("%dx%d/es%d", cfg.Sets, cfg.Ways, es), func(t *testing.T) {
				cfg.LineSize = 512
				c, err := New(cfg, patternBackend{})
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(cfg.Sets), uint64(es)))
				lines := uint64(cfg.Sets * cfg.Ways)
				universe := 2 * lines // about half resident at any time
				for range 3 {
					for range lines {
						tag := uint64(rng.Uint32()) % universe
						if rng.IntN(4) == 0 {
							tag |= uint64(rng.IntN(3)) << TagNamespaceShift
						}
						h, err := c.Acquire(ctx, tag, 1)
						if err != nil {
							t.Fatal(err)
						}
						h.Release()
					}
					n := 1 + rng.IntN(300)
					tags := make([]uint64, n)
					offs := make([]uint64, n)
					for k := range tags {
						tags[k] = uint64(rng.Uint32()) % universe
						switch rng.IntN(10) {
						case 0: // past the end of the line
							offs[k] = uint64(512 - es + 1 + rng.IntN(600))
						case 1:
							offs[k] = ^uint64(0) - uint64(rng.IntN(8))
						default:
							offs[k] = uint64(rng.IntN(512 - es + 1))
						}
					}
					dst := make([]byte, n*es)
					served := make([]bool, n)
					for k := range served {
						served[k] = rng.IntN(2) == 0 // stale contents must not matter
					}
					got := c.PeekMany(tags, offs, es, dst, served, make([]uintptr, n))
					want := 0
					for k, tag := range tags {
						line, _, ok := c.Peek(tag)
						ok = ok && offs[k] <= uint64(512-es)
						if served[k] != ok {
							t.Fatalf("request %d (tag %#x, offset %d): served %v, want %v", k, tag, offs[k], served[k], ok)
						}
						if !ok {
							continue
						}
						want++
						if b := dst[k*es:][:es]; !bytes.Equal(b, line[offs[k]:][:es]) {
							t.Fatalf("request %d (tag %#x, offset %d): got %x, want %x", k, tag, offs[k], b, line[offs[k]:][:es])
						}
						for i := range es {
							if dst[k*es+i] != pattern(tag, int(offs[k])+i) {
								t.Fatalf("request %d (tag %#x): byte %d is not the tag's data", k, tag, i)
							}
						}
					}
					if got != want {
						t.Fatalf("PeekMany returned %d, %d served", got, want)
					}
				}
			})
		}
	}
}

// TestPeekManyBadSizes: element sizes that no line can hold serve nothing.
func TestPeekManyBadSizes(t *testing.T) {
	c, err := New(Config{Sets: 1, Ways: 1, LineSize: 512}, patternBackend{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Acquire(context.Background(), 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	for _, es := range []int{0, -8, 513} {
		served := []bool{true}
		dst := make([]byte, max(es, 0))
		if n := c.PeekMany([]uint64{3}, []uint64{0}, es, dst, served, make([]uintptr, 1)); n != 0 || served[0] {
			t.Fatalf("element size %d: served %d (%v)", es, n, served[0])
		}
	}
	if n := c.PeekMany(nil, nil, 8, nil, nil, nil); n != 0 {
		t.Fatalf("empty batch served %d", n)
	}
}
