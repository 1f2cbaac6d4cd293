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
