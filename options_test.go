package bam

import "testing"

// The GPU engine sizes its own queues unless the caller set them; the CPU
// engine's defaults must not leak into it, however often defaults are
// applied (Create applies them, then opens with the result).
func TestOptionsGPUQueuesFollowTheCaller(t *testing.T) {
	for _, tc := range []struct {
		name               string
		in                 Options
		pairs, depth       int // what the CPU engine gets
		gpuPairs, gpuDepth int // what the GPU engine is asked for (0: its own defaults)
	}{
		{"zero", Options{}, DefaultQueuePairs, DefaultQueueDepth, 0, 0},
		{"pairs set", Options{QueuePairs: 4}, 4, DefaultQueueDepth, 4, 0},
		{"both set", Options{QueuePairs: 32, QueueDepth: 1024}, 32, 1024, 32, 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once, err := tc.in.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			twice, err := once.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []Options{once, twice} {
				if o.QueuePairs != tc.pairs || o.QueueDepth != tc.depth {
					t.Errorf("CPU queues %d x %d, want %d x %d", o.QueuePairs, o.QueueDepth, tc.pairs, tc.depth)
				}
				if o.gpuQueuePairs != tc.gpuPairs || o.gpuQueueDepth != tc.gpuDepth {
					t.Errorf("GPU queues %d x %d, want %d x %d", o.gpuQueuePairs, o.gpuQueueDepth, tc.gpuPairs, tc.gpuDepth)
				}
			}
		})
	}
}
