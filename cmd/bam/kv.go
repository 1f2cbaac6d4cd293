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

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv"
	"github.com/bam-go/bam/kv/kvbench"
)

func init() {
	register(&command{
		name:    "kv",
		usage:   "{load|get|put|stat|bench} ...",
		summary: "key-value tables: load a file, get and put keys, describe a table, benchmark K1",
		run:     runKV,
	})
}

const kvUsage = `bam kv load  STORE TABLE FILE [--value-size N] [--hex] [--sync]   lines "KEY VALUE"; creates TABLE if missing
bam kv get   STORE TABLE KEY... [--hex] [--json]
bam kv put   STORE TABLE KEY VALUE [--value-size N] [--hex]       creates TABLE if missing; durable on return
bam kv stat  STORE TABLE [--json] [--verify]
bam kv bench [--json] [--gpu] [--cache 256MiB] [--factor 4] [--duration 5s] [--batch N] [--threads N] [--zipf 1.1] [--dir D] [--out bench/results]
KEY is an unsigned decimal integer (8-byte little-endian keys). VALUE is text, or hex with --hex;
shorter values are zero-padded to the table's value size.`

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
	case "stat":
		return runKVStat(ctx, e, args[1:])
	case "bench":
		return runKVBench(ctx, e, args[1:])
	}
	return usageErrorf("unknown subcommand %q\n%s", args[0], kvUsage)
}

// openOrCreate opens TABLE, creating it with 8-byte keys and valueSize-byte
// values when missing (valueSize 0: refuse).
func openOrCreate(ctx context.Context, s *bam.Store, name string, valueSize int, opts *kv.Options) (*kv.RawTable, error) {
	t, err := kv.OpenRaw(ctx, s, name, opts)
	if err == nil || !errors.Is(err, bam.ErrNotFound) {
		if err == nil && t.KeySize() != 8 {
			t.Close(ctx)
			return nil, fmt.Errorf("table %q has %d-byte keys; bam kv handles 8-byte integer keys", name, t.KeySize())
		}
		return t, err
	}
	if valueSize <= 0 {
		return nil, usageErrorf("table %q does not exist; give --value-size to create it", name)
	}
	return kv.CreateRaw(ctx, s, name, 8, valueSize, opts)
}

func parseKey(s string) ([]byte, error) {
	k, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return nil, usageErrorf("key %q: want an unsigned decimal integer", s)
	}
	return binary.LittleEndian.AppendUint64(nil, k), nil
}

func parseValue(s string, size int, isHex bool) ([]byte, error) {
	b := []byte(s)
	if isHex {
		var err error
		if b, err = hex.DecodeString(s); err != nil {
			return nil, usageErrorf("value %q: %v", s, err)
		}
	}
	if len(b) > size {
		return nil, fmt.Errorf("value of %d bytes is longer than the table's %d-byte values", len(b), size)
	}
	out := make([]byte, size)
	copy(out, b)
	return out, nil
}

func runKVLoad(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv load")
	vsize := fs.Int("value-size", 0, "value size in bytes when creating the table")
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
	t, err := openOrCreate(ctx, s, pos[1], *vsize, &kv.Options{SyncWrites: *sync})
	if err != nil {
		return err
	}
	f, err := os.Open(pos[2])
	if err != nil {
		t.Close(ctx)
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var keys, vals [][]byte
	n, lineNo := 0, 0
	start := time.Now()
	flush := func() error {
		err := t.PutMany(ctx, keys, vals)
		n += len(keys)
		keys, vals = keys[:0], vals[:0]
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
			t.Close(ctx)
			return fmt.Errorf("%s:%d: %w", pos[2], lineNo, err)
		}
		v, err := parseValue(strings.TrimSpace(vs), t.ValueSize(), *isHex)
		if err != nil {
			t.Close(ctx)
			return fmt.Errorf("%s:%d: %w", pos[2], lineNo, err)
		}
		keys, vals = append(keys, k), append(vals, v)
		if len(keys) == 65536 {
			if err := flush(); err != nil {
				t.Close(ctx)
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Close(ctx)
		return err
	}
	if err := flush(); err != nil {
		t.Close(ctx)
		return err
	}
	if err := t.Close(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "loaded %d entries into %s in %v\n", n, pos[1], time.Since(start).Round(time.Millisecond))
	return nil
}

func runKVGet(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv get")
	isHex := fs.Bool("hex", false, "print values as hex")
	asJSON := fs.Bool("json", false, "print as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 3 {
		return usageErrorf("give STORE TABLE KEY...")
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := kv.OpenRaw(ctx, s, pos[1], nil)
	if err != nil {
		return err
	}
	defer t.Close(ctx)
	type entry struct {
		Key   string `json:"key"`
		Found bool   `json:"found"`
		Value string `json:"value,omitempty"`
	}
	var out []entry
	missing := 0
	for _, ks := range pos[2:] {
		k, err := parseKey(ks)
		if err != nil {
			return err
		}
		v, ok, err := t.Get(ctx, k)
		if err != nil {
			return err
		}
		en := entry{Key: ks, Found: ok}
		if ok {
			if *isHex || *asJSON {
				en.Value = hex.EncodeToString(v)
			} else {
				en.Value = strings.TrimRight(string(v), "\x00")
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
	vsize := fs.Int("value-size", 0, "value size in bytes when creating the table")
	isHex := fs.Bool("hex", false, "VALUE is hex")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 4 {
		return usageErrorf("give STORE TABLE KEY VALUE")
	}
	s, err := openStoreRW(ctx, pos[0])
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := openOrCreate(ctx, s, pos[1], *vsize, &kv.Options{SyncWrites: true})
	if err != nil {
		return err
	}
	k, err := parseKey(pos[2])
	if err != nil {
		t.Close(ctx)
		return err
	}
	v, err := parseValue(pos[3], t.ValueSize(), *isHex)
	if err != nil {
		t.Close(ctx)
		return err
	}
	if err := t.PutMany(ctx, [][]byte{k}, [][]byte{v}); err != nil {
		t.Close(ctx)
		return err
	}
	return t.Close(ctx)
}

func runKVStat(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "kv stat")
	asJSON := fs.Bool("json", false, "print as JSON")
	verify := fs.Bool("verify", false, "read every bucket and check it")
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
	t, err := kv.OpenRaw(ctx, s, pos[1], nil)
	if err != nil {
		return err
	}
	defer t.Close(ctx)
	if *verify {
		if err := t.Verify(ctx); err != nil {
			return err
		}
	}
	info := t.Info()
	if *asJSON {
		b, _ := json.MarshalIndent(info, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", info.Name)
	fmt.Fprintf(tw, "keys / values\t%d B (%s) / %d B (%s)\n", info.KeySize, info.KeyType, info.ValueSize, info.ValueType)
	fmt.Fprintf(tw, "entries\t%d\n", info.Len)
	fmt.Fprintf(tw, "buckets\t%d of %d B, %d slots each, load %.3f\n", info.Buckets, info.LineSize, info.SlotsPerLine, info.Load)
	fmt.Fprintf(tw, "log\t%s, %d B, checkpoint LSN %d, last LSN %d, %d records replayed at open\n", info.LogPath, info.LogBytes, info.CheckpointLSN, info.LastLSN, info.Stats.Replayed)
	if *verify {
		fmt.Fprintf(tw, "verify\tok\n")
	}
	return tw.Flush()
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
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	p := kvbench.Params{Dir: *dir, TableFactor: *factor, Duration: *duration, Batch: *batch, Threads: *threads,
		Zipf: *zipf, GPU: *gpu, SkipCPU: *skipCPU}
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
