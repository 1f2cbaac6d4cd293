package gpucache_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/bam-go/bam/gpucache"
)

// memStore is a Backend over a map, for the example.
type memStore struct {
	mu    sync.Mutex
	lines map[uint64][]byte
}

func (m *memStore) ReadLine(_ context.Context, tag uint64, dst []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(dst)
	copy(dst, m.lines[tag])
	return nil
}

func (m *memStore) WriteLine(_ context.Context, tag uint64, src []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lines[tag] = append([]byte(nil), src...)
	return nil
}

func (m *memStore) Flush(context.Context) error { return nil }

func Example() {
	store := &memStore{lines: map[uint64][]byte{}}
	c, err := gpucache.New(gpucache.Config{Sets: 4, Ways: 2, LineSize: 4096}, store)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Write element 3 (uint64) of line 10 of namespace 1.
	tag, _ := gpucache.MakeTag(1, 10)
	h, err := c.Acquire(ctx, tag, 1)
	if err != nil {
		panic(err)
	}
	binary.LittleEndian.PutUint64(h.Line()[3*8:], 12345)
	h.ReleaseDirty()

	// A group of 4 readers of the same line acquires once.
	h, err = c.Acquire(ctx, tag, 4)
	if err != nil {
		panic(err)
	}
	fmt.Println("cached:", binary.LittleEndian.Uint64(h.Line()[3*8:]))
	h.Release()

	if err := c.Flush(ctx); err != nil {
		panic(err)
	}
	fmt.Println("stored:", binary.LittleEndian.Uint64(store.lines[tag][3*8:]))
	st := c.Stats()
	fmt.Printf("hits %d misses %d write-backs %d\n", st.Hits, st.Misses, st.WriteBacks)
	// Output:
	// cached: 12345
	// stored: 12345
	// hits 1 misses 1 write-backs 1
}
