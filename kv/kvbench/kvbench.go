// Package kvbench is benchmark K1 (BENCHMARKS.md): batch Gets of a kv
// table 4x the size of the GPU cache, uniform and Zipf keys, on the GPU
// engine and on the CPU engine, against Pebble point Gets on the host
// cores with the same keys and values. It returns a *bench.Result; the CLI
// (bam kv bench) prints it and writes it under bench/results.
//
// It owns nothing persistent: the store and the Pebble database live in a
// temporary directory (or Params.Dir) removed afterwards.
package kvbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/bench"
	"github.com/bam-go/bam/kernels"
	"github.com/bam-go/bam/kv"
	"github.com/cockroachdb/pebble/v2"
)

// Value is the benchmark's value: 64 bytes, an embedding of 16 float32s'
// size. Word 0 is the key and word 1 its index, so results are checkable.
type Value [8]uint64

// Params of a run. Zero fields take the defaults in their comments.
type Params struct {
	Dir         string        // where the store and Pebble live (default: a temporary directory)
	CacheBytes  uint64        // GPU line cache; the table is TableFactor times it (default 256 MiB)
	TableFactor float64       // table size / cache size (default 4)
	Entries     uint64        // overrides the entry count derived from the sizes
	Batch       int           // keys per GetMany (default 1 Mi on the GPU, 4096 on the CPU)
	Duration    time.Duration // measuring time per figure (default 5s)
	Threads     int           // host goroutines for Pebble and the CPU engine (default NumCPU)
	Zipf        float64       // Zipf exponent s > 1 (default 1.1)
	GPU         bool          // measure the GPU (fails without one)
	SkipCPU     bool          // skip the CPU-engine figures
	QueuePairs  int           // NVMe queue pairs of the GPU engine (default: kv.GPUOptions')
	Log         io.Writer     // progress lines (default: none)
}

func (p *Params) fill() {
	if p.CacheBytes == 0 {
		p.CacheBytes = 256 << 20
	}
	if p.TableFactor == 0 {
		p.TableFactor = 4
	}
	if p.Duration == 0 {
		p.Duration = 5 * time.Second
	}
	if p.Threads == 0 {
		p.Threads = runtime.NumCPU()
	}
	if p.Zipf == 0 {
		p.Zipf = 1.1
	}
	if p.Batch == 0 {
		p.Batch = 4096
		if p.GPU {
			p.Batch = 1 << 20
		}
	}
	if p.Log == nil {
		p.Log = io.Discard
	}
}

func keyOf(i uint64) uint64 { return kernels.Mix64(i + 0x5bd1e995) }

func valueOf(i uint64) Value { return Value{keyOf(i), i, i * 3, ^i} }

// keyStream generates indices of present keys: uniform or Zipf (rank r
// mapped to a scattered index so hot keys are spread over the table).
type keyStream struct {
	n    uint64
	rng  *rand.Rand
	zipf *rand.Zipf
}

func newStream(n uint64, zipf float64, seed uint64) *keyStream {
	ks := &keyStream{n: n, rng: rand.New(rand.NewPCG(seed, 77))}
	if zipf > 0 {
		ks.zipf = rand.NewZipf(ks.rng, zipf, 1, n-1)
	}
	return ks
}

func (s *keyStream) next() uint64 {
	if s.zipf == nil {
		return s.rng.Uint64N(s.n)
	}
	return (s.zipf.Uint64() * 0x9e3779b97f4a7c15) % s.n
}

