package nvme

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// benchTargetRead runs b.N one-block random reads through a Target and
// reports the rate as IOPS.
func benchTargetRead(b *testing.B, opts IOPSOptions) {
	b.Helper()
	opts.Commands = uint64(b.N)
	opts.Kick = true
	if opts.Blocks == 0 {
		opts.Blocks = 32768
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	iops, err := MeasureTargetIOPS(ctx, opts)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(iops, "IOPS")
}

// BenchmarkTargetFileRead measures random one-block reads from a file
// namespace whose data is in the page cache, for 512 B and 4 KiB blocks
// and one or several queue pairs, served on the workers (the default:
// copied from a mapping of the file).
func BenchmarkTargetFileRead(b *testing.B) {
	benchTargetFileRead(b, false, MapAuto)
}

// BenchmarkTargetFileReadPreadv2 is BenchmarkTargetFileRead with MapOff:
// one preadv2(RWF_NOWAIT) per read on the worker.
func BenchmarkTargetFileReadPreadv2(b *testing.B) {
	benchTargetFileRead(b, false, MapOff)
}

// BenchmarkTargetFileReadExecutors is BenchmarkTargetFileRead with
// TargetConfig.NoCachedReadInline: every read goes through an executor.
func BenchmarkTargetFileReadExecutors(b *testing.B) {
	benchTargetFileRead(b, true, MapAuto)
}

func benchTargetFileRead(b *testing.B, executors bool, m MapMode) {
	for _, bs := range []int{512, 4096} {
		for _, qps := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("bs=%d/qp=%d", bs, qps), func(b *testing.B) {
				benchTargetRead(b, IOPSOptions{File: true, BlockSize: bs, Submitters: qps, QueueDepth: 32,
					Dir: b.TempDir(), NoCachedReadInline: executors, Map: m})
			})
		}
	}
}

// BenchmarkTargetMemoryRead is the same load on a memory namespace, the
// ceiling for the file case.
func BenchmarkTargetMemoryRead(b *testing.B) {
	for _, bs := range []int{512, 4096} {
		for _, qps := range []int{1, 16} {
			b.Run(fmt.Sprintf("bs=%d/qp=%d", bs, qps), func(b *testing.B) {
				benchTargetRead(b, IOPSOptions{BlockSize: bs, Submitters: qps, QueueDepth: 32})
			})
		}
	}
}

// BenchmarkTargetFileReadLarge reads at random from a 2 GiB file namespace
// (page cache), larger than the CPU's caches: each read's source misses
// the caches and the TLB, as A1's scattered reads of amount columns do.
func BenchmarkTargetFileReadLarge(b *testing.B) {
	for _, bs := range []int{512, 4096} {
		b.Run(fmt.Sprintf("bs=%d", bs), func(b *testing.B) {
			benchTargetRead(b, IOPSOptions{File: true, BlockSize: bs, Blocks: uint64(2<<30) / uint64(bs), Submitters: 1,
				QueueDepth: 64, Workers: 1, Dir: b.TempDir()})
		})
	}
}
