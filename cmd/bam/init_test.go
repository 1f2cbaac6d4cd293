package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bam-go/bam"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"4096", 4096, false},
		{"4KiB", 4096, false},
		{"4k", 4096, false},
		{"64MiB", 64 << 20, false},
		{"10GB", 10e9, false},
		{"1.5GiB", 3 << 29, false},
		{"512B", 512, false},
		{" 2 TiB ", 2 << 40, false},
		{"1.3B", 0, true},
		{"", 0, true},
		{"MiB", 0, true},
		{"12XB", 0, true},
		{"1.2.3", 0, true},
		{"99999999999TiB", 0, true},
	}
	for _, tc := range tests {
		got, err := parseByteSize(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), &env{stdout: &out, stderr: &errb}, args)
	return out.String(), errb.String(), code
}

func TestInitLsStat(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if out, errs, code := run(t, "init", dir, "--ns", "2", "--size", "16MiB", "--line", "8KiB"); code != 0 || !strings.Contains(out, "2 namespaces") {
		t.Fatalf("init: %d %q %q", code, out, errs)
	}
	if _, errs, code := run(t, "init", dir, "--size", "16MiB"); code != 1 || !strings.Contains(errs, "already exists") {
		t.Fatalf("second init: %d %q", code, errs)
	}
	if _, _, code := run(t, "init", dir); code != 2 {
		t.Fatalf("init without --size exited %d, want 2", code)
	}

	s, err := bam.Open(context.Background(), dir, bam.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateObject(context.Background(), bam.ObjectSpec{Name: "vec", ElemType: "float64", Length: 5000,
		Meta: map[string]string{"source": "x.npy"}}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	out, errs, code := run(t, "ls", dir)
	if code != 0 || !strings.Contains(out, "vec") || !strings.Contains(out, "float64") {
		t.Fatalf("ls: %d %q %q", code, out, errs)
	}
	out, _, _ = run(t, "ls", dir, "--json")
	var objs []bam.ObjectInfo
	if err := json.Unmarshal([]byte(out), &objs); err != nil || len(objs) != 1 || objs[0].Length != 5000 ||
		objs[0].Kind != bam.KindArray || objs[0].Layout != bam.LayoutStriped {
		t.Fatalf("ls --json: %v %q", err, out)
	}
	out, _, code = run(t, "stat", dir)
	if code != 0 || !strings.Contains(out, "objects:") || !strings.Contains(out, "ns-001.bam") || !strings.Contains(out, "8 KiB") {
		t.Fatalf("stat: %q", out)
	}
	out, _, code = run(t, "stat", dir, "vec", "--json")
	var v struct {
		Name    string `json:"name"`
		Lines   uint64 `json:"lines"`
		Extents []struct {
			Lines uint64 `json:"lines"`
		} `json:"extents"`
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v.Name != "vec" || v.Lines != 5 || len(v.Extents) != 2 || v.Extents[0].Lines != 3 {
		t.Fatalf("stat vec --json: %v %q", err, out)
	}
	out, _, code = run(t, "stat", dir, "vec")
	if code != 0 || !strings.Contains(out, "extents:") || !strings.Contains(out, "meta source:") {
		t.Fatalf("stat vec: %q", out)
	}
	if _, errs, code := run(t, "stat", dir, "nope"); code != 1 || !strings.Contains(errs, "not found") {
		t.Fatalf("stat nope: %d %q", code, errs)
	}
	if _, errs, code := run(t, "ls", filepath.Join(dir, "missing")); code != 1 || errs == "" {
		t.Fatalf("ls missing: %d %q", code, errs)
	}
}

func TestInitDevices(t *testing.T) {
	d := t.TempDir()
	var devs []string
	for _, n := range []string{"a", "b"} {
		p := filepath.Join(d, n)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Truncate(p, 8<<20)
		devs = append(devs, p)
	}
	if out, errs, code := run(t, "init", "--dev", devs[0], "--dev", devs[1]); code != 0 {
		t.Fatalf("init --dev: %d %q %q", code, out, errs)
	}
	if _, errs, code := run(t, "init", "--dev", devs[0], "--dev", devs[1]); code != 1 || !strings.Contains(errs, "Overwrite") {
		t.Fatalf("init --dev over a store: %d %q", code, errs)
	}
	if _, _, code := run(t, "init", "--dev", devs[0], "--dev", devs[1], "--force"); code != 0 {
		t.Fatal("init --force failed")
	}
	// Later commands name the store by its devices, in any order.
	out, errs, code := run(t, "stat", devs[1]+","+devs[0])
	if code != 0 || !strings.Contains(out, devs[1]) {
		t.Fatalf("stat devices: %d %q %q", code, out, errs)
	}
}
