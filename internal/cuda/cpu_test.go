package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestErrorIs(t *testing.T) {
	tests := []struct {
		call   string
		result int
		want   error
		not    []error
	}{
		{"cuMemAlloc_v2", resultOutOfMemory, ErrOutOfMemory, []error{ErrNoDevice, ErrNoDriver}},
		{"cuInit", resultNoDevice, ErrNoDevice, []error{ErrOutOfMemory, ErrNoDriver}},
		{"cuDeviceGet", resultInvalidDevice, ErrNoDevice, nil},
		{"cuInit", resultInsufficientDriver, ErrNoDriver, []error{ErrNoDevice}},
		{"cuInit", resultStubLibrary, ErrNoDriver, nil},
		{"cuInit", resultOperatingSystem, ErrNoDriver, nil},
		{"cuInit", resultSystemDriverMismatch, ErrNoDriver, nil},
		{"cuMemAlloc_v2", resultNotLoaded, ErrNoDriver, nil},
		{"cuLaunchKernel", 719, nil, []error{ErrOutOfMemory, ErrNoDevice, ErrNoDriver}},
		// NVRTC result 2 is NVRTC_ERROR_INVALID_INPUT, not out of memory.
		{"nvrtcCompileProgram", 2, nil, []error{ErrOutOfMemory, ErrNoNVRTC}},
		{"nvrtcCompileProgram", 7, ErrNoNVRTC, []error{ErrNoDriver}},
		{"cuInit", 7, nil, []error{ErrNoNVRTC}},
	}
	for _, tc := range tests {
		err := &Error{Call: tc.call, Result: tc.result}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s result %d: not %v", tc.call, tc.result, tc.want)
		}
		for _, n := range tc.not {
			if errors.Is(err, n) {
				t.Errorf("%s result %d: unexpectedly %v", tc.call, tc.result, n)
			}
		}
	}
}

func TestErrorMessage(t *testing.T) {
	err := error(&Error{Call: "cuMemAlloc_v2", Result: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Msg: "out of memory"})
	if got, want := err.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&Error{Call: "cuX", Result: 9}).Error(); got != "cuda: cuX: result 9 (9)" {
		t.Errorf("unnamed: %q", got)
	}
	if newError("cuX", 0) != nil {
		t.Error("success produced an error")
	}
}

// TestOpenWithoutGPU checks the contract every machine relies on: Open
// either works or explains itself with a sentinel, never panics.
func TestOpenWithoutGPU(t *testing.T) {
	err := Open()
	if err == nil {
		if _, err := DeviceCount(); err != nil {
			t.Fatalf("driver opened but DeviceCount failed: %v", err)
		}
		return
	}
	t.Logf("Open: %v", err)
	if !errors.Is(err, ErrNoDriver) && !errors.Is(err, ErrNoDevice) {
		t.Errorf("Open error %v matches neither ErrNoDriver nor ErrNoDevice", err)
	}
	if err2 := Open(); err2 != err {
		t.Errorf("second Open returned %v, first %v", err2, err)
	}
	if err := Available(); err == nil {
		t.Error("Available is nil although Open failed")
	}
	if _, err := Primary(0); err == nil {
		t.Error("Primary(0) succeeded although Open failed")
	}
}

func TestPackArgs(t *testing.T) {
	args := []Arg{U32(0x11223344), U64(0x0102030405060708), I32(-2), F32(1.5), F64(-0.25),
		Ptr(0xdeadbeef00), Struct([]byte{1, 2, 3}, 1), Struct(make([]byte, 24), 12), I64(math.MinInt64)}
	params, free := packArgs(args)
	defer free()
	ptrs := unsafe.Slice(params, len(args))
	read := func(i, n int) []byte { return unsafe.Slice((*byte)(ptrs[i]), n) }
	if got := binary.LittleEndian.Uint32(read(0, 4)); got != 0x11223344 {
		t.Errorf("u32 %#x", got)
	}
	if got := binary.LittleEndian.Uint64(read(1, 8)); got != 0x0102030405060708 {
		t.Errorf("u64 %#x", got)
	}
	if got := int32(binary.LittleEndian.Uint32(read(2, 4))); got != -2 {
		t.Errorf("i32 %d", got)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(read(3, 4))); got != 1.5 {
		t.Errorf("f32 %v", got)
	}
	if got := math.Float64frombits(binary.LittleEndian.Uint64(read(4, 8))); got != -0.25 {
		t.Errorf("f64 %v", got)
	}
	if got := binary.LittleEndian.Uint64(read(5, 8)); got != 0xdeadbeef00 {
		t.Errorf("ptr %#x", got)
	}
	if got := read(6, 3); got[0] != 1 || got[2] != 3 {
		t.Errorf("struct % x", got)
	}
	if got := int64(binary.LittleEndian.Uint64(read(8, 8))); got != math.MinInt64 {
		t.Errorf("i64 %d", got)
	}
	for i, a := range args {
		if p := uintptr(ptrs[i]); p%uintptr(a.align) != 0 {
			t.Errorf("arg %d at %#x not aligned to %d", i, p, a.align)
		}
		if i > 0 && uintptr(ptrs[i]) < uintptr(ptrs[i-1])+uintptr(args[i-1].size) {
			t.Errorf("arg %d overlaps arg %d", i, i-1)
		}
	}
	if args[7].align != 16 {
		t.Errorf("alignment 12 rounded to %d, want 16", args[7].align)
	}
	if p, free := packArgs(nil); p != nil {
		t.Error("no args produced a parameter array")
	} else {
		free()
	}
}

