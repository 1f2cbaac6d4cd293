package gpubench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda/cudatest"
)

// Environment of TestBenchGPUCacheSharedDevice.
const (
	sharedProcsEnv = "BAM_SHARED_PROCS" // processes sharing the GPU (2 or more; unset: skip)
	sharedRepsEnv  = "BAM_SHARED_REPS"  // runs of the tiny cache benchmark in each (default 3)
	sharedOutEnv   = "BAM_SHARED_OUT"   // directory for each process's whole output (optional)
	sharedChildEnv = "BAM_SHARED_CHILD" // set in the child processes
)

// TestBenchGPUCacheSharedDevice runs the tiny cache benchmark at 64 KiB
// lines, C4 included, in BAM_SHARED_PROCS processes at once, so that
// their contexts share the GPU by time slices. With two or three test
// processes on one GPU, a read-ahead pass once returned a wrong sum with
// modules linked, and C4 failed early and then blocked in cuMemFree in
// both builds (bench/results/logs/linked-default-69723b1-H200-20261126.txt):
// its kernel ran far past its bound, one timed-out wait after another,
// until a failed launch stopped starting reads (ded6e9c;
// bench/results/logs/shared-gpu-overrun-H200-20261126.txt). With four
// processes, C4's per-lane pass still timed out in some runs, which
// now end with the error; why a 5 s wait times out there is not known,
// so a timeout fails this test too.
// Each child's runs must all verify, and a child still running at the
// deadline gets SIGQUIT, so that its goroutines' stacks are in its
// output. Opt-in, since it takes the GPU from anything else beside it.
func TestBenchGPUCacheSharedDevice(t *testing.T) {
	if os.Getenv(sharedChildEnv) == "1" {
		sharedChild(t)
		return
	}
	procs, _ := strconv.Atoi(os.Getenv(sharedProcsEnv))
	if procs < 2 {
		t.Skipf("%s unset or below 2", sharedProcsEnv)
	}
	cudatest.Device(t)
	reps := sharedReps()
	// A run took about 10 s with three processes on an H200; the first
	// JIT of the modules up to a minute.
	deadline := 2*time.Minute + time.Duration(reps)*45*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	outDir := os.Getenv(sharedOutEnv)
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, procs)
	errs := make([]error, procs)
	for i := range procs {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBenchGPUCacheSharedDevice$", "-test.v", "-test.count=1",
			fmt.Sprintf("-test.timeout=%v", deadline+time.Minute))
		cmd.Env = append(os.Environ(), sharedChildEnv+"=1")
		cmd.Stdout = &outs[i]
		cmd.Stderr = &outs[i]
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 15 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Wait()
		}()
	}
	wg.Wait()
	for i := range procs {
		out := outs[i].Bytes()
		if outDir != "" {
			if err := os.WriteFile(filepath.Join(outDir, fmt.Sprintf("shared-%d.txt", i)), out, 0o644); err != nil {
				t.Error(err)
			}
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			if bytes.Contains(line, []byte("shared run ")) {
				t.Logf("process %d: %s", i, bytes.TrimSpace(line))
			}
		}
		if errs[i] != nil {
			t.Errorf("process %d: %v (deadline %v); %s", i, errs[i], deadline, failureExcerpt(out))
		}
	}
}

// failureExcerpt is what a failed child's output shows of its failure:
// before a goroutine dump (SIGQUIT), the lines before it and the dump's
// frames of this module with their goroutines' headers; else its end.
func failureExcerpt(out []byte) string {
	before, dump, quit := bytes.Cut(out, []byte("SIGQUIT: quit"))
	if !quit {
		return fmt.Sprintf("the end of its output:\n%s", out[max(len(out)-8<<10, 0):])
	}
	var b bytes.Buffer
	b.Write(before[max(len(before)-4<<10, 0):])
	b.WriteString("SIGQUIT: quit; its goroutines in this module:\n")
	var header []byte
	lines := 0
	for _, line := range bytes.Split(dump, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("goroutine ")):
			header = line
		case bytes.Contains(line, []byte("github.com/bam-go/bam/")) && !bytes.Contains(line, []byte("nvme.(*Target).executor")) && lines < 200:
			if header != nil {
				b.Write(header)
				b.WriteByte('\n')
				header = nil
			}
			b.Write(line)
			b.WriteByte('\n')
			lines++
		}
	}
	return b.String()
}

func sharedReps() int {
	if n, err := strconv.Atoi(os.Getenv(sharedRepsEnv)); err == nil && n > 0 {
		return n
	}
	return 3
}

// sharedChild is one process of TestBenchGPUCacheSharedDevice.
func sharedChild(t *testing.T) {
	c := tinyConfig(t)
	for r := range sharedReps() {
		t0 := time.Now()
		res, err := RunCache(gpuCtx(t), CacheParams{
			Config: c, CacheBytes: 32 << 20, Lines: []int{65536}, Queues: 8, Depth: 256,
			Lookups: 1 << 16, CeilingBytes: 16 << 20, CeilingTime: 50 * time.Millisecond,
		})
		t.Logf("shared run %d: %v in %v", r, err, time.Since(t0).Round(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		checkResults(t, res, "C1", "C4")
	}
}
