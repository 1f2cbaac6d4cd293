//go:build !race

package gpucache

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPeekManyConcurrentRefill: readers serve batches through PeekMany
// while other goroutines keep evicting and refilling the same ways (the
// fills pause half way, so readers often copy a half-written line). Every
// byte a reader is told is valid must be its tag's. Without the race
// detector only: the copies are unsynchronised reads that the validation
// discards, which the detector would report.
func TestPeekManyConcurrentRefill(t *testing.T) {
	for _, cfg := range []Config{{Sets: 2, Ways: 2}, {Sets: 1, Ways: 8}, {Sets: 3, Ways: 3}} {
		cfg.LineSize = 512
		c, err := New(cfg, patternBackend{torn: runtime.Gosched})
		if err != nil {
			t.Fatal(err)
		}
		universe := uint64(cfg.Sets*cfg.Ways) * 3
		d := time.Duration(float64(300*time.Millisecond) * stressScale())
		ctx, cancel := context.WithTimeout(context.Background(), d)
		var (
			wg            sync.WaitGroup
			served, asked atomic.Int64
			failOnce      sync.Once
			failure       string
			fills         atomic.Int64
			fail          = func(msg string) { failOnce.Do(func() { failure = msg; cancel() }) }
		)
		for w := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for ctx.Err() == nil {
					h, err := c.Acquire(ctx, rng.Uint64N(universe), 1)
					if err != nil {
						if ctx.Err() == nil {
							fail("acquire: " + err.Error())
						}
						return
					}
					h.Release()
					fills.Add(1)
				}
			})
		}
		for r := range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(r), 2))
				const n = 64
				tags := make([]uint64, n)
				offs := make([]uint64, n)
				servedv := make([]bool, n)
				ways := make([]uintptr, n)
				for ctx.Err() == nil {
					es := []int{8, 4, 24, 512}[rng.IntN(4)]
					dst := make([]byte, n*es)
					for k := range tags {
						tags[k] = rng.Uint64N(universe)
						offs[k] = uint64(rng.IntN(512-es+1)) &^ 3
					}
					asked.Add(n)
					served.Add(int64(c.PeekMany(tags, offs, es, dst, servedv, ways)))
					for k, ok := range servedv {
						if !ok {
							continue
						}
						for i := range es {
							if dst[k*es+i] != pattern(tags[k], int(offs[k])+i) {
								fail("a torn or stale copy was served")
								return
							}
						}
					}
				}
			})
		}
		wg.Wait()
		cancel()
		if failure != "" {
			t.Fatalf("%dx%d: %s", cfg.Sets, cfg.Ways, failure)
		}
		if served.Load() == 0 || fills.Load() == 0 {
			t.Fatalf("%dx%d: the test did not exercise PeekMany: %d of %d served, %d acquires", cfg.Sets, cfg.Ways, served.Load(), asked.Load(), fills.Load())
		}
		t.Logf("%dx%d: %d of %d served during %d acquires", cfg.Sets, cfg.Ways, served.Load(), asked.Load(), fills.Load())
	}
}
