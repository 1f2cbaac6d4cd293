package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv"
	"github.com/bam-go/bam/kv/kvbench"
)

func init() {
	register(&command{
		name:    "kv",
		usage:   "{load|get|put|del|stat|compact|bench} ...",
		summary: "key-value tables: load a file, get, put and delete keys, describe, compact, benchmark K1",
		run:     runKV,
	})
}

const kvUsage = `bam kv load    STORE TABLE FILE [--value-size N | --bytes] [--hex] [--sync]   lines "KEY VALUE"; creates TABLE if missing
bam kv get     STORE TABLE KEY... [--hex] [--json]
bam kv put     STORE TABLE KEY VALUE [--value-size N | --bytes] [--hex]       creates TABLE if missing; durable on return
bam kv del     STORE TABLE KEY...                                            durable on return
bam kv stat    STORE TABLE [--json] [--verify]
bam kv compact STORE TABLE [--json] [--min-dead RATIO]                       reclaim a bytes table's dead values
bam kv bench   [--json] [--gpu] [--cache 256MiB] [--factor 4] [--duration 5s] [--batch N] [--threads N] [--zipf 1.1] [--dir D] [--out bench/results]
KEY is an unsigned decimal integer (8-byte little-endian keys). VALUE is text, or hex with --hex.
A table is created with fixed-size values (--value-size N: shorter values are zero-padded) or with
values of any length up to 64 MiB kept in a value log (--bytes); later commands find out which.`

func runKV(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing subcommand\n%s", kvUsage)
	}
	switch args[0] {
	case "load":
		return runKVLoad(ctx, e, args[1:])
	case "get":
		return runKVGet(ctx, e, args[1:])
	case "put":
		return runKVPut(ctx, e, args[1:])
	case "del":
		return runKVDel(ctx, e, args[1:])
	case "stat":
		return runKVStat(ctx, e, args[1:])
	case "compact":
		return runKVCompact(ctx, e, args[1:])
	case "bench":
		return runKVBench(ctx, e, args[1:])
	}
	return usageErrorf("unknown subcommand %q\n%s", args[0], kvUsage)
}

// kvTable is what the commands need of a table of either variant, with
// 8-byte integer keys.
type kvTable interface {
	variant() string
	// parseValue turns a VALUE argument into the bytes to store.
	parseValue(s string, isHex bool) ([]byte, error)
	// format returns a value for text output.
	format(v []byte) string
	get(ctx context.Context, k uint64) ([]byte, bool, error)
	putMany(ctx context.Context, keys []uint64, vals [][]byte) error
	deleteMany(ctx context.Context, keys []uint64) error
	info() kv.Info
	verify(ctx context.Context) error
	close(ctx context.Context) error
}

type fixedTable struct{ t *kv.RawTable }

func (f fixedTable) variant() string { return kv.VariantFixed }

func (f fixedTable) parseValue(s string, isHex bool) ([]byte, error) {
	b, err := decodeValue(s, isHex)
	if err != nil {
		return nil, err
	}
	size := f.t.ValueSize()
	if len(b) > size {
		return nil, fmt.Errorf("value of %d bytes is longer than the table's %d-byte values", len(b), size)
	}
	out := make([]byte, size)
	copy(out, b)
	return out, nil
}

func (f fixedTable) format(v []byte) string { return strings.TrimRight(string(v), "\x00") }

func (f fixedTable) get(ctx context.Context, k uint64) ([]byte, bool, error) {
	return f.t.Get(ctx, keyBytes(k))
}

func (f fixedTable) putMany(ctx context.Context, keys []uint64, vals [][]byte) error {
	kb := make([][]byte, len(keys))
	for i, k := range keys {
		kb[i] = keyBytes(k)
	}
	return f.t.PutMany(ctx, kb, vals)
}

func (f fixedTable) deleteMany(ctx context.Context, keys []uint64) error {
	for _, k := range keys {
		if err := f.t.Delete(ctx, keyBytes(k)); err != nil {
			return err
		}
	}
	return nil
}

