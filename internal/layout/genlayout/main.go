// Command genlayout writes kernels/include/bam/detail/layout.h, the C++
// constants of every memory layout shared by Go and CUDA, from their Go
// definitions. Run it through `go generate ./internal/layout`.
//
// To add a layout, append its package's Layout() to groups.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/internal/layout"
	"github.com/bam-go/bam/vq"
)

// groups lists the shared layouts, in header order.
func groups() []layout.Group {
	return []layout.Group{
		vq.Layout(),
		gpucache.Layout(),
		gpuengine.Layout(),
	}
}

// render returns the header's bytes.
func render() ([]byte, error) {
	var b bytes.Buffer
	if err := layout.WriteHeader(&b, "internal/layout/genlayout", groups()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func main() {
	out := flag.String("o", "layout.h", "header to write")
	flag.Parse()
	b, err := render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "genlayout:", err)
		os.Exit(1)
	}
	if old, err := os.ReadFile(*out); err == nil && bytes.Equal(old, b) {
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genlayout:", err)
		os.Exit(1)
	}
}
