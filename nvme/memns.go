package nvme

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/bam-go/bam/internal/hugepages"
)

const (
	memStripeShift = 16 // bytes per lock stripe: 64 KiB
	memStripes     = 1024
)

// stripeLock is one stripe's lock, alone in its cache lines, so that
// workers reading different stripes do not share a line (packed
// RWMutexes are 24 bytes, several to a line; 128 bytes also keeps the
// adjacent-line prefetcher from pairing two locks). Measured under GPU
// load on the H200 (Q1, 16 Target workers), the reader count's atomic
// adds cost about 0.55 of the copies' CPU time both before and after the
// padding: what remains is the atomic itself and workers reading the same
// stripe. Readers that write no shared word (a sequence count per stripe)
// were measured too and left the queues' command rate unchanged, so the
// read lock stays.
type stripeLock struct {
	sync.RWMutex
	_ [128 - unsafe.Sizeof(sync.RWMutex{})]byte
}

// MemoryNamespace is a namespace held in Go memory. Concurrent commands on
// different 64 KiB stripes never contend; a command spanning stripes is
// copied stripe by stripe, so only single-block writes are atomic (as NVMe
// promises only for AWUN = one block).
//
// A strict MemoryNamespace (NewStrictMemoryNamespace) also simulates power
// loss in the style of Pebble's strict memory file system: Crash reverts
// every block written since the last Flush. The durable contents of a block
// are copied only when the block is first written after a Flush, so memory
// grows with the set of unflushed blocks, not with the namespace.
type MemoryNamespace struct {
	lbaSize int
	blocks  uint64
	data    []byte
	locks   [memStripes]stripeLock
	closed  atomic.Bool

	strict  bool
	crashMu sync.Mutex        // held for whole writes, Flush and Crash in strict mode
	durable map[uint64][]byte // block → contents at the last Flush, for blocks written since
}

// NewMemoryNamespace returns a zeroed namespace of blocks blocks of lbaSize
// bytes (512 or 4096).
func NewMemoryNamespace(lbaSize int, blocks uint64) (*MemoryNamespace, error) {
	if err := checkLBASize(lbaSize); err != nil {
		return nil, err
	}
	if blocks == 0 || blocks > (1<<46)/uint64(lbaSize) {
		return nil, fmt.Errorf("nvme: memory namespace of %d blocks: want 1..%d", blocks, (1<<46)/uint64(lbaSize))
	}
	data := make([]byte, uint64(lbaSize)*blocks)
	// Commands read and write blocks at random across the namespace: with
	// 4 KiB pages nearly every block's copy starts with a TLB miss (a
	// nested page walk under virtualisation). The advice comes before the
	// first touch, so the pages are huge from the start where the kernel
	// has them. On an H200 host (THP "madvise") the Target's 4 KiB reads
	// rose from 10.8-11.5 to 11.4-12.2 M/s (Q1, 64 Ki GPU threads, four
	// runs each, interleaved; bench/results/logs/q2-hosts-H200-20261126.txt).
	hugepages.Advise(data)
	return &MemoryNamespace{lbaSize: lbaSize, blocks: blocks, data: data}, nil
}

// NewStrictMemoryNamespace is NewMemoryNamespace with crash simulation: see
// Crash. Writes are serialised with each other, which is fine for tests.
func NewStrictMemoryNamespace(lbaSize int, blocks uint64) (*MemoryNamespace, error) {
	m, err := NewMemoryNamespace(lbaSize, blocks)
	if err != nil {
		return nil, err
	}
	m.strict = true
	m.durable = make(map[uint64][]byte)
	return m, nil
}

// LBASize implements Namespace.
func (m *MemoryNamespace) LBASize() int { return m.lbaSize }

// Blocks implements Namespace.
func (m *MemoryNamespace) Blocks() uint64 { return m.blocks }

// inlineIO marks the namespace as fast and non-blocking: the Target runs its
// commands on the worker that fetched them.
func (m *MemoryNamespace) inlineIO() bool { return !m.strict }

func (m *MemoryNamespace) check(off int64, n int) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if off < 0 || uint64(off) > uint64(len(m.data)) || uint64(n) > uint64(len(m.data))-uint64(off) {
		return fmt.Errorf("nvme: memory namespace %d+%d of %d bytes: %w", off, n, len(m.data), ErrOutOfRange)
	}
	return nil
}

