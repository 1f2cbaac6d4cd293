package gpucache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// fakeBackend is an in-memory Backend that checks the cache's I/O
// invariants on every call:
//   - no ReadLine of a tag while a WriteLine of it is in flight;
//   - no two ReadLines (two fills) or two WriteLines of one tag at once;
//   - no WriteLine of a line whose bytes equal what storage holds (tests
//     change a line on every write, so that would be a write-back of an
//     unmodified line).
type fakeBackend struct {
	lineSize int

	mu         sync.Mutex
	data       map[uint64][]byte
	reading    map[uint64]int
	writing    map[uint64]int
	violations []string

	reads, writes, flushes atomic.Int64

	// Optional hooks, called outside the lock before the transfer; a
	// non-nil error fails the call without touching storage.
	beforeRead  func(ctx context.Context, tag uint64) error
	beforeWrite func(ctx context.Context, tag uint64) error
	// allowSameWrite turns off the unmodified-write check.
	allowSameWrite bool
}

func newFakeBackend(lineSize int) *fakeBackend {
	return &fakeBackend{
		lineSize: lineSize,
		data:     map[uint64][]byte{},
		reading:  map[uint64]int{},
		writing:  map[uint64]int{},
	}
}

func (b *fakeBackend) violate(format string, a ...any) {
	b.violations = append(b.violations, fmt.Sprintf(format, a...)+"\n"+string(debugStack()))
}

func (b *fakeBackend) ReadLine(ctx context.Context, tag uint64, dst []byte) error {
	if len(dst) != b.lineSize {
		return fmt.Errorf("fake: read of %d bytes", len(dst))
	}
	b.mu.Lock()
	if b.writing[tag] > 0 {
		b.violate("ReadLine(%#x) while its WriteLine is in flight", tag)
	}
	if b.reading[tag] > 0 {
		b.violate("two ReadLine(%#x) in flight: line filled twice", tag)
	}
	b.reading[tag]++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.reading[tag]--
		b.mu.Unlock()
	}()
	runtime.Gosched() // widen the in-flight window
	if b.beforeRead != nil {
		if err := b.beforeRead(ctx, tag); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.data[tag]; ok {
		copy(dst, d)
	} else {
		clear(dst)
	}
	b.reads.Add(1)
	return nil
}

func (b *fakeBackend) WriteLine(ctx context.Context, tag uint64, src []byte) error {
	if len(src) != b.lineSize {
		return fmt.Errorf("fake: write of %d bytes", len(src))
	}
	b.mu.Lock()
	if b.writing[tag] > 0 {
		b.violate("two WriteLine(%#x) in flight", tag)
	}
	if b.reading[tag] > 0 {
		b.violate("WriteLine(%#x) while its ReadLine is in flight", tag)
	}
	if old, ok := b.data[tag]; !b.allowSameWrite && ((ok && bytes.Equal(old, src)) || (!ok && allZero(src))) {
		b.violate("WriteLine(%#x) of an unmodified line", tag)
	}
	b.writing[tag]++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.writing[tag]--
		b.mu.Unlock()
	}()
	runtime.Gosched()
	if b.beforeWrite != nil {
		if err := b.beforeWrite(ctx, tag); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data[tag] = bytes.Clone(src)
	b.writes.Add(1)
	return nil
}

func (b *fakeBackend) Flush(ctx context.Context) error {
	b.flushes.Add(1)
	return ctx.Err()
}

func (b *fakeBackend) word(tag uint64, i int) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.data[tag]
	if !ok {
		return 0
	}
	return leUint64(d[8*i:])
}

func (b *fakeBackend) check(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, v := range b.violations {
		if i == 10 {
			t.Errorf("... and %d more", len(b.violations)-10)
			break
		}
		t.Error(v)
	}
}

func allZero(p []byte) bool {
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

func leUint64(p []byte) uint64 {
	_ = p[7]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}

// word returns word i of a line for atomic access: holders of one line
// share it, so tests touch its bytes only with atomics (the backend copies
// a line only while one owner holds it exclusively).
func word(line []byte, i int) *uint64 { return (*uint64)(unsafe.Pointer(&line[8*i])) }

// checkSets verifies, under each set's lock, the structural invariants of
// the metadata: among all ways of a set, the non-empty tags and write-back
// tags are pairwise distinct (a line is never resident twice, and never
// resident while its write-back is in flight), and no way is VALID with an
// empty tag.
func (c *Cache) checkSets(ctx context.Context) error {
	for set := uint32(0); set < c.cfg.Sets; set++ {
		w := c.newWaiter()
		if err := c.lockSet(ctx, set, &w); err != nil {
			return err
		}
		seen := map[uint64]uintptr{}
		var err error
		base := uintptr(set) * uintptr(c.cfg.Ways)
		for g := base; g < base+uintptr(c.cfg.Ways) && err == nil; g++ {
			for _, t := range []uint64{atomic.LoadUint64(c.r.wbTag(g)), wordTag(atomic.LoadUint64(c.r.tag(g)))} {
				if t == TagEmpty || t == TagMask {
					continue
				}
				if SetIndex(t, c.cfg.Sets) != set {
					err = fmt.Errorf("set %d way %d holds tag %#x of set %d", set, g, t, SetIndex(t, c.cfg.Sets))
				}
				if o, dup := seen[t]; dup {
					err = fmt.Errorf("set %d: tag %#x in ways %d and %d", set, t, o, g)
				}
				seen[t] = g
			}
			s := atomic.LoadUint32(c.r.state(g))
			if s&StateValid != 0 && wordTag(atomic.LoadUint64(c.r.tag(g))) == TagMask {
				err = fmt.Errorf("set %d way %d valid with the empty tag (state %#x)", set, g, s)
			}
		}
		c.unlockSet(set)
		if err != nil {
			return err
		}
	}
	return nil
}

// quiescentCheck verifies that nothing is referenced or busy and no
// write-back is in flight, once all callers have returned.
func (c *Cache) quiescentCheck() error {
	var errs []error
	for g := uintptr(0); g < uintptr(c.Lines()); g++ {
		s := atomic.LoadUint32(c.r.state(g))
		if refs(s) != 0 || s&StateBusy != 0 {
			errs = append(errs, fmt.Errorf("way %d: state %#x after all callers returned", g, s))
		}
		if wb := atomic.LoadUint64(c.r.wbTag(g)); wb != TagEmpty {
			errs = append(errs, fmt.Errorf("way %d: write-back of %#x still marked", g, wb))
		}
	}
	return errors.Join(errs...)
}

func debugStack() []byte {
	buf := make([]byte, 8192)
	return buf[:runtime.Stack(buf, false)]
}
