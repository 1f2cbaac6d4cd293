package cpuengine

import (
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// hostTier is an optional host-memory cache of clean lines, in front of slow
// namespaces (O_DIRECT files, real disks). It sits below the line cache: a
// line cache miss asks the tier before storage, and every line read from
// storage is offered to it. It holds clean copies only; a write-back drops
// the tier's copy before writing storage, and the line cache never reads a
// tag while its write-back is in flight, so the tier never serves stale data.
//
// Admission and eviction are ristretto's (TinyLFU admission, sampled LFU
// eviction); Set is asynchronous and may drop a line, which only costs a
// later storage read.
type hostTier struct {
	c                  *ristretto.Cache[uint64, []byte]
	hits, misses, puts atomic.Uint64
}

func newHostTier(bytes int64, lineSize int) (*hostTier, error) {
	lines := max(bytes/int64(lineSize), 1)
	c, err := ristretto.NewCache(&ristretto.Config[uint64, []byte]{
		NumCounters: lines * 10,
		MaxCost:     bytes,
		BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("cpuengine: host tier: %w", err)
	}
	return &hostTier{c: c}, nil
}

// get copies the tier's copy of tag into dst and reports whether it had one.
func (t *hostTier) get(tag uint64, dst []byte) bool {
	v, ok := t.c.Get(tag)
	if !ok || len(v) != len(dst) {
		t.misses.Add(1)
		return false
	}
	copy(dst, v)
	t.hits.Add(1)
	return true
}

// put offers a clean copy of a line.
func (t *hostTier) put(tag uint64, src []byte) {
	if t.c.Set(tag, append([]byte(nil), src...), int64(len(src))) {
		t.puts.Add(1)
	}
}

// del drops the copy of tag. Ristretto removes it at once and queues the
// removal behind any Set of tag still buffered, but a buffered Set applied
// after that first removal and before the queued one makes the old copy
// visible again for a moment (measured: TestEvict read a stale line in 3
// of 30 runs). So a del is complete only after sync.
func (t *hostTier) del(tag uint64) { t.c.Del(tag) }

// sync returns once every put and del made before it has been applied:
// no copy dropped by an earlier del can be served afterwards.
func (t *hostTier) sync() { t.c.Wait() }

func (t *hostTier) close() { t.c.Close() }

// TierStats counts the host-memory tier's events.
type TierStats struct {
	Enabled bool   `json:"enabled"`
	Hits    uint64 `json:"hits"`   // line cache misses served from host memory
	Misses  uint64 `json:"misses"` // line cache misses that went to storage
	Puts    uint64 `json:"puts"`   // lines offered and accepted into the buffer
}

func (t *hostTier) stats() TierStats {
	if t == nil {
		return TierStats{}
	}
	return TierStats{Enabled: true, Hits: t.hits.Load(), Misses: t.misses.Load(), Puts: t.puts.Load()}
}
