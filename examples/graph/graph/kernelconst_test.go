package graph

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/bam-go/bam/kernels"
)

// TestKernelConstantsMirrored checks that the constants the GPU runner
// mirrors from kernels/graph.cu are the kernels' own: BFS sizes its
// long-list buffers from bigList, and a kernel listing vertices from a
// smaller threshold would write past them; the small-levels kernel's state
// layout and its copy of Beamer's alpha must be the runner's.
func TestKernelConstantsMirrored(t *testing.T) {
	src, err := kernels.Source(KernelFamily)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint64{"big_list": bigList, "big_segment": bigSegment, "bfs_alpha": bottomUpAlpha,
		"small_state_words": smallStateWords, "small_record_words": smallRecordWords, "small_failed": smallFailed,
		"small_levels": smallLevelsRun, "small_unchecked": smallUnchecked, "heads_block": headsBlock, "heads_tile": headsTile, "heads_max": HeadsPerVertex,
		"bfs_probe_lines": probeLines, "bfs_probe_lines_all": probeLinesAll, "bfs_probe_left": probeLeft, "bfs_probe_left_all": probeLeftAll} {
		m := regexp.MustCompile(`constexpr u64 ` + name + ` = (\d+);`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("kernels/graph.cu defines no %s", name)
		}
		if got := string(m[1]); got != fmt.Sprint(want) {
			t.Errorf("kernels/graph.cu has %s = %s, the runner mirrors %d", name, got, want)
		}
	}
}
