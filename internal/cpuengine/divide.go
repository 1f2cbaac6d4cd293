package cpuengine

import "math/bits"

// divider divides 64-bit numbers by a fixed divisor d >= 1 with a multiply,
// an add and two shifts instead of a hardware division (Granlund and
// Montgomery, "Division by invariant integers using multiplication", 1994,
// figure 4.1). The batch paths divide every element index by the elements
// per line, and every line by the namespaces of a striped object.
type divider struct {
	d      uint64
	m      uint64 // floor(2^64 * (2^l - d) / d) + 1, l = ceil(log2 d)
	s1, s2 uint8  // min(l, 1), max(l-1, 0)
}

func newDivider(d uint64) divider {
	if d == 0 {
		panic("cpuengine: division by zero") // callers divide by validated sizes
	}
	l := uint(bits.Len64(d - 1)) // ceil(log2 d)
	var hi uint64
	if l < 64 {
		hi = 1<<l - d
	} else {
		hi = -d // 2^64 - d
	}
	q, _ := bits.Div64(hi, 0, d) // hi < d, so the quotient fits
	return divider{d: d, m: q + 1, s1: uint8(min(l, 1)), s2: uint8(max(int(l)-1, 0))}
}

// div returns x / d.
func (v divider) div(x uint64) uint64 {
	t, _ := bits.Mul64(v.m, x)
	return (t + (x-t)>>(v.s1&63)) >> (v.s2 & 63)
}

// divMod returns x / d and x % d.
func (v divider) divMod(x uint64) (uint64, uint64) {
	q := v.div(x)
	return q, x - q*v.d
}
