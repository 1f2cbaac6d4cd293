package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bam-go/bam/examples/graph/graph"
)

func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), args, &out, &errw)
	return out.String() + errw.String(), code
}

func TestCLI(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if out, code := runCLI(t, "gen", store, "k", "--scale", "10", "--store-size", "64MiB"); code != 0 {
		t.Fatalf("gen: %d %s", code, out)
	}
	edges := filepath.Join(dir, "e.txt")
	if err := os.WriteFile(edges, []byte("# test\n0 1\n1 2\n2 0\n4 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "import", store, "tri", edges, "--symmetrize", "--json"); code != 0 || !strings.Contains(out, `"vertices": 6`) {
		t.Fatalf("import: %d %s", code, out)
	}
	for _, algo := range []string{"bfs", "cc"} {
		for _, name := range []string{"k", "tri"} {
			out, code := runCLI(t, algo, store, name, "--engine", "cpu", "--validate", "--json", "--out", dir)
			if code != 0 {
				t.Fatalf("%s %s: %d %s", algo, name, code, out)
			}
			var s graph.Summary
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("%s: %v in %s", algo, err, out)
			}
			if !s.Validated || s.Engine != "cpu" || s.Output == "" {
				t.Fatalf("%s: %+v", algo, s)
			}
			if _, err := os.Stat(s.Output); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad := filepath.Join(dir, "bad.mtx")
	os.WriteFile(bad, []byte("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n"), 0o644)
	if out, code := runCLI(t, "import", store, "bad", bad); code != 1 || !strings.Contains(out, "malformed") {
		t.Fatalf("truncated mtx: %d %s", code, out)
	}
	if _, code := runCLI(t, "bfs", store); code != 2 {
		t.Fatalf("missing argument: exit %d, want 2", code)
	}
	if out, code := runCLI(t, "demo", "--scale", "10", "--engine", "cpu"); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("demo: %d %s", code, out)
	}
}
