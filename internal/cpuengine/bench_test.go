package cpuengine

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/bam-go/bam/internal/engine"
)

// BenchmarkGatherAllHit: random 8-byte Gather, every line resident.
func BenchmarkGatherAllHit(b *testing.B) { benchGatherAllHit(b, 2048, 1, 8) }

// BenchmarkGatherAllHitDRAM: the same over 256 MiB, larger than the CPU's
// caches (the H1 setting).
func BenchmarkGatherAllHitDRAM(b *testing.B) { benchGatherAllHit(b, 65536, 1, 8) }

// BenchmarkGatherAllHit12B: 12-byte elements (341 to a line) striped over
// three namespaces, where finding an element's line and namespace takes
// divisions by numbers that are not powers of two.
func BenchmarkGatherAllHit12B(b *testing.B) { benchGatherAllHit(b, 2048, 3, 12) }

func benchGatherAllHit(b *testing.B, lines, nns, es int) {
	ctx := context.Background()
	r := newRig(b, nns, 4096, uint64(lines/nns+8)*8, false, Config{CacheBytes: int64(2 * lines * 4096), Parallelism: 1})
	o := object(1, nns, 4096, es, uint64(lines)*uint64(4096/es), engine.Striped, 1)
	warm := make([]byte, o.Bytes())
	if err := r.e.ReadAt(ctx, o, warm, 0); err != nil {
		b.Fatal(err)
	}
	// Rotate through index sets whose lines together exceed the CPU's
	// caches, so the figure is not a measure of lines left hot by the
	// previous iteration.
	rng := rand.New(rand.NewPCG(1, 1))
	sets := make([][]uint64, 64)
	for s := range sets {
		sets[s] = make([]uint64, 4096)
		for i := range sets[s] {
			sets[s][i] = rng.Uint64N(o.Length)
		}
	}
	dst := make([]byte, 4096*es)
	b.ResetTimer()
	k := 0
	for b.Loop() {
		k++
		if err := r.e.Gather(ctx, o, sets[k%len(sets)], dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*4096), "ns/lookup")
}
