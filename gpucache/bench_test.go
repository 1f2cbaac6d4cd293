package gpucache

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
)

// nullBackend serves lines without storage, so benchmarks measure the
// cache's own cost.
type nullBackend struct{}

func (nullBackend) ReadLine(_ context.Context, tag uint64, dst []byte) error {
	dst[0] = byte(tag)
	return nil
}
func (nullBackend) WriteLine(context.Context, uint64, []byte) error { return nil }
func (nullBackend) Flush(context.Context) error                     { return nil }

func benchCache(b *testing.B, cfg Config) *Cache {
	b.Helper()
	if cfg.LineSize == 0 {
		cfg.LineSize = 4096
	}
	c, err := New(cfg, nullBackend{})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkAcquireHit measures acquire+release of resident lines from all
// goroutines (GOMAXPROCS of them), with groups of 1 and of 32 references.
func BenchmarkAcquireHit(b *testing.B) {
	for _, count := range []uint32{1, 32} {
		b.Run("count="+strconv.Itoa(int(count)), func(b *testing.B) {
			c := benchCache(b, Config{Sets: 256, Ways: 8})
			ctx := context.Background()
			const resident = 1024 // half the cache: every acquire hits
			for tag := range uint64(resident) {
				h, err := c.Acquire(ctx, tag, 1)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				x := rand.Uint64()
				for pb.Next() {
					x = x*6364136223846793005 + 1442695040888963407
					h, err := c.Acquire(ctx, (x>>33)%resident, count)
					if err != nil {
						b.Error(err)
						return
					}
					h.Release()
				}
			})
			b.StopTimer()
			if st := c.Stats(); st.Misses != resident {
				b.Errorf("misses %d during a hit-only benchmark", st.Misses-resident)
			}
		})
	}
}

// randomMiss runs a read workload over 8x the cache's lines: Zipf (s=1.1,
// the skew of graph and embedding lookups) and uniform. It reports the hit
// ratio next to the time per acquire.
func randomMiss(b *testing.B, p Policy) {
	for _, dist := range []string{"zipf", "uniform"} {
		b.Run(dist, func(b *testing.B) {
			cfg := Config{Sets: 64, Ways: 8, Policy: p}
			c := benchCache(b, cfg)
			ctx := context.Background()
			keys := uint64(cfg.Sets*cfg.Ways) * 8
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				zipf := rand.NewZipf(rng, 1.1, 1, keys-1)
				for pb.Next() {
					var k uint64
					if dist == "zipf" {
						// Scatter ranks over the key space so hot lines do not
						// share sets.
						k = zipf.Uint64() * 0x9E3779B97F4A7C15 % keys
					} else {
						k = rng.Uint64N(keys)
					}
					h, err := c.Acquire(ctx, k, 1)
					if err != nil {
						b.Error(err)
						return
					}
					h.Release()
				}
			})
			st := c.Stats()
			b.ReportMetric(st.HitRatio(), "hit-ratio")
			b.ReportMetric(float64(st.Evictions)/float64(b.N), "evictions/op")
		})
	}
}

func BenchmarkRandomMissClock(b *testing.B)      { randomMiss(b, PolicyClock) }
func BenchmarkRandomMissRoundRobin(b *testing.B) { randomMiss(b, PolicyRoundRobin) }
