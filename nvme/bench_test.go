package nvme

import (
	"context"
	"testing"
	"time"
)

func TestMeasureTargetIOPS(t *testing.T) {
	iops, err := MeasureTargetIOPS(context.Background(), IOPSOptions{Submitters: 2, QueueDepth: 16, Duration: 100 * time.Millisecond, Kick: true})
	if err != nil {
		t.Fatal(err)
	}
	if iops <= 0 {
		t.Fatalf("IOPS %v", iops)
	}
	t.Logf("Target 4 KiB read IOPS: %.0f", iops)
}

func TestMeasureTargetIOPSFile(t *testing.T) {
	for _, bs := range []int{512, 4096} {
		iops, err := MeasureTargetIOPS(context.Background(), IOPSOptions{File: true, Dir: t.TempDir(), BlockSize: bs, Blocks: 1024, Submitters: 3, QueueDepth: 8, Duration: 50 * time.Millisecond, Kick: true})
		if err != nil {
			t.Fatal(err)
		}
		if iops <= 0 {
			t.Fatalf("%d B: IOPS %v", bs, iops)
		}
		t.Logf("Target %d B file read IOPS: %.0f", bs, iops)
	}
}

func TestMeasureTargetIOPSCommands(t *testing.T) {
	iops, err := MeasureTargetIOPS(context.Background(), IOPSOptions{File: true, Dir: t.TempDir(), BlockSize: 512, Blocks: 256, Submitters: 2, QueueDepth: 4, Commands: 2000, Kick: true})
	if err != nil {
		t.Fatal(err)
	}
	if iops <= 0 {
		t.Fatalf("IOPS %v", iops)
	}
}
