// Package scripts holds the shell scripts that run on a GPU host; its test
// runs scripts/gpu-test.sh over a fake bundle, with stand-ins for the test
// binaries, bam, nvidia-smi and compute-sanitizer, so that the script's own
// bookkeeping is checked on every machine.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeBundle writes a bundle of three test binaries: "gpu" has one GPU
// test (its plain run exits with plainExit), "bench" a benchmark's tiny GPU
// run (TestBenchGPU...) and "cpu" none that the sanitizer runs select. It
// returns the bundle directory and a PATH holding the fake tools.
func fakeBundle(t *testing.T, plainExit int) (bundle, path string) {
	t.Helper()
	dir := t.TempDir()
	bundle = filepath.Join(dir, "bundle")
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{filepath.Join(bundle, "tests"), bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string) {
		if err := os.WriteFile(p, []byte("#!/usr/bin/env bash\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// -test.list prints the tests matching its pattern; any other run
	// passes them, or exits with plainExit when not under -test.short
	// (the plain run).
	// BAM_SANITIZER names the tool in sanitizer runs and is unset in plain
	// runs, or gpu.test fails.
	write(filepath.Join(bundle, "tests", "gpu.test"), `
if [[ $1 == -test.list ]]; then echo TestGPUThing | grep -E -- "$2"; exit 0; fi
for a in "$@"; do [[ $a == -test.short ]] && {
  [[ $BAM_SANITIZER == memcheck || $BAM_SANITIZER == racecheck ]] || { echo "--- FAIL: TestGPUThing: BAM_SANITIZER=$BAM_SANITIZER"; exit 1; }
  echo "--- PASS: TestGPUThing (0.00s)"; exit 0; }; done
[[ -z ${BAM_SANITIZER-} ]] || { echo "--- FAIL: TestGPUThing: plain run with BAM_SANITIZER=$BAM_SANITIZER"; exit 1; }
echo "--- PASS: TestGPUThing (0.00s)"; exit `+strconv.Itoa(plainExit)+"\n")
	write(filepath.Join(bundle, "tests", "bench.test"), `
if [[ $1 == -test.list ]]; then echo TestBenchGPUTiny | grep -E -- "$2"; exit 0; fi
echo "--- PASS: TestBenchGPUTiny (0.00s)"
`)
	write(filepath.Join(bundle, "tests", "cpu.test"), `
if [[ $1 == -test.list ]]; then echo TestParse | grep -E -- "$2"; exit 0; fi
echo "--- PASS: TestParse (0.00s)"
`)
	write(filepath.Join(bundle, "bam"), "echo fake bam \"$@\"\n")
	if err := os.WriteFile(filepath.Join(bundle, "COMMIT"), []byte("fake"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(bin, "nvidia-smi"), "echo '0, Fake GPU, 0.0, 5, 16, 1 MiB'\n")
	// The sanitizer runs the first argument ending in .test with the
	// rest, then prints its tool's summary, as compute-sanitizer does.
	write(filepath.Join(bin, "compute-sanitizer"), `
[[ $1 == --version ]] && { echo "fake sanitizer"; exit 0; }
tool=""
while [[ $# -gt 0 && $1 != *.test ]]; do [[ $1 == --tool ]] && tool=$2; shift; done
"$@"; rc=$?
if [[ $tool == racecheck ]]; then echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else echo "========= ERROR SUMMARY: 0 errors"; fi
exit $rc
`)
	return bundle, bin + string(os.PathListSeparator) + os.Getenv("PATH")
}

// runScript runs gpu-test.sh over bundle and returns its exit status and
// the summary it wrote.
func runScript(t *testing.T, bundle, path string, env ...string) (int, string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("bash", "gpu-test.sh", bundle)
	cmd.Env = append(os.Environ(), append([]string{"PATH=" + path, "OUT=" + out, "BENCH=0"}, env...)...)
	log, err := cmd.CombinedOutput()
	rc := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("gpu-test.sh: %v\n%s", err, log)
		}
		rc = ee.ExitCode()
	}
	summary, err := os.ReadFile(filepath.Join(out, "gpu-test-summary.txt"))
	if err != nil {
		t.Fatalf("no summary: %v\n%s", err, log)
	}
	return rc, string(summary)
}

// hasRecord reports whether summary has a record of status, binary and mode.
func hasRecord(summary, status, binary, mode string) bool {
	for _, line := range strings.Split(summary, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == status && f[1] == binary && f[2] == mode {
			return true
		}
	}
	return false
}

func needBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
}

func TestScriptRecords(t *testing.T) {
	needBash(t)
	bundle, path := fakeBundle(t, 0)
	rc, s := runScript(t, bundle, path, "SANITIZER_TOOLS=memcheck racecheck")
	if rc != 0 {
		t.Fatalf("exit %d, want 0:\n%s", rc, s)
	}
	for _, r := range [][3]string{
		{"PASS", "gpu", "plain"}, {"PASS", "cpu", "plain"},
		{"PASS", "gpu", "memcheck"}, {"PASS", "gpu", "racecheck"},
		// The default selection takes the benchmarks' tiny GPU runs.
		{"PASS", "bench", "memcheck"}, {"PASS", "bench", "racecheck"},
		// No test of cpu matches the selection: the sanitizer is not run
		// over it (compute-sanitizer fails a program that makes no CUDA
		// call), and the run does not fail.
		{"SKIP", "cpu", "memcheck"}, {"SKIP", "cpu", "racecheck"},
	} {
		if !hasRecord(s, r[0], r[1], r[2]) {
			t.Errorf("no %q record in:\n%s", r, s)
		}
	}
	if !strings.Contains(s, "# result: PASS") {
		t.Errorf("result not PASS:\n%s", s)
	}
}

func TestScriptPlainOff(t *testing.T) {
	needBash(t)
	bundle, path := fakeBundle(t, 1) // a plain run would fail
	rc, s := runScript(t, bundle, path, "PLAIN=0", "SANITIZER_TOOLS=memcheck")
	if rc != 0 {
		t.Fatalf("exit %d with the plain runs skipped, want 0:\n%s", rc, s)
	}
	if hasRecord(s, "FAIL", "gpu", "plain") || hasRecord(s, "PASS", "cpu", "plain") || !strings.Contains(s, "# plain runs skipped") {
		t.Errorf("plain runs not skipped:\n%s", s)
	}
	if !hasRecord(s, "PASS", "gpu", "memcheck") {
		t.Errorf("no memcheck record:\n%s", s)
	}
}

func TestScriptFails(t *testing.T) {
	needBash(t)
	bundle, path := fakeBundle(t, 1)
	rc, s := runScript(t, bundle, path, "SANITIZER=0")
	if rc == 0 || !hasRecord(s, "FAIL", "gpu", "plain") || !strings.Contains(s, "# result: FAIL") {
		t.Fatalf("a failing plain run: exit %d, summary:\n%s", rc, s)
	}
}