func TestLinear(t *testing.T) {
	tests := []struct {
		n              uint64
		block, max     uint32
		wantGrid, blkX uint32
	}{
		{0, 256, 0, 1, 256},
		{1, 256, 0, 1, 256},
		{256, 256, 0, 1, 256},
		{257, 256, 0, 2, 256},
		{1 << 40, 256, 0, math.MaxInt32, 256},
		{1 << 20, 128, 64, 64, 128},
		{10, 0, 0, 1, 256},
	}
	for _, tc := range tests {
		c := Linear(tc.n, tc.block, tc.max)
		if c.Grid.X != tc.wantGrid || c.Block.X != tc.blkX {
			t.Errorf("Linear(%d, %d, %d) = grid %d block %d, want %d %d", tc.n, tc.block, tc.max, c.Grid.X, c.Block.X, tc.wantGrid, tc.blkX)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		80 << 30: "80.0 GiB", 3 << 40: "3.0 TiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestClosedObjects(t *testing.T) {
	c := &Context{}
	c.closed.Store(true)
	if _, err := c.Alloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc on closed context: %v", err)
	}
	if _, err := c.LoadPTX([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("LoadPTX on closed context: %v", err)
	}
	if err := c.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Errorf("Synchronize on closed context: %v", err)
	}
	s := &Stream{ctx: c}
	if err := s.CopyBatch(HostToDevice, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("CopyBatch on closed context: %v", err)
	}
	if err := s.CopyBatch(CopyKind(9), nil); err == nil || !strings.Contains(err.Error(), "invalid kind") {
		t.Errorf("CopyBatch with bad kind: %v", err)
	}
	var nilStream *Stream
	if err := nilStream.Synchronize(); err == nil {
		t.Error("Synchronize on nil stream succeeded")
	}
}

func TestPollUntilBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := pollUntil(ctx, func() (bool, error) { return false, nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("poll overran its deadline by %v", d)
	}
	calls := 0
	err = pollUntil(context.Background(), func() (bool, error) { calls++; return calls == 3, nil })
	if err != nil || calls != 3 {
		t.Errorf("poll: %v after %d calls", err, calls)
	}
	// Work that ends after the back-to-back phase is seen by the sleeping one.
	start = time.Now()
	late := start.Add(3 * spinPolls)
	if err := pollUntil(context.Background(), func() (bool, error) { return time.Now().After(late), nil }); err != nil {
		t.Errorf("poll past the spin phase: %v", err)
	}
	if time.Now().Before(late) {
		t.Error("poll returned before its work was done")
	}
	boom := errors.New("boom")
	if err := pollUntil(context.Background(), func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("poll error: %v", err)
	}
}

// TestNoDriverLibrary runs this test binary again with the driver library
// pointed at a path that does not exist, as on a machine without NVIDIA
// software, and checks the clean ErrNoDriver answer there.
func TestNoDriverLibrary(t *testing.T) {
	if os.Getenv("BAM_TEST_NO_DRIVER_CHILD") == "1" {
		err := Open()
		if !errors.Is(err, ErrNoDriver) || errors.Is(err, ErrNoDevice) {
			t.Fatalf("Open: %v, want ErrNoDriver", err)
		}
		if !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
			t.Errorf("error %q does not name the library", err)
		}
		if _, err := DeviceCount(); !errors.Is(err, ErrNoDriver) {
			t.Errorf("DeviceCount: %v", err)
		}
		if err := Available(); !errors.Is(err, ErrNoDriver) {
			t.Errorf("Available: %v", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoDriverLibrary$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BAM_TEST_NO_DRIVER_CHILD=1", DriverLibraryEnv+"=/nonexistent/libcuda.so.1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestHostMemAddr(t *testing.T) {
	buf := make([]byte, 64)
	h := &HostMem{p: unsafe.Pointer(&buf[0]), size: 64}
	base := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if got := h.Addr(0); got != base {
		t.Errorf("Addr(0) = %#x", got)
	}
	if got := h.Addr(64); got != base+64 {
		t.Errorf("Addr(64) = %#x", got)
	}
	if got := h.Addr(65); got != 0 {
		t.Errorf("Addr(65) = %#x, want 0", got)
	}
}
