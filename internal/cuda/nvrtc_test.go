package cuda_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
)

// NVRTC needs no GPU: these run wherever the library is installed.

func nvrtcOrSkip(t *testing.T) {
	t.Helper()
	if err := cuda.OpenNVRTC(); err != nil {
		if !errors.Is(err, cuda.ErrNoNVRTC) {
			t.Fatalf("OpenNVRTC error %v does not wrap ErrNoNVRTC", err)
		}
		t.Skipf("NVRTC not installed: %v", err)
	}
	major, minor, err := cuda.NVRTCVersion()
	if err != nil || major < 11 {
		t.Fatalf("NVRTC version %d.%d, %v", major, minor, err)
	}
	t.Logf("NVRTC %d.%d from %s", major, minor, cuda.NVRTCLibrary())
}

func TestNVRTCCompilesWithDeviceHeaders(t *testing.T) {
	nvrtcOrSkip(t)
	ptx, _, err := cuda.CompilePTX(cuda.Source{Name: "square.cu", Code: squareSource, Headers: kernels.HeaderSources()})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".entry square_pattern(", ".target sm_80"} {
		if !bytes.Contains(ptx, []byte(want)) {
			t.Errorf("PTX lacks %q", want)
		}
	}
	if bytes.IndexByte(ptx, 0) >= 0 {
		t.Error("PTX contains a NUL byte")
	}
}

func TestNVRTCCompileErrorCarriesLog(t *testing.T) {
	nvrtcOrSkip(t)
	_, log, err := cuda.CompilePTX(cuda.Source{Name: "bad.cu", Code: `extern "C" __global__ void k(int *p) { p[0] = undefined_name_bam; }`})
	var ce *cuda.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *CompileError", err)
	}
	if !strings.Contains(log, "undefined_name_bam") || !strings.Contains(err.Error(), "undefined_name_bam") {
		t.Errorf("log %q / error %q do not name the undefined identifier", log, err)
	}
	if !strings.Contains(err.Error(), "bad.cu") {
		t.Errorf("error %q does not name the source", err)
	}
}

func TestNVRTCMissingHeader(t *testing.T) {
	nvrtcOrSkip(t)
	_, _, err := cuda.CompilePTX(cuda.Source{Code: `#include "bam/common.cuh"
extern "C" __global__ void k() {}`})
	if err == nil {
		t.Fatal("compiled without the header it includes")
	}
}

func TestNamesArch(t *testing.T) {
	for _, tc := range []struct {
		opts []string
		want bool
	}{
		{nil, false},
		{[]string{"-DX=1", "-lineinfo"}, false},
		{[]string{"--gpu-architecture=compute_90"}, true},
		{[]string{"-DX=1", "-arch=compute_80"}, true},
		{[]string{"-arch", "compute_80"}, true},
	} {
		if got := cuda.NamesArch(tc.opts); got != tc.want {
			t.Errorf("NamesArch(%q) = %v, want %v", tc.opts, got, tc.want)
		}
	}
}

// readerSource reads a bam::array, so its PTX holds the queues' miss path
// and with it the harvest of completion windows.
const readerSource = `
#include "bam/array.cuh"
extern "C" __global__ void read_all(bam::array<unsigned long long> a, unsigned long long n, unsigned long long *out) {
	unsigned long long s = 0;
	for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
		s += a[i];
	atomicAdd(out, s);
}
`

// TestNVRTCFollowsKernelBuilds compiles user code with the options of each
// build (kernels.NVRTCOptions): the sm_90 build's reads completion windows
// with bulk copies, as the engine's embedded sm_90 kernels do, the
// portable build's with loads.
func TestNVRTCFollowsKernelBuilds(t *testing.T) {
	nvrtcOrSkip(t)
	major, _, err := cuda.NVRTCVersion()
	if err != nil {
		t.Fatal(err)
	}
	if major < 12 {
		t.Skipf("NVRTC %d writes no PTX ISA 8.0: user code gets the compute_80 build", major)
	}
	for _, tc := range []struct {
		build, target string
		bulk          bool
	}{{kernels.BuildSM90, ".target sm_90", true}, {kernels.BuildPortable, ".target sm_80", false}} {
		ptx, _, err := cuda.CompilePTX(cuda.Source{Name: "reader.cu", Code: readerSource, Headers: kernels.HeaderSources(),
			Options: kernels.NVRTCOptions(tc.build, major)})
		if err != nil {
			t.Fatalf("%s: %v", tc.build, err)
		}
		if !bytes.Contains(ptx, []byte(tc.target)) {
			t.Errorf("%s: PTX lacks %q", tc.build, tc.target)
		}
		if got := bytes.Contains(ptx, []byte("cp.async.bulk")); got != tc.bulk {
			t.Errorf("%s: PTX has cp.async.bulk: %v, want %v", tc.build, got, tc.bulk)
		}
	}
}
