package taxi

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/bam-go/bam/bench"
)

// BenchConfig configures Bench (benchmark A1).
type BenchConfig struct {
	Thresholds []float64 // distances of Q0–Q5 (default 30 and 20)
	Runs       int       // timed runs per figure, in rounds over all queries and engines; median reported (default 3)
	Workers    int       // goroutines of the host baseline (default GOMAXPROCS)
	// Log, when set, receives a line per measurement.
	Log func(format string, args ...any)
	// Host lists the host baselines (b). The first carries the speedup
	// goal. Default: the parallel Go columnar scan (RunMemory).
	Host []Baseline
}

// Baseline is a host engine benchmark A1 compares with.
type Baseline struct {
	ID   string // short name used in figure names, e.g. "duckdb"
	Desc string // what it is, for the figure's baseline field
	Run  func(ctx context.Context, q Query) (*Result, error)
}

// Bench runs benchmark A1 (BENCHMARKS.md) over table t: every query on
// the GPU engine with a cold cache, against (a) the same kernels with the
// columns in GPU memory and (b) the parallel Go columnar scan over the
// columns in host memory, after checking that all three agree. b must hold
// the query columns (LoadDirect); g is an open GPU over t.
func Bench(ctx context.Context, t *Table, b *Batch, g *GPU, cfg BenchConfig) (*bench.Result, error) {
	if len(cfg.Thresholds) == 0 {
		cfg.Thresholds = []float64{30, 20}
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	dev, err := g.e.Context().Device().Name()
	if err != nil {
		dev = "gpu"
	}
	if len(cfg.Host) == 0 {
		cfg.Host = []Baseline{{ID: "goscan", Desc: "parallel Go columnar scan, host memory",
			Run: func(ctx context.Context, q Query) (*Result, error) { return RunMemory(ctx, q, b, cfg.Workers) }}}
	}
	res := bench.NewResult("A1", dev)
	ec := g.e.Config()
	res.Params["rows"] = t.Rows
	res.Params["line_size"] = ec.LineSize
	scan, scanQueues, scanDepth := ec.LineSize, ec.QueuePairs, ec.QueueDepth
	for _, mc := range ec.MoreCaches {
		scan, scanQueues, scanDepth = mc.LineSize, mc.QueuePairs, mc.QueueDepth
	}
	res.Params["scan_line_size"] = scan
	res.Params["scan_queue_pairs"] = scanQueues
	res.Params["scan_queue_depth"] = scanDepth
	if info, err := t.s.Info(); err == nil {
		res.Params["store_line_size"] = info.LineSize
	}
	res.Params["file_map"] = g.fileMap.String()
	res.Params["match_batch"] = g.matchBatch
	res.Params["cache_bytes"] = ec.CacheBytes
	res.Params["queue_pairs"] = ec.QueuePairs
	res.Params["queue_depth"] = ec.QueueDepth
	res.Params["target_workers"] = ec.TargetWorkers
	res.Params["runs"] = cfg.Runs
	res.Params["thresholds"] = cfg.Thresholds
	var hosts []string
	for _, h := range cfg.Host {
		hosts = append(hosts, h.Desc)
	}
	res.Params["baselines_b"] = hosts
	res.Params["host_workers"] = cfg.Workers
	var cols []Col
	for _, id := range AllQueries {
		for _, c := range (Query{ID: id, Threshold: 1}).Columns() {
			if !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	if err := g.LoadResident(b, cols); err != nil {
		return nil, fmt.Errorf("taxi: bench: columns into GPU memory: %w", err)
	}
	var queries []Query
	for _, id := range AllQueries {
		if id[0] != 'q' {
			queries = append(queries, Query{ID: id})
			continue
		}
		for _, d := range cfg.Thresholds {
			queries = append(queries, Query{ID: id, Threshold: d})
		}
	}
	// Rounds: every run of every query on every engine comes in turn, so
	// that a stretch of a noisy host slows one run of each figure rather
	// than every run of one figure.
	type runs struct {
		host      [][]*Result
		mem, cold []*Result
	}
	all := make([]runs, len(queries))
	for i := range all {
		all[i].host = make([][]*Result, len(cfg.Host))
	}
	for round := range cfg.Runs {
		for i, q := range queries {
			for k, h := range cfg.Host {
				r, err := h.Run(ctx, q)
				if err != nil {
					return nil, fmt.Errorf("taxi: bench %s: %s: %w", q.ID, h.ID, err)
				}
				all[i].host[k] = append(all[i].host[k], r)
			}
			mem, err := g.RunResident(ctx, q)
			if err != nil {
				return nil, err
			}
			if err := g.Invalidate(ctx); err != nil {
				return nil, err
			}
			cold, err := g.Run(ctx, q)
			if err != nil {
				return nil, err
			}
			all[i].mem = append(all[i].mem, mem)
			all[i].cold = append(all[i].cold, cold)
		}
		logf("round %d of %d done", round+1, cfg.Runs)
	}
	samples := map[string][]float64{}
	for i, q := range queries {
		name := string(q.ID)
		if q.Selective() {
			name = fmt.Sprintf("%s_d%g", q.ID, q.Threshold)
		}
		rs := all[i]
		want := rs.host[0][0]
		others := append(slices.Clone(rs.mem), rs.cold...)
		for _, h := range rs.host {
			others = append(others, h...)
		}
		for _, r := range others {
			if err := SameAnswer(want, r); err != nil {
				return nil, fmt.Errorf("taxi: bench %s: %w", name, err)
			}
		}
		hostRes := make([]*Result, len(cfg.Host))
		for k := range cfg.Host {
			hostRes[k] = median(rs.host[k])
			samples[name+"_"+cfg.Host[k].ID] = seconds(rs.host[k])
		}
		mem, cold := median(rs.mem), median(rs.cold)
		samples[name+"_gpu_memory"] = seconds(rs.mem)
		samples[name+"_cold"] = seconds(rs.cold)
		goal := ""
		if q.Selective() && q.ID != Q0 && q.Threshold == 30 {
			goal = ">= 5"
		}
		for k, h := range cfg.Host {
			g := ""
			if k == 0 {
				g = goal
			}
			res.Add("time_"+name+"_cold_vs_"+h.ID+"_speedup", cold.Seconds, "s", h.Desc, hostRes[k].Seconds, true, g)
		}
		res.Add("time_"+name+"_cold_vs_gpu_memory_speedup", cold.Seconds, "s", "same kernel, columns in GPU memory", mem.Seconds, true, "")
		amp := cold.Amplification()
		ampGoal := ""
		if q.Selective() && q.Threshold == 30 {
			ampGoal = "<= 1.6"
		}
		res.Report("io_amplification_"+name, amp, "x", ampGoal)
		res.Report("bytes_read_"+name, float64(cold.BytesRead), "B", "")
		res.Report("gbps_read_"+name, float64(cold.BytesRead)/cold.Seconds/1e9, "GB/s", "")
		if q.Selective() {
			res.Report("matches_"+name, float64(cold.Count), "rows", "")
		}
		line := fmt.Sprintf("%-10s cold %8.4fs  gpu-mem %8.4fs", name, cold.Seconds, mem.Seconds)
		for k, h := range cfg.Host {
			line += fmt.Sprintf("  %s %8.4fs (%5.2fx)", h.ID, hostRes[k].Seconds, hostRes[k].Seconds/cold.Seconds)
		}
		logf("%s  amp %5.3f  read %s", line, amp, fmtBytes(cold.BytesRead))
	}
	res.Params["samples_s"] = samples
	return res, nil
}

// seconds lists the times of rs in run order.
func seconds(rs []*Result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.Seconds
	}
	return out
}

// median returns the result with the median time (the upper middle one
// of an even count).
func median(rs []*Result) *Result {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b *Result) int {
		return int(math.Copysign(1, a.Seconds-b.Seconds))
	})
	return rs[len(rs)/2]
}

// SameAnswer checks that r answers like want (counts exactly, sums to
// rounding).
func SameAnswer(want, r *Result) error {
	near := func(a, b float64) bool {
		if math.IsNaN(a) || math.IsNaN(b) {
			return math.IsNaN(a) == math.IsNaN(b)
		}
		return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b))
	}
	if r.Count != want.Count || !near(r.Value, want.Value) {
		return fmt.Errorf("%s: %d rows, value %v; %s: %d rows, value %v", r.Engine, r.Count, r.Value, want.Engine, want.Count, want.Value)
	}
	if len(r.Groups) != len(want.Groups) {
		return fmt.Errorf("%s: %d groups; %s: %d", r.Engine, len(r.Groups), want.Engine, len(want.Groups))
	}
	for i := range r.Groups {
		a, b := r.Groups[i], want.Groups[i]
		if a.CabType != b.CabType || a.Passengers != b.Passengers || a.Year != b.Year || a.Distance != b.Distance ||
			a.Count != b.Count || !near(a.Avg, b.Avg) {
			return fmt.Errorf("%s: group %+v; %s: %+v", r.Engine, a, want.Engine, b)
		}
	}
	return nil
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
