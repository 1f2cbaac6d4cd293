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
