package cpuengine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/engine"
	"github.com/bam-go/bam/nvme"
)

func stress() bool { return os.Getenv("BAM_STRESS") == "1" }

// rig is an engine over memory namespaces with objects laid out by hand.
type rig struct {
	nss  []nvme.Namespace
	mems []*nvme.MemoryNamespace
	cfg  Config
	e    *Engine
}

func newRig(t testing.TB, nns int, lineSize int, blocks uint64, strict bool, cfg Config) *rig {
	t.Helper()
	r := &rig{}
	for range nns {
		var m *nvme.MemoryNamespace
		var err error
		if strict {
			m, err = nvme.NewStrictMemoryNamespace(512, blocks)
		} else {
			m, err = nvme.NewMemoryNamespace(512, blocks)
		}
		if err != nil {
			t.Fatal(err)
		}
		r.mems = append(r.mems, m)
		r.nss = append(r.nss, m)
	}
	cfg.Namespaces = r.nss
	cfg.LineSize = lineSize
	if cfg.FullSetTimeout == 0 {
		cfg.FullSetTimeout = 20 * time.Second
	}
	r.cfg = cfg
	r.open(t)
	t.Cleanup(func() { r.e.Close() })
	return r
}

func (r *rig) open(t testing.TB) {
	t.Helper()
	e, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
}

// reopen closes the engine (after a Flush when flush is set) and starts a
// new one over the same namespaces.
func (r *rig) reopen(t testing.TB, flush bool) {
	t.Helper()
	if flush {
		if err := r.e.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.e.Close(); err != nil {
		t.Fatal(err)
	}
	r.open(t)
}

// object lays out an object of length elements after startLine lines on
// every namespace.
func object(id uint64, nns, lineSize, elemSize int, length uint64, layout engine.Layout, startLine uint64) *engine.Object {
	o := &engine.Object{ID: id, Name: fmt.Sprint("obj", id), ElemSize: elemSize, Length: length, LineSize: lineSize,
		LBASize: 512, Layout: layout}
	lines := o.Lines()
	for k := range nns {
		n := lines
		if layout == engine.Striped {
			n = lines / uint64(nns)
			if uint64(k) < lines%uint64(nns) {
				n++
			}
		}
		o.Extents = append(o.Extents, engine.Extent{StartLBA: startLine * uint64(lineSize/512), Lines: n})
	}
	return o
}

// value is the deterministic contents of element i written at step s.
func value(es int, i uint64, s uint64) []byte {
	b := make([]byte, es)
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], i*0x9E3779B97F4A7C15^s*0xBF58476D1CE4E5B9)
	for k := range b {
		b[k] = w[k%8] ^ byte(k/8)
	}
	return b
}

type geometry struct {
	sets, ways uint32
	line       int
}

func (g geometry) String() string { return fmt.Sprintf("%dx%dx%d", g.sets, g.ways, g.line) }

// TestPropertyOracle runs random Scatter, Gather, WriteAt, ReadAt and Flush
// from several goroutines, each owning a block of elements (blocks share
// lines), against a slice oracle, then reopens the engine and compares
// everything.
func TestPropertyOracle(t *testing.T) {
	geoms := []geometry{{1, 1, 512}, {1, 2, 4096}, {2, 4, 512}, {1, 4, 16384}, {2, 2, 65536}, {64, 8, 4096}}
	layouts := []struct {
		name   string
		nns    int
		layout engine.Layout
		es     int
	}{
		{"striped2-u64", 2, engine.Striped, 8},
		{"striped3-12B", 3, engine.Striped, 12},
		{"replicated2-u32", 2, engine.Replicated, 4},
	}
	for _, g := range geoms {
		for _, l := range layouts {
			t.Run(g.String()+"/"+l.name, func(t *testing.T) {
				t.Parallel()
				runOracle(t, g, l.nns, l.layout, l.es)
			})
		}
	}
}