func (f fixedTable) info() kv.Info                    { return f.t.Info() }
func (f fixedTable) verify(ctx context.Context) error { return f.t.Verify(ctx) }
func (f fixedTable) close(ctx context.Context) error  { return f.t.Close(ctx) }

type bytesTable struct{ t *kv.BytesTable[uint64] }

func (b bytesTable) variant() string { return kv.VariantBytes }

func (b bytesTable) parseValue(s string, isHex bool) ([]byte, error) {
	v, err := decodeValue(s, isHex)
	if err != nil {
		return nil, err
	}
	if len(v) > kv.MaxValueSize {
		return nil, fmt.Errorf("value of %d bytes is longer than the largest value, %d bytes", len(v), kv.MaxValueSize)
	}
	return v, nil
}

// format prints printable text as it is and anything else quoted.
func (b bytesTable) format(v []byte) string {
	s := string(v)
	if strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) || r == utf8.RuneError }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func (b bytesTable) get(ctx context.Context, k uint64) ([]byte, bool, error) { return b.t.Get(ctx, k) }
func (b bytesTable) putMany(ctx context.Context, keys []uint64, vals [][]byte) error {
	return b.t.PutMany(ctx, keys, vals)
}
func (b bytesTable) deleteMany(ctx context.Context, keys []uint64) error {
	return b.t.DeleteMany(ctx, keys)
}
func (b bytesTable) info() kv.Info                    { return b.t.Info() }
func (b bytesTable) verify(ctx context.Context) error { return b.t.Verify(ctx) }
func (b bytesTable) close(ctx context.Context) error  { return b.t.Close(ctx) }

// createSpec is what the user asked for when the command creates missing
// tables: --value-size N (fixed) or --bytes. The zero value creates
// nothing.
type createSpec struct {
	creates   bool
	valueSize int
	bytes     bool
}

func (c createSpec) check() error {
	switch {
	case c.valueSize < 0:
		return usageErrorf("--value-size %d: want a positive size", c.valueSize)
	case c.valueSize > 0 && c.bytes:
		return usageErrorf("give --value-size N (fixed-size values) or --bytes (values of any length), not both")
	}
	return nil
}

// openKV opens TABLE as whichever variant the catalog says it is, creating
// it as spec says when it is missing.
func openKV(ctx context.Context, s *bam.Store, name string, spec createSpec, opts *kv.Options) (kvTable, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	variant, err := kv.VariantOf(s, name)
	switch {
	case errors.Is(err, bam.ErrNotFound) && spec.bytes:
		t, err := kv.CreateBytes[uint64](ctx, s, name, opts)
		if err != nil {
			return nil, err
		}
		return bytesTable{t}, nil
	case errors.Is(err, bam.ErrNotFound) && spec.valueSize > 0:
		t, err := kv.CreateRaw(ctx, s, name, 8, spec.valueSize, opts)
		if err != nil {
			return nil, err
		}
		return fixedTable{t}, nil
	case errors.Is(err, bam.ErrNotFound) && spec.creates:
		return nil, usageErrorf("table %q does not exist; give --value-size N (fixed-size values) or --bytes (values of any length) to create it", name)
	case err != nil:
		return nil, err
	}
	switch variant {
	case kv.VariantFixed:
		if spec.bytes {
			return nil, fmt.Errorf("table %q has fixed-size values; --bytes only applies when creating a table", name)
		}
		t, err := kv.OpenRaw(ctx, s, name, opts)
		if err != nil {
			return nil, err
		}
		if t.KeySize() != 8 {
			t.Close(ctx)
			return nil, fmt.Errorf("table %q has %d-byte keys; bam kv handles 8-byte integer keys", name, t.KeySize())
		}
		if spec.valueSize > 0 && spec.valueSize != t.ValueSize() {
			t.Close(ctx)
			return nil, fmt.Errorf("table %q has %d-byte values, not --value-size %d", name, t.ValueSize(), spec.valueSize)
		}
		return fixedTable{t}, nil
	case kv.VariantBytes:
		if spec.valueSize > 0 {
			return nil, fmt.Errorf("table %q holds values of any length (a --bytes table); drop --value-size", name)
		}
		t, err := kv.OpenBytes[uint64](ctx, s, name, opts)
		if errors.Is(err, kv.ErrTypeMismatch) {
			return nil, fmt.Errorf("table %q: bam kv handles bytes tables with uint64 keys: %w", name, err)
		}
		if err != nil {
			return nil, err
		}
		return bytesTable{t}, nil
	}
	return nil, fmt.Errorf("table %q is of the %q variant, which bam kv does not know", name, variant)
}

