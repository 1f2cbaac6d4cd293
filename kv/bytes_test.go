package kv

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/bam-go/bam/kv/vlog"
)

func randValue(r *rand.Rand) []byte {
	var n int
	switch r.IntN(10) {
	case 0:
		n = 0
	case 1:
		n = 64<<10 + r.IntN(200<<10) // large
	default:
		n = r.IntN(300)
	}
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(r.Uint32())
	}
	return v
}

func checkBytesAgainst(t *testing.T, tb *BytesTable[uint64], want map[uint64][]byte, keys uint64) {
	t.Helper()
	ctx := context.Background()
	if got := tb.Len(); got != uint64(len(want)) {
		t.Fatalf("Len = %d, want %d", got, len(want))
	}
	ks := make([]uint64, keys)
	for k := range keys {
		ks[k] = k
		v, ok, err := tb.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		w, wok := want[k]
		if ok != wok || !bytes.Equal(v, w) || (ok && v == nil) {
			t.Fatalf("Get(%d) = %d bytes, %v; want %d bytes, %v", k, len(v), ok, len(w), wok)
		}
	}
	vals := make([][]byte, keys)
	found := make([]bool, keys)
	if err := tb.GetMany(ctx, ks, vals, found); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		w, wok := want[k]
		if found[k] != wok || !bytes.Equal(vals[k], w) {
			t.Fatalf("GetMany[%d] = %d bytes, %v; want %d bytes, %v", k, len(vals[k]), found[k], len(w), wok)
		}
	}
}

