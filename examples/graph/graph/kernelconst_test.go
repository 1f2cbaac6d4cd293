package graph

import (
	"fmt"
	"os"
	"regexp"
	"testing"
)

// TestKernelConstantsMirrored checks that the constants the GPU runner
// mirrors from kernels/graph.cu are the kernels' own: BFS sizes its
// long-list buffers from bigList, and a kernel listing vertices from a
// smaller threshold would write past them; cc_link_heads stages at most
// heads_max_per entries a vertex in blocks of heads_block threads.
func TestKernelConstantsMirrored(t *testing.T) {
	src, err := os.ReadFile("../../../kernels/graph.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint64{"big_list": bigList, "big_segment": bigSegment, "heads_chunk": headsChunk, "heads_block": headsBlock, "heads_max_per": HeadsPerVertex} {
		m := regexp.MustCompile(`constexpr u(?:32|64) ` + name + ` = (\d+);`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("kernels/graph.cu defines no %s", name)
		}
		if got := string(m[1]); got != fmt.Sprint(want) {
			t.Errorf("kernels/graph.cu has %s = %s, the runner mirrors %d", name, got, want)
		}
	}
}
