package kv

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv/vlog"
)

// The compaction crash test runs a child that writes batches into a
// byte-value table with SyncWrites and compacts its value log every
// compactEvery batches; the parent kills it, reopens the table and checks
// it against a model of the batches.
const (
	compactTable = "cmp"
	compactKeys  = 96
	compactEvery = 3
)

// compactBatch returns batch b: puts (keys and values) or, every fourth
// batch, deletes (keys only). Values vary in length, so overwrites leave
// dead bytes of all sizes.
func compactBatch(b int) (keys []uint64, vals [][]byte) {
	if b%4 == 3 {
		for i := range 8 {
			keys = append(keys, uint64((b*5+i*3)%compactKeys))
		}
		return keys, nil
	}
	for i := range 16 {
		k := uint64((b*7 + i) % compactKeys)
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%d", b, k)
		n := int(h.Sum64() % 700)
		keys = append(keys, k)
		vals = append(vals, bytes.Repeat([]byte(fmt.Sprintf("<%d:%d>", b, k)), 1+n/4)[:n])
	}
	return keys, vals
}

// compactModel returns the table's contents after batches 0..last.
func compactModel(last int) map[uint64][]byte {
	m := map[uint64][]byte{}
	for b := 0; b <= last; b++ {
		keys, vals := compactBatch(b)
		for i, k := range keys {
			if vals == nil {
				delete(m, k)
			} else {
				m[k] = vals[i]
			}
		}
	}
	return m
}

// TestCompactCrashChild is the child of TestCrashDuringCompaction: it writes
// batches start, start+1, ... and appends each acknowledged batch number to
// the file BAM_KV_COMPACT_ACKS (synced), compacting every compactEvery
// batches in small chunks. With BAM_KV_COMPACT_EXIT=step:n it exits at the
// n-th time a compaction reaches step, as a crash there would. It prints
// "compacting" and "compacted" around each compaction. It only runs when
// the parent sets BAM_KV_COMPACT_DIR.
func TestCompactCrashChild(t *testing.T) {
	dir := os.Getenv("BAM_KV_COMPACT_DIR")
	if dir == "" {
		t.Skip("child of TestCrashDuringCompaction")
	}
	die := func(format string, args ...any) {
		fmt.Printf("error "+format+"\n", args...)
		os.Exit(3)
	}
	start, err := strconv.Atoi(os.Getenv("BAM_KV_COMPACT_START"))
	if err != nil {
		die("start: %v", err)
	}
	if exit := os.Getenv("BAM_KV_COMPACT_EXIT"); exit != "" {
		step, ns, _ := strings.Cut(exit, ":")
		n, err := strconv.Atoi(ns)
		if err != nil {
			die("exit point %q: %v", exit, err)
		}
		compactHook = func(s string) {
			if s == step {
				if n--; n == 0 {
					fmt.Println("exit", step)
					os.Exit(7)
				}
			}
		}
	}
	acks, err := os.OpenFile(os.Getenv("BAM_KV_COMPACT_ACKS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		die("ack file: %v", err)
	}
	ctx := context.Background()
	s, err := bam.Open(ctx, dir, bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU})
	if err != nil {
		die("open store: %v", err)
	}
	opts := &Options{SyncWrites: true, CheckpointBytes: 16 << 10, Logger: slog.New(slog.DiscardHandler)}
	tb, err := OpenBytes[uint64](ctx, s, compactTable, opts)
	if err != nil {
		die("open table: %v", err)
	}
	fmt.Println("ready")
	for b := start; ; b++ {
		keys, vals := compactBatch(b)
		if vals == nil {
			err = tb.DeleteMany(ctx, keys)
		} else {
			err = tb.PutMany(ctx, keys, vals)
		}
		if err != nil {
			die("batch %d: %v", b, err)
		}
		if _, err := fmt.Fprintln(acks, b); err != nil {
			die("ack %d: %v", b, err)
		}
		if err := acks.Sync(); err != nil {
			die("ack %d: %v", b, err)
		}
		if b%compactEvery == compactEvery-1 {
			fmt.Println("compacting", b)
			if _, err := tb.Compact(ctx, &CompactOptions{ChunkBytes: 2 << 10}); err != nil {
				die("compact after batch %d: %v", b, err)
			}
			fmt.Println("compacted", b)
		}
	}
}

