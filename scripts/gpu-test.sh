#!/usr/bin/env bash
# Runs the prebuilt GPU test bundle on a GPU host (no Go toolchain needed).
#
#   bash scripts/gpu-test.sh [BUNDLE]     BUNDLE: the directory `make gpu-bundle` wrote
#                                         (default .gpubundle) or its .tar.gz
#
# For every test binary in BUNDLE/tests: one plain run (-test.v), then, when
# compute-sanitizer is found, one run per sanitizer tool over the GPU tests
# (with -test.short, which makes the tests that only need volume smaller).
# Then `bam info` and `bam bench pcie` (BENCH=0 skips the benchmark).
# Writes gpu-test-summary.txt (one line per run: status, binary, mode,
# tests passed/failed/skipped or sanitizer error count), logs/ and the
# benchmark JSON under $OUT (default: the bundle directory). Exits non-zero
# if any run failed.
#
# Environment: OUT, BENCH (1), PLAIN (1; 0 skips the plain runs, to split
# a long run in parts), SANITIZER (1; 0 skips), SANITIZER_TOOLS
# ("memcheck racecheck synccheck"), SANITIZER_RUN (test regexp,
# '^Test(GPU|BenchGPU)': the GPU tests and the benchmarks' tiny GPU runs),
# TEST_TIMEOUT (go test timeout per binary, 5m), BAM_GPU (device, 0).
# BAM_SHARED_PROCS=N (2 or more) makes internal_gpubench's plain run also
# run its tiny cache benchmark in N processes sharing the GPU at once
# (TestBenchGPUCacheSharedDevice; BAM_SHARED_REPS runs each, default 3).
# racecheck runs load the compute_80 kernels (BAM_KERNEL_BUILD=compute_80).
# A sanitizer run sets BAM_SANITIZER to its tool for the tests
# (cudatest.Sanitizer).
set -uo pipefail

bundle=${1:-.gpubundle}
if [[ -f $bundle ]]; then
  tmp=$(mktemp -d)
  tar -C "$tmp" -xzf "$bundle" || { echo "gpu-test: cannot unpack $bundle" >&2; exit 2; }
  bundle=$tmp
fi
[[ -d $bundle/tests && -x $bundle/bam ]] || { echo "gpu-test: $bundle is not a GPU bundle (run make gpu-bundle)" >&2; exit 2; }
bundle=$(cd "$bundle" && pwd)
out=${OUT:-$bundle}
mkdir -p "$out/logs" "$out/work"
out=$(cd "$out" && pwd)
summary=$out/gpu-test-summary.txt
: >"$summary"

export BAM_REQUIRE_GPU=1 # a GPU test that would skip fails instead
export BAM_COMMIT=${BAM_COMMIT:-$(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)}
timeout_go=${TEST_TIMEOUT:-5m}
tools=${SANITIZER_TOOLS:-memcheck racecheck synccheck}
san_run=${SANITIZER_RUN:-^Test(GPU|BenchGPU)}
failed=0

note() { echo "$*" | tee -a "$summary"; }
record() { # status binary mode detail
  printf '%-4s  %-22s %-10s %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"
  [[ $1 == PASS || $1 == SKIP ]] || failed=1
}
count() { grep -cE "$1" "$2" 2>/dev/null || true; }

note "# GPU test run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), commit $BAM_COMMIT"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total \
    --format=csv,noheader 2>&1 | sed 's/^/# gpu: /' | tee -a "$summary"
fi

sanitizer=""
if [[ ${SANITIZER:-1} != 0 ]]; then
  for c in compute-sanitizer /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    if command -v "$c" >/dev/null 2>&1; then sanitizer=$(command -v "$c"); break; fi
  done
  [[ -n $sanitizer ]] && note "# sanitizer: $sanitizer ($("$sanitizer" --version 2>/dev/null | tail -1))" \
    || note "# sanitizer: compute-sanitizer not found; sanitizer runs skipped"
fi

