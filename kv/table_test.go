package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv/wal"
)

type val struct {
	A uint64
	B [3]uint32
}

func newStore(t testing.TB, dir string, line int) *bam.Store {
	t.Helper()
	s, err := bam.Create(context.Background(), dir, bam.CreateOptions{Namespaces: 2, NamespaceSize: 32 << 20,
		LineSize: line, CatalogSize: 64 << 10, Options: bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openStore(t testing.TB, dir string) *bam.Store {
	t.Helper()
	s, err := bam.Open(context.Background(), dir, bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mkval(k uint64, gen int) val {
	return val{A: k*31 + uint64(gen), B: [3]uint32{uint32(k), uint32(gen), 7}}
}

func checkAgainst(t *testing.T, tb *Table[uint64, val], want map[uint64]val) {
	t.Helper()
	ctx := context.Background()
	if got := tb.Len(); got != uint64(len(want)) {
		t.Fatalf("Len = %d, want %d", got, len(want))
	}
	seen := map[uint64]bool{}
	var err error
	for k, v := range tb.All(ctx, &err) {
		if seen[k] {
			t.Fatalf("All yielded %d twice", k)
		}
		seen[k] = true
		if w, ok := want[k]; !ok || w != v {
			t.Fatalf("All: %d=%v, want %v (present %v)", k, v, w, ok)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Fatalf("All yielded %d entries, want %d", len(seen), len(want))
	}
	keys := make([]uint64, 0, len(want)+10)
	for k := range want {
		keys = append(keys, k)
	}
	for i := range 10 {
		keys = append(keys, 1<<60+uint64(i))
	}
	vals := make([]val, len(keys))
	found := make([]bool, len(keys))
	if err := tb.GetMany(ctx, keys, vals, found); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		w, ok := want[k]
		if found[i] != ok || (ok && vals[i] != w) {
			t.Fatalf("GetMany %d: %v %v, want %v %v", k, vals[i], found[i], w, ok)
		}
	}
	if err := tb.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPropertyAgainstMap runs random operation sequences against a Go map,
// with rehashes (small capacity), checkpoints (small CheckpointBytes) and
// reopens in between.
func TestPropertyAgainstMap(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	opts := &Options{Capacity: 16, CheckpointBytes: 16 << 10}
	tb, err := Create[uint64, val](ctx, s, "t", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]val{}
	rng := rand.New(rand.NewPCG(1, 2))
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		for step := range 300 {
			k := rng.Uint64N(400)
			switch r := rng.IntN(10); {
			case r < 4:
				v := mkval(k, step)
				if err := tb.Put(ctx, k, v); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			case r < 6:
				if err := tb.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
				delete(want, k)
			case r < 8:
				n := rng.IntN(40)
				ks := make([]uint64, n)
				vs := make([]val, n)
				for i := range ks {
					ks[i] = rng.Uint64N(400)
					vs[i] = mkval(ks[i], step+i)
				}
				if err := tb.PutMany(ctx, ks, vs); err != nil {
					t.Fatal(err)
				}
				for i := range ks {
					want[ks[i]] = vs[i]
				}
			case r < 9:
				ks := []uint64{k, k + 1, k + 2}
				if err := tb.DeleteMany(ctx, ks); err != nil {
					t.Fatal(err)
				}
				for _, k := range ks {
					delete(want, k)
				}
			default:
				v, ok, err := tb.Get(ctx, k)
				w, wok := want[k]
				if err != nil || ok != wok || (ok && v != w) {
					t.Fatalf("Get %d = %v %v %v, want %v %v", k, v, ok, err, w, wok)
				}
				if has, _ := tb.Has(ctx, k); has != wok {
					t.Fatalf("Has %d = %v", k, has)
				}
			}
		}
		checkAgainst(t, tb, want)
		switch round % 3 {
		case 0: // reopen without checkpoint: replay
			if err := tb.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			tb.c.log.Close(ctx) // simulate a crash: no checkpoint
			tb.c.closed = true
		case 1:
			if err := tb.Close(ctx); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := tb.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			tb.c.log.Close(ctx)
			tb.c.closed = true
		}
		s.Close()
		s = openStore(t, dir)
		if tb, err = Open[uint64, val](ctx, s, "t", opts); err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, tb, want)
	}
	if info := tb.Info(); info.Stats.Rehashes == 0 && info.Buckets < 4 {
		t.Fatalf("table never grew: %+v", info)
	}
	tb.Close(ctx)
	s.Close()
}

// TestConcurrentReadersWriters: writers own disjoint key ranges, so each
// reader can check the values it sees against what its writer could have
// written; at the end the table equals the writers' maps.
func TestConcurrentReadersWriters(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, t.TempDir(), 4096)
	defer s.Close()
	tb, err := Create[uint64, uint64](ctx, s, "c", &Options{Capacity: 64, SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 4, 150
	var wg sync.WaitGroup
	finals := make([]map[uint64]uint64, writers)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := map[uint64]uint64{}
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range perWriter {
				k := uint64(w)<<32 | rng.Uint64N(100)
				if rng.IntN(4) == 0 {
					if err := tb.Delete(ctx, k); err != nil {
						t.Error(err)
						return
					}
					delete(m, k)
					continue
				}
				v := k ^ uint64(i)<<40
				if err := tb.Put(ctx, k, v); err != nil {
					t.Error(err)
					return
				}
				m[k] = v
			}
			finals[w] = m
		}()
	}
	var rwg sync.WaitGroup
	for r := range 3 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for {
				select {
				case <-stop:
					return
				default:
				}
				keys := make([]uint64, 32)
				for i := range keys {
					keys[i] = rng.Uint64N(writers)<<32 | rng.Uint64N(100)
				}
				vals := make([]uint64, len(keys))
				found := make([]bool, len(keys))
				if err := tb.GetMany(ctx, keys, vals, found); err != nil {
					t.Error(err)
					return
				}
				for i, k := range keys {
					if found[i] && vals[i]&(1<<40-1) != k&(1<<40-1) {
						t.Errorf("key %x has value %x no writer wrote", k, vals[i])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	total := 0
	for _, m := range finals {
		for k, v := range m {
			got, ok, err := tb.Get(ctx, k)
			if err != nil || !ok || got != v {
				t.Fatalf("final %x = %x %v %v, want %x", k, got, ok, err, v)
			}
			total++
		}
	}
	if tb.Len() != uint64(total) {
		t.Fatalf("Len %d, want %d", tb.Len(), total)
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 4096)
	tb, err := Create[uint64, [4]float32](ctx, s, "e", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create[uint64, [4]float32](ctx, s, "e", nil); !errors.Is(err, bam.ErrExists) {
		t.Fatalf("second Create: %v", err)
	}
	for i := range 20 {
		tb.Put(ctx, uint64(i), [4]float32{float32(i)})
	}
	tb.Sync(ctx)
	tb.c.log.Close(ctx)
	tb.c.closed = true
	if _, err := Open[uint32, [4]float32](ctx, s, "e", nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("open with 4-byte keys: %v", err)
	} else {
		t.Log(err)
	}
	if _, err := Open[uint64, [8]float32](ctx, s, "e", nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("open with 32-byte values: %v", err)
	}
	if _, err := Open[uint64, [4]float32](ctx, s, "missing", nil); !errors.Is(err, bam.ErrNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := Create[*int, int](ctx, s, "p", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("pointer key: %v", err)
	}
	// Damage the first record of the log: records follow, so Open refuses.
	p := tb.c.logPath()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xee}, wal.HeaderSize+wal.RecordHeaderSize+3)
	f.Close()
	_, err = Open[uint64, [4]float32](ctx, s, "e", nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with a corrupt log: %v", err)
	}
	t.Log(err)
	tb2, err := Open[uint64, [4]float32](ctx, s, "e", &Options{TruncateCorruptLog: true})
	if err != nil {
		t.Fatal(err)
	}
	if tb2.Len() != 0 {
		t.Fatalf("Len after dropping the whole log: %d", tb2.Len())
	}
	tb2.Close(ctx)
	s.Close()
}

// enospcFile fails writes past the header once armed.
type enospcFile struct {
	*os.File
	armed *bool
}

func (f enospcFile) WriteAt(b []byte, off int64) (int, error) {
	if *f.armed && off >= wal.HeaderSize {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(b, off)
}

func TestFullDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 4096)
	armed := false
	opts := &Options{SyncWrites: true, openLogFile: func(p string) (wal.File, error) {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		return enospcFile{f, &armed}, err
	}}
	tb, err := Create[uint64, uint64](ctx, s, "f", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Put(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	armed = true
	err = tb.Put(ctx, 2, 20)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Put on a full disk: %v", err)
	}
	t.Log(err)
	if err := tb.Put(ctx, 3, 30); !errors.Is(err, ErrFailed) {
		t.Fatalf("Put after a log failure: %v", err)
	}
	if v, ok, err := tb.Get(ctx, 1); err != nil || !ok || v != 10 {
		t.Fatalf("Get after failure: %v %v %v", v, ok, err)
	}
	tb.Close(ctx)
	armed = false
	tb, err = Open[uint64, uint64](ctx, s, "f", opts)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := tb.Get(ctx, 1); !ok || v != 10 {
		t.Fatalf("acknowledged write lost")
	}
	if ok, _ := tb.Has(ctx, 2); ok {
		t.Fatalf("failed write visible after reopen")
	}
	tb.Close(ctx)
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, "ns-000.bam")); err != nil {
		t.Fatal(err)
	}
}
