package array_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/bam-go/bam/internal/cuda"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
	"github.com/bam-go/bam/nvme"
)

func stress() bool { return os.Getenv("BAM_STRESS") == "1" }

// memStore is a store on memory namespaces that survive Close, so a test
// can reopen it.
type memStore struct {
	nss  []nvme.Namespace
	opts bam.Options
	s    *bam.Store
}

func newMemStore(t testing.TB, nns, lineSize int, cacheLines int64) *memStore {
	t.Helper()
	m := &memStore{opts: bam.Options{CacheBytes: cacheLines * int64(lineSize), QueuePairs: 2, QueueDepth: 16}}
	for range nns {
		ns, err := nvme.NewMemoryNamespace(512, 8192)
		if err != nil {
			t.Fatal(err)
		}
		m.nss = append(m.nss, ns)
	}
	s, err := bam.CreateOn(context.Background(), m.nss, bam.CreateOptions{Options: m.opts, LineSize: lineSize, LBASize: 512, CatalogSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	m.s = s
	t.Cleanup(func() { m.s.Close() })
	return m
}

func (m *memStore) reopen(t testing.TB) {
	t.Helper()
	if err := m.s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := bam.OpenOn(context.Background(), m.nss, m.opts)
	if err != nil {
		t.Fatal(err)
	}
	m.s = s
}

// rec is a struct element with padding-free fixed-size fields.
type rec struct {
	A uint32
	B [3]uint16
	C float32
	D int16
}

func recOf(i, gen uint64) rec {
	x := i*0x9E3779B97F4A7C15 ^ gen*0xBF58476D1CE4E5B9
	return rec{A: uint32(x), B: [3]uint16{uint16(x >> 32), uint16(x >> 48), uint16(gen)}, C: float32(i), D: int16(gen)}
}

// TestPropertyOracle drives arrays with random Set, Get, Gather, Scatter,
// ReadRange, WriteRange, Range, Flush and reopen from many goroutines
// against a slice oracle, over caches from one line to many.
func TestPropertyOracle(t *testing.T) {
	cases := []struct {
		lines  int64 // cache lines: 1 → 1×1, 2 → 1×2, 4 → 1×4, 8 → 2×4
		line   int
		nns    int
		layout bam.Layout
	}{
		{1, 512, 1, bam.LayoutStriped},
		{2, 512, 2, bam.LayoutStriped},
		{4, 4096, 3, bam.LayoutStriped},
		{8, 512, 2, bam.LayoutReplicated},
		{4096, 4096, 2, bam.LayoutStriped},
	}
	for _, c := range cases {
		name := fmt.Sprintf("cache%d-line%d-ns%d-%s", c.lines, c.line, c.nns, c.layout)
		t.Run(name+"/uint64", func(t *testing.T) {
			t.Parallel()
			runOracle(t, newMemStore(t, c.nns, c.line, c.lines), c.layout, func(i, g uint64) uint64 { return i*31 + g<<40 })
		})
		t.Run(name+"/struct", func(t *testing.T) {
			t.Parallel()
			runOracle(t, newMemStore(t, c.nns, c.line, c.lines), c.layout, recOf)
		})
	}
}

func runOracle[T comparable](t *testing.T, m *memStore, layout bam.Layout, val func(i, gen uint64) T) {
	ctx := context.Background()
	workers, ops, rounds := 8, 60, 3
	if stress() {
		workers, ops, rounds = 32, 400, 6
	}
	const length = 3000
	a, err := array.Create[T](ctx, m.s, "a", length, &array.Options{Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	oracle := make([]T, length)
	block := uint64(length / workers)
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			lo, hi := uint64(w)*block, uint64(w+1)*block
			if w == workers-1 {
				hi = length
			}
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
				if err := oracleWorker(ctx, a, oracle, lo, hi, ops, uint64(round*1000), rng, val); err != nil {
					errs <- fmt.Errorf("round %d worker %d: %w", round, w, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var iterErr error
		for i, v := range a.Range(ctx, 0, length, &iterErr) {
			if v != oracle[i] {
				t.Fatalf("round %d: Range element %d = %v, want %v", round, i, v, oracle[i])
			}
		}
		if iterErr != nil {
			t.Fatal(iterErr)
		}
		if round%2 == 0 {
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		m.reopen(t) // Close flushes too
		if a, err = array.Open[T](m.s, "a"); err != nil {
			t.Fatal(err)
		}
		got := make([]T, length)
		if err := a.ReadRange(ctx, 0, got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, oracle) {
			t.Fatalf("round %d: contents after reopen differ from the oracle", round)
		}
	}
	st := a.Stats()
	if st.Requests == 0 || st.BytesAsked == 0 {
		t.Fatalf("stats after reopen and a read: %+v", st)
	}
}

func oracleWorker[T comparable](ctx context.Context, a *array.Array[T], oracle []T, lo, hi uint64, ops int, gen uint64, rng *rand.Rand, val func(i, gen uint64) T) error {
	pick := func() uint64 { return lo + rng.Uint64N(hi-lo) }
	for step := range uint64(ops) {
		g := gen + step + 1
		switch rng.IntN(7) {
		case 0:
			i := pick()
			v := val(i, g)
			if err := a.Set(ctx, i, v); err != nil {
				return err
			}
			oracle[i] = v
		case 1:
			i := pick()
			v, err := a.Get(ctx, i)
			if err != nil {
				return err
			}
			if v != oracle[i] {
				return fmt.Errorf("Get(%d) = %v, want %v", i, v, oracle[i])
			}
		case 2: // Scatter, repeats allowed: adopt whichever value landed
			n := 1 + rng.IntN(40)
			idx := make([]uint64, n)
			src := make([]T, n)
			for k := range idx {
				idx[k] = pick()
				src[k] = val(idx[k], g+uint64(k)<<20)
			}
			if err := a.Scatter(ctx, idx, src); err != nil {
				return err
			}
			got := make([]T, n)
			if err := a.Gather(ctx, idx, got); err != nil {
				return err
			}
			for k, i := range idx {
				ok := false
				for j, i2 := range idx {
					ok = ok || (i2 == i && src[j] == got[k])
				}
				if !ok {
					return fmt.Errorf("after Scatter element %d = %v, not a value written to it", i, got[k])
				}
				oracle[i] = got[k]
			}
		case 3:
			n := 1 + rng.IntN(60)
			idx := make([]uint64, n)
			for k := range idx {
				idx[k] = pick()
			}
			got := make([]T, n)
			if err := a.Gather(ctx, idx, got); err != nil {
				return err
			}
			for k, i := range idx {
				if got[k] != oracle[i] {
					return fmt.Errorf("Gather element %d = %v, want %v", i, got[k], oracle[i])
				}
			}
		case 4:
			s := pick()
			n := 1 + rng.Uint64N(hi-s)
			src := make([]T, n)
			for k := range src {
				src[k] = val(s+uint64(k), g)
			}
			if err := a.WriteRange(ctx, s, src); err != nil {
				return err
			}
			copy(oracle[s:], src)
		case 5:
			s := pick()
			n := 1 + rng.Uint64N(hi-s)
			got := make([]T, n)
			if err := a.ReadRange(ctx, s, got); err != nil {
				return err
			}
			if !slices.Equal(got, oracle[s:s+n]) {
				return fmt.Errorf("ReadRange(%d, %d) differs from the oracle", s, n)
			}
		case 6:
			if err := a.Flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

type withPointer struct {
	A int
	P *int
}

type withString struct {
	N [2]struct{ S string }
}

func TestElementTypes(t *testing.T) {
	cases := []struct {
		name string
		f    func() (string, error)
		want string
	}{
		{"int64", array.TypeName[int64], "int64"},
		{"int", array.TypeName[int], "int64"},
		{"float32", array.TypeName[float32], "float32"},
		{"bool", array.TypeName[bool], "bool"},
		{"array", array.TypeName[[4]float32], "[4]float32"},
		{"struct", array.TypeName[rec], "array_test.rec"},
		{"pointer", array.TypeName[*int], ""},
		{"string", array.TypeName[string], ""},
		{"slice", array.TypeName[[]byte], ""},
		{"struct with pointer", array.TypeName[withPointer], ""},
		{"nested string", array.TypeName[withString], ""},
		{"interface", array.TypeName[any], ""},
		{"empty", array.TypeName[struct{}], ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.f()
			if c.want == "" {
				if !errors.Is(err, array.ErrElemType) {
					t.Fatalf("TypeName = %q, %v; want ErrElemType", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("TypeName = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	m := newMemStore(t, 1, 512, 16)
	a, err := array.Create[float32](ctx, m.s, "f", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := array.Create[withPointer](ctx, m.s, "p", 10, nil); !errors.Is(err, array.ErrElemType) {
		t.Fatalf("Create of a pointer type: %v", err)
	}
	if _, err := array.Open[int32](m.s, "f"); !errors.Is(err, bam.ErrTypeMismatch) {
		t.Fatalf("Open with the wrong type: %v", err)
	}
	if _, err := array.Open[uint64](m.s, "missing"); !errors.Is(err, bam.ErrNotFound) {
		t.Fatalf("Open of a missing array: %v", err)
	}
	if _, err := array.Create[float32](ctx, m.s, "f", 1, nil); !errors.Is(err, bam.ErrExists) {
		t.Fatalf("Create of an existing name: %v", err)
	}
	// Index and range errors are errors, never panics.
	if _, err := a.Get(ctx, 100); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("Get(100): %v", err)
	}
	if err := a.Set(ctx, 1<<63, 1); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("Set(1<<63): %v", err)
	}
	if err := a.Gather(ctx, []uint64{1, 100}, make([]float32, 2)); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("Gather past the end: %v", err)
	}
	if err := a.Gather(ctx, []uint64{1, 2}, make([]float32, 1)); !errors.Is(err, bam.ErrInvalid) {
		t.Fatalf("Gather with a short destination: %v", err)
	}
	if err := a.Scatter(ctx, []uint64{99, 100}, make([]float32, 2)); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("Scatter past the end: %v", err)
	}
	if err := a.ReadRange(ctx, 90, make([]float32, 11)); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("ReadRange past the end: %v", err)
	}
	if err := a.WriteRange(ctx, 1<<62, make([]float32, 1)); !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("WriteRange far past the end: %v", err)
	}
	var iterErr error
	for range a.Range(ctx, 50, 101, &iterErr) {
		t.Fatal("Range past the end yielded")
	}
	if !errors.Is(iterErr, bam.ErrOutOfRange) {
		t.Fatalf("Range past the end: %v", iterErr)
	}
	if n, err := a.WriteAt(make([]byte, 8), 396); n != 4 || !errors.Is(err, bam.ErrOutOfRange) {
		t.Fatalf("WriteAt across the end = %d, %v", n, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Gather(cctx, []uint64{1}, make([]float32, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Gather with a canceled context: %v", err)
	}
	// Deleting evicts the array's cached lines: a new array on the same
	// space reads zeros, not the old contents.
	if err := a.Set(ctx, 5, 42); err != nil {
		t.Fatal(err)
	}
	if err := m.s.DeleteObject(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	b, err := array.Create[float32](ctx, m.s, "g", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, 5); err != nil || v != 0 {
		t.Fatalf("new array element 5 = %v, %v; want 0", v, err)
	}
	m.s.Close()
	if _, err := b.Get(ctx, 5); !errors.Is(err, bam.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestReadOnlyAndEngineChoice(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := bam.Create(ctx, dir, bam.CreateOptions{NamespaceSize: 8 << 20, LineSize: 4096, CatalogSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	a, err := array.Create[uint16](ctx, s, "u", 5000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, 4999, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // Close flushes
		t.Fatal(err)
	}
	if cuda.Available() != nil {
		// Without a GPU, asking for the GPU engine is a clear error.
		if _, err := bam.Open(ctx, dir, bam.Options{Engine: bam.EngineGPU}); !errors.Is(err, bam.ErrEngineUnavailable) {
			t.Fatalf("Open with EngineGPU and no GPU: %v", err)
		}
	}
	ro, err := bam.Open(ctx, dir, bam.Options{ReadOnly: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	a, err = array.Open[uint16](ro, "u")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := a.Get(ctx, 4999); err != nil || v != 7 {
		t.Fatalf("Get = %v, %v; want 7", v, err)
	}
	if err := a.Set(ctx, 1, 1); !errors.Is(err, bam.ErrReadOnly) {
		t.Fatalf("Set on a read-only store: %v", err)
	}
}

// TestTruncatedNamespace: a namespace file cut short is refused on open
// with an error naming it.
func TestTruncatedNamespace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := bam.Create(ctx, dir, bam.CreateOptions{NamespaceSize: 4 << 20, LineSize: 4096, CatalogSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := array.Create[int32](ctx, s, "x", 1000, nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := filepath.Join(dir, bam.NamespaceFileName(0))
	if err := os.Truncate(p, 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err = bam.Open(ctx, dir, bam.Options{})
	if !errors.Is(err, bam.ErrCorrupt) {
		t.Fatalf("open of a truncated namespace: %v", err)
	}
	t.Logf("error: %v", err)
}
