package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bam-go/bam/internal/npy"
)

func writeNpy(t *testing.T, path, descr string, shape []int64, body []byte) {
	t.Helper()
	dt, err := npy.ParseDescr(descr)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := npy.NewWriter(&b, npy.Header{Dtype: dt, Shape: shape})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImportExportRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	if _, errs, code := run(t, "init", store, "--ns", "2", "--size", "16MiB", "--line", "4KiB"); code != 0 {
		t.Fatalf("init: %s", errs)
	}
	// Raw float64 data, not a multiple of a line.
	raw := make([]byte, 8*12345)
	for i := range 12345 {
		binary.LittleEndian.PutUint64(raw[i*8:], math.Float64bits(float64(i)*1.5))
	}
	rawPath := filepath.Join(tmp, "x.f64")
	os.WriteFile(rawPath, raw, 0o644)
	out, errs, code := run(t, "import", store, "x", rawPath, "--type", "float64", "--json")
	if code != 0 {
		t.Fatalf("import raw: %d %s", code, errs)
	}
	var res transferResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Length != 12345 || res.ElemType != "float64" {
		t.Fatalf("import --json = %q (%v)", out, err)
	}
	back := filepath.Join(tmp, "x.out")
	if _, errs, code := run(t, "export", store, "x", back); code != 0 {
		t.Fatalf("export raw: %s", errs)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, raw) {
		t.Fatal("raw export differs from the imported file")
	}

	// A 2-D int16 .npy file (odd element count, 2-byte elements).
	body := make([]byte, 2*7*301)
	for i := range body {
		body[i] = byte(i * 7)
	}
	npyPath := filepath.Join(tmp, "m.npy")
	writeNpy(t, npyPath, "<i2", []int64{7, 301}, body)
	if _, errs, code := run(t, "import", store, "m", npyPath); code != 0 {
		t.Fatalf("import npy: %s", errs)
	}
	npyBack := filepath.Join(tmp, "m2.npy")
	if _, errs, code := run(t, "export", store, "m", npyBack); code != 0 {
		t.Fatalf("export npy: %s", errs)
	}
	want, _ := os.ReadFile(npyPath)
	if got, _ := os.ReadFile(npyBack); !bytes.Equal(got, want) {
		t.Fatal(".npy export differs from the imported file")
	}

	// stat reports type, length, layout and the cache section.
	out, errs, code = run(t, "stat", store, "m", "--json")
	if code != 0 {
		t.Fatalf("stat: %s", errs)
	}
	var st struct {
		ElemType string         `json:"elem_type"`
		Length   uint64         `json:"length"`
		Layout   string         `json:"layout"`
		Sections map[string]any `json:"sections"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.ElemType != "int16" || st.Length != 7*301 || st.Layout != "striped" || st.Sections["cache"] == nil {
		t.Fatalf("stat --json = %s (%v)", out, err)
	}
	if out, _, _ := run(t, "stat", store, "m"); !strings.Contains(out, "cache:") {
		t.Fatalf("stat without --json has no cache section:\n%s", out)
	}
}

func TestImportBadInput(t *testing.T) {
	tmp := t.TempDir()
	store := filepath.Join(tmp, "store")
	if _, errs, code := run(t, "init", store, "--size", "8MiB"); code != 0 {
		t.Fatalf("init: %s", errs)
	}
	bad := func(name string, body []byte) string {
		p := filepath.Join(tmp, name)
		os.WriteFile(p, body, 0o644)
		return p
	}
	var npyBuf bytes.Buffer
	dt, _ := npy.ParseDescr("<f4")
	w, _ := npy.NewWriter(&npyBuf, npy.Header{Dtype: dt, Shape: []int64{1000}})
	w.Write(make([]byte, 1000)) // 1000 of 4000 body bytes
	truncated := bad("t.npy", npyBuf.Bytes())
	dict := "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }"
	hl := (10+len(dict)+1+63)/64*64 - 10
	hdr := append([]byte("\x93NUMPY\x01\x00"), byte(hl), byte(hl>>8))
	hdr = append(hdr, dict+strings.Repeat(" ", hl-len(dict)-1)+"\n"...)
	unsupported := bad("u.npy", append(hdr, make([]byte, 24)...))
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"truncated npy", []string{"import", store, "t", truncated}, 1, "truncated"},
		{"unsupported dtype", []string{"import", store, "u", unsupported}, 1, "unsupported"},
		{"raw without type", []string{"import", store, "r", bad("r.bin", make([]byte, 16))}, 2, "--type"},
		{"raw of odd size", []string{"import", store, "r", bad("r2.bin", make([]byte, 13)), "--type", "int32"}, 1, "whole number"},
		{"unknown type", []string{"import", store, "r", bad("r3.bin", make([]byte, 16)), "--type", "int128"}, 2, "int128"},
		{"missing file", []string{"import", store, "r", filepath.Join(tmp, "nope")}, 1, "no such file"},
		{"export missing array", []string{"export", store, "nope", filepath.Join(tmp, "o")}, 1, "not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs, code := run(t, c.args...)
			if code != c.code || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, errs, c.code, c.want)
			}
		})
	}
	// Failed imports leave no array behind, temporary or not.
	out, _, _ := run(t, "ls", store, "--json")
	if strings.Contains(out, "importing") || strings.Contains(out, "\"t\"") {
		t.Fatalf("failed imports left objects: %s", out)
	}
}
