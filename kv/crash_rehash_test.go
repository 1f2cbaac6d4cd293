package kv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
)

// The rehash crash test keeps a table that starts with room for a few
// dozen entries and only ever grows, so most of its life is spent close to
// the next rehash. A store that reaches rehashResetAt entries is replaced
// by a fresh one, which keeps every round near a rehash of a small table.
const (
	rehashTableName = "grow"
	rehashLine      = 512
	rehashCapacity  = 32
	rehashResetAt   = 1 << 12
)

// TestCrashRehashChild is the child of TestCrashDuringRehash: it writes
// batches start, start+1, ... with SyncWrites into an existing table and,
// after each PutMany returns, appends the batch number to the file named
// by BAM_KV_REHASH_ACKS and syncs it. Before a batch that will rehash the
// table it prints "grow <batch> <buckets>" on stdout, and after it
// "grown <batch> <buckets> <microseconds>". It only runs when the parent
// sets BAM_KV_REHASH_DIR.
func TestCrashRehashChild(t *testing.T) {
	dir := os.Getenv("BAM_KV_REHASH_DIR")
	if dir == "" {
		t.Skip("child of TestCrashDuringRehash")
	}
	die := func(format string, args ...any) {
		fmt.Printf("error "+format+"\n", args...)
		os.Exit(3)
	}
	start, err := strconv.Atoi(os.Getenv("BAM_KV_REHASH_START"))
	if err != nil {
		die("start: %v", err)
	}
	acks, err := os.OpenFile(os.Getenv("BAM_KV_REHASH_ACKS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		die("ack file: %v", err)
	}
	ctx := context.Background()
	s, err := bam.Open(ctx, dir, bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU})
	if err != nil {
		die("open store: %v", err)
	}
	opts := &Options{SyncWrites: true, CheckpointBytes: 16 << 10, Logger: slog.New(slog.DiscardHandler)}
	tb, err := Open[uint64, uint64](ctx, s, rehashTableName, opts)
	if err != nil {
		die("open table: %v", err)
	}
	fmt.Println("ready")
	keys := make([]uint64, batchKeys)
	vals := make([]uint64, batchKeys)
	for b := start; ; b++ {
		for i := range keys {
			keys[i] = uint64(b*batchKeys + i)
			vals[i] = uint64(b)<<32 | uint64(i)
		}
		// Every key is new, so ensureRoom rehashes exactly when the
		// batch's keys do not fit under MaxLoad.
		c := tb.c
		c.mu.RLock()
		grow := c.used+batchKeys > uint64(c.opts.MaxLoad*float64(c.capacity()))
		nb := c.nb
		c.mu.RUnlock()
		if grow {
			fmt.Println("grow", b, nb)
		}
		t0 := time.Now()
		if err := tb.PutMany(ctx, keys, vals); err != nil {
			die("batch %d: %v", b, err)
		}
		if grow {
			fmt.Println("grown", b, tb.Info().Buckets, time.Since(t0).Microseconds())
		}
		if _, err := fmt.Fprintln(acks, b); err != nil {
			die("ack %d: %v", b, err)
		}
		if err := acks.Sync(); err != nil {
			die("ack %d: %v", b, err)
		}
	}
}

// rehashChild is one running child and the events it printed.
type rehashChild struct {
	cmd    *exec.Cmd
	events chan []string // fields of each stdout line
	done   chan struct{} // closed when stdout is drained
	errs   []string      // "error" lines, read after done
}

func startRehashChild(t *testing.T, dir, acks string, start int) *rehashChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRehashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BAM_KV_REHASH_DIR="+dir, "BAM_KV_REHASH_ACKS="+acks,
		"BAM_KV_REHASH_START="+strconv.Itoa(start))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &rehashChild{cmd: cmd, events: make(chan []string, 1024), done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		defer close(ch.events)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 {
				continue
			}
			if f[0] == "error" {
				ch.errs = append(ch.errs, sc.Text())
			}
			select {
			case ch.events <- f:
			default: // the parent only needs the first few
			}
		}
		io.Copy(io.Discard, out)
	}()
	return ch
}

