package gpucache

import (
	"sync/atomic"
	"unsafe"
)

// Snapshot identifies what Peek saw of a way, for Valid.
type Snapshot struct {
	g   uintptr
	gen uint32
}

// Peek finds tag among the resident lines without taking a reference: it
// returns the line's bytes when the way holding tag is VALID and not BUSY.
// A reader copies what it needs from the line and then calls Valid; only if
// Valid reports true are the copied bytes the tag's data. Otherwise (and
// when Peek reports false) the reader must take the ordinary path through
// Acquire.
//
// This is a sequence-lock style read: it costs no atomic read-modify-write,
// so a batch of hits on different lines overlaps their memory accesses.
// The bytes read between Peek and Valid may be torn when the way is being
// refilled at that moment; Valid rejects them. Readers that copy while a
// writer holding a reference changes the same element may see a mix, as
// with any unsynchronised read of memory being written. Because the copy
// itself is an unsynchronised read, callers use Peek only in builds without
// the race detector.
func (c *Cache) Peek(tag uint64) (line []byte, s Snapshot, ok bool) {
	g, found := c.lookup(c.setOf(tag), tag)
	if !found {
		return nil, Snapshot{}, false
	}
	gen := atomic.LoadUint32(c.r.gen(g))
	if atomic.LoadUint32(c.r.state(g))&(StateValid|StateBusy) != StateValid || atomic.LoadUint64(c.r.tag(g)) != tag {
		return nil, Snapshot{}, false
	}
	return c.line(g), Snapshot{g: g, gen: gen}, true
}

// Valid reports whether the bytes read from the line Peek returned for tag
// are the tag's data: the way was neither claimed for another tag nor made
// busy since Peek.
func (c *Cache) Valid(tag uint64, s Snapshot) bool {
	return atomic.LoadUint32(c.r.state(s.g))&(StateValid|StateBusy) == StateValid &&
		atomic.LoadUint32(c.r.gen(s.g)) == s.gen &&
		atomic.LoadUint64(c.r.tag(s.g)) == tag
}

// AddPeekHits counts n reads served through Peek as hits.
func (c *Cache) AddPeekHits(n uint64) {
	if n > 0 {
		c.stats.add(0, cHits, n)
	}
}

// PeekMany serves a batch of reads the way Peek and Valid serve one, with
// the memory accesses of the batch overlapped: it first touches the tag
// lines of every request's set, then the way records and data of the ways
// found, and only then copies and validates, so the cache misses of a batch
// proceed in parallel instead of one dependent chain per request. Request k
// reads es bytes at byte offs[k] of the line of tags[k] into
// dst[k*es:(k+1)*es] and sets served[k] when the copy is valid. It returns
// the number served. ways is scratch space of at least len(tags) entries.
// The same caveat as Peek applies to the copy.
func (c *Cache) PeekMany(tags, offs []uint64, es int, dst []byte, served []bool, ways []uintptr) int {
	K := uintptr(c.cfg.Ways)
	var sink uint64
	ways = ways[:len(tags)]
	// Pass 1: the tag lines of every set (independent loads).
	for k, tag := range tags {
		set := c.setOf(tag)
		ways[k] = uintptr(set)
		sink ^= atomic.LoadUint64(c.r.tag(uintptr(set) * K))
	}
	// Pass 2: find the ways (tags now cached) and touch their records and
	// data.
	for k, tag := range tags {
		g, ok := c.lookup(uint32(ways[k]), tag)
		if !ok {
			ways[k] = ^uintptr(0)
			continue
		}
		ways[k] = g
		sink ^= uint64(atomic.LoadUint32(c.r.state(g)))
		sink ^= uint64(c.data[uintptr(offs[k])+g<<c.shift])
	}
	// Pass 3: snapshot, copy and validate (everything cached).
	n := 0
	for k, tag := range tags {
		served[k] = false
		g := ways[k]
		if g == ^uintptr(0) {
			continue
		}
		gen := atomic.LoadUint32(c.r.gen(g))
		if atomic.LoadUint32(c.r.state(g))&(StateValid|StateBusy) != StateValid || atomic.LoadUint64(c.r.tag(g)) != tag {
			continue
		}
		src := c.data[g<<c.shift+uintptr(offs[k]):]
		d := dst[k*es : (k+1)*es]
		if es == 8 {
			*(*uint64)(unsafe.Pointer(&d[0])) = *(*uint64)(unsafe.Pointer(&src[0]))
		} else {
			copy(d, src[:es])
		}
		if c.Valid(tag, Snapshot{g: g, gen: gen}) {
			served[k] = true
			n++
		}
	}
	peekSink.Store(sink)
	return n
}

// peekSink keeps the touching loads of PeekMany from being optimised away.
var peekSink atomic.Uint64