// TestBytesTableProperty runs random operations against a map, reopening
// the table now and then.
func TestBytesTableProperty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	opts := &Options{Capacity: 16, CheckpointBytes: 8 << 10}
	tb, err := CreateBytes[uint64](ctx, s, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	want := map[uint64][]byte{}
	const keys = 300
	steps := 3000
	if testing.Short() {
		steps = 1000
	}
	for i := range steps {
		k := r.Uint64N(keys)
		switch x := r.IntN(100); {
		case x < 50:
			v := randValue(r)
			if err := tb.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		case x < 60:
			n := 1 + r.IntN(20)
			ks := make([]uint64, n)
			vs := make([][]byte, n)
			for j := range ks {
				ks[j], vs[j] = r.Uint64N(keys), randValue(r)
			}
			if err := tb.PutMany(ctx, ks, vs); err != nil {
				t.Fatal(err)
			}
			for j := range ks {
				want[ks[j]] = vs[j]
			}
		case x < 75:
			if err := tb.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		case x < 98:
			v, ok, err := tb.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			w, wok := want[k]
			if ok != wok || !bytes.Equal(v, w) {
				t.Fatalf("step %d: Get(%d) = %d bytes, %v; want %d bytes, %v", i, k, len(v), ok, len(w), wok)
			}
			if has, err := tb.Has(ctx, k); err != nil || has != wok {
				t.Fatalf("Has(%d) = %v, %v; want %v", k, has, err, wok)
			}
		default:
			if r.IntN(2) == 0 {
				if err := tb.Close(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := tb.Sync(ctx); err != nil { // reopen without a checkpoint
				t.Fatal(err)
			} else {
				tb.c.closed = true
				tb.c.log.Close(ctx)
				tb.vl.Close(ctx)
			}
			if tb, err = OpenBytes[uint64](ctx, s, "b", opts); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkBytesAgainst(t, tb, want, keys)
	if err := tb.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	var ierr error
	for k, v := range tb.All(ctx, &ierr) {
		if !bytes.Equal(v, want[k]) {
			t.Fatalf("All: key %d has %d bytes, want %d", k, len(v), len(want[k]))
		}
		n++
	}
	if ierr != nil || n != len(want) {
		t.Fatalf("All yielded %d entries, err %v; want %d", n, ierr, len(want))
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// abandon drops a table without checkpointing or syncing anything more, as
// a crash would (the files keep what was written).
func abandon[K comparable](t *testing.T, tb *BytesTable[K]) {
	t.Helper()
	tb.c.mu.Lock()
	tb.c.closed = true
	tb.c.mu.Unlock()
	tb.c.log.Close(context.Background())
	tb.vl.Close(context.Background())
}

func TestBytesTableTornTail(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, end int64)
	}{
		{"garbage appended", func(t *testing.T, path string, end int64) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(bytes.Repeat([]byte{0xab}, 1000))
			f.Close()
		}},
		{"half record", func(t *testing.T, path string, end int64) {
			if err := os.Truncate(path, end+vlog.RecordHeaderSize+10); err != nil {
				t.Fatal(err)
			}
		}},
		{"header only", func(t *testing.T, path string, end int64) {
			if err := os.Truncate(path, end+7); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newStore(t, dir, 512)
			defer s.Close()
			tb, err := CreateBytes[uint64](ctx, s, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			want := map[uint64][]byte{}
			r := rand.New(rand.NewPCG(3, 4))
			for k := range uint64(50) {
				v := randValue(r)
				if err := tb.Put(ctx, k, v); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			}
			if err := tb.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			path := tb.ValueLogPath()
			end := int64(tb.ValueLogBytes())
			// A value whose index write never became durable: the record
			// is in the value log, the log record is not.
			if _, err := tb.vl.Append(bytes.Repeat([]byte{1}, 5000)); err != nil {
				t.Fatal(err)
			}
			abandon(t, tb)
			tc.damage(t, path, end)
			tb, err = OpenBytes[uint64](ctx, s, "b", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := tb.ValueLogBytes(); got != uint64(end) {
				t.Fatalf("value log is %d bytes after recovery, want %d", got, end)
			}
			if st, _ := os.Stat(path); st.Size() != end {
				t.Fatalf("value log file is %d bytes, want %d", st.Size(), end)
			}
			checkBytesAgainst(t, tb, want, 60)
			// Appends continue after the cut.
			if err := tb.Put(ctx, 55, []byte("after")); err != nil {
				t.Fatal(err)
			}
			want[55] = []byte("after")
			if err := tb.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
				t.Fatal(err)
			}
			checkBytesAgainst(t, tb, want, 60)
			if err := tb.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBytesTableCorruptRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", &Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(10) {
		if err := tb.Put(ctx, k, bytes.Repeat([]byte{byte(k)}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	var pb [vlog.PtrSize]byte
	key := uint64(4)
	if ok, err := tb.c.get(ctx, bytesOf(&key), pb[:]); !ok || err != nil {
		t.Fatal(ok, err)
	}
	p := vlog.DecodePtr(pb[:])
	path := tb.ValueLogPath()
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, int64(p.Off)+vlog.RecordHeaderSize+50); err != nil {
		t.Fatal(err)
	}
	f.Close()

	tb, err = OpenBytes[uint64](ctx, s, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	_, _, err = tb.Get(ctx, key)
	var ce *vlog.CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Path != path || ce.Off != p.Off {
		t.Fatalf("Get of a damaged record: %v; want ErrCorrupt at %s offset %d", err, path, p.Off)
	}
	if v, ok, err := tb.Get(ctx, 3); err != nil || !ok || len(v) != 100 {
		t.Fatalf("Get of an intact record: %d bytes, %v, %v", len(v), ok, err)
	}
	if err := tb.Verify(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify = %v, want ErrCorrupt", err)
	}
}

func TestBytesTableShortLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(10) {
		if err := tb.Put(ctx, k, []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	path, end := tb.ValueLogPath(), tb.ValueLogBytes()
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(end)-3); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBytes[uint64](ctx, s, "b", nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("OpenBytes with a referenced record cut off = %v, want ErrCorrupt", err)
	}
}

func TestBytesTableErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Put(ctx, 1, make([]byte, MaxValueSize+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put of %d bytes = %v, want ErrInvalid", MaxValueSize+1, err)
	}
	if err := tb.PutMany(ctx, []uint64{1}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PutMany with mismatched slices = %v, want ErrInvalid", err)
	}
	if tb.Len() != 0 {
		t.Fatalf("Len = %d after failed puts", tb.Len())
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Open[uint64, [16]byte](ctx, s, "b", nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("Open of a bytes table as a fixed one = %v, want ErrTypeMismatch", err)
	}
	if _, err := OpenBytes[uint32](ctx, s, "b", nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("OpenBytes with another key type = %v, want ErrTypeMismatch", err)
	}
	if _, err := CreateBytes[uint64](ctx, s, "b", nil); err == nil {
		t.Fatal("CreateBytes of an existing name succeeded")
	}
	if _, _, err := tb.Get(ctx, 1); err == nil {
		t.Fatal("Get after Close succeeded")
	}
}

func TestBytesTableConcurrent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", &Options{SyncWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 50
	var wg sync.WaitGroup
	for w := range uint64(workers) {
		wg.Go(func() {
			for i := range uint64(per) {
				k := w*per + i
				if err := tb.Put(ctx, k, bytes.Repeat([]byte{byte(k)}, int(k))); err != nil {
					t.Error(err)
					return
				}
				if _, _, err := tb.Get(ctx, k/2); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	for k := range uint64(workers * per) {
		v, ok, err := tb.Get(ctx, k)
		if err != nil || !ok || !bytes.Equal(v, bytes.Repeat([]byte{byte(k)}, int(k))) {
			t.Fatalf("Get(%d) = %d bytes, %v, %v", k, len(v), ok, err)
		}
	}
}