func runOracle(t *testing.T, g geometry, nns int, layout engine.Layout, es int) {
	ctx := context.Background()
	workers, ops := 6, 150
	if stress() {
		workers, ops = 16, 2000
	}
	perLine := g.line / es
	length := uint64(perLine*9 + 3) // a partial last line
	if g.line >= 16384 {
		length = uint64(perLine*3 + 1)
	}
	o := object(7, nns, g.line, es, length, layout, 1)
	blocks := uint64(g.line/512) * (o.Lines() + 2)
	r := newRig(t, nns, g.line, blocks, false, Config{Sets: g.sets, Ways: g.ways, QueuePairs: 2, QueueDepth: 8, Parallelism: 3})
	oracle := make([]byte, length*uint64(es)) // zero, like fresh storage
	block := (length + uint64(workers) - 1) / uint64(workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		lo, hi := uint64(w)*block, min(uint64(w+1)*block, length)
		if lo >= hi {
			continue
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			fail := func(err error) { errs <- fmt.Errorf("worker %d: %w", w, err) }
			for step := range uint64(ops) {
				switch rng.IntN(5) {
				case 0: // Scatter distinct indices of the block
					n := 1 + rng.IntN(20)
					seen := map[uint64]bool{}
					var idx []uint64
					var src []byte
					for range n {
						i := lo + rng.Uint64N(hi-lo)
						if seen[i] {
							continue
						}
						seen[i] = true
						v := value(es, i, step+1)
						idx = append(idx, i)
						src = append(src, v...)
						copy(oracle[i*uint64(es):], v)
					}
					if err := r.e.Scatter(ctx, o, idx, src); err != nil {
						fail(err)
						return
					}
				case 1: // Gather with repeats
					n := 1 + rng.IntN(30)
					idx := make([]uint64, n)
					for k := range idx {
						idx[k] = lo + rng.Uint64N(hi-lo)
					}
					dst := make([]byte, n*es)
					if err := r.e.Gather(ctx, o, idx, dst); err != nil {
						fail(err)
						return
					}
					for k, i := range idx {
						if want := oracle[i*uint64(es):][:es]; !bytes.Equal(dst[k*es:][:es], want) {
							fail(fmt.Errorf("step %d: gather element %d = %x, want %x", step, i, dst[k*es:][:es], want))
							return
						}
					}
				case 2: // WriteAt of a byte range inside the block
					a := lo*uint64(es) + rng.Uint64N((hi-lo)*uint64(es))
					b := a + 1 + rng.Uint64N(hi*uint64(es)-a)
					p := make([]byte, b-a)
					for k := range p {
						p[k] = byte(rng.Uint32())
					}
					copy(oracle[a:b], p)
					if err := r.e.WriteAt(ctx, o, p, a); err != nil {
						fail(err)
						return
					}
				case 3: // ReadAt of a byte range inside the block
					a := lo*uint64(es) + rng.Uint64N((hi-lo)*uint64(es))
					b := a + 1 + rng.Uint64N(hi*uint64(es)-a)
					p := make([]byte, b-a)
					if err := r.e.ReadAt(ctx, o, p, a); err != nil {
						fail(err)
						return
					}
					if !bytes.Equal(p, oracle[a:b]) {
						fail(fmt.Errorf("step %d: ReadAt [%d, %d) differs from the oracle", step, a, b))
						return
					}
				case 4:
					if err := r.e.Flush(ctx); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	check := func(when string) {
		got := make([]byte, len(oracle))
		if err := r.e.ReadAt(ctx, o, got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, oracle) {
			t.Fatalf("%s: contents differ from the oracle", when)
		}
	}
	check("before reopen")
	r.reopen(t, true)
	check("after reopen")
	if layout == engine.Replicated {
		// Every copy holds the data: read each replica's extent directly.
		lb := o.LineBytes()
		for k, m := range r.mems {
			for line := range o.Lines() {
				_, lba := o.LineAddr(line, k)
				n := min(lb, o.Bytes()-line*lb)
				got := m.Bytes()[lba*512:][:n]
				if !bytes.Equal(got, oracle[line*lb:][:n]) {
					t.Fatalf("replica %d line %d differs from the oracle", k, line)
				}
			}
		}
	}
	st := r.e.ObjectStats(o)
	if st.BytesAsked == 0 {
		t.Fatalf("object stats %+v: nothing asked", st)
	}
}

// TestFlushDurability writes, flushes, writes more, then simulates power
// loss on the namespaces: every value flushed survives, and every element
// written after the Flush holds either its old or its new value.
func TestFlushDurability(t *testing.T) {
	ctx := context.Background()
	const es = 8
	r := newRig(t, 2, 512, 512, true, Config{Sets: 2, Ways: 2, QueuePairs: 2, QueueDepth: 4})
	o := object(3, 2, 512, es, 1000, engine.Striped, 1)
	idx := make([]uint64, 1000)
	first := make([]byte, 1000*es)
	for i := range idx {
		idx[i] = uint64(i)
		copy(first[i*es:], value(es, uint64(i), 1))
	}
	if err := r.e.Scatter(ctx, o, idx, first); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	second := make([]byte, 500*es)
	for i := range 500 {
		copy(second[i*es:], value(es, uint64(i*2), 2))
	}
	evens := make([]uint64, 500)
	for i := range evens {
		evens[i] = uint64(i * 2)
	}
	if err := r.e.Scatter(ctx, o, evens, second); err != nil {
		t.Fatal(err)
	}
	// Power loss: no Flush; the engine's dirty lines are lost too.
	r.e.Close()
	for _, m := range r.mems {
		if err := m.Crash(); err != nil {
			t.Fatal(err)
		}
	}
	r.open(t)
	got := make([]byte, 1000*es)
	if err := r.e.Gather(ctx, o, idx, got); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		g := got[i*es:][:es]
		if bytes.Equal(g, first[i*es:][:es]) {
			continue
		}
		if i%2 == 0 && bytes.Equal(g, value(es, uint64(i), 2)) {
			continue
		}
		t.Fatalf("element %d = %x: neither the flushed nor the later value", i, g)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 1, 4096, 1024, false, Config{CacheBytes: 64 << 10})
	o := object(1, 1, 4096, 8, 100, engine.Striped, 1)
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"gather index past end", func() error { return r.e.Gather(ctx, o, []uint64{3, 100}, make([]byte, 16)) }, engine.ErrOutOfRange},
		{"scatter short buffer", func() error { return r.e.Scatter(ctx, o, []uint64{3}, make([]byte, 7)) }, engine.ErrInvalid},
		{"read past end", func() error { return r.e.ReadAt(ctx, o, make([]byte, 10), 795) }, engine.ErrOutOfRange},
		{"write past end", func() error { return r.e.WriteAt(ctx, o, make([]byte, 1), 800) }, engine.ErrOutOfRange},
		{"huge offset", func() error { return r.e.ReadAt(ctx, o, make([]byte, 1), 1<<63) }, engine.ErrOutOfRange},
		{"element larger than line", func() error {
			return r.e.ReadAt(ctx, &engine.Object{ID: 9, ElemSize: 5000, Length: 1, LineSize: 4096, LBASize: 512, Layout: engine.Striped,
				Extents: []engine.Extent{{StartLBA: 8, Lines: 1}}}, make([]byte, 1), 0)
		}, engine.ErrInvalid},
		{"extent past namespace", func() error {
			bad := object(10, 1, 4096, 8, 100, engine.Striped, 1000)
			return r.e.ReadAt(ctx, bad, make([]byte, 1), 0)
		}, engine.ErrInvalid},
		{"extent too short", func() error {
			bad := object(11, 1, 4096, 8, 100, engine.Striped, 1)
			bad.Extents[0].Lines = 0
			return r.e.ReadAt(ctx, bad, make([]byte, 1), 0)
		}, engine.ErrInvalid},
		{"unknown layout", func() error {
			bad := object(12, 1, 4096, 8, 100, engine.Striped, 1)
			bad.Layout = 9
			return r.e.ReadAt(ctx, bad, make([]byte, 1), 0)
		}, engine.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.e.Gather(cctx, o, []uint64{1}, make([]byte, 8)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled gather: %v", err)
	}
	r.e.Close()
	if err := r.e.Gather(ctx, o, []uint64{1}, make([]byte, 8)); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("gather after close: %v", err)
	}
	if _, err := New(Config{LineSize: 4096}); !errors.Is(err, engine.ErrInvalid) {
		t.Fatalf("no namespaces: %v", err)
	}
}

// TestStorageError: a failing namespace surfaces as a fill error naming the
// line, and the engine stays usable.
func TestStorageError(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 1, 4096, 1024, false, Config{CacheBytes: 64 << 10})
	o := object(1, 1, 4096, 8, 2000, engine.Striped, 1)
	var fail sync.Map
	r.e.target.SetFaultHook(func(_ uint16, cmd *nvme.Command) nvme.Fault {
		if _, ok := fail.Load(cmd.SLBA()); ok && cmd.Opcode == nvme.OpRead {
			return nvme.Fault{Kind: nvme.FaultFail, Status: nvme.StatusUnrecoveredRead}
		}
		return nvme.Fault{}
	})
	_, lba := o.LineAddr(1, 0)
	fail.Store(lba, true)
	err := r.e.Gather(ctx, o, []uint64{600}, make([]byte, 8))
	if !errors.Is(err, gpucache.ErrFill) || !errors.Is(err, nvme.ErrUnrecoveredRead) {
		t.Fatalf("gather of a bad line: %v", err)
	}
	fail.Delete(lba)
	if err := r.e.Gather(ctx, o, []uint64{600}, make([]byte, 8)); err != nil {
		t.Fatalf("after the fault cleared: %v", err)
	}
}

// TestEvict: after Evict no line of the object is cached (storage written
// behind the cache's back is what a later read sees) and dirty lines were
// written back first.
func TestEvict(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 1, 512, 256, false, Config{Sets: 4, Ways: 2, HostTierBytes: 1 << 20})
	o := object(1, 1, 512, 8, 200, engine.Striped, 1)
	if err := r.e.WriteAt(ctx, o, []byte{1, 2, 3}, 8); err != nil {
		t.Fatal(err)
	}
	if err := r.e.Evict(ctx, o); err != nil {
		t.Fatal(err)
	}
	if got := r.mems[0].Bytes()[512+8 : 512+11]; !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("dirty line not written back by Evict: %v", got)
	}
	copy(r.mems[0].Bytes()[512+8:], []byte{9, 9, 9})
	p := make([]byte, 3)
	if err := r.e.ReadAt(ctx, o, p, 8); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, []byte{9, 9, 9}) {
		t.Fatalf("read after Evict served a stale line: %v", p)
	}
}

// TestHostTier: with the tier on, lines evicted from a tiny cache come back
// from host memory, and writes are never lost behind it.
func TestHostTier(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, 1, 512, 1024, false, Config{Sets: 1, Ways: 2, HostTierBytes: 1 << 20})
	o := object(1, 1, 512, 8, 64*50, engine.Striped, 1)
	n := int(o.Length)
	idx := make([]uint64, n)
	src := make([]byte, n*8)
	for i := range idx {
		idx[i] = uint64(i)
		copy(src[i*8:], value(8, uint64(i), 1))
	}
	if err := r.e.Scatter(ctx, o, idx, src); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		dst := make([]byte, n*8)
		if err := r.e.Gather(ctx, o, idx, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("round %d: gather differs", round)
		}
		r.e.be.tier.c.Wait()
	}
	if d := r.e.Detail(); d.Tier.Hits == 0 {
		t.Fatalf("tier never hit: %+v", d.Tier)
	}
}
