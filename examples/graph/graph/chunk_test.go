package graph

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// TestChunkFirst checks the chunk table of the GPU's first CC pass
// against a binary search, on offsets with empty lists anywhere (at chunk
// boundaries, at the start, after the last edge), long lists spanning many
// chunks, and no edges at all; every vertex with a list must fall in
// exactly the chunk holding its first edge.
func TestChunkFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		n := rng.IntN(200)
		offsets := make([]uint64, n+1)
		for v := 1; v <= n; v++ {
			d := uint64(0)
			switch rng.IntN(4) {
			case 0: // empty
			case 1:
				d = uint64(rng.IntN(100))
			default:
				d = uint64(rng.IntN(8))
			}
			offsets[v] = offsets[v-1] + d
		}
		chunk := uint64(1 + rng.IntN(40))
		first := chunkFirst(offsets, chunk)
		m := offsets[n]
		if want := (m + chunk - 1) / chunk; uint64(len(first)) != want+1 {
			t.Fatalf("round %d: %d entries for %d edges in chunks of %d", round, len(first), m, chunk)
		}
		for c := range first {
			bound := min(uint64(c)*chunk, m)
			want := uint64(sort.Search(n, func(v int) bool { return offsets[v] >= bound }))
			if first[c] != want {
				t.Fatalf("round %d: chunk %d of %d edges: first vertex %d, want %d", round, c, chunk, first[c], want)
			}
		}
		for v := 0; v < n; v++ {
			if offsets[v] == offsets[v+1] {
				continue
			}
			c := offsets[v] / chunk
			if uint64(v) < first[c] || uint64(v) >= first[c+1] {
				t.Fatalf("round %d: vertex %d (first edge %d) not in chunk %d's vertices [%d, %d)", round, v, offsets[v], c, first[c], first[c+1])
			}
		}
	}
}
