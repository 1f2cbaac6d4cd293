package gpucache

import "sync/atomic"

// Stats counts cache events since New (or the last Reset).
type Stats struct {
	Hits            uint64 // acquires served from a resident line (including ones that waited for a concurrent fill)
	Misses          uint64 // acquires that claimed a way and filled it from the backend
	Waits           uint64 // acquires that waited for another caller's fill or write-back
	Fills           uint64 // successful backend reads
	FillErrors      uint64 // failed backend reads
	WriteBacks      uint64 // successful backend writes (evictions, Flush, Invalidate)
	WriteBackErrors uint64 // failed backend writes; the line stayed dirty
	Evictions       uint64 // valid lines dropped to make room for another tag
	TooSmall        uint64 // acquires that failed with ErrCacheTooSmall
	BytesRead       uint64 // bytes read from the backend
	BytesWritten    uint64 // bytes written to the backend
}

// HitRatio is Hits / (Hits + Misses), or 0 before any acquire.
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

const (
	cHits = iota
	cMisses
	cWaits
	cFills
	cFillErrors
	cWriteBacks
	cWriteBackErrors
	cEvictions
	cTooSmall
	cBytesRead
	cBytesWritten
	numCounters
)

// statShards spreads the counters over padded shards, chosen by set, so that
// hits on different sets do not contend on one counter word.
const statShards = 16

type statShard struct {
	v [numCounters]atomic.Uint64
	_ [128 - numCounters*8%128]byte
}

type counters [statShards]statShard

func (c *counters) add(set uint32, which int, n uint64) {
	c[set%statShards].v[which].Add(n)
}

func (c *counters) snapshot() Stats {
	var t [numCounters]uint64
	for i := range c {
		for j := range t {
			t[j] += c[i].v[j].Load()
		}
	}
	return Stats{
		Hits: t[cHits], Misses: t[cMisses], Waits: t[cWaits], Fills: t[cFills],
		FillErrors: t[cFillErrors], WriteBacks: t[cWriteBacks], WriteBackErrors: t[cWriteBackErrors],
		Evictions: t[cEvictions], TooSmall: t[cTooSmall], BytesRead: t[cBytesRead], BytesWritten: t[cBytesWritten],
	}
}

func (c *counters) reset() {
	for i := range c {
		for j := range c[i].v {
			c[i].v[j].Store(0)
		}
	}
}
