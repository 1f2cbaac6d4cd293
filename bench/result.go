// Package bench owns the result format every benchmark writes: one JSON file
// per run under bench/results, named <id>-<device>-<yyyymmdd>.json, with the
// schema of BENCHMARKS.md. It measures nothing itself.
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Result is one benchmark run.
type Result struct {
	Benchmark string         `json:"benchmark"`
	Variant   string         `json:"variant,omitempty"` // a part of the benchmark run on its own (G1's graph kind); names the file too
	Device    string         `json:"device"`
	Host      Host           `json:"host"`
	Commit    string         `json:"commit"`
	Date      string         `json:"date"`
	Params    map[string]any `json:"params"`
	Figures   []Figure       `json:"figures"`
}

// Host describes the machine the benchmark ran on.
type Host struct {
	CPU   string `json:"cpu"`
	Cores int    `json:"cores"`
}

// Figure is one measured number with its baseline.
type Figure struct {
	Name          string  `json:"name"`
	Value         float64 `json:"value"`
	Unit          string  `json:"unit"`
	Baseline      string  `json:"baseline,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	Goal          string  `json:"goal,omitempty"`
}

// NewResult starts a result for benchmark id on device ("cpu" for CPU-only
// runs), filling host, commit and date.
func NewResult(id, device string) *Result {
	return &Result{
		Benchmark: id,
		Device:    device,
		Host:      ThisHost(),
		Commit:    Commit(),
		Date:      time.Now().UTC().Format(time.RFC3339),
		Params:    map[string]any{},
	}
}

// Add appends a figure with a baseline; ratio = value / baseline. For
// figures where smaller is better pass inverse=true: ratio = baseline/value.
func (r *Result) Add(name string, value float64, unit, baseline string, baselineValue float64, inverse bool, goal string) {
	f := Figure{Name: name, Value: value, Unit: unit, Baseline: baseline, BaselineValue: baselineValue, Goal: goal}
	switch {
	case baselineValue == 0 || value == 0:
	case inverse:
		f.Ratio = baselineValue / value
	default:
		f.Ratio = value / baselineValue
	}
	r.Figures = append(r.Figures, f)
}

// Report appends a figure with no baseline.
func (r *Result) Report(name string, value float64, unit, goal string) {
	r.Figures = append(r.Figures, Figure{Name: name, Value: value, Unit: unit, Goal: goal})
}

// FileName is the result's file name: <id>[-<variant>]-<device>-<yyyymmdd>.json.
func (r *Result) FileName() string {
	dev := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.':
			return c
		}
		return '-'
	}, r.Device)
	day := time.Now().UTC().Format("20060102")
	if t, err := time.Parse(time.RFC3339, r.Date); err == nil {
		day = t.Format("20060102")
	}
	id := r.Benchmark
	if r.Variant != "" {
		id += "-" + r.Variant
	}
	return fmt.Sprintf("%s-%s-%s.json", id, dev, day)
}

// WriteFile writes the result as indented JSON into dir, creating it, and
// returns the path.
func (r *Result) WriteFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("bench: encode %s: %w", r.Benchmark, err)
	}
	p := filepath.Join(dir, r.FileName())
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return p, nil
}

// ThisHost reads the CPU model from /proc/cpuinfo where it exists.
func ThisHost() Host {
	h := Host{CPU: runtime.GOARCH, Cores: runtime.NumCPU()}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return h
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			h.CPU = strings.TrimSpace(v)
			break
		}
	}
	return h
}

// Commit returns the git commit being measured: $BAM_COMMIT when set (a
// binary carried to another machine has no repository beside it), else the
// embedded VCS revision, else `git rev-parse HEAD`, else "unknown".
func Commit() string {
	if c := os.Getenv("BAM_COMMIT"); c != "" {
		return c
	}
	if c := vcsRevision(); c != "" {
		return c
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "unknown"
}
