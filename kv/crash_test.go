package kv

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const batchKeys = 64

// TestCrashChild is the child of TestCrashDuringPutMany: it writes batches
// start, start+1, ... with SyncWrites and prints each acknowledged batch
// number. It only runs when the parent sets BAM_KV_CRASH_DIR.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("BAM_KV_CRASH_DIR")
	if dir == "" {
		t.Skip("child of TestCrashDuringPutMany")
	}
	start, _ := strconv.Atoi(os.Getenv("BAM_KV_CRASH_START"))
	mode := os.Getenv("BAM_KV_CRASH_MODE")
	ctx := context.Background()
	s := openStore(t, dir)
	opts := &Options{SyncWrites: true, CheckpointBytes: 64 << 10}
	tb, err := Open[uint64, uint64](ctx, s, "crash", opts)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	for b := start; ; b++ {
		keys := make([]uint64, batchKeys)
		vals := make([]uint64, batchKeys)
		for i := range keys {
			keys[i] = uint64(b*batchKeys + i)
			vals[i] = uint64(b)<<32 | uint64(i)
		}
		if err := tb.PutMany(ctx, keys, vals); err != nil {
			fmt.Fprintln(out, "error", err)
			out.Flush()
			os.Exit(3)
		}
		if mode == "checkpoint" && b%3 == 0 {
			if err := tb.Checkpoint(ctx); err != nil {
				fmt.Fprintln(out, "error", err)
				out.Flush()
				os.Exit(3)
			}
		}
		fmt.Fprintln(out, "ack", b)
		out.Flush()
	}
}

// TestCrashDuringPutMany kills child processes at random points while they
// write with SyncWrites (and, in checkpoint mode, checkpoint every third
// batch), then reopens and checks: every acknowledged batch is complete,
// the batch in flight is all there or absent, nothing later exists, and
// the table verifies.
func TestCrashDuringPutMany(t *testing.T) {
	if os.Getenv("BAM_KV_CRASH_DIR") != "" {
		t.Skip("in the child")
	}
	rounds := 4
	if os.Getenv("BAM_STRESS") == "1" {
		rounds = 40
	}
	for _, mode := range []string{"putmany", "checkpoint"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := newStore(t, dir, 4096)
			tb, err := Create[uint64, uint64](ctx, s, "crash", &Options{Capacity: 256})
			if err != nil {
				t.Fatal(err)
			}
			tb.Close(ctx)
			s.Close()
			rng := rand.New(rand.NewPCG(uint64(len(mode)), 5))
			next := 0
			for round := range rounds {
				cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), "BAM_KV_CRASH_DIR="+dir, "BAM_KV_CRASH_START="+strconv.Itoa(next), "BAM_KV_CRASH_MODE="+mode)
				var stdout strings.Builder
				cmd.Stdout = &stdout
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
				cmd.Process.Kill()
				cmd.Wait()
				acked := next - 1
				for _, line := range strings.Split(stdout.String(), "\n") {
					if n, ok := strings.CutPrefix(line, "ack "); ok {
						acked, _ = strconv.Atoi(n)
					} else if strings.HasPrefix(line, "error") {
						t.Fatalf("child: %s", line)
					}
				}
				s := openStore(t, dir)
				tb, err := Open[uint64, uint64](ctx, s, "crash", nil)
				if err != nil {
					t.Fatalf("round %d: reopen: %v", round, err)
				}
				// Batches up to acked must be complete; acked+1 all or
				// nothing; later ones absent.
				inflight := -1
				for b := 0; b <= acked+2; b++ {
					keys := make([]uint64, batchKeys)
					for i := range keys {
						keys[i] = uint64(b*batchKeys + i)
					}
					vals := make([]uint64, batchKeys)
					found := make([]bool, batchKeys)
					if err := tb.GetMany(ctx, keys, vals, found); err != nil {
						t.Fatal(err)
					}
					n := 0
					for i := range keys {
						if found[i] {
							n++
							if vals[i] != uint64(b)<<32|uint64(i) {
								t.Fatalf("round %d: key %d = %x", round, keys[i], vals[i])
							}
						}
					}
					switch {
					case b <= acked && n != batchKeys:
						t.Fatalf("round %d: acknowledged batch %d has %d of %d keys", round, b, n, batchKeys)
					case b == acked+1 && n != 0 && n != batchKeys:
						t.Fatalf("round %d: batch %d in flight is half visible (%d keys)", round, b, n)
					case b == acked+1 && n == batchKeys:
						inflight = b
					case b > acked+1 && n != 0:
						t.Fatalf("round %d: batch %d beyond the acknowledged %d is visible", round, b, acked)
					}
				}
				if want := uint64(max(acked, inflight) + 1); tb.Len() != want*batchKeys {
					t.Fatalf("round %d: Len %d, want %d", round, tb.Len(), want*batchKeys)
				}
				if err := tb.Verify(ctx); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				info := tb.Info()
				t.Logf("round %d: acked %d, in flight visible %v, replayed %d records, %d buckets", round, acked, inflight >= 0, info.Stats.Replayed, info.Buckets)
				// Crash again right away next round, without a clean close.
				tb.c.log.Close(ctx)
				tb.c.closed = true
				s.Close()
				next = max(acked, inflight) + 1
			}
		})
	}
}
