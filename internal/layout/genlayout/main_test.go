package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestHeaderUpToDate fails when the committed header differs from what the
// Go layouts generate.
func TestHeaderUpToDate(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", "kernels", "include", "bam", "detail", "layout.h")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go generate ./internal/layout`)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./internal/layout`", path)
	}
}
