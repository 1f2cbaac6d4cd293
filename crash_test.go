package bam

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

const crashDirEnv = "BAM_TEST_CRASH_DIR"

// TestCrashChildProcess is the child of TestCrashKill: it loops over catalog
// updates on the store in $BAM_TEST_CRASH_DIR and reports each one on stdout
// after it returns, until it is killed.
func TestCrashChildProcess(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("child of TestCrashKill")
	}
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		os.Exit(3)
	}
	base, _ := strconv.Atoi(os.Getenv(crashDirEnv + "_BASE"))
	for i := base; ; i++ {
		name := "o" + strconv.Itoa(i)
		if i%5 == 4 && i-3 >= base {
			victim := "o" + strconv.Itoa(i-3)
			fmt.Printf("begin D %s\n", victim)
			if err := s.DeleteObject(ctx, victim); err != nil {
				fmt.Printf("ERR %v\n", err)
				os.Exit(3)
			}
			fmt.Printf("D %s\n", victim)
			continue
		}
		fmt.Printf("begin C %s\n", name)
		if _, err := s.CreateObject(ctx, ObjectSpec{Name: name, ElemType: "float64", Length: uint64(100 + (i%100)*37)}); err != nil {
			fmt.Printf("ERR %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("C %s\n", name)
	}
}

// TestCrashKill kills a child process at random points while it updates the
// catalog, then checks that the store opens and holds every object whose
// CreateObject returned (minus those whose DeleteObject returned).
func TestCrashKill(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("in the child")
	}
	iters := 6
	if testing.Short() {
		iters = 3
	}
	if v, err := strconv.Atoi(os.Getenv("BAM_CRASH_ITERS")); err == nil {
		iters = v
	}
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Create(ctx, dir, CreateOptions{Namespaces: 2, NamespaceSize: 64 << 20, CatalogSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	acked := map[string]bool{}
	for iter := range iters {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, fmt.Sprintf("%s_BASE=%d", crashDirEnv, iter*100000))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after a random number of acknowledged updates (0..60),
		// or a deadline, whichever comes first.
		killAfter := rng.IntN(60)
		pending := ""
		deadline := time.After(10 * time.Second)
		n := 0
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				f := strings.Fields(l)
				switch {
				case len(f) == 3 && f[0] == "begin":
					pending = f[2]
					if n >= killAfter {
						// Give the child a random moment inside the update.
						time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
						cmd.Process.Kill()
						break read
					}
				case len(f) == 2 && f[0] == "C":
					acked[f[1]] = true
					n++
				case len(f) == 2 && f[0] == "D":
					delete(acked, f[1])
					n++
				case len(f) > 0 && f[0] == "ERR":
					t.Fatalf("child: %s", l)
				}
			case <-deadline:
				cmd.Process.Kill()
				t.Fatal("child made no progress for 10 s")
			}
		}
		cmd.Process.Kill()
		// Drain: lines written before the kill may still be buffered.
		for l := range lines {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "begin":
				pending = f[2]
			case len(f) == 2 && f[0] == "C":
				acked[f[1]] = true
			case len(f) == 2 && f[0] == "D":
				delete(acked, f[1])
			}
		}
		cmd.Wait()

		s, err := Open(ctx, dir, Options{})
		if err != nil {
			t.Fatalf("iteration %d: open after kill: %v", iter, err)
		}
		got := map[string]bool{}
		for _, o := range s.Objects() {
			got[o.Name] = true
		}
		for name := range acked {
			if !got[name] && name != pending {
				t.Fatalf("iteration %d: acknowledged object %s missing", iter, name)
			}
		}
		for name := range got {
			if !acked[name] && name != pending {
				t.Fatalf("iteration %d: object %s was never acknowledged", iter, name)
			}
		}
		// The in-flight update may or may not have landed; adopt what the
		// store says so the next round's model is exact.
		acked = got
		s.Close()
		t.Logf("iteration %d: killed after %d updates, %d objects", iter, n, len(got))
	}
}
