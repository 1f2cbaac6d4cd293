package cpuengine

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/engine"
)

// objState is what the engine keeps about one object it has seen: its
// descriptor, the precomputed tag math and its counters.
type objState struct {
	desc      engine.Object
	n         uint64   // namespaces
	startLine []uint64 // per namespace: first namespace line of the extent
	perLine   uint64   // elements per line
	perDiv    divider  // divides by perLine
	nsDiv     divider  // divides by n
	lineBytes uint64   // element bytes per line
	lines     uint64
	bytes     uint64 // element bytes of the object
	rr        atomic.Uint64
	st        counters
}

// tag returns the cache tag of object line line: the namespace-qualified
// line of its (first) copy. Replicated objects are cached under the copy on
// namespace 0; the backend spreads their reads and writes over the copies.
func (o *objState) tag(line uint64) uint64 {
	if o.n == 1 || o.desc.Layout == engine.Replicated {
		return o.startLine[0] + line
	}
	return o.stripedTag(line)
}

// stripedTag is tag for objects striped over several namespaces: line k
// lives on namespace k mod n. It is kept out of line so that tag, on the
// path of every element of a batch, inlines.
//
//go:noinline
func (o *objState) stripedTag(line uint64) uint64 {
	q, ns := o.nsDiv.divMod(line)
	return ns<<gpucache.TagNamespaceShift | (o.startLine[ns] + q)
}

// rangeEntry maps namespace lines [lo, hi) to the object owning them.
type rangeEntry struct {
	lo, hi uint64
	o      *objState
}

// registry finds objects by ID (batch calls) and by namespace line (the
// backend, to attribute I/O and to find the copies of replicated lines).
// Lookups are lock-free; registration copies the range table.
type registry struct {
	mu      sync.Mutex
	byID    sync.Map                       // uint64 -> *objState
	ranges  atomic.Pointer[[][]rangeEntry] // by namespace, sorted by lo
	nsLines []uint64                       // lines per namespace
	lbaSize int
	line    int
}

func newRegistry(nsLines []uint64, lbaSize, lineSize int) *registry {
	r := &registry{nsLines: nsLines, lbaSize: lbaSize, line: lineSize}
	empty := make([][]rangeEntry, len(nsLines))
	r.ranges.Store(&empty)
	return r
}

// get returns the state of o, registering it on first use.
func (r *registry) get(o *engine.Object) (*objState, error) {
	if v, ok := r.byID.Load(o.ID); ok {
		return v.(*objState), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.byID.Load(o.ID); ok {
		return v.(*objState), nil
	}
	st, err := r.newState(o)
	if err != nil {
		return nil, err
	}
	old := *r.ranges.Load()
	next := make([][]rangeEntry, len(old))
	for k := range old {
		next[k] = old[k]
	}
	for k, e := range st.desc.Extents {
		if e.Lines == 0 {
			continue
		}
		ent := rangeEntry{lo: st.startLine[k], hi: st.startLine[k] + e.Lines, o: st}
		list := slices.Clone(old[k])
		i := sort.Search(len(list), func(i int) bool { return list[i].lo >= ent.lo })
		if (i > 0 && list[i-1].hi > ent.lo) || (i < len(list) && list[i].lo < ent.hi) {
			return nil, fmt.Errorf("%w: object %q: extent on namespace %d overlaps another object's", engine.ErrInvalid, o.Name, k)
		}
		next[k] = slices.Insert(list, i, ent)
	}
	r.ranges.Store(&next)
	r.byID.Store(o.ID, st)
	return st, nil
}

func (r *registry) newState(o *engine.Object) (*objState, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.LineSize != r.line || o.LBASize != r.lbaSize {
		return nil, fmt.Errorf("%w: object %q has line/block size %d/%d, the engine %d/%d",
			engine.ErrInvalid, o.Name, o.LineSize, o.LBASize, r.line, r.lbaSize)
	}
	if len(o.Extents) != len(r.nsLines) {
		return nil, fmt.Errorf("%w: object %q has %d extents for %d namespaces", engine.ErrInvalid, o.Name, len(o.Extents), len(r.nsLines))
	}
	st := &objState{desc: *o, n: uint64(len(o.Extents)), perLine: o.ElemsPerLine(), lineBytes: o.LineBytes(),
		lines: o.Lines(), bytes: o.Bytes()}
	st.perDiv, st.nsDiv = newDivider(st.perLine), newDivider(st.n)
	st.desc.Extents = slices.Clone(o.Extents)
	lpl := uint64(o.LineSize / o.LBASize)
	st.startLine = make([]uint64, len(o.Extents))
	for k, e := range o.Extents {
		if e.Lines == 0 {
			continue
		}
		if e.StartLBA%lpl != 0 {
			return nil, fmt.Errorf("%w: object %q: extent on namespace %d starts at LBA %d, not on a line boundary", engine.ErrInvalid, o.Name, k, e.StartLBA)
		}
		start := e.StartLBA / lpl
		if start > r.nsLines[k] || e.Lines > r.nsLines[k]-start {
			return nil, fmt.Errorf("%w: object %q: extent on namespace %d (lines %d+%d) ends past the namespace's %d lines",
				engine.ErrInvalid, o.Name, k, start, e.Lines, r.nsLines[k])
		}
		if start+e.Lines > gpucache.TagLineMask {
			return nil, fmt.Errorf("%w: object %q: namespace line %d does not fit a cache tag", engine.ErrInvalid, o.Name, start+e.Lines)
		}
		st.startLine[k] = start
	}
	return st, nil
}

// lookup returns the object owning namespace line nsLine of namespace ns.
func (r *registry) lookup(ns int, nsLine uint64) *objState {
	tab := *r.ranges.Load()
	if ns >= len(tab) {
		return nil
	}
	list := tab[ns]
	i := sort.Search(len(list), func(i int) bool { return list[i].hi > nsLine })
	if i < len(list) && list[i].lo <= nsLine {
		return list[i].o
	}
	return nil
}

// remove forgets an object.
func (r *registry) remove(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.byID.LoadAndDelete(id)
	if !ok {
		return
	}
	st := v.(*objState)
	old := *r.ranges.Load()
	next := make([][]rangeEntry, len(old))
	for k := range old {
		next[k] = slices.DeleteFunc(slices.Clone(old[k]), func(e rangeEntry) bool { return e.o == st })
	}
	r.ranges.Store(&next)
}

// counters are an object's (or the engine's) statistics.
type counters struct {
	requests, elements, asked, acquires, misses atomic.Uint64
	linesRead, linesWritten, bytesRead          atomic.Uint64
	bytesWritten, flushes                       atomic.Uint64
}

func (c *counters) snapshot() engine.Stats {
	s := engine.Stats{
		Requests: c.requests.Load(), Elements: c.elements.Load(), BytesAsked: c.asked.Load(),
		Acquires: c.acquires.Load(), Misses: c.misses.Load(),
		LinesRead: c.linesRead.Load(), LinesWritten: c.linesWritten.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(), Flushes: c.flushes.Load(),
	}
	s.Misses = min(s.Misses, s.Acquires)
	s.Hits = s.Acquires - s.Misses
	return s
}
