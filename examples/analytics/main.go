// Command analytics keeps NYC-taxi trip tables in a bam store and runs
// BaM's selective queries (Q0–Q5) and the four "billion taxi rides"
// queries (B1–B4) over them on the CPU engine, the GPU engine or columns in
// host memory; package taxi defines the tables and the queries.
//
//	analytics gen    --store DIR [--table trips] --rows 100M [--seed 1]
//	analytics import --store DIR [--table trips] FILE.parquet|FILE.csv ...
//	analytics query  --store DIR [--table trips] [--engine cpu|gpu|gpu-memory|memory|duckdb] [--q all] [--d 30] [--json]
//	analytics bench  --store DIR [--rows 500M] [--json] [--out bench/results]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/examples/analytics/duckbase"
	"github.com/bam-go/bam/examples/analytics/taxi"
	"github.com/bam-go/bam/internal/cpuprofile"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/nvme"
)

const usage = `usage: analytics <command> [flags]

commands:
  gen     generate a TLC-like table of --rows rows (deterministic in --seed)
  import  import TLC Parquet or CSV files as a table
  query   run queries and print their results, time and I/O
  bench   benchmark A1: GPU engine (cold cache) vs columns in GPU memory vs a host scan

run 'analytics <command> -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	stopProfile := cpuprofile.FromEnv("analytics", os.Stderr)
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "gen":
		err = runGen(ctx, args)
	case "import":
		err = runImport(ctx, args)
	case "query":
		err = runQuery(ctx, args, os.Stdout)
	case "bench":
		err = runBench(ctx, args, os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "analytics: unknown command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	stopProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "analytics: %v\n", err)
		os.Exit(1)
	}
}

// storeFlags are the flags every command takes.
type storeFlags struct {
	dir, table string
	line, lba  int
	cache      string
	workers    int
}

func (f *storeFlags) register(fs *flag.FlagSet) { f.registerLine(fs, 4096) }

// registerLine registers the flags with line as the default line size of a
// new store.
func (f *storeFlags) registerLine(fs *flag.FlagSet, line int) {
	fs.StringVar(&f.dir, "store", "", "store directory (required)")
	fs.StringVar(&f.table, "table", "trips", "table name")
	fs.IntVar(&f.line, "line", line, "line size of a new store")
	fs.IntVar(&f.lba, "lba", 512, "LBA size of a new store (512 lets the GPU engine use 512-byte lines)")
	fs.StringVar(&f.cache, "host-cache", "1GiB", "CPU engine line cache")
	fs.IntVar(&f.workers, "workers", runtime.GOMAXPROCS(0), "host goroutines")
}

// open opens the store, creating it with room for rows rows when missing
// and rows > 0.
func (f *storeFlags) open(ctx context.Context, rows uint64) (*bam.Store, error) {
	if f.dir == "" {
		return nil, errors.New("--store is required")
	}
	cache, err := parseSize(f.cache)
	if err != nil {
		return nil, fmt.Errorf("--host-cache: %w", err)
	}
	opts := bam.Options{CacheBytes: int64(cache), Engine: bam.EngineCPU, Workers: f.workers}
	s, err := bam.Open(ctx, f.dir, opts)
	if err == nil || !errors.Is(err, bam.ErrNotFound) || rows == 0 {
		return s, err
	}
	// One namespace: the GPU engine may then use lines smaller than the store's.
	size := int64(float64(rows)*60) + 256<<20
	return bam.Create(ctx, f.dir, bam.CreateOptions{Options: opts, NamespaceSize: size, LineSize: f.line, LBASize: f.lba})
}

func runGen(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	var sf storeFlags
	sf.register(fs)
	rowsFlag := fs.String("rows", "1M", "rows to generate (K, M, G suffixes)")
	seed := fs.Uint64("seed", 1, "generator seed")
	overwrite := fs.Bool("overwrite", false, "replace an existing table")
	fs.Parse(args)
	rows, err := parseCount(*rowsFlag)
	if err != nil {
		return fmt.Errorf("--rows: %w", err)
	}
	s, err := sf.open(ctx, rows)
	if err != nil {
		return err
	}
	defer s.Close()
	start := time.Now()
	if _, err := taxi.Generate(ctx, s, sf.table, taxi.GenOptions{Rows: rows, Seed: *seed, Workers: sf.workers,
		Overwrite: *overwrite, Progress: progress("gen", rows)}); err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "\ngenerated %d rows in %v (%.1f M rows/s)\n", rows, el.Round(time.Millisecond), float64(rows)/el.Seconds()/1e6)
	return s.Close()
}

func runImport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("import", flag.ExitOnError)
	var sf storeFlags
	sf.register(fs)
	cab := fs.String("cab", "", "cab type of files without a cab_type column: yellow or green (default: from the file name)")
	overwrite := fs.Bool("overwrite", false, "replace an existing table")
	fs.Parse(args)
	files := fs.Args()
	if len(files) == 0 {
		return errors.New("import: no files")
	}
	opts := taxi.ImportOptions{Overwrite: *overwrite}
	switch *cab {
	case "":
	case "yellow":
		opts.CabType = new(uint8)
	case "green":
		v := taxi.CabGreen
		opts.CabType = &v
	default:
		return fmt.Errorf("--cab %q: want yellow or green", *cab)
	}
	var size int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		size += st.Size()
	}
	// Room for about 4 rows per byte of input, far more than TLC files hold.
	s, err := sf.open(ctx, uint64(size)*4+1<<20)
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := taxi.Import(ctx, s, sf.table, files, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imported %d rows from %d files into %s\n", t.Rows, len(files), sf.table)
	return s.Close()
}

// gpuFlags configure the GPU engine.
type gpuFlags struct {
	line, scanLine, queues, scanQueues, depth, targetWorkers, matchBatch int
	cache, fileMap                                                       string
	timeout                                                              time.Duration
}

func (f *gpuFlags) register(fs *flag.FlagSet) {
	// 512 bytes for the columns Q1–Q5 read at matching rows only: a
	// 0.03 % query reads 3.8 % of their lines (7.4 % with 1 KiB lines;
	// I/O amplification 1.19 against 1.37 on Q5), and the scanned columns
	// have their own cache of larger lines (--scan-line). With the queue
	// pairs split as package taxi's defaults, Q1 took 0.066 s with
	// 512-byte lines against 0.081 s with 1 KiB (bench/results A1).
	fs.IntVar(&f.line, "gpu-line", 512, "GPU cache line size (a one-namespace store allows lines below the store's)")
	fs.IntVar(&f.scanLine, "scan-line", 0, "line size of the cache of the columns queries read whole (0: the store's line size; equal to --gpu-line: one cache)")
	fs.StringVar(&f.cache, "gpu-cache", "8GiB", "GPU cache size (each cache)")
	fs.IntVar(&f.matchBatch, "match-batch", taxi.DefaultMatchBatch, "amount reads of Q1–Q5 (matching rows times amount columns) a warp gathers before making them together (1 to 32)")
	fs.IntVar(&f.queues, "queues", 0, "NVMe queue pairs of the GPU engine's default cache, the amounts' when the scanned columns have their own (0: package taxi's or the engine's default)")
	fs.IntVar(&f.scanQueues, "scan-queues", 0, "NVMe queue pairs of the scanned columns' cache, when it is one of its own (0: package taxi's default)")
	fs.IntVar(&f.depth, "depth", 0, "queue depth (0: engine default)")
	fs.IntVar(&f.targetWorkers, "target-workers", 0, "host threads serving the queues (0: engine default)")
	fs.DurationVar(&f.timeout, "timeout", 0, "bound of every device wait (0: engine default)")
	fs.StringVar(&f.fileMap, "file-map", "auto", "how host threads read the namespace files: auto, on (copy from a mapping) or off (one preadv2 per line)")
}

func (f *gpuFlags) open(t *taxi.Table) (*taxi.GPU, error) {
	cache, err := parseSize(f.cache)
	if err != nil {
		return nil, fmt.Errorf("--gpu-cache: %w", err)
	}
	m, ok := map[string]nvme.MapMode{"auto": nvme.MapAuto, "on": nvme.MapOn, "off": nvme.MapOff}[f.fileMap]
	if !ok {
		return nil, fmt.Errorf("--file-map %q: want auto, on or off", f.fileMap)
	}
	return taxi.OpenGPU(t, taxi.GPUConfig{Engine: gpuengine.Config{LineSize: f.line, CacheBytes: cache,
		QueuePairs: f.queues, QueueDepth: f.depth, TargetWorkers: f.targetWorkers, Timeout: f.timeout}, FileMap: m, ScanLineSize: f.scanLine, ScanQueuePairs: f.scanQueues, MatchBatch: f.matchBatch})
}

func parseQueries(list, thresholds string) ([]taxi.Query, error) {
	var ds []float64
	for _, s := range strings.Split(thresholds, ",") {
		d, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("--d %q: %w", s, err)
		}
		ds = append(ds, d)
	}
	var ids []taxi.QueryID
	if list == "all" {
		ids = taxi.AllQueries
	} else {
		for _, s := range strings.Split(list, ",") {
			id, err := taxi.ParseQueryID(strings.TrimSpace(s))
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
	}
	var qs []taxi.Query
	for _, id := range ids {
		q := taxi.Query{ID: id}
		if !q.Selective() {
			qs = append(qs, q)
			continue
		}
		for _, d := range ds {
			q.Threshold = d
			if err := q.Validate(); err != nil {
				return nil, err
			}
			qs = append(qs, q)
		}
	}
	return qs, nil
}

func runQuery(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("query", flag.ExitOnError)
	var sf storeFlags
	var gf gpuFlags
	sf.register(fs)
	gf.register(fs)
	engine := fs.String("engine", "cpu", "cpu (store's CPU engine, cold cache), gpu (GPU engine, cold cache), gpu-memory (columns in GPU memory), memory (parallel Go scan of columns in host memory) or duckdb")
	list := fs.String("q", "all", "queries: all, or a list of q0..q5, b1..b4")
	ds := fs.String("d", "30", "trip distance thresholds of Q0–Q5 (comma-separated)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Parse(args)
	qs, err := parseQueries(*list, *ds)
	if err != nil {
		return err
	}
	s, err := sf.open(ctx, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := taxi.Open(s, sf.table)
	if err != nil {
		return err
	}
	var run func(q taxi.Query) (*taxi.Result, error)
	switch *engine {
	case "cpu":
		// A fresh store per query, so that each starts with a cold line cache.
		s.Close()
		run = func(q taxi.Query) (*taxi.Result, error) {
			s, err := sf.open(ctx, 0)
			if err != nil {
				return nil, err
			}
			defer s.Close()
			t, err := taxi.Open(s, sf.table)
			if err != nil {
				return nil, err
			}
			return taxi.RunCPU(ctx, t, q, sf.workers)
		}
	case "memory":
		b, err := t.LoadDirect(ctx, queryCols(qs), sf.workers)
		if err != nil {
			return err
		}
		run = func(q taxi.Query) (*taxi.Result, error) { return taxi.RunMemory(ctx, q, b, sf.workers) }
	case "duckdb":
		b, err := t.LoadDirect(ctx, queryCols(qs), sf.workers)
		if err != nil {
			return err
		}
		db, err := duckbase.Load(ctx, b, queryCols(qs), sf.workers)
		if err != nil {
			return err
		}
		defer db.Close()
		run = func(q taxi.Query) (*taxi.Result, error) { return db.Run(ctx, q) }
	case "gpu", "gpu-memory":
		g, err := gf.open(t)
		if err != nil {
			return err
		}
		defer g.Close()
		if *engine == "gpu" {
			run = func(q taxi.Query) (*taxi.Result, error) {
				if err := g.Invalidate(ctx); err != nil {
					return nil, err
				}
				return g.Run(ctx, q)
			}
		} else {
			b, err := t.LoadDirect(ctx, queryCols(qs), sf.workers)
			if err != nil {
				return err
			}
			if err := g.LoadResident(b, queryCols(qs)); err != nil {
				return err
			}
			run = func(q taxi.Query) (*taxi.Result, error) { return g.RunResident(ctx, q) }
		}
	default:
		return fmt.Errorf("--engine %q: want cpu, gpu, gpu-memory, memory or duckdb", *engine)
	}
	var results []*taxi.Result
	for _, q := range qs {
		r, err := run(q)
		if err != nil {
			return err
		}
		results = append(results, r)
		if !*asJSON {
			printResult(out, r)
		}
	}
	if *asJSON {
		return writeJSON(out, results)
	}
	return nil
}

func queryCols(qs []taxi.Query) []taxi.Col {
	seen := map[taxi.Col]bool{}
	var cols []taxi.Col
	for _, q := range qs {
		for _, c := range q.Columns() {
			if !seen[c] {
				seen[c] = true
				cols = append(cols, c)
			}
		}
	}
	return cols
}

func printResult(w io.Writer, r *taxi.Result) {
	fmt.Fprintf(w, "%s\n", r.Text)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	if r.Groups == nil {
		if r.Query == taxi.Q0 {
			fmt.Fprintf(tw, "trips\t\n%d\t\n", r.Count)
		} else {
			fmt.Fprintf(tw, "trips\tsum(amount)\tsum(distance)\t$/mile\t\n%d\t%.2f\t%.2f\t%s\t\n", r.Count, r.SumAmount, r.SumDistance, fmtFloat(r.Value))
		}
	} else {
		for _, g := range r.Groups {
			fmt.Fprintln(tw, groupLine(r.Query, g))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "engine %s  time %.4fs  read %d B  needed %d B  I/O amplification %.3f\n\n",
		r.Engine, r.Seconds, r.BytesRead, r.BytesNeeded, r.Amplification())
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return "NULL"
	}
	return strconv.FormatFloat(v, 'f', 4, 64)
}

func nullInt(v, null int64) string {
	if v == null {
		return "NULL"
	}
	return strconv.FormatInt(v, 10)
}

func groupLine(q taxi.QueryID, g taxi.Group) string {
	pc := nullInt(int64(g.Passengers), -1)
	year := nullInt(int64(g.Year), 0)
	switch q {
	case taxi.B1:
		return fmt.Sprintf("%s\t%d\t", taxi.CabTypeName(uint8(g.CabType)), g.Count)
	case taxi.B2:
		return fmt.Sprintf("%s\t%s\t", pc, fmtFloat(g.Avg))
	case taxi.B3:
		return fmt.Sprintf("%s\t%s\t%d\t", pc, year, g.Count)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%d\t", pc, year, nullInt(g.Distance, taxi.DistNull), g.Count)
}

// jsonResult is a result as --json prints it: NULLs as null.
type jsonResult struct {
	*taxi.Result
	Value         *float64         `json:"value,omitempty"`
	Amplification float64          `json:"io_amplification"`
	Groups        []map[string]any `json:"groups,omitempty"`
}

func writeJSON(w io.Writer, rs []*taxi.Result) error {
	out := make([]jsonResult, len(rs))
	for i, r := range rs {
		j := jsonResult{Result: r, Amplification: r.Amplification()}
		if r.Groups == nil && !math.IsNaN(r.Value) {
			v := r.Value
			j.Value = &v
		}
		for _, g := range r.Groups {
			m := map[string]any{"count": g.Count}
			nullable := func(k string, v, null int64) {
				if v == null {
					m[k] = nil
				} else {
					m[k] = v
				}
			}
			switch r.Query {
			case taxi.B1:
				m["cab_type"] = taxi.CabTypeName(uint8(g.CabType))
			case taxi.B2:
				nullable("passenger_count", int64(g.Passengers), -1)
				if math.IsNaN(g.Avg) {
					m["avg_total_amount"] = nil
				} else {
					m["avg_total_amount"] = g.Avg
				}
			case taxi.B3, taxi.B4:
				nullable("passenger_count", int64(g.Passengers), -1)
				nullable("year", int64(g.Year), 0)
				if r.Query == taxi.B4 {
					nullable("distance", g.Distance, taxi.DistNull)
				}
			}
			j.Groups = append(j.Groups, m)
		}
		out[i] = j
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func runBench(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	var sf storeFlags
	var gf gpuFlags
	// A new benchmark store gets 16 KiB lines: the GPU engine scans
	// whole columns through a cache of the store's line size (--scan-line)
	// and reads the amounts at matching rows through 512-byte lines
	// (--gpu-line), so larger store lines cost those reads nothing. Q1
	// took 0.087 s with 16 KiB lines against 0.11-0.14 s with 4 KiB
	// (bench/results/logs/a1-line-sweeps-H200-20261123.txt). The CPU
	// engine, which reads whole store lines, is not part of A1.
	sf.registerLine(fs, 16384)
	gf.register(fs)
	rowsFlag := fs.String("rows", "500M", "rows of the benchmark table (generated when the table is missing or has another size)")
	seed := fs.Uint64("seed", 1, "generator seed")
	ds := fs.String("d", "30", "trip distance thresholds of Q0–Q5 (comma-separated; 30 carries the goals, add 20 for 0.47 % selectivity)")
	runs := fs.Int("runs", 3, "timed runs per figure (median)")
	outDir := fs.String("out", "bench/results", "directory of the JSON result")
	baselines := fs.String("baseline", "duckdb,goscan", "host baselines (b), the first carrying the goal: duckdb, goscan")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	fs.Parse(args)
	rows, err := parseCount(*rowsFlag)
	if err != nil {
		return fmt.Errorf("--rows: %w", err)
	}
	var thresholds []float64
	for _, s := range strings.Split(*ds, ",") {
		d, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("--d: %w", err)
		}
		thresholds = append(thresholds, d)
	}
	s, err := sf.open(ctx, rows)
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := taxi.Open(s, sf.table)
	if err != nil || t.Rows != rows {
		start := time.Now()
		if t, err = taxi.Generate(ctx, s, sf.table, taxi.GenOptions{Rows: rows, Seed: *seed, Workers: sf.workers,
			Overwrite: true, Progress: progress("gen", rows)}); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "\ngenerated %d rows in %v\n", rows, time.Since(start).Round(time.Millisecond))
	}
	start := time.Now()
	var cols []taxi.Col
	for _, id := range taxi.AllQueries {
		for _, c := range (taxi.Query{ID: id, Threshold: 1}).Columns() {
			if !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	b, err := t.LoadDirect(ctx, cols, sf.workers)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "loaded the query columns into host memory in %v\n", time.Since(start).Round(time.Millisecond))
	var hosts []taxi.Baseline
	for _, name := range strings.Split(*baselines, ",") {
		switch name {
		case "goscan":
			hosts = append(hosts, taxi.Baseline{ID: "goscan", Desc: fmt.Sprintf("parallel Go columnar scan, host memory, %d goroutines", sf.workers),
				Run: func(ctx context.Context, q taxi.Query) (*taxi.Result, error) {
					return taxi.RunMemory(ctx, q, b, sf.workers)
				}})
		case "duckdb":
			start := time.Now()
			db, err := duckbase.Load(ctx, b, cols, sf.workers)
			if err != nil {
				return err
			}
			defer db.Close()
			fmt.Fprintf(os.Stderr, "loaded DuckDB in %v\n", time.Since(start).Round(time.Millisecond))
			hosts = append(hosts, taxi.Baseline{ID: "duckdb", Desc: fmt.Sprintf("DuckDB %s, in-memory table, %d threads", duckbase.Version, sf.workers), Run: db.Run})
		default:
			return fmt.Errorf("--baseline %q: want duckdb or goscan", name)
		}
	}
	g, err := gf.open(t)
	if err != nil {
		return err
	}
	defer g.Close()
	res, err := taxi.Bench(ctx, t, b, g, taxi.BenchConfig{Thresholds: thresholds, Runs: *runs, Workers: sf.workers, Host: hosts,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return err
	}
	res.Params["seed"] = *seed
	path, err := res.WriteFile(*outDir)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "figure\tvalue\tunit\tbaseline\tratio\tgoal")
		for _, f := range res.Figures {
			fmt.Fprintf(tw, "%s\t%.4g\t%s\t%.4g\t%.3g\t%s\n", f.Name, f.Value, f.Unit, f.BaselineValue, f.Ratio, f.Goal)
		}
		tw.Flush()
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", filepath.Clean(path))
	return nil
}

// progress prints a progress line to a terminal, nothing otherwise.
func progress(what string, total uint64) func(uint64) {
	st, err := os.Stderr.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var last time.Time
	return func(done uint64) {
		if now := time.Now(); now.Sub(last) > 200*time.Millisecond || done == total {
			last = now
			fmt.Fprintf(os.Stderr, "\r%s: %d / %d rows (%.0f%%)", what, done, total, 100*float64(done)/float64(total))
		}
	}
}

// parseCount parses 500M, 2G, 1000 (K, M, G are powers of ten).
func parseCount(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult = 1e3
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult = 1e6
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult = 1e9
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("count %q", s)
	}
	return uint64(v * float64(mult)), nil
}

// parseSize parses 512, 4KiB, 8GiB, 1MB.
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("size %q", s)
			}
			return uint64(n * float64(u.mult)), nil
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q", s)
	}
	return n, nil
}
