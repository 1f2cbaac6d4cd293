package array_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
)

const (
	crashDirEnv   = "BAM_ARRAY_CRASH_DIR"
	crashRoundEnv = "BAM_ARRAY_CRASH_ROUND"
	crashLen      = 20000
)

func crashValue(i, round uint64) uint64 {
	if round == 0 {
		return 0
	}
	return i<<20 | round
}

// TestCrashChild is the child of TestCrashFlushed: from round $ROUND on it
// overwrites every element of array "a" (in random chunks, some by
// Scatter), Flushes and prints "F round"; every 25th round it also creates
// an array and prints "C name". It runs until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child of TestCrashFlushed")
	}
	ctx := context.Background()
	fail := func(err error) {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	s, err := bam.Open(ctx, dir, bam.Options{CacheBytes: 64 << 10, QueuePairs: 2, QueueDepth: 16})
	if err != nil {
		fail(err)
	}
	a, err := array.Open[uint64](s, "a")
	if err != nil {
		fail(err)
	}
	round, _ := strconv.ParseUint(os.Getenv(crashRoundEnv), 10, 64)
	rng := rand.New(rand.NewPCG(round, 1))
	for ; ; round++ {
		const chunk = 1000
		for _, c := range rng.Perm(crashLen / chunk) {
			lo := uint64(c * chunk)
			vals := make([]uint64, chunk)
			for k := range vals {
				vals[k] = crashValue(lo+uint64(k), round)
			}
			if c%2 == 0 {
				err = a.WriteRange(ctx, lo, vals)
			} else {
				idx := make([]uint64, chunk)
				for k := range idx {
					idx[k] = lo + uint64(k)
				}
				err = a.Scatter(ctx, idx, vals)
			}
			if err != nil {
				fail(err)
			}
		}
		if err := a.Flush(ctx); err != nil {
			fail(err)
		}
		fmt.Printf("F %d\n", round)
		if round%25 == 0 {
			name := "c" + strconv.FormatUint(round, 10)
			if _, err := array.Create[int32](ctx, s, name, 3000, nil); err != nil {
				fail(err)
			}
			fmt.Printf("C %s\n", name)
		}
	}
}

// TestCrashFlushed kills a child process at random points while it writes
// and flushes, then checks on reopen that the catalog opens, every array
// whose creation returned exists, and every element holds the value of the
// last Flushed round or of the round after it (never older data, never
// garbage).
func TestCrashFlushed(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("in the child")
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := bam.Create(ctx, dir, bam.CreateOptions{NamespaceSize: 4 << 20, Namespaces: 2, LineSize: 4096, CatalogSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := array.Create[uint64](ctx, s, "a", crashLen, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	kills := 4
	if stress() {
		kills = 20
	}
	rng := rand.New(rand.NewPCG(7, 7))
	flushed := uint64(0)
	var created []string
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRoundEnv+"="+strconv.FormatUint(flushed+1, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			lines []string
			done  = make(chan struct{})
		)
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		cmd.Process.Kill()
		<-done
		cmd.Wait()
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "F "):
				flushed, _ = strconv.ParseUint(l[2:], 10, 64)
			case strings.HasPrefix(l, "C "):
				created = append(created, l[2:])
			case strings.HasPrefix(l, "ERR"):
				t.Fatalf("kill %d: child failed: %s", k, l)
			}
		}
		s, err := bam.Open(ctx, dir, bam.Options{CacheBytes: 1 << 20})
		if err != nil {
			t.Fatalf("kill %d: reopen: %v", k, err)
		}
		for _, name := range created {
			if _, err := array.Open[int32](s, name); err != nil {
				t.Fatalf("kill %d: array %s created before the kill: %v", k, name, err)
			}
		}
		a, err := array.Open[uint64](s, "a")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]uint64, crashLen)
		if err := a.ReadRange(ctx, 0, got); err != nil {
			t.Fatal(err)
		}
		newer := 0
		for i, v := range got {
			switch v {
			case crashValue(uint64(i), flushed):
			case crashValue(uint64(i), flushed+1):
				newer++
			default:
				t.Fatalf("kill %d: element %d = %#x; flushed round %d wrote %#x", k, i, v, flushed, crashValue(uint64(i), flushed))
			}
		}
		t.Logf("kill %d: flushed round %d, %d elements of round %d, %d arrays created", k, flushed, newer, flushed+1, len(created))
		// Make the state uniform for the next child: everything of the
		// last flushed round.
		for i := range got {
			got[i] = crashValue(uint64(i), flushed)
		}
		if err := a.WriteRange(ctx, 0, got); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if flushed == 0 {
		t.Fatal("the child never completed a Flush")
	}
}
