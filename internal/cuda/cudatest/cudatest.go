// Package cudatest gives tests a GPU or a clear reason to skip.
//
// Tests that need a GPU call Device first. Without a driver or device they
// skip with the reason; with BAM_REQUIRE_GPU=1 in the environment (the GPU
// host's test script sets it) they fail instead, so a GPU run can never pass
// by skipping. BAM_GPU selects the device ordinal (default 0); the script
// sets BAM_SANITIZER to the tool of a sanitizer run (Sanitizer, SkipUnder).
//
// This package only opens devices and loads the embedded kernels for tests;
// it must not be imported by non-test code.
package cudatest

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
)

// Required reports whether the environment demands a GPU (BAM_REQUIRE_GPU=1).
func Required() bool { return os.Getenv("BAM_REQUIRE_GPU") == "1" }

// Sanitizer is the compute-sanitizer tool the GPU test script runs this
// binary under ($BAM_SANITIZER: memcheck, racecheck or synccheck), or "".
func Sanitizer() string { return os.Getenv("BAM_SANITIZER") }

// SkipUnder skips t when the binary runs under the sanitizer tool, saying
// why. Use it only where the tool itself cannot run the test (say so, with
// the log that shows it), never to hide a report.
func SkipUnder(t testing.TB, tool, why string) {
	t.Helper()
	if Sanitizer() == tool {
		t.Skipf("under compute-sanitizer %s: %s", tool, why)
	}
}

// Ordinal is the device tests use: $BAM_GPU, default 0.
func Ordinal() int {
	if v, err := strconv.Atoi(os.Getenv("BAM_GPU")); err == nil && v >= 0 {
		return v
	}
	return 0
}

// Device returns a retained primary context of the test device, released
// when the test ends, or skips the test (fails it when Required) when there
// is no usable driver or device.
func Device(t testing.TB) *cuda.Context {
	t.Helper()
	if err := cuda.Available(); err != nil {
		if !Required() && (errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice)) {
			t.Skipf("no GPU: %v (GPU tests run on a GPU host: make gpu-bundle, then make gpu-test there)", err)
		}
		t.Fatalf("GPU required but unusable: %v", err)
	}
	ctx, err := cuda.Primary(Ordinal())
	if err != nil {
		if !Required() && errors.Is(err, cuda.ErrNoDevice) {
			t.Skipf("no GPU %d: %v", Ordinal(), err)
		}
		t.Fatalf("retain device %d: %v", Ordinal(), err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("release device %d: %v", Ordinal(), err)
		}
	})
	return ctx
}

// Module loads an embedded kernel family into ctx, built for its device
// (kernels.PTXFor; $BAM_KERNEL_BUILD can pin the compute_80 build),
// unloaded when the test ends.
func Module(t testing.TB, ctx *cuda.Context, family string) *cuda.Module {
	t.Helper()
	major, err := ctx.Device().Attribute(cuda.AttrComputeCapabilityMajor)
	if err != nil {
		t.Fatal(err)
	}
	portable, err := kernels.PortableFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if portable {
		major = 8
	}
	ptx, err := kernels.PTXFor(family, major)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ctx.LoadPTX(ptx)
	if err != nil {
		t.Fatalf("load %s kernels: %v", family, err)
	}
	t.Cleanup(func() {
		if err := m.Unload(); err != nil {
			t.Errorf("unload %s kernels: %v", family, err)
		}
	})
	return m
}

// Function looks up a kernel of m or fails the test.
func Function(t testing.TB, m *cuda.Module, name string) *cuda.Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Alloc allocates device memory freed when the test ends.
func Alloc(t testing.TB, ctx *cuda.Context, n uint64) *cuda.DeviceMem {
	t.Helper()
	m, err := ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Free(); err != nil {
			t.Errorf("free device memory: %v", err)
		}
	})
	return m
}

// Pinned allocates mapped pinned host memory freed when the test ends.
func Pinned(t testing.TB, ctx *cuda.Context, n uint64) *cuda.HostMem {
	t.Helper()
	h, err := ctx.AllocPinned(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Free(); err != nil {
			t.Errorf("free pinned memory: %v", err)
		}
	})
	return h
}