// wait returns the next event whose first field is one of names, or false
// when the child ended or the deadline passed.
func (ch *rehashChild) wait(deadline time.Time, names ...string) ([]string, bool) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case f, ok := <-ch.events:
			if !ok {
				return nil, false
			}
			for _, n := range names {
				if f[0] == n {
					return f, true
				}
			}
		case <-timer.C:
			return nil, false
		}
	}
}

// kill kills the child, waits for it and returns its "error" lines.
func (ch *rehashChild) kill() []string {
	ch.cmd.Process.Kill()
	<-ch.done
	ch.cmd.Wait()
	return ch.errs
}

// lastAck returns the last batch number in the ack file, or def when it
// holds none. A line cut short by the kill is ignored.
func lastAck(t *testing.T, path string, def int) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	s := string(data)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return def
	}
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("ack file %s: last line %q: %v", path, s, err)
	}
	return n
}

// TestCrashDuringRehash kills child processes while they fill a table that
// starts small and rehashes into a larger object again and again; three
// kills in four are timed from the child's announcement that the next
// batch rehashes, to land inside the rehash. After each kill it reopens and
// checks: the table opens and verifies, every acknowledged batch is
// complete, the batch in flight is all there or absent, nothing later
// exists, Len matches, and no rehash object is left in the catalog.
func TestCrashDuringRehash(t *testing.T) {
	if os.Getenv("BAM_KV_CRASH_DIR") != "" || os.Getenv("BAM_KV_REHASH_DIR") != "" {
		t.Skip("in the child")
	}
	rounds := 4
	if os.Getenv("BAM_STRESS") == "1" {
		rounds = 60
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 7))

	var dir, acks string
	next := 0
	fresh := func() {
		dir = t.TempDir()
		acks = filepath.Join(t.TempDir(), "acks")
		s := newStore(t, dir, rehashLine)
		tb, err := Create[uint64, uint64](ctx, s, rehashTableName, &Options{Capacity: rehashCapacity})
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		next = 0
	}
	fresh()

	// est is the last measured duration of a batch that rehashed.
	est := 5 * time.Millisecond
	var targeted, leftovers, beforeSwap, inFlight int
	for round := range rounds {
		ch := startRehashChild(t, dir, acks, next)
		deadline := time.Now().Add(20 * time.Second)
		if _, ok := ch.wait(deadline, "ready"); !ok {
			t.Fatalf("round %d: child did not start: %v", round, ch.kill())
		}
		aimed := round%4 != 3
		lastGrow, lastGrown := -1, -1
		var delay time.Duration
		if aimed {
			targeted++
			// Let 0-2 rehashes finish, so the table is not always at
			// its smallest, then kill somewhere in the expected span
			// of the next rehashing batch (it moves about twice what
			// the last one did, but syncs dominate small rehashes).
			for skip := rng.IntN(3); ; skip-- {
				f, ok := ch.wait(deadline, "grow", "grown")
				if !ok {
					t.Fatalf("round %d: no rehash announced: %v", round, ch.kill())
				}
				if f[0] == "grown" {
					lastGrown, est = parseGrown(f, lastGrown, est)
					skip++
					continue
				}
				lastGrow, _ = strconv.Atoi(f[1])
				if skip == 0 {
					break
				}
			}
			delay = time.Duration(rng.Int64N(int64(2 * est)))
		} else {
			delay = time.Duration(20+rng.IntN(200)) * time.Millisecond
		}
		time.Sleep(delay)
		if errs := ch.kill(); len(errs) > 0 {
			t.Fatalf("round %d: child: %s", round, strings.Join(errs, "; "))
		}
		// The last rehash the child announced and finished, for the
		// duration estimate and to tell whether it was cut short.
		for f := range ch.events {
			switch {
			case f[0] == "grow" && len(f) == 3:
				lastGrow, _ = strconv.Atoi(f[1])
			case f[0] == "grown":
				lastGrown, est = parseGrown(f, lastGrown, est)
			}
		}
		acked := lastAck(t, acks, next-1)

		s := openStore(t, dir)
		// What the kill left, before Open cleans it up.
		left, err := s.Object(rehashTableName + rehashSuffix)
		leftover := err == nil
		if err != nil && !errors.Is(err, bam.ErrNotFound) {
			t.Fatalf("round %d: look up rehash object: %v", round, err)
		}
		live, err := s.Object(rehashTableName)
		if err != nil {
			t.Fatalf("round %d: table object: %v", round, err)
		}
		swapped := leftover && left.Len() < live.Len()
		if leftover {
			leftovers++
			if !swapped {
				beforeSwap++
			}
		}
		cutShort := lastGrow > lastGrown && lastGrow == acked+1
		if cutShort {
			inFlight++
		}

		tb, err := Open[uint64, uint64](ctx, s, rehashTableName, &Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("round %d: reopen (leftover rehash object %v, swapped %v): %v", round, leftover, swapped, err)
		}
		for _, o := range s.Objects() {
			if strings.HasSuffix(o.Name, rehashSuffix) {
				t.Fatalf("round %d: object %q still in the catalog after Open", round, o.Name)
			}
		}
		if err := tb.Verify(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		inflight := checkBatches(t, ctx, tb, round, acked)
		want := uint64(max(acked, inflight)+1) * batchKeys
		if tb.Len() != want {
			t.Fatalf("round %d: Len %d, want %d", round, tb.Len(), want)
		}
		info := tb.Info()
		t.Logf("round %d: aimed %v, killed %v after start, acked %d, in flight visible %v, rehashing batch cut short %v, "+
			"rehash object left %v (before swap %v), %d buckets, replayed %d records",
			round, aimed, delay, acked, inflight >= 0, cutShort, leftover, leftover && !swapped, info.Buckets, info.Stats.Replayed)
		// Leave the table as a crash would: no checkpoint at close.
		tb.c.log.Close(ctx)
		tb.c.closed = true
		s.Close()
		next = max(acked, inflight) + 1
		if want >= rehashResetAt {
			fresh()
			est = 5 * time.Millisecond
		}
	}
	t.Logf("%d kills, %d timed at a rehash; %d cut a rehashing batch short, %d left a rehash object (%d before the swap)",
		rounds, targeted, inFlight, leftovers, beforeSwap)
}

