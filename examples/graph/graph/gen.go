package graph

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Kind is a generator.
type Kind string

// Generators.
const (
	// Kronecker is the Graph500/GAP R-MAT generator with A=0.57, B=0.19,
	// C=0.19 (D=0.05) and a random permutation of the vertex ids.
	Kronecker Kind = "kron"
	// Uniform draws both endpoints of every edge uniformly (GAP's urand).
	Uniform Kind = "urand"
)

// GenOptions describe a generated graph.
type GenOptions struct {
	Kind       Kind
	Scale      int    // 2^Scale vertices, 1..40
	EdgeFactor int    // edges drawn = EdgeFactor * 2^Scale (default 16)
	Seed       uint64 // the graph is a function of (Kind, Scale, EdgeFactor, Seed)
	Workers    int
	Progress   Progress
}

// Kronecker initiator probabilities of Graph500 and GAP.
const (
	kronA = 0.57
	kronB = 0.19
	kronC = 0.19
)

// genBlock is the number of edges drawn from one random stream: blocks
// are independent, so the result does not depend on the worker count.
const genBlock = 1 << 16

// Generate draws the edge list of a synthetic graph. The edges are
// directed as drawn; Build with Symmetrize makes the usual undirected graph.
func Generate[V VertexID](ctx context.Context, o GenOptions) (*EdgeList[V], error) {
	if o.EdgeFactor == 0 {
		o.EdgeFactor = 16
	}
	if o.Scale < 1 || o.Scale > 40 {
		return nil, fmt.Errorf("graph: scale %d: want 1 to 40", o.Scale)
	}
	if o.EdgeFactor < 1 || o.EdgeFactor > 1<<10 {
		return nil, fmt.Errorf("graph: edge factor %d: want 1 to 1024", o.EdgeFactor)
	}
	n := uint64(1) << o.Scale
	var zero V
	if _, ok := any(zero).(uint32); ok && Wide(n) {
		return nil, fmt.Errorf("graph: scale %d needs 64-bit vertex ids", o.Scale)
	}
	m := n * uint64(o.EdgeFactor)
	if m > 1<<40 {
		return nil, fmt.Errorf("graph: %d edges is too many to build in memory", m)
	}
	el := &EdgeList[V]{N: n, Src: make([]V, m), Dst: make([]V, m)}
	var draw func(r *rand.Rand) (uint64, uint64)
	switch o.Kind {
	case Kronecker:
		// thresholds on 32-bit draws: quadrant (0,0) below ta, (0,1) below
		// tb, (1,0) below tc, (1,1) otherwise
		fa, fb, fc := kronA*(1<<32), (kronA+kronB)*(1<<32), (kronA+kronB+kronC)*(1<<32)
		ta := uint32(fa)
		tb := uint32(fb)
		tc := uint32(fc)
		scale := o.Scale
		draw = func(r *rand.Rand) (uint64, uint64) {
			var u, v uint64
			var bits uint64
			for d := 0; d < scale; d++ {
				if d&1 == 0 {
					bits = r.Uint64()
				} else {
					bits >>= 32
				}
				x := uint32(bits)
				u <<= 1
				v <<= 1
				switch {
				case x < ta:
				case x < tb:
					v |= 1
				case x < tc:
					u |= 1
				default:
					u |= 1
					v |= 1
				}
			}
			return u, v
		}
	case Uniform:
		draw = func(r *rand.Rand) (uint64, uint64) {
			x := r.Uint64()
			if o.Scale <= 32 {
				return (x & (n - 1)), (x >> 32) & (n - 1)
			}
			return x & (n - 1), r.Uint64() & (n - 1)
		}
	default:
		return nil, fmt.Errorf("graph: unknown generator %q (want %q or %q)", o.Kind, Kronecker, Uniform)
	}
	var perm []V
	if o.Kind == Kronecker {
		perm = permutation[V](n, o.Seed)
	}
	prog := progressOr(o.Progress)
	bar := prog.Start(fmt.Sprintf("generate %s-%d", o.Kind, o.Scale), int64(m))
	defer bar.Done()
	w := (&BuildOptions{Workers: o.Workers}).workers()
	blocks := int((m + genBlock - 1) / genBlock)
	return el, parallelRange(ctx, w, blocks, 1, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			r := rand.New(rand.NewPCG(o.Seed, uint64(b)+1))
			end := min(m, uint64(b+1)*genBlock)
			for i := uint64(b) * genBlock; i < end; i++ {
				u, v := draw(r)
				if perm != nil {
					el.Src[i], el.Dst[i] = perm[u], perm[v]
				} else {
					el.Src[i], el.Dst[i] = V(u), V(v)
				}
			}
			bar.Add(int64(end - uint64(b)*genBlock))
		}
	})
}

// permutation returns a random permutation of [0, n) drawn from seed.
func permutation[V VertexID](n, seed uint64) []V {
	p := make([]V, n)
	for i := range p {
		p[i] = V(i)
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for i := n - 1; i > 0; i-- {
		j := r.Uint64N(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}
