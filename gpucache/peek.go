package gpucache

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Snapshot identifies what Peek saw of a way, for Valid.
type Snapshot struct {
	g    uintptr
	word uint64
}

// Peek finds tag among the resident lines without taking a reference: it
// returns the line's bytes when the way holding tag is not being filled.
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
	if tag >= TagMask {
		return nil, Snapshot{}, false
	}
	g, found := c.lookup(c.setOf(tag), tag)
	if !found {
		return nil, Snapshot{}, false
	}
	w, ok := seqBegin(c.r.tag(g), tag)
	if !ok {
		return nil, Snapshot{}, false
	}
	return c.line(g), Snapshot{g: g, word: w}, true
}

// Valid reports whether the bytes read from the line Peek returned for tag
// are the tag's data: the way was neither claimed for another tag nor made
// busy since Peek.
func (c *Cache) Valid(tag uint64, s Snapshot) bool {
	return seqStill(c.r.tag(s.g), s.word)
}

// seqBegin and seqStill are the two reads of a way's tag word (its tag,
// clock bit and generation) by a reader that takes no reference, as in a
// sequence lock. The BUSY owner of a way makes its generation odd in the
// store that installs a new tag, before it writes the line, and even again
// only once the line holds the tag's complete data; a failed fill leaves it
// odd. So a copy made between two reads of the word that show the tag with
// the same even generation is the tag's data. Peek, Valid, PeekMany and
// the device's bam::array reads all follow these two functions.
//
// seqBegin returns the word when it holds tag at an even generation: the
// line may be copied.
func seqBegin(word *uint64, tag uint64) (uint64, bool) {
	w := atomic.LoadUint64(word)
	if wordTag(w) != tag || wordGen(w)&1 != 0 {
		return 0, false
	}
	return w, true
}

// seqStill reports whether the way still holds what seqBegin saw (w, up to
// its clock bit): what was copied since is its tag's data.
func seqStill(word *uint64, w uint64) bool {
	return sameLine(atomic.LoadUint64(word), w)
}

// AddPeekHits counts n reads served through Peek as hits.
func (c *Cache) AddPeekHits(n uint64) {
	if n > 0 {
		c.stats.add(0, cHits, n)
	}
}

// PeekMany serves a batch of reads the way Peek and Valid serve one, with
// the memory accesses of the batch overlapped: it first touches the tag
// lines of every request's set, then the data of the ways found, and only
// then copies and validates, so the cache misses of a batch
// proceed in parallel instead of one dependent chain per request. Request k
// reads es bytes at byte offs[k] of the line of tags[k] into
// dst[k*es:(k+1)*es] and sets served[k] when the copy is valid. It returns
// the number served. A request whose bytes do not lie within one line is
// not served. offs, served and ways (scratch space) hold at least
// len(tags) entries and dst at least len(tags)*es bytes. The same caveat
// as Peek applies to the copy.
func (c *Cache) PeekMany(tags, offs []uint64, es int, dst []byte, served []bool, ways []uintptr) int {
	n := len(tags)
	if n == 0 || es <= 0 || es > int(c.cfg.LineSize) {
		clear(served[:n])
		return 0
	}
	offs, served, ways, dst = offs[:n], served[:n], ways[:n], dst[:n*es]
	var (
		k       = uintptr(c.cfg.Ways)
		tagBase = unsafe.Add(c.r.base, c.r.tags) // tag word of way g at g*TagBytes
		data    = unsafe.Pointer(unsafe.SliceData(c.data))
		shift   = c.shift & 63
		lineMax = uint64(c.cfg.LineSize) - uint64(es) // largest offset of a whole element
		setMask = c.setMask
		setBits = c.setBits
		sets    = uint64(c.cfg.Sets)
		sink    uint64
		none    = ^uintptr(0)
	)
	// Pass 1: every request's set (arithmetic only), then the tag lines of
	// those sets in a loop of a few instructions a request, so that the
	// processor holds many of the loads in flight at once (with the hash
	// in the same loop, fewer than half as many: measured 9% of an all-hit
	// lookup over DRAM).
	for i, tag := range tags {
		// c.setOf, inlined by hand.
		h := setHash(tag)
		var set uint64
		if setMask != 0 {
			set = (h + setSkew(h>>setBits)) & setMask
		} else {
			set = (h%sets + setSkew(h/sets)%sets) % sets
		}
		ways[i] = uintptr(set) * k
	}
	last := (k - 1) * TagBytes
	if setBytes := k * TagBytes; setBytes <= cpuLineBytes && cpuLineBytes%setBytes == 0 {
		// A set's tag words lie in one processor cache line (the tag
		// array starts at a sector boundary).
		for _, base := range ways {
			sink ^= atomic.LoadUint64((*uint64)(unsafe.Add(tagBase, base*TagBytes)))
		}
	} else {
		for _, base := range ways {
			sink ^= atomic.LoadUint64((*uint64)(unsafe.Add(tagBase, base*TagBytes)))
			sink ^= atomic.LoadUint64((*uint64)(unsafe.Add(tagBase, base*TagBytes+last)))
		}
	}
	// Pass 2: find the ways (tags now cached) and note where in the data
	// region each request's bytes are: way<<shift + offset, or none.
	if k == 8 && haveFindWays8 {
		findWays8(tagBase, tags, offs, ways, shift, lineMax)
	} else {
		findWays(tagBase, k, tags, offs, ways, shift, lineMax)
	}
	// Pass 3: touch the data of the ways found. The loop is kept to a few
	// instructions a request so that the processor holds many of its
	// misses in flight at once, as in a gather from a slice.
	for _, at := range ways {
		if at == none {
			continue
		}
		sink ^= uint64(*(*byte)(unsafe.Add(data, at)))
	}
	// Pass 4: snapshot, copy and validate (everything cached). The loads
	// and their order are those of Peek and Valid.
	hits := 0
	for i, tag := range tags {
		served[i] = false
		at := ways[i]
		if at == none {
			continue
		}
		word := (*uint64)(unsafe.Add(tagBase, (at>>shift)*TagBytes))
		w, ok := seqBegin(word, tag)
		if !ok {
			continue
		}
		src := unsafe.Add(data, at)
		switch {
		case es == 8:
			*(*uint64)(unsafe.Pointer(&dst[i*8])) = *(*uint64)(src)
		case unalignedWords && es > 8 && es <= 16:
			// Two word moves, overlapping when es < 16, instead of a
			// memmove call.
			d := unsafe.Pointer(&dst[i*es])
			*(*uint64)(d) = *(*uint64)(src)
			*(*uint64)(unsafe.Add(d, es-8)) = *(*uint64)(unsafe.Add(src, es-8))
		case unalignedWords && es >= 4 && es < 8:
			d := unsafe.Pointer(&dst[i*es])
			*(*uint32)(d) = *(*uint32)(src)
			*(*uint32)(unsafe.Add(d, es-4)) = *(*uint32)(unsafe.Add(src, es-4))
		default:
			copy(dst[i*es:(i+1)*es], unsafe.Slice((*byte)(src), es))
		}
		if seqStill(word, w) {
			served[i] = true
			hits++
		}
	}
	peekSink.Store(sink)
	return hits
}

// cpuLineBytes is the processor's cache line size the passes of PeekMany
// assume (64 bytes on amd64 and arm64 alike; a larger line only makes a
// touch cover more).
const cpuLineBytes = 64

// unalignedWords is set where word loads and stores at any address are
// allowed and cheap.
const unalignedWords = runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"

// peekSink keeps the touching loads of PeekMany from being optimised away.
var peekSink atomic.Uint64