// openExisting opens TABLE without creating it, with a clear error when
// it is missing.
func openExisting(ctx context.Context, s *bam.Store, name string, opts *kv.Options) (kvTable, error) {
	t, err := openKV(ctx, s, name, createSpec{}, opts)
	if errors.Is(err, bam.ErrNotFound) {
		return nil, fmt.Errorf("table %q: %w", name, err)
	}
	return t, err
}

func keyBytes(k uint64) []byte { return binary.LittleEndian.AppendUint64(nil, k) }

func parseKey(s string) (uint64, error) {
	k, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageErrorf("key %q: want an unsigned decimal integer", s)
	}
	return k, nil
}

func decodeValue(s string, isHex bool) ([]byte, error) {
	if !isHex {
		return []byte(s), nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, usageErrorf("value %q: %v", s, err)
	}
	return b, nil
}

func runKVLoad(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv load")
	vsize := fs.Int("value-size", 0, "value size in bytes when creating a fixed-size table")
	asBytes := fs.Bool("bytes", false, "create a table of values of any length (value log)")
	isHex := fs.Bool("hex", false, "values are hex")
	sync := fs.Bool("sync", false, "sync the log after every batch (SyncWrites)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usageErrorf("give STORE TABLE FILE")
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openKV(ctx, s, pos[1], createSpec{true, *vsize, *asBytes}, &kv.Options{SyncWrites: *sync})
	if err != nil {
		return err
	}
	n, elapsed, err := loadFile(ctx, t, pos[2], *isHex)
	if err := errors.Join(err, t.close(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "loaded %d entries into %s in %v\n", n, pos[1], elapsed.Round(time.Millisecond))
	return nil
}

// loadFile puts the "KEY VALUE" lines of file into t in batches.
func loadFile(ctx context.Context, t kvTable, file string, isHex bool) (int, time.Duration, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var keys []uint64
	var vals [][]byte
	var batchBytes int
	n, lineNo := 0, 0
	start := time.Now()
	flush := func() error {
		err := t.putMany(ctx, keys, vals)
		n += len(keys)
		keys, vals, batchBytes = keys[:0], vals[:0], 0
		return err
	}
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ks, vs, _ := strings.Cut(line, " ")
		k, err := parseKey(ks)
		if err != nil {
			return n, 0, fmt.Errorf("%s:%d: %w", file, lineNo, err)
		}
		v, err := t.parseValue(strings.TrimSpace(vs), isHex)
		if err != nil {
			return n, 0, fmt.Errorf("%s:%d: %w", file, lineNo, err)
		}
		keys, vals = append(keys, k), append(vals, v)
		batchBytes += len(v)
		if len(keys) == 65536 || batchBytes >= 64<<20 {
			if err := flush(); err != nil {
				return n, 0, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, 0, fmt.Errorf("%s: %w", file, err)
	}
	if err := flush(); err != nil {
		return n, 0, err
	}
	return n, time.Since(start), nil
}

func runKVGet(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv get")
	isHex := fs.Bool("hex", false, "print values as hex")
	asJSON := fs.Bool("json", false, "print as JSON (values in hex)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	keys, err := parseTableKeys(pos)
	if err != nil {
		return err
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openExisting(ctx, s, pos[1], nil)
	if err != nil {
		return err
	}
	defer t.close(ctx)
	type entry struct {
		Key   string `json:"key"`
		Found bool   `json:"found"`
		Size  int    `json:"size"`
		Value string `json:"value,omitempty"`
	}
	var out []entry
	missing := 0
	for i, k := range keys {
		v, ok, err := t.get(ctx, k)
		if err != nil {
			return err
		}
		en := entry{Key: pos[2+i], Found: ok, Size: len(v)}
		if ok {
			if *isHex || *asJSON {
				en.Value = hex.EncodeToString(v)
			} else {
				en.Value = t.format(v)
			}
		} else {
			missing++
		}
		out = append(out, en)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		for _, en := range out {
			if en.Found {
				fmt.Fprintf(e.stdout, "%s\t%s\n", en.Key, en.Value)
			} else {
				fmt.Fprintf(e.stdout, "%s\t(not found)\n", en.Key)
			}
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d keys not found", missing, len(out))
	}
	return nil
}

func runKVPut(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv put")
	vsize := fs.Int("value-size", 0, "value size in bytes when creating a fixed-size table")
	asBytes := fs.Bool("bytes", false, "create a table of values of any length (value log)")
	isHex := fs.Bool("hex", false, "VALUE is hex")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 4 {
		return usageErrorf("give STORE TABLE KEY VALUE")
	}
	k, err := parseKey(pos[2])
	if err != nil {
		return err
	}
	if err := (createSpec{true, *vsize, *asBytes}).check(); err != nil {
		return err
	}
	if _, err := decodeValue(pos[3], *isHex); err != nil {
		return err
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openKV(ctx, s, pos[1], createSpec{true, *vsize, *asBytes}, &kv.Options{SyncWrites: true})
	if err != nil {
		return err
	}
	v, err := t.parseValue(pos[3], *isHex)
	if err == nil {
		err = t.putMany(ctx, []uint64{k}, [][]byte{v})
	}
	return errors.Join(err, t.close(ctx))
}

func runKVDel(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv del")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	keys, err := parseTableKeys(pos)
	if err != nil {
		return err
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openExisting(ctx, s, pos[1], &kv.Options{SyncWrites: true})
	if err != nil {
		return err
	}
	return errors.Join(t.deleteMany(ctx, keys), t.close(ctx))
}

// kvStat is bam kv stat's JSON: the table's Info, and for a bytes table
// its value log.
type kvStat struct {
	kv.Info
	ValueLog *kv.ValueLogStats `json:"value_log,omitempty"`
	Verified bool              `json:"verified,omitempty"`
}

func runKVStat(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv stat")
	asJSON := fs.Bool("json", false, "print as JSON")
	verify := fs.Bool("verify", false, "read every bucket (and every value of a bytes table) and check it")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErrorf("give STORE TABLE")
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openExisting(ctx, s, pos[1], nil)
	if err != nil {
		return err
	}
	defer t.close(ctx)
	if *verify {
		if err := t.verify(ctx); err != nil {
			return err
		}
	}
	st := kvStat{Info: t.info(), Verified: *verify}
	if b, ok := t.(bytesTable); ok {
		vs := b.t.ValueLogStats()
		st.ValueLog = &vs
	}
	if *asJSON {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
		return nil
	}
	info := st.Info
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s (%s)\n", info.Name, info.Variant)
	if st.ValueLog != nil {
		fmt.Fprintf(tw, "keys / values\t%d B (%s) / any length, in the value log\n", info.KeySize, info.KeyType)
	} else {
		fmt.Fprintf(tw, "keys / values\t%d B (%s) / %d B (%s)\n", info.KeySize, info.KeyType, info.ValueSize, info.ValueType)
	}
	fmt.Fprintf(tw, "entries\t%d\n", info.Len)
	fmt.Fprintf(tw, "buckets\t%d of %d B, %d slots each, load %.3f\n", info.Buckets, info.LineSize, info.SlotsPerLine, info.Load)
	fmt.Fprintf(tw, "log\t%s, %d B, checkpoint LSN %d, last LSN %d, %d records replayed at open\n", info.LogPath, info.LogBytes, info.CheckpointLSN, info.LastLSN, info.Stats.Replayed)
	if v := st.ValueLog; v != nil {
		fmt.Fprintf(tw, "value log\t%d segments, %d B: %d B live, %d B dead (%.1f%%)\n", v.Segments, v.FileBytes, v.LiveBytes, v.DeadBytes, 100*v.DeadRatio)
	}
	if *verify {
		fmt.Fprintf(tw, "verify\tok\n")
	}
	return tw.Flush()
}

func runKVCompact(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv compact")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	minDead := fs.Float64("min-dead", 0, "compact only when at least this fraction of the value log is dead (0..1)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageErrorf("give STORE TABLE")
	}
	if *minDead < 0 || *minDead > 1 {
		return usageErrorf("--min-dead %g: want a fraction between 0 and 1", *minDead)
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openExisting(ctx, s, pos[1], nil)
	if err != nil {
		return err
	}
	b, ok := t.(bytesTable)
	if !ok {
		t.close(ctx)
		return fmt.Errorf("table %q has fixed-size values in its buckets and no value log to compact; only --bytes tables are compacted", pos[1])
	}
	bar := newProgress(e, int64(b.t.ValueLogStats().LiveBytes), "compacting "+pos[1])
	res, err := b.t.Compact(ctx, &kv.CompactOptions{MinDeadRatio: *minDead, Progress: func(p kv.CompactProgress) {
		if bar != nil {
			bar.Set64(int64(p.Bytes))
		}
	}})
	if bar != nil {
		bar.Finish()
	}
	if err := errors.Join(err, t.close(ctx)); err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintln(e.stdout, string(out))
		return nil
	}
	if res.Skipped {
		fmt.Fprintf(e.stdout, "%s: not compacted: %d of %d value-log bytes dead (%.1f%%), --min-dead %g\n", pos[1],
			res.Before.DeadBytes, res.Before.LiveBytes+res.Before.DeadBytes, 100*res.Before.DeadRatio, *minDead)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: moved %d values (%d B), removed %d segments (%d B), reclaimed %d B in %v; value log now %d B\n",
		pos[1], res.Entries, res.MovedBytes, res.Segments, res.RemovedBytes, res.ReclaimedBytes,
		res.Duration.Round(time.Millisecond), res.After.FileBytes)
	return nil
}

func runKVBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv bench")
	jsonOut := fs.Bool("json", false, "print the result as JSON")
	out := fs.String("out", "bench/results", "directory for the result file (empty: do not write)")
	gpu := fs.Bool("gpu", false, "measure GPU batch Gets (needs a GPU)")
	cache := fs.String("cache", "256MiB", "GPU line cache (and Pebble block cache)")
	factor := fs.Float64("factor", 4, "table size / cache size")
	duration := fs.Duration("duration", 5*time.Second, "measuring time per figure")
	batch := fs.Int("batch", 0, "keys per GetMany (default 1Mi on the GPU, 4096 on the CPU)")
	threads := fs.Int("threads", 0, "goroutines for Pebble and the CPU engine (default all cores)")
	zipf := fs.Float64("zipf", 1.1, "Zipf exponent s > 1")
	dir := fs.String("dir", "", "directory for the store and Pebble (default: a temporary directory)")
	skipCPU := fs.Bool("skip-cpu", false, "skip the CPU-engine figures")
	queues := fs.Int("queues", 0, "NVMe queue pairs of the GPU engine (0: the engine's default)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	p := kvbench.Params{Dir: *dir, TableFactor: *factor, Duration: *duration, Batch: *batch, Threads: *threads,
		Zipf: *zipf, GPU: *gpu, SkipCPU: *skipCPU, QueuePairs: *queues}
	cb, err := parseSizeFlag(*cache, "--cache")
	if err != nil {
		return err
	}
	p.CacheBytes = uint64(cb)
	if !*jsonOut {
		p.Log = e.stderr
	}
	res, err := kvbench.Run(ctx, p)
	if err != nil {
		return err
	}
	return reportResult(e, res, fmt.Sprintf("%s on %s (%s, %d cores)", res.Benchmark, res.Device, res.Host.CPU, res.Host.Cores), *jsonOut, *out)
}

// parseTableKeys parses the KEY... arguments after STORE TABLE.
func parseTableKeys(pos []string) ([]uint64, error) {
	if len(pos) < 3 {
		return nil, usageErrorf("give STORE TABLE KEY...")
	}
	keys := make([]uint64, len(pos)-2)
	for i, ks := range pos[2:] {
		var err error
		if keys[i], err = parseKey(ks); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
