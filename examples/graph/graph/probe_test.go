package graph

import "testing"

// TestRestSaves checks the estimate of the lines the heads past the first
// block save a bottom-up level, on the probe counts of the cases it must
// tell apart: a Kronecker level whose lines hold short lists, a level with
// a handful of lines left, and a uniform random graph's large level,
// where every list is longer than the heads and the first block settled
// most vertices.
func TestRestSaves(t *testing.T) {
	for _, c := range []struct {
		name     string
		p        headsProbe
		min, max uint64
	}{
		{"short lists only", headsProbe{found: 100, lines: 500, left: 900}, 500, 500},
		{"nothing found", headsProbe{lines: 500, linesAll: 200, left: 900, leftAll: 300}, 300, 300},
		{"few lines left", headsProbe{found: 1 << 20, lines: 13, linesAll: 13, left: 13, leftAll: 13}, 0, 13},
		// 86% of the unreached settled by two heads, two vertices left a
		// line: the rest settles a line's two with 0.86^2.
		{"uniform", headsProbe{found: 10_700_000, lines: 832_414, linesAll: 832_414, left: 1_740_000, leftAll: 1_740_000}, 580_000, 640_000},
		// Ten vertices left a line: few lines come free.
		{"crowded lines", headsProbe{found: 500, lines: 1000, linesAll: 1000, left: 10_000, leftAll: 10_000}, 0, 1},
	} {
		got := c.p.restSaves(2, 4)
		if got < c.min || got > c.max {
			t.Errorf("%s: rest saves %d lines, want %d to %d", c.name, got, c.min, c.max)
		}
	}
	bad := headsProbe{found: 10, lines: 5, linesAll: 9, left: 3, leftAll: 3}
	for _, c := range []struct {
		p       headsProbe
		in, all uint32
	}{{bad, 2, 4}, {headsProbe{lines: 5}, 0, 4}, {headsProbe{lines: 5}, 4, 4}} {
		if got := c.p.restSaves(c.in, c.all); got != 0 {
			t.Errorf("%+v with %d of %d heads: rest saves %d lines, want 0", c.p, c.in, c.all, got)
		}
	}
}

// TestTailBegins checks when BFS starts reading its depths back early: on
// the frontiers of a Kronecker graph of scale 25 (after the level that
// found 3.9 M vertices, the rest finding 18 K), never on a growing
// frontier, a level that found nothing, or before a quarter of the
// vertices is reached.
func TestTailBegins(t *testing.T) {
	const n = 1 << 25
	for _, c := range []struct {
		name                string
		prev, next, reached uint64
		want                bool
	}{
		{"kron: growing", 145_100, 12_943_499, 13_088_609, false},
		{"kron: shrinking", 12_943_499, 3_944_337, 17_032_946, true},
		{"kron: last", 18_125, 61, 17_051_132, true},
		{"nothing found", 61, 0, 17_051_193, false},
		{"half the reached still ahead", 2_000_000, 1_500_000, 2_900_000, false},
		{"too few reached", 2_000_000, 1_000, 4_000_000, false},
	} {
		if got := tailBegins(c.prev, c.next, c.reached, n); got != c.want {
			t.Errorf("%s: tail begins %v, want %v", c.name, got, c.want)
		}
	}
}