// Run runs K1.
func Run(ctx context.Context, p Params) (*bench.Result, error) {
	p.fill()
	dir := p.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "bam-k1-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	storeDir, pebbleDir := dir+"/store", dir+"/pebble"
	tableBytes := uint64(float64(p.CacheBytes) * p.TableFactor)
	const line = 4096
	slots := (line - 16) / (1 + 8 + 64)
	for 16+(slots+15)/16*16+slots*72 > line {
		slots--
	}
	buckets := uint64(1)
	for buckets*line < tableBytes {
		buckets <<= 1
	}
	entries := p.Entries
	if entries == 0 {
		entries = uint64(float64(buckets*uint64(slots)) * 0.8)
	}
	device := "cpu"
	res := bench.NewResult("K1", device)
	res.Params = map[string]any{"cache_bytes": p.CacheBytes, "table_factor": p.TableFactor, "entries": entries,
		"key_bytes": 8, "value_bytes": 64, "line_size": line, "batch": p.Batch, "threads": p.Threads,
		"zipf_s": p.Zipf, "duration_s": p.Duration.Seconds()}

	// Store and table.
	nsSize := int64(tableBytes*3+(256<<20)) / 2
	s, err := bam.Create(ctx, storeDir, bam.CreateOptions{Namespaces: 2, NamespaceSize: nsSize, LineSize: line,
		Options: bam.Options{CacheBytes: int64(p.CacheBytes), Engine: bam.EngineCPU}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	t0 := time.Now()
	tb, err := kv.Create[uint64, Value](ctx, s, "k1", &kv.Options{Capacity: entries, CheckpointBytes: 1 << 30, LogBytes: 4 << 30})
	if err != nil {
		return nil, err
	}
	defer tb.Close(ctx)
	const loadBatch = 1 << 18
	keys := make([]uint64, loadBatch)
	vals := make([]Value, loadBatch)
	for start := uint64(0); start < entries; start += loadBatch {
		n := min(loadBatch, entries-start)
		for i := range n {
			keys[i], vals[i] = keyOf(start+i), valueOf(start+i)
		}
		if err := tb.PutMany(ctx, keys[:n], vals[:n]); err != nil {
			return nil, err
		}
	}
	if err := tb.Checkpoint(ctx); err != nil {
		return nil, err
	}
	info := tb.Info()
	fmt.Fprintf(p.Log, "loaded %d entries into %d buckets (%.1f MiB, load %.2f) in %v\n", entries, info.Buckets,
		float64(info.Buckets*line)/(1<<20), info.Load, time.Since(t0).Round(time.Millisecond))
	res.Params["table_bytes"] = info.Buckets * line
	if p.QueuePairs > 0 {
		res.Params["gpu_queue_pairs"] = p.QueuePairs
	}

	// Pebble with the same keys and values, block cache = the GPU cache.
	t0 = time.Now()
	cache := pebble.NewCache(int64(p.CacheBytes))
	defer cache.Unref()
	db, err := pebble.Open(pebbleDir, &pebble.Options{Cache: cache, DisableWAL: true, Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	defer db.Close()
	for start := uint64(0); start < entries; start += loadBatch {
		b := db.NewBatch()
		for i := start; i < min(entries, start+loadBatch); i++ {
			v := valueOf(i)
			if err := b.Set(pebbleKey(keyOf(i)), valueBytes(&v), nil); err != nil {
				return nil, err
			}
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return nil, fmt.Errorf("pebble: %w", err)
		}
	}
	if err := db.Flush(); err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	if err := db.Compact(ctx, pebbleKey(0), pebbleKey(^uint64(0)), true); err != nil {
		return nil, fmt.Errorf("pebble: compact: %w", err)
	}
	fmt.Fprintf(p.Log, "loaded Pebble in %v\n", time.Since(t0).Round(time.Millisecond))

	type dist struct {
		name string
		zipf float64
	}
	for _, d := range []dist{{"uniform", 0}, {"zipf", p.Zipf}} {
		pr, err := pebbleGets(ctx, db, entries, d.zipf, p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(p.Log, "pebble %s: %.3g gets/s\n", d.name, pr)
		res.Report("pebble_get_"+d.name, pr, "lookups/s", "")
		if !p.SkipCPU {
			cr, err := cpuGets(ctx, tb, entries, d.zipf, p)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(p.Log, "cpu engine %s: %.3g gets/s\n", d.name, cr)
			res.Add("cpu_batch_get_"+d.name, cr, "lookups/s", "pebble point Gets, same keys, "+fmt.Sprint(p.Threads)+" goroutines", pr, false, "")
		}
		if p.GPU {
			gr, hit, name, err := gpuGets(ctx, tb, entries, d.zipf, p)
			if err != nil {
				return nil, err
			}
			res.Device = name
			fmt.Fprintf(p.Log, "gpu %s: %.3g gets/s (cache hit ratio %.2f)\n", d.name, gr, hit)
			res.Add("gpu_batch_get_"+d.name, gr, "lookups/s", "pebble point Gets, same keys, "+fmt.Sprint(p.Threads)+" goroutines", pr, false, ">= 10")
			res.Report("gpu_cache_hit_ratio_"+d.name, hit, "ratio", "")
		}
	}
	return res, nil
}

func pebbleKey(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

func valueBytes(v *Value) []byte {
	b := make([]byte, 0, 64)
	for _, w := range v {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

// pebbleGets runs point Gets from p.Threads goroutines for p.Duration.
func pebbleGets(ctx context.Context, db *pebble.DB, entries uint64, zipf float64, p Params) (float64, error) {
	var total atomic.Uint64
	var firstErr atomic.Pointer[error]
	deadline := time.Now().Add(p.Duration)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range p.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := newStream(entries, zipf, uint64(w)+1)
			key := make([]byte, 8)
			n := uint64(0)
			for ctx.Err() == nil {
				for range 256 {
					i := ks.next()
					binary.BigEndian.PutUint64(key, keyOf(i))
					v, closer, err := db.Get(key)
					if err == nil && (len(v) != 64 || binary.LittleEndian.Uint64(v[8:]) != i) {
						err = fmt.Errorf("pebble: key %d: wrong value", i)
					}
					if err != nil {
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					closer.Close()
					n++
				}
				if time.Now().After(deadline) {
					break
				}
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, *e
	}
	return float64(total.Load()) / time.Since(start).Seconds(), ctx.Err()
}

func batchOf(ks *keyStream, n int) ([]uint64, []uint64) {
	idx := make([]uint64, n)
	keys := make([]uint64, n)
	for i := range idx {
		idx[i] = ks.next()
		keys[i] = keyOf(idx[i])
	}
	return idx, keys
}

func checkBatch(idx []uint64, vals []Value, found []bool) error {
	for i, j := range idx {
		if !found[i] || vals[i] != valueOf(j) {
			return fmt.Errorf("kvbench: key index %d: found %v, value %v", j, found[i], vals[i])
		}
	}
	return nil
}

// cpuGets runs Table.GetMany from p.Threads goroutines (CPU engine).
func cpuGets(ctx context.Context, tb *kv.Table[uint64, Value], entries uint64, zipf float64, p Params) (float64, error) {
	batch := min(p.Batch, 4096)
	var total atomic.Uint64
	var firstErr atomic.Pointer[error]
	deadline := time.Now().Add(p.Duration)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range p.Threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := newStream(entries, zipf, uint64(w)+100)
			vals := make([]Value, batch)
			found := make([]bool, batch)
			checked := false
			for ctx.Err() == nil && time.Now().Before(deadline) {
				idx, keys := batchOf(ks, batch)
				err := tb.GetMany(ctx, keys, vals, found)
				if err == nil && !checked {
					err, checked = checkBatch(idx, vals, found), true
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				total.Add(uint64(batch))
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, *e
	}
	return float64(total.Load()) / time.Since(start).Seconds(), ctx.Err()
}

// gpuGets runs GPUTable.GetMany on rotating pre-generated batches: one
// warm-up pass, then timed passes for p.Duration; the first result is
// checked against the expected values.
func gpuGets(ctx context.Context, tb *kv.Table[uint64, Value], entries uint64, zipf float64, p Params) (rate, hit float64, device string, err error) {
	g, err := kv.NewGPU(tb, kv.GPUOptions{CacheBytes: p.CacheBytes, QueuePairs: p.QueuePairs})
	if err != nil {
		return 0, 0, "", err
	}
	defer g.Close()
	device = "GPU"
	if name, err := g.Engine().Context().Device().Name(); err == nil {
		device = name
	}
	ks := newStream(entries, zipf, 999)
	const nb = 4
	idx := make([][]uint64, nb)
	keys := make([][]uint64, nb)
	for i := range nb {
		idx[i], keys[i] = batchOf(ks, p.Batch)
	}
	vals := make([]Value, p.Batch)
	found := make([]bool, p.Batch)
	for i := range nb { // warm-up, and the check
		if err := g.GetMany(ctx, keys[i], vals, found); err != nil {
			return 0, 0, device, err
		}
		if err := checkBatch(idx[i], vals, found); err != nil {
			return 0, 0, device, err
		}
	}
	st0, _ := g.Engine().Stats()
	start := time.Now()
	var n uint64
	for i := 0; time.Since(start) < p.Duration; i++ {
		if err := g.GetMany(ctx, keys[i%nb], vals, found); err != nil {
			return 0, 0, device, err
		}
		n += uint64(p.Batch)
	}
	el := time.Since(start)
	st1, _ := g.Engine().Stats()
	if n > 0 {
		// Misses per lookup bounds the hit ratio of home-bucket acquisitions.
		hit = 1 - float64(st1.Misses-st0.Misses)/float64(n)
	}
	return float64(n) / el.Seconds(), max(hit, 0), device, nil
}

// quietLogger drops Pebble's informational messages.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
