package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bam-go/bam/kv/vlog"
)

// recountLive sums the record sizes the index refers to, and checks that
// every pointer is into an open segment.
func recountLive(t *testing.T, tb *BytesTable[uint64]) uint64 {
	t.Helper()
	open := map[uint32]bool{}
	for _, s := range tb.vl.Segments() {
		open[s.ID] = true
	}
	var live uint64
	var err error
	for _, pb := range tb.c.all(context.Background(), &err) {
		p := vlog.DecodePtr(pb)
		if !open[p.Seg] {
			t.Fatalf("pointer %+v into a segment that is not open (%v)", p, open)
		}
		live += p.Size()
	}
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func checkStats(t *testing.T, tb *BytesTable[uint64]) ValueLogStats {
	t.Helper()
	st := tb.ValueLogStats()
	if want := recountLive(t, tb); st.LiveBytes != want {
		t.Fatalf("LiveBytes = %d, the index refers to %d", st.LiveBytes, want)
	}
	if st.FileBytes != tb.ValueLogBytes() || st.FileBytes != st.LiveBytes+st.DeadBytes+uint64(st.Segments)*vlog.HeaderSize {
		t.Fatalf("stats do not add up: %+v, ValueLogBytes %d", st, tb.ValueLogBytes())
	}
	return st
}

// TestCompactProperty runs random writes against a map, compacting now and
// then, and checks reads, statistics and reopening after each compaction.
func TestCompactProperty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	opts := &Options{Capacity: 16, CheckpointBytes: 8 << 10}
	tb, err := CreateBytes[uint64](ctx, s, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	want := map[uint64][]byte{}
	const keys = 200
	rounds, steps := 6, 300
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		for range steps {
			k := r.Uint64N(keys)
			switch x := r.IntN(100); {
			case x < 55:
				v := randValue(r)
				if err := tb.Put(ctx, k, v); err != nil {
					t.Fatal(err)
				}
				want[k] = v
			case x < 70:
				n := 1 + r.IntN(10)
				ks := make([]uint64, n)
				vs := make([][]byte, n)
				for j := range ks {
					ks[j], vs[j] = r.Uint64N(keys), randValue(r)
				}
				if err := tb.PutMany(ctx, ks, vs); err != nil {
					t.Fatal(err)
				}
				for j := range ks {
					want[ks[j]] = vs[j]
				}
			case x < 85:
				if err := tb.Delete(ctx, k); err != nil {
					t.Fatal(err)
				}
				delete(want, k)
			default:
				ks := []uint64{k, r.Uint64N(keys), k}
				if err := tb.DeleteMany(ctx, ks); err != nil {
					t.Fatal(err)
				}
				for _, k := range ks {
					delete(want, k)
				}
			}
		}
		before := checkStats(t, tb)
		if before.DeadBytes == 0 {
			t.Fatalf("round %d: no dead bytes after overwrites and deletes: %+v", round, before)
		}
		var progress []CompactProgress
		res, err := tb.Compact(ctx, &CompactOptions{ChunkBytes: 16 << 10, Progress: func(p CompactProgress) { progress = append(progress, p) }})
		if err != nil {
			t.Fatal(err)
		}
		after := checkStats(t, tb)
		if res.Skipped || after.DeadBytes != 0 || after.Segments != 1 || after.LiveBytes != before.LiveBytes {
			t.Fatalf("round %d: compaction %+v left %+v (before %+v)", round, res, after, before)
		}
		if res.MovedBytes != before.LiveBytes || res.ReclaimedBytes != before.DeadBytes+uint64(before.Segments-1)*vlog.HeaderSize {
			t.Fatalf("round %d: moved %d, reclaimed %d; before %+v", round, res.MovedBytes, res.ReclaimedBytes, before)
		}
		if len(progress) == 0 || progress[len(progress)-1].Entries != uint64(len(want)) || progress[len(progress)-1].Bytes != res.MovedBytes {
			t.Fatalf("round %d: progress %+v, %d entries", round, progress, len(want))
		}
		if after.Compactions != 1 || after.ReclaimedBytes != res.ReclaimedBytes {
			t.Fatalf("round %d: stats count %d compactions reclaiming %d bytes, want 1 reclaiming %d", round, after.Compactions, after.ReclaimedBytes, res.ReclaimedBytes)
		}
		if after.FileBytes != before.FileBytes-res.ReclaimedBytes {
			t.Fatalf("round %d: %d file bytes after reclaiming %d of %d", round, after.FileBytes, res.ReclaimedBytes, before.FileBytes)
		}
		checkBytesAgainst(t, tb, want, keys)
		// Reopen, cleanly or as after a crash.
		if round%2 == 0 {
			if err := tb.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			abandon(t, tb)
		}
		if tb, err = OpenBytes[uint64](ctx, s, "b", opts); err != nil {
			t.Fatal(err)
		}
		checkBytesAgainst(t, tb, want, keys)
		if st := checkStats(t, tb); st.DeadBytes != 0 || st.Segments != 1 {
			t.Fatalf("round %d: after reopen %+v", round, st)
		}
		if err := tb.Verify(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing dead: skipped.
	if res, err := tb.Compact(ctx, nil); err != nil || !res.Skipped {
		t.Fatalf("Compact with no dead bytes = %+v, %v", res, err)
	}
	if err := tb.Put(ctx, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if res, err := tb.Compact(ctx, &CompactOptions{MinDeadRatio: 0.99}); err != nil || !res.Skipped {
		t.Fatalf("Compact under MinDeadRatio = %+v, %v", res, err)
	}
	if _, err := tb.Compact(ctx, &CompactOptions{MinDeadRatio: 2}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Compact with MinDeadRatio 2 = %v, want ErrInvalid", err)
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Compact(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Compact after Close = %v, want ErrClosed", err)
	}
}

// TestCompactConcurrent compacts again and again while writers overwrite
// and delete their own keys and readers check that every value they see is
// one that was written for its key.
func TestCompactConcurrent(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", &Options{Capacity: 32, CheckpointBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	value := func(k uint64, gen int) []byte {
		return []byte(strings.Repeat(fmt.Sprintf("%d/%d;", k, gen), 1+int(k+uint64(gen))%13))
	}
	parse := func(k uint64, v []byte) bool {
		var gk uint64
		var gen int
		if _, err := fmt.Sscanf(string(v), "%d/%d;", &gk, &gen); err != nil || gk != k {
			return false
		}
		return bytes.Equal(v, value(k, gen))
	}
	const writers, perWriter = 3, 40
	gens := 60
	if testing.Short() {
		gens = 25
	}
	finals := make([]map[uint64][]byte, writers)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		finals[w] = map[uint64][]byte{}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for gen := range gens {
				for range perWriter / 4 {
					// Keys grow with the generations, so the table
					// rehashes under the compactions too.
					k := uint64(w) + writers*r.Uint64N(uint64(perWriter*(1+gen/10)))
					if r.IntN(5) == 0 {
						if err := tb.Delete(ctx, k); err != nil {
							t.Error(err)
							return
						}
						delete(finals[w], k)
						continue
					}
					v := value(k, gen)
					if err := tb.Put(ctx, k, v); err != nil {
						t.Error(err)
						return
					}
					finals[w][k] = v
				}
			}
		})
	}
	var readErr error
	var rwg sync.WaitGroup
	rwg.Go(func() {
		r := rand.New(rand.NewPCG(77, 1))
		for {
			select {
			case <-done:
				return
			default:
			}
			k := r.Uint64N(writers * perWriter * 7)
			v, ok, err := tb.Get(ctx, k)
			if err == nil && ok && !parse(k, v) {
				err = fmt.Errorf("Get(%d) = %q", k, v)
			}
			if err == nil {
				var ierr error
				n := 0
				for k, v := range tb.All(ctx, &ierr) {
					if !parse(k, v) {
						ierr = fmt.Errorf("All: key %d = %q", k, v)
						break
					}
					if n++; n > 50 {
						break
					}
				}
				if errors.Is(ierr, ErrConcurrentGrowth) {
					ierr = nil
				}
				err = ierr
			}
			if err != nil {
				readErr = err
				return
			}
		}
	})
	compactions, moved := 0, uint64(0)
	var cerr error
	cdone := make(chan struct{})
	go func() {
		defer close(cdone)
		for {
			select {
			case <-done:
				return
			default:
			}
			res, err := tb.Compact(ctx, &CompactOptions{ChunkBytes: 2 << 10})
			if err != nil {
				cerr = err
				return
			}
			if !res.Skipped {
				compactions++
				moved += res.Entries
			}
		}
	}()
	wg.Wait()
	close(done)
	rwg.Wait()
	<-cdone
	if cerr != nil {
		t.Fatal(cerr)
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	want := map[uint64][]byte{}
	for _, f := range finals {
		for k, v := range f {
			want[k] = v
		}
	}
	if _, err := tb.Compact(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d compactions beside the writers moved %d records; %d entries", compactions, moved, len(want))
	if compactions < 2 {
		t.Fatalf("only %d compactions ran beside the writers", compactions)
	}
	checkBytesAgainst(t, tb, want, writers*perWriter*7)
	if st := checkStats(t, tb); st.DeadBytes != 0 {
		t.Fatalf("dead bytes after a quiet compaction: %+v", st)
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	checkBytesAgainst(t, tb, want, writers*perWriter*7)
	if err := tb.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCompactStopped stops compactions part way (cancelled context, Close)
// and checks the table keeps every value, reopens with the half-moved
// state, and compacts fully afterwards.
func TestCompactStopped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64][]byte{}
	r := rand.New(rand.NewPCG(8, 8))
	for gen := range 3 {
		for k := range uint64(100) {
			v := bytes.Repeat([]byte{byte(gen), byte(k)}, 1+r.IntN(100))
			if err := tb.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
			want[k] = v
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	chunks := 0
	_, err = tb.Compact(cctx, &CompactOptions{ChunkBytes: 1 << 10, Progress: func(CompactProgress) {
		if chunks++; chunks == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Compact = %v, want context.Canceled", err)
	}
	st := checkStats(t, tb)
	if st.Segments != 2 {
		t.Fatalf("after a cancelled compaction: %+v", st)
	}
	checkBytesAgainst(t, tb, want, 110)
	abandon(t, tb)
	if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
		t.Fatal(err)
	}
	checkBytesAgainst(t, tb, want, 110)
	if st := checkStats(t, tb); st.Segments != 2 {
		t.Fatalf("half-compacted log reopened as %+v", st)
	}

	// Close stops a running compaction.
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	res := make(chan error, 1)
	go func() {
		_, err := tb.Compact(ctx, &CompactOptions{ChunkBytes: 1 << 10, Progress: func(CompactProgress) {
			once.Do(func() { close(started); <-release })
		}})
		res <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- tb.Close(ctx) }()
	// Close cancels the compaction, parked in Progress, then waits for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tb.comp.mu.Lock()
		closing := tb.comp.closing
		tb.comp.mu.Unlock()
		if closing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Close did not stop the compaction")
		}
	}
	close(release)
	if err := <-res; !errors.Is(err, ErrClosed) {
		t.Fatalf("Compact stopped by Close = %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	checkBytesAgainst(t, tb, want, 110)
	if _, err := tb.Compact(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st := checkStats(t, tb); st.Segments != 1 || st.DeadBytes != 0 {
		t.Fatalf("after a full compaction: %+v", st)
	}
	checkBytesAgainst(t, tb, want, 110)
	segs, _ := filepath.Glob(tb.ValueLogPath() + "*")
	if len(segs) != 1 {
		t.Fatalf("value-log files on disk: %v", segs)
	}
}

// TestCompactLegacyLog compacts a table whose value log is still segment 0,
// the file of the single-file layout (kv-<id>.vlog, pointers are plain
// offsets), and checks the file is gone afterwards.
func TestCompactLegacyLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newStore(t, dir, 512)
	defer s.Close()
	tb, err := CreateBytes[uint64](ctx, s, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range uint64(20) {
		tb.Put(ctx, k%7, bytes.Repeat([]byte{byte(k)}, int(k)))
	}
	if err := tb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tb.ValueLogPath()); err != nil {
		t.Fatalf("segment 0 is not the single-file name: %v", err)
	}
	if tb, err = OpenBytes[uint64](ctx, s, "b", nil); err != nil {
		t.Fatal(err)
	}
	defer tb.Close(ctx)
	if _, err := tb.Compact(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tb.ValueLogPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("segment 0 left after compaction: %v", err)
	}
	for k := range uint64(7) {
		last := k + 14
		if last >= 20 {
			last -= 7
		}
		if v, ok, err := tb.Get(ctx, k); err != nil || !ok || !bytes.Equal(v, bytes.Repeat([]byte{byte(last)}, int(last))) {
			t.Fatalf("Get(%d) = %v, %v, %v", k, v, ok, err)
		}
	}
}