// chunks calls f for each piece of [off, off+n) inside one lock stripe.
func (m *MemoryNamespace) chunks(off int64, n int, f func(stripe *sync.RWMutex, lo, hi int)) {
	pos := 0
	for pos < n {
		at := off + int64(pos)
		end := (at>>memStripeShift + 1) << memStripeShift
		c := int(end - at)
		if c > n-pos {
			c = n - pos
		}
		f(&m.locks[(at>>memStripeShift)%memStripes].RWMutex, pos, pos+c)
		pos += c
	}
}

// ReadAt implements Namespace.
func (m *MemoryNamespace) ReadAt(p []byte, off int64) (int, error) {
	if err := m.check(off, len(p)); err != nil {
		return 0, err
	}
	m.chunks(off, len(p), func(l *sync.RWMutex, lo, hi int) {
		l.RLock()
		copy(p[lo:hi], m.data[off+int64(lo):])
		l.RUnlock()
	})
	return len(p), nil
}

// WriteAt implements Namespace.
func (m *MemoryNamespace) WriteAt(p []byte, off int64) (int, error) {
	if err := m.check(off, len(p)); err != nil {
		return 0, err
	}
	m.write(off, len(p), func(dst []byte, lo int) { copy(dst, p[lo:]) })
	return len(p), nil
}

// WriteZeroes implements Zeroer.
func (m *MemoryNamespace) WriteZeroes(off, n int64) error {
	if n < 0 || n > int64(len(m.data)) {
		return fmt.Errorf("nvme: memory namespace zero %d+%d: %w", off, n, ErrOutOfRange)
	}
	if err := m.check(off, int(n)); err != nil {
		return err
	}
	m.write(off, int(n), func(dst []byte, _ int) { clear(dst) })
	return nil
}

func (m *MemoryNamespace) write(off int64, n int, fill func(dst []byte, lo int)) {
	if m.strict {
		m.crashMu.Lock()
		defer m.crashMu.Unlock()
		bs := int64(m.lbaSize)
		for b := off / bs; b < (off+int64(n)+bs-1)/bs; b++ {
			if _, ok := m.durable[uint64(b)]; !ok {
				m.durable[uint64(b)] = append([]byte(nil), m.data[b*bs:(b+1)*bs]...)
			}
		}
	}
	m.chunks(off, n, func(l *sync.RWMutex, lo, hi int) {
		l.Lock()
		fill(m.data[off+int64(lo):off+int64(hi)], lo)
		l.Unlock()
	})
}

// Flush implements Namespace: in a strict namespace it makes every write so
// far survive Crash.
func (m *MemoryNamespace) Flush() error {
	if m.closed.Load() {
		return ErrClosed
	}
	if m.strict {
		m.crashMu.Lock()
		clear(m.durable)
		m.crashMu.Unlock()
	}
	return nil
}

// Crash simulates power loss: every block written since the last Flush gets
// back its contents as of that Flush. It returns ErrNoCrashSimulation unless
// the namespace was made by NewStrictMemoryNamespace.
func (m *MemoryNamespace) Crash() error {
	if !m.strict {
		return ErrNoCrashSimulation
	}
	m.crashMu.Lock()
	defer m.crashMu.Unlock()
	bs := int64(m.lbaSize)
	for b, old := range m.durable {
		off := int64(b) * bs
		l := &m.locks[(off>>memStripeShift)%memStripes].RWMutex
		l.Lock()
		copy(m.data[off:off+bs], old)
		l.Unlock()
	}
	clear(m.durable)
	return nil
}

// Unflushed returns how many blocks a Crash would revert (0 for a namespace
// that is not strict).
func (m *MemoryNamespace) Unflushed() int {
	if !m.strict {
		return 0
	}
	m.crashMu.Lock()
	defer m.crashMu.Unlock()
	return len(m.durable)
}

// Bytes returns the namespace's backing memory, for tests and tools that
// inspect or preload contents while no commands are running.
func (m *MemoryNamespace) Bytes() []byte { return m.data }

// Close implements Namespace.
func (m *MemoryNamespace) Close() error {
	m.closed.Store(true)
	return nil
}