cd "$out/work" || exit 2
[[ ${PLAIN:-1} == 0 ]] && note "# plain runs skipped (PLAIN=0)"
for t in "$bundle"/tests/*.test; do
  [[ ${PLAIN:-1} == 0 ]] && break
  name=$(basename "$t" .test)
  log=$out/logs/$name.plain.log
  "$t" -test.v -test.count=1 -test.timeout="$timeout_go" >"$log" 2>&1
  rc=$?
  p=$(count '^\s*--- PASS' "$log"); f=$(count '^\s*--- FAIL' "$log"); s=$(count '^\s*--- SKIP' "$log")
  if [[ $rc -eq 0 ]]; then st=PASS; else st=FAIL; fi
  record "$st" "$name" plain "exit $rc, $p passed, $f failed, $s skipped (logs/$name.plain.log)"
done

if [[ -n $sanitizer ]]; then
  for tool in $tools; do
    for t in "$bundle"/tests/*.test; do
      name=$(basename "$t" .test)
      log=$out/logs/$name.$tool.log
      # A binary with no GPU tests makes no CUDA call, which the sanitizer
      # reports as a failure of its own.
      if [[ -z $("$t" -test.list "$san_run" 2>/dev/null) ]]; then
        record SKIP "$name" "$tool" "no test matches $san_run"
        continue
      fi
      extra=()
      [[ $tool == memcheck ]] && extra=(--leak-check full)
      # racecheck follows no hand-over through atomics, and the sm_90
      # build's completion-window slots pass between threads that way
      # (bench/experiments/racecheck_slots.cu): it checks the compute_80
      # build, which reads the windows with loads; the other tools check
      # the build the GPU gets.
      build=${BAM_KERNEL_BUILD:-}
      [[ $tool == racecheck ]] && build=compute_80
      # API errors are expected (the out-of-memory and broken-PTX tests
      # provoke them); only device-side errors count.
      # -test.short: tests whose volume only serves load (the small-cache
      # gather) run smaller under the tools, checking the same things, and
      # the graph test's grid (1203 levels) runs two of its variants.
      BAM_SANITIZER=$tool BAM_KERNEL_BUILD=$build "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 86 --print-limit 50 "${extra[@]}" \
        "$t" -test.v -test.count=1 -test.short -test.timeout="$timeout_go" -test.run "$san_run" >"$log" 2>&1
      rc=$?
      errs=$(grep -oE '(ERROR SUMMARY|RACECHECK SUMMARY): [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
      hazards=$(grep -oE '\(([0-9]+) errors' "$log" | grep -oE '[0-9]+' | tail -1)
      errs=${errs:-?}
      [[ $tool == racecheck && -n $hazards ]] && errs=$hazards
      p=$(count '^\s*--- PASS' "$log"); f=$(count '^\s*--- FAIL' "$log")
      if [[ $rc -eq 0 && $errs == 0 ]]; then st=PASS; else st=FAIL; fi
      record "$st" "$name" "$tool" "exit $rc, $errs sanitizer errors, $p passed, $f failed, kernels ${build:-for the device} (logs/$name.$tool.log)"
    done
  done
fi

"$bundle/bam" info >"$out/logs/bam-info.txt" 2>&1 && "$bundle/bam" info --json >"$out/bam-info.json" 2>>"$out/logs/bam-info.txt"
rc=$?
record "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" bam info "exit $rc (logs/bam-info.txt, bam-info.json)"

if [[ ${BENCH:-1} != 0 ]]; then
  "$bundle/bam" bench pcie --device "${BAM_GPU:-0}" --out "$out/bench-results" >"$out/logs/bench-pcie.txt" 2>&1
  rc=$?
  record "$([[ $rc -eq 0 ]] && echo PASS || echo FAIL)" bam "bench pcie" "exit $rc (logs/bench-pcie.txt, bench-results/)"
  sed 's/^/# /' "$out/logs/bench-pcie.txt" | tee -a "$summary"
fi

if [[ $failed -eq 0 ]]; then note "# result: PASS"; else note "# result: FAIL"; fi
exit $failed
