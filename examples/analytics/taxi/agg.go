package taxi

import "math/bits"

// aggTable is an open-addressing hash table from group key to aggregate,
// for one goroutine. Keys never equal EmptyKey.
type aggTable struct {
	keys []uint64
	vals []Agg
	n    int
}

func newAggTable() *aggTable {
	t := &aggTable{}
	t.init(64)
	return t
}

func (t *aggTable) init(capacity int) {
	t.keys = make([]uint64, capacity)
	for i := range t.keys {
		t.keys[i] = EmptyKey
	}
	t.vals = make([]Agg, capacity)
	t.n = 0
}

func hashKey(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

// at returns the aggregate of key k, inserting it.
func (t *aggTable) at(k uint64) *Agg {
	mask := uint64(len(t.keys) - 1)
	for i := hashKey(k) & mask; ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return &t.vals[i]
		case EmptyKey:
			if 4*(t.n+1) > 3*len(t.keys) {
				t.grow()
				return t.at(k)
			}
			t.keys[i] = k
			t.n++
			return &t.vals[i]
		}
	}
}

func (t *aggTable) grow() {
	keys, vals := t.keys, t.vals
	t.init(1 << bits.Len(uint(2*len(keys)-1)))
	for i, k := range keys {
		if k != EmptyKey {
			*t.at(k) = vals[i]
		}
	}
}

// mergeInto adds the table's aggregates to m.
func (t *aggTable) mergeInto(m map[uint64]Agg) {
	for i, k := range t.keys {
		if k == EmptyKey {
			continue
		}
		a := m[k]
		v := t.vals[i]
		a.Count += v.Count
		a.NonNull += v.NonNull
		a.Sum += v.Sum
		m[k] = a
	}
}
