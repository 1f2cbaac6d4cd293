package cpuengine

import "math/bits"

// peekChunk is the number of reads gpucache.PeekMany serves at a time.
const peekChunk = 256

// slowReads holds the elements of a batch that gpucache.PeekMany could not
// serve: their indices, a buffer for their values, and where each goes,
// plus PeekMany's scratch space.
type slowReads struct {
	idx    []uint64
	buf    []byte
	pos    []int
	tags   []uint64
	offs   []uint64
	served []bool
	ways   []uintptr
}

// peekReads serves the elements of part whose lines are resident through
// gpucache.PeekMany, writing them into buf. It returns the rest (indices
// and a buffer for their values, to be acquired and then put in place by
// slow.scatter) and the number served.
func (e *Engine) peekReads(st *objState, part []uint64, buf []byte, slow *slowReads) ([]uint64, []byte, uint64) {
	es := uint64(st.desc.ElemSize)
	per := st.perLine
	if cap(slow.served) < len(part) {
		slow.served = make([]bool, len(part))
	}
	if slow.ways == nil {
		slow.ways = make([]uintptr, peekChunk)
		slow.tags = make([]uint64, peekChunk)
		slow.offs = make([]uint64, peekChunk)
	}
	served := slow.served[:len(part)]
	pow2 := per&(per-1) == 0
	shift := uint(bits.TrailingZeros64(per))
	// PeekMany's passes touch, then use, a chunk's metadata and lines: a
	// chunk must stay small enough for them to remain in the CPU's caches
	// between the passes (measured: 256 beat 4096 by 1.6x; 128 to 1024
	// measure alike).
	hits := 0
	for lo := 0; lo < len(part); lo += peekChunk {
		hi := min(lo+peekChunk, len(part))
		tags, offs := slow.tags[:hi-lo], slow.offs[:hi-lo]
		for k, i := range part[lo:hi] {
			if pow2 {
				tags[k], offs[k] = st.tag(i>>shift), (i&(per-1))*es
			} else {
				line, at := st.perDiv.divMod(i)
				tags[k], offs[k] = st.tag(line), at*es
			}
		}
		hits += e.cache.PeekMany(tags, offs, int(es), buf[uint64(lo)*es:uint64(hi)*es], served[lo:hi], slow.ways)
	}
	slow.idx, slow.pos = slow.idx[:0], slow.pos[:0]
	for m, i := range part {
		if !served[m] {
			slow.idx = append(slow.idx, i)
			slow.pos = append(slow.pos, m)
		}
	}
	if need := len(slow.idx) * int(es); cap(slow.buf) < need {
		slow.buf = make([]byte, need)
	}
	slow.buf = slow.buf[:len(slow.idx)*int(es)]
	return slow.idx, slow.buf, uint64(hits)
}

// scatter copies the acquired values back to their places in buf.
func (s *slowReads) scatter(buf []byte, es uint64) {
	for k, m := range s.pos {
		copy(buf[uint64(m)*es:][:es], s.buf[uint64(k)*es:][:es])
	}
}