// parseGrown reads a "grown <batch> <buckets> <microseconds>" line: the
// batch and its duration, the estimate for the next rehashing batch.
func parseGrown(f []string, batch int, est time.Duration) (int, time.Duration) {
	if len(f) != 4 {
		return batch, est
	}
	if b, err := strconv.Atoi(f[1]); err == nil {
		batch = b
	}
	if us, err := strconv.Atoi(f[3]); err == nil && us > 0 {
		est = time.Duration(us) * time.Microsecond
	}
	return batch, est
}

// checkBatches checks batches 0..acked+2 of a reopened table: batches up to
// acked complete with the right values, acked+1 all or nothing, later ones
// absent. It returns acked+1 if that batch is present, else -1.
func checkBatches(t *testing.T, ctx context.Context, tb *Table[uint64, uint64], round, acked int) int {
	t.Helper()
	inflight := -1
	keys := make([]uint64, batchKeys)
	vals := make([]uint64, batchKeys)
	found := make([]bool, batchKeys)
	for b := 0; b <= acked+2; b++ {
		for i := range keys {
			keys[i] = uint64(b*batchKeys + i)
		}
		if err := tb.GetMany(ctx, keys, vals, found); err != nil {
			t.Fatalf("round %d: %v", round, err)
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
	return inflight
}