// TestCrashDuringCompaction kills children while they write and compact,
// some at random times (most of the child's time is spent compacting) and
// some at chosen steps of a compaction, then reopens and checks: the table
// opens and verifies, it holds exactly the model after the last
// acknowledged batch or after the batch in flight, its live-byte count
// matches the index, no value-log file is left that the index does not
// need, and compaction finishes afterwards.
func TestCrashDuringCompaction(t *testing.T) {
	if os.Getenv("BAM_KV_COMPACT_DIR") != "" || os.Getenv("BAM_KV_CRASH_DIR") != "" || os.Getenv("BAM_KV_REHASH_DIR") != "" {
		t.Skip("in the child")
	}
	steps := []string{"rotated", "copied", "swapped", "synced", "checked", "removed"}
	killRounds, pointRounds := 4, len(steps)
	if os.Getenv("BAM_STRESS") == "1" {
		killRounds, pointRounds = 40, 8*len(steps)
	}
	ctx := context.Background()
	dir := t.TempDir()
	acks := filepath.Join(t.TempDir(), "acks")
	s := newStore(t, dir, 512)
	tb, err := CreateBytes[uint64](ctx, s, compactTable, &Options{Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rng := rand.New(rand.NewPCG(21, 3))
	next := 0
	var inside, exits int
	for round := range killRounds + pointRounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCompactCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BAM_KV_COMPACT_DIR="+dir, "BAM_KV_COMPACT_ACKS="+acks,
			"BAM_KV_COMPACT_START="+strconv.Itoa(next))
		point := round >= killRounds
		if point {
			k := round - killRounds
			exit := fmt.Sprintf("%s:%d", steps[k%len(steps)], 1+rng.IntN(3))
			if steps[k%len(steps)] == "copied" || steps[k%len(steps)] == "swapped" {
				exit = fmt.Sprintf("%s:%d", steps[k%len(steps)], 1+rng.IntN(12))
			}
			cmd.Env = append(cmd.Env, "BAM_KV_COMPACT_EXIT="+exit)
		}
		var stdout strings.Builder
		cmd.Stdout = &stdout
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if point {
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("round %d: child did not reach its exit point: %s", round, stdout.String())
			}
		} else {
			time.Sleep(time.Duration(150+rng.IntN(450)) * time.Millisecond)
			cmd.Process.Kill()
			cmd.Wait()
		}
		out := stdout.String()
		if strings.Contains(out, "FAIL") || strings.Contains(out, "panic") {
			t.Fatalf("round %d: child failed: %s", round, out)
		}
		if i := strings.Index(out, "error"); i >= 0 {
			t.Fatalf("round %d: child: %s", round, out[i:])
		}
		if point && !strings.Contains(out, "exit ") {
			t.Fatalf("round %d: child ended without reaching its exit point: %q", round, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if strings.HasPrefix(last, "compacting") || strings.HasPrefix(last, "exit") {
			inside++
		}
		if strings.HasPrefix(last, "exit") {
			exits++
		}
		acked := lastAck(t, acks, next-1)

		s := openStore(t, dir)
		tb, err := OpenBytes[uint64](ctx, s, compactTable, &Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("round %d (%s): reopen: %v", round, last, err)
		}
		if err := tb.Verify(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		got := map[uint64][]byte{}
		var ierr error
		for k, v := range tb.All(ctx, &ierr) {
			got[k] = v
		}
		if ierr != nil {
			t.Fatal(ierr)
		}
		inflight := false
		if !sameContents(got, compactModel(acked)) {
			if !sameContents(got, compactModel(acked+1)) {
				t.Fatalf("round %d (%s): the table matches neither batch %d (acknowledged) nor %d (in flight): %d entries",
					round, last, acked, acked+1, len(got))
			}
			inflight = true
		}
		st := checkStats(t, tb)
		// Every segment left is needed: each holds a referenced record,
		// or is the head.
		needed := map[uint32]bool{tb.vl.Head(): true}
		for _, pb := range tb.c.all(ctx, &ierr) {
			needed[vlog.DecodePtr(pb).Seg] = true
		}
		files, _ := filepath.Glob(tb.ValueLogPath() + "*")
		if len(files) != len(needed) || st.Segments != len(needed) {
			t.Fatalf("round %d: value-log files %v, %d segments open, %d needed", round, files, st.Segments, len(needed))
		}
		t.Logf("round %d: %s, acked %d, in flight visible %v, %d segments, %d live and %d dead bytes",
			round, last, acked, inflight, st.Segments, st.LiveBytes, st.DeadBytes)
		next = acked + 1
		if inflight {
			next++
		}
		if round%5 == 4 {
			// Compaction finishes on a reopened table too.
			if _, err := tb.Compact(ctx, nil); err != nil {
				t.Fatalf("round %d: compact after reopen: %v", round, err)
			}
			if st := checkStats(t, tb); st.Segments != 1 || st.DeadBytes != 0 {
				t.Fatalf("round %d: after compaction %+v", round, st)
			}
		}
		// Leave the table as a crash would.
		abandon(t, tb)
		s.Close()
	}
	t.Logf("%d rounds: %d ended inside a compaction (%d at a chosen step)", killRounds+pointRounds, inside, exits)
}

func sameContents(a, b map[uint64][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
