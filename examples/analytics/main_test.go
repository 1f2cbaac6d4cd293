package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
)

func TestParseCountAndSize(t *testing.T) {
	for s, want := range map[string]uint64{"500M": 500e6, "2G": 2e9, "1000": 1000, "1.5k": 1500} {
		if got, err := parseCount(s); err != nil || got != want {
			t.Errorf("parseCount(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for s, want := range map[string]uint64{"8GiB": 8 << 30, "512": 512, "4KiB": 4096, "1MB": 1e6} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"x", "-1M"} {
		if _, err := parseCount(s); err == nil {
			t.Errorf("parseCount(%q) succeeded", s)
		}
	}
}

// TestGenAndQuery runs the commands a user would: gen, then query with the
// CPU engine and the host scan, as JSON; both must agree.
func TestGenAndQuery(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	if err := runGen(ctx, []string{"--store", dir, "--rows", "100K", "--workers", "2", "--host-cache", "4MiB"}); err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]any{}
	for _, engine := range []string{"cpu", "memory"} {
		var buf bytes.Buffer
		if err := runQuery(ctx, []string{"--store", dir, "--engine", engine, "--q", "q1,b2", "--d", "1", "--json", "--workers", "2", "--host-cache", "4MiB"}, &buf); err != nil {
			t.Fatal(err)
		}
		var rs []map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rs); err != nil {
			t.Fatalf("%s: %v\n%s", engine, err, buf.String())
		}
		if len(rs) != 2 || rs[0]["count"].(float64) == 0 || len(rs[1]["groups"].([]any)) == 0 {
			t.Fatalf("%s: %s", engine, buf.String())
		}
		out[engine] = rs
	}
	if a, b := out["cpu"][0]["count"], out["memory"][0]["count"]; a != b {
		t.Errorf("q1 count: cpu %v, memory %v", a, b)
	}
	var buf bytes.Buffer
	if err := runQuery(ctx, []string{"--store", dir, "--engine", "memory", "--q", "b1", "--workers", "2"}, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("yellow")) {
		t.Errorf("table output lacks the yellow group:\n%s", buf.String())
	}
}
