package cuda_test

// Tests that need a GPU. Each starts with cudatest.Device, which skips
// without one. `make gpu-bundle` builds this package's test binary because
// this file exists.

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/kernels"
)

func sync1(t *testing.T, ctx *cuda.Context) {
	t.Helper()
	if err := ctx.Synchronize(); err != nil {
		t.Fatalf("synchronize: %v", err)
	}
}

func u64s(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}

func TestGPUDeviceProps(t *testing.T) {
	ctx := cudatest.Device(t)
	p, err := ctx.Device().Props()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", p)
	if p.Name == "" || p.PCIBusID == "" {
		t.Errorf("empty name %q or bus id %q", p.Name, p.PCIBusID)
	}
	if p.ComputeMajor < 8 {
		t.Errorf("compute capability %d.%d: the embedded PTX targets compute_80", p.ComputeMajor, p.ComputeMinor)
	}
	if p.Multiprocessors <= 0 || p.WarpSize != 32 || p.MaxThreadsPerBlock < 1024 {
		t.Errorf("implausible SMs %d, warp %d, max threads %d", p.Multiprocessors, p.WarpSize, p.MaxThreadsPerBlock)
	}
	if !p.UnifiedAddressing || !p.CanMapHostMemory {
		t.Errorf("unified addressing %v, can map host memory %v: both are required", p.UnifiedAddressing, p.CanMapHostMemory)
	}
	free, total, err := ctx.MemInfo()
	if err != nil || free == 0 || free > total || total > p.TotalMem {
		t.Errorf("MemInfo = %d, %d, %v; device total %d", free, total, err, p.TotalMem)
	}
	v, err := cuda.DriverVersion()
	if err != nil || v < 11080 {
		t.Errorf("driver version %d, %v", v, err)
	}
}

func TestGPUFillPattern(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	for _, n := range []uint64{1, 31, 1000, 1 << 20} {
		for _, tc := range []struct {
			kernel string
			size   uint64
		}{{kernels.FillPatternU64, 8}, {kernels.FillPatternU32, 4}} {
			dev := cudatest.Alloc(t, ctx, n*tc.size)
			const seed = 77
			// A grid smaller than n exercises the grid-stride loop.
			cfg := cuda.Linear(n, 128, 64)
			if err := cudatest.Function(t, m, tc.kernel).Launch(cfg, cuda.Ptr(dev.Ptr()), cuda.U64(n), cuda.U64(seed)); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n*tc.size)
			if err := dev.Read(0, got); err != nil {
				t.Fatal(err)
			}
			for i := uint64(0); i < n; i++ {
				want := kernels.Pattern64(seed, i)
				var v uint64
				if tc.size == 8 {
					v = binary.LittleEndian.Uint64(got[8*i:])
				} else {
					v = uint64(binary.LittleEndian.Uint32(got[4*i:]))
					want &= 0xffffffff
				}
				if v != want {
					t.Fatalf("%s n=%d: element %d = %#x, want %#x", tc.kernel, n, i, v, want)
				}
			}
		}
	}
}

func TestGPULaunchChecksArgs(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	f := cudatest.Function(t, m, kernels.FillPatternU64)
	if again, err := m.Function(kernels.FillPatternU64); err != nil || again != f {
		t.Errorf("a second lookup of %s gave %p (%v), want the first's %p", kernels.FillPatternU64, again, err, f)
	}
	dev := cudatest.Alloc(t, ctx, 8)
	cfg := cuda.Linear(1, 32, 1)
	// Wrong launches that would still run correctly unchecked (the driver
	// reads each parameter's size from the front of its argument and
	// ignores extra ones), so the test is safe where the driver cannot
	// describe parameters.
	wrong := [][]cuda.Arg{
		{cuda.Ptr(dev.Ptr()), cuda.U64(1), cuda.U64(3), cuda.U64(1)},         // one too many
		{cuda.Struct(make([]byte, 16), 8), cuda.U64(0), cuda.U64(3)},         // too large
		{cuda.Ptr(dev.Ptr()), cuda.U64(1), cuda.Struct(make([]byte, 24), 8)}, // too large, last
	}
	checked := 0
	for k, args := range wrong {
		switch err := f.Launch(cfg, args...); {
		case errors.Is(err, cuda.ErrArgs):
			checked++
		case err != nil:
			t.Fatalf("wrong launch %d: %v", k, err)
		}
	}
	if err := ctx.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Skip("the driver does not describe kernel parameters")
	}
	if checked != len(wrong) {
		t.Fatalf("%d of %d wrong launches refused", checked, len(wrong))
	}
	if err := f.Launch(cfg, cuda.Ptr(dev.Ptr()), cuda.U64(1), cuda.U64(3)); err != nil {
		t.Fatal(err)
	}
	if ps, err := f.Params(); err != nil {
		t.Fatal(err)
	} else if ps != nil && !slices.Equal(ps, []cuda.Param{{0, 8}, {8, 8}, {16, 8}}) {
		t.Fatalf("%s parameters %v", kernels.FillPatternU64, ps)
	}
}

func TestGPUGather(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	const srcLen, n, fallback = 100_003, 1 << 18, 0xdead
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]uint64, srcLen)
	for i := range src {
		src[i] = kernels.Pattern64(5, uint64(i))
	}
	idx := make([]uint64, n)
	wantOOR := uint32(0)
	for i := range idx {
		if i%97 == 0 {
			idx[i] = srcLen + uint64(rng.IntN(1000)) // out of range
			wantOOR++
		} else {
			idx[i] = uint64(rng.IntN(srcLen))
		}
	}
	for _, elem := range []uint64{8, 4} {
		dSrc := cudatest.Alloc(t, ctx, srcLen*elem)
		dIdx := cudatest.Alloc(t, ctx, n*8)
		dOut := cudatest.Alloc(t, ctx, n*elem)
		dOOR := cudatest.Alloc(t, ctx, 4)
		kernel := kernels.GatherU64
		if elem == 4 {
			kernel = kernels.GatherU32
			s32 := make([]uint32, srcLen)
			for i, v := range src {
				s32[i] = uint32(v)
			}
			if err := dSrc.Write(0, cuda.AsBytes(s32)); err != nil {
				t.Fatal(err)
			}
		} else if err := dSrc.Write(0, cuda.AsBytes(src)); err != nil {
			t.Fatal(err)
		}
		if err := dIdx.Write(0, cuda.AsBytes(idx)); err != nil {
			t.Fatal(err)
		}
		if err := dOOR.Memset8(0); err != nil {
			t.Fatal(err)
		}
		fb := cuda.U64(fallback)
		if elem == 4 {
			fb = cuda.U32(fallback)
		}
		err := cudatest.Function(t, m, kernel).Launch(cuda.Linear(n, 256, 0),
			cuda.Ptr(dOut.Ptr()), cuda.Ptr(dSrc.Ptr()), cuda.U64(srcLen), cuda.Ptr(dIdx.Ptr()), cuda.U64(n), fb, cuda.Ptr(dOOR.Ptr()))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, n*elem)
		if err := dOut.Read(0, out); err != nil {
			t.Fatal(err)
		}
		for i, j := range idx {
			want := uint64(fallback)
			if j < srcLen {
				want = src[j]
			}
			var got uint64
			if elem == 8 {
				got = binary.LittleEndian.Uint64(out[8*i:])
			} else {
				got = uint64(binary.LittleEndian.Uint32(out[4*i:]))
				want &= 0xffffffff
			}
			if got != want {
				t.Fatalf("%s: out[%d] (idx %d) = %#x, want %#x", kernel, i, j, got, want)
			}
		}
		var oor [4]byte
		if err := dOOR.Read(0, oor[:]); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(oor[:]); got != wantOOR {
			t.Errorf("%s: out-of-range count %d, want %d", kernel, got, wantOOR)
		}
	}
}

func TestGPUDeviceMemoryRoundTrip(t *testing.T) {
	ctx := cudatest.Device(t)
	const n = 3<<20 + 5
	a := cudatest.Alloc(t, ctx, n)
	b := cudatest.Alloc(t, ctx, n)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(kernels.Pattern64(9, uint64(i)))
	}
	if err := a.Write(0, src); err != nil {
		t.Fatal(err)
	}
	if err := ctx.CopyDtoD(b.Ptr(), a.Ptr(), n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := b.Read(0, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(src) {
		t.Fatal("device round trip through D2D differs")
	}
	// Partial reads and writes at odd offsets.
	if err := b.Write(17, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 9)
	if err := b.Read(15, part); err != nil {
		t.Fatal(err)
	}
	if want := string(src[15:17]) + "hello" + string(src[22:24]); string(part) != want {
		t.Errorf("partial read %q, want %q", part, want)
	}
	if err := b.Read(n-2, make([]byte, 3)); err == nil {
		t.Error("read past the end succeeded")
	}
	if err := a.Memset8(0xab); err != nil {
		t.Fatal(err)
	}
	if err := a.Read(0, got); err != nil {
		t.Fatal(err)
	}
	for i, c := range got {
		if c != 0xab {
			t.Fatalf("memset: byte %d = %#x", i, c)
		}
	}
	if err := ctx.MemsetD32(a.Ptr(), 0x01020304, 4); err != nil {
		t.Fatal(err)
	}
	if err := a.Read(0, got[:20]); err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(got[12:]) != 0x01020304 || got[16] != 0xab {
		t.Errorf("memset32 wrote % x", got[:20])
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Errorf("second free: %v", err)
	}
	if err := a.Write(0, []byte{1}); !errors.Is(err, cuda.ErrClosed) {
		t.Errorf("write after free: %v, want ErrClosed", err)
	}
}

func TestGPUPinnedAsyncAndBatch(t *testing.T) {
	ctx := cudatest.Device(t)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n = 8 << 20
	h := cudatest.Pinned(t, ctx, n)
	back := cudatest.Pinned(t, ctx, n)
	dev := cudatest.Alloc(t, ctx, n)
	hb := h.Bytes()
	for i := range hb {
		hb[i] = byte(kernels.Pattern64(3, uint64(i)))
	}
	if err := s.CopyHtoD(dev.Ptr(), h, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoH(back, 0, dev.Ptr(), n); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	if string(back.Bytes()) != string(hb) {
		t.Fatal("pinned async round trip differs")
	}

	// Batch: many small copies of random sizes to scattered device offsets
	// (H2D), then back into a cleared buffer in another order (D2H).
	rng := rand.New(rand.NewPCG(7, 8))
	clear(back.Bytes())
	if err := dev.Memset8(0); err != nil {
		t.Fatal(err)
	}
	var up, down []cuda.Copy
	for off := uint64(0); off < n; {
		sz := uint64(1 + rng.IntN(9000))
		if off+sz > n {
			sz = n - off
		}
		up = append(up, cuda.Copy{Dst: uint64(dev.Ptr().Add(off)), Src: h.Addr(off), Bytes: sz})
		down = append(down, cuda.Copy{Dst: back.Addr(off), Src: uint64(dev.Ptr().Add(off)), Bytes: sz})
		off += sz
	}
	rng.Shuffle(len(down), func(i, j int) { down[i], down[j] = down[j], down[i] })
	t.Logf("%d copies per batch", len(up))
	if err := s.EnqueueCopies(cuda.HostToDevice, up); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyBatch(cuda.DeviceToHost, down); err != nil {
		t.Fatal(err)
	}
	if string(back.Bytes()) != string(hb) {
		t.Fatal("batched copies differ")
	}
	// Device-to-device batch: reverse the halves.
	dev2 := cudatest.Alloc(t, ctx, n)
	if err := s.CopyBatch(cuda.DeviceToDevice, []cuda.Copy{
		{Dst: uint64(dev2.Ptr()), Src: uint64(dev.Ptr().Add(n / 2)), Bytes: n / 2},
		{Dst: uint64(dev2.Ptr().Add(n / 2)), Src: uint64(dev.Ptr()), Bytes: n / 2},
	}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := dev2.Read(0, got); err != nil {
		t.Fatal(err)
	}
	if string(got[:n/2]) != string(hb[n/2:]) || string(got[n/2:]) != string(hb[:n/2]) {
		t.Fatal("device-to-device batch differs")
	}
}

func TestGPUMappedPinnedMemory(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	add := cudatest.Function(t, m, kernels.MappedAddU32)
	const n = 1 << 16
	h := cudatest.Pinned(t, ctx, n*4)
	words := unsafeU32(h.Bytes())
	for i := range words {
		words[i] = uint32(i) * 3
	}
	dp, err := h.DevicePtr()
	if err != nil {
		t.Fatal(err)
	}
	for round, delta := range []uint32{5, 1000} {
		if err := add.Launch(cuda.Linear(n, 256, 32), cuda.Ptr(dp), cuda.U64(n), cuda.U32(delta)); err != nil {
			t.Fatal(err)
		}
		sync1(t, ctx)
		for i, w := range words {
			want := uint32(i)*3 + 5
			if round == 1 {
				want = uint32(i)*7 + 1000 // the host rewrote them below
			}
			if w != want {
				t.Fatalf("round %d: word %d = %d, want %d (kernel store not seen by host)", round, i, w, want)
			}
		}
		// The host writes; the next launch must read the new values.
		for i := range words {
			words[i] = uint32(i) * 7
		}
	}

	// Registered memory from mmap, mapped into the device.
	const pages = 16
	buf, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	reg, err := ctx.RegisterHost(buf, cuda.RegisterPortable|cuda.RegisterDeviceMap)
	if err != nil {
		t.Fatal(err)
	}
	rw := unsafeU32(buf)
	for i := range rw {
		rw[i] = uint32(i)
	}
	rp, err := reg.DevicePtr()
	if err != nil {
		t.Fatal(err)
	}
	if err := add.Launch(cuda.Linear(uint64(len(rw)), 256, 0), cuda.Ptr(rp), cuda.U64(uint64(len(rw))), cuda.U32(11)); err != nil {
		t.Fatal(err)
	}
	sync1(t, ctx)
	for i, w := range rw {
		if w != uint32(i)+11 {
			t.Fatalf("registered word %d = %d, want %d", i, w, i+11)
		}
	}
	if err := reg.Free(); err != nil {
		t.Fatal(err)
	}
}

func TestGPUReadSum(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyMembench)
	f := cudatest.Function(t, m, kernels.ReadSumU64)
	const n = 4<<20 + 48 // not a multiple of the unrolled stride
	h := cudatest.Pinned(t, ctx, n)
	var want uint64
	hw := unsafeU64(h.Bytes())
	for i := range hw {
		hw[i] = kernels.Pattern64(21, uint64(i))
		want += hw[i]
	}
	dev := cudatest.Alloc(t, ctx, n)
	if err := dev.Write(0, h.Bytes()); err != nil {
		t.Fatal(err)
	}
	sum := cudatest.Alloc(t, ctx, 8)
	hp, err := h.DevicePtr()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		src   cuda.DevicePtr
		block uint32
	}{{"mapped-host", hp, 256}, {"device", dev.Ptr(), 256}, {"device-odd-block", dev.Ptr(), 100}} {
		if err := sum.Memset8(0); err != nil {
			t.Fatal(err)
		}
		cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 40}, Block: cuda.Dim3{X: tc.block}}
		if err := f.Launch(cfg, cuda.Ptr(tc.src), cuda.U64(n/16), cuda.Ptr(sum.Ptr())); err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		if err := sum.Read(0, b[:]); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint64(b[:]); got != want {
			t.Errorf("%s: sum %#x, want %#x", tc.name, got, want)
		}
	}
}

func TestGPUBrokenPTXReportsJITLog(t *testing.T) {
	ctx := cudatest.Device(t)
	const bad = `.version 7.8
.target sm_80
.address_size 64
.visible .entry broken_kernel(.param .u64 p)
{
	.reg .b64 %rd<2>;
	ld.param.u64 %rd1, [p];
	st.global.u32 [%rd1], %undeclared_register_bam;
	ret;
}
`
	loads := []struct {
		name string
		load func([]byte) (*cuda.Module, error)
		call string // the failing driver call
	}{
		{"whole program", ctx.LoadPTX, "cuModuleLoadDataEx"},
		{"linked", ctx.LinkPTX, "cuLinkAddData_v2"},
	}
	for _, l := range loads {
		_, err := l.load([]byte(bad))
		if err == nil {
			t.Fatalf("%s: broken PTX loaded", l.name)
		}
		t.Logf("%s: error: %v", l.name, err)
		var ce *cuda.Error
		if !errors.As(err, &ce) || ce.Call != l.call {
			t.Fatalf("%s: error %v is not a *cuda.Error from %s", l.name, err, l.call)
		}
		msg := err.Error()
		i := strings.Index(msg, "JIT error log:")
		if i < 0 {
			t.Fatalf("%s: error lacks the JIT error log: %v", l.name, err)
		}
		if log := msg[i:]; !strings.Contains(log, "undeclared_register_bam") && !strings.Contains(strings.ToLower(log), "error") {
			t.Errorf("%s: JIT log does not describe the problem: %q", l.name, log)
		}
	}
	if _, err := ctx.LoadPTX(nil); err == nil {
		t.Error("empty PTX loaded")
	}
}

func TestGPUOutOfMemory(t *testing.T) {
	ctx := cudatest.Device(t)
	_, total, err := ctx.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ctx.Alloc(total + 1<<30)
	if err == nil {
		m.Free()
		t.Fatalf("allocating %d bytes on a device of %d succeeded", total+1<<30, total)
	}
	if !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("error %v does not match ErrOutOfMemory", err)
	}
	if !strings.Contains(err.Error(), "free of") || !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("unclear message: %v", err)
	}
	t.Logf("error: %v", err)
	// The context stays usable.
	small, err := ctx.Alloc(1 << 20)
	if err != nil {
		t.Fatalf("allocation after OOM: %v", err)
	}
	small.Free()
}

func TestGPUEventsAndStreamWait(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	fill := cudatest.Function(t, m, kernels.FillPatternU64)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	start, err := ctx.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := ctx.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	const n = 64 << 20 / 8
	dev := cudatest.Alloc(t, ctx, n*8)
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	cfg := cuda.Linear(n, 256, 1024)
	cfg.Stream = s
	if err := fill.Launch(cfg, cuda.Ptr(dev.Ptr()), cuda.U64(n), cuda.U64(1)); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := end.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	d, err := cuda.Elapsed(start, end)
	if err != nil || d <= 0 || d > 10*time.Second {
		t.Errorf("elapsed %v, %v", d, err)
	}
	t.Logf("fill of 64 MiB: %v (%.0f GB/s)", d, float64(n*8)/d.Seconds()/1e9)
	if done, err := s.Done(); err != nil || !done {
		t.Errorf("stream done %v, %v after its last event completed", done, err)
	}
	// A wait bounded by an expired context returns promptly when work is
	// pending or reports success when it is not; it never hangs.
	expired, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := s.Wait(expired); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("wait with cancelled context: %v", err)
	}
}

// TestGPUSyncCallsFinishBeforeReturn checks that the calls the driver runs
// on the legacy default stream (memsets, device-to-device copies,
// host-to-device copies from pageable memory) have finished when they
// return: a kernel launched right after on a non-blocking stream, which
// does not wait for the legacy stream, must see their result. The buffer
// is large, so that an unfinished call would still be running when the
// kernel reads its end.
func TestGPUSyncCallsFinishBeforeReturn(t *testing.T) {
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	fill := cudatest.Function(t, m, kernels.FillPatternU64)
	gather := cudatest.Function(t, m, kernels.GatherU64)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n = 64 << 20 // elements: 512 MiB
	big := cudatest.Alloc(t, ctx, n*8)
	zeros := cudatest.Alloc(t, ctx, n*8)
	if err := zeros.Memset8(0); err != nil {
		t.Fatal(err)
	}
	// Indices over the whole buffer, most of them in its last quarter.
	const k = 4096
	idx := make([]uint64, k)
	for i := range idx {
		if i%4 == 0 {
			idx[i] = uint64(i) * (n / k)
		} else {
			idx[i] = n - 1 - uint64(i)*(n/4/k)
		}
	}
	dIdx := cudatest.Alloc(t, ctx, k*8)
	if err := dIdx.Write(0, cuda.AsBytes(idx)); err != nil {
		t.Fatal(err)
	}
	dOut := cudatest.Alloc(t, ctx, k*8)
	onS := func(cfg cuda.LaunchConfig) cuda.LaunchConfig { cfg.Stream = s; return cfg }
	hostZeros := make([]byte, n*8)
	for _, c := range []struct {
		name string
		call func() error
		want uint64
	}{
		{"MemsetD8", func() error { return big.Memset8(0) }, 0},
		{"MemsetD32", func() error { return ctx.MemsetD32(big.Ptr(), 0xffffffff, 2*n) }, ^uint64(0)},
		{"CopyDtoD", func() error { return ctx.CopyDtoD(big.Ptr(), zeros.Ptr(), n*8) }, 0},
		{"CopyHtoD", func() error { return ctx.CopyHtoD(big.Ptr(), hostZeros) }, 0},
	} {
		for round := 0; round < 3; round++ {
			if err := fill.Launch(onS(cuda.Linear(n, 256, 2048)), cuda.Ptr(big.Ptr()), cuda.U64(n), cuda.U64(3)); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if err := c.call(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			err := gather.Launch(onS(cuda.Linear(k, 256, 0)),
				cuda.Ptr(dOut.Ptr()), cuda.Ptr(big.Ptr()), cuda.U64(n), cuda.Ptr(dIdx.Ptr()), cuda.U64(k), cuda.U64(1), cuda.Ptr(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, k*8)
			if err := dOut.Read(0, out); err != nil {
				t.Fatal(err)
			}
			for i, j := range idx {
				if got := binary.LittleEndian.Uint64(out[8*i:]); got != c.want {
					t.Fatalf("%s, round %d: element %d = %#x after the call returned, want %#x", c.name, round, j, got, c.want)
				}
			}
		}
	}
}

// TestGPUConcurrentGoroutines drives one context from many goroutines at
// once: each call must find its context current on whatever thread runs it.
// Not under racecheck: there, frees and copies beside other streams'
// kernels stalled inside the driver until the test's 5-minute timeout
// (bench/results/logs/sanitizers-8eaf490-H200-20261126.txt), and its fill
// kernel shares no memory between threads for racecheck to check.
func TestGPUConcurrentGoroutines(t *testing.T) {
	cudatest.SkipUnder(t, "racecheck", "the tool stalls concurrent frees beside running kernels")
	ctx := cudatest.Device(t)
	m := cudatest.Module(t, ctx, kernels.FamilyBasic)
	fill := cudatest.Function(t, m, kernels.FillPatternU64)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ctx.NewStream()
			if err != nil {
				errs <- err
				return
			}
			defer s.Destroy()
			for iter := range 20 {
				n := uint64(1000 + 37*g + iter)
				dev, err := ctx.Alloc(n * 8)
				if err != nil {
					errs <- err
					return
				}
				cfg := cuda.Linear(n, 128, 0)
				cfg.Stream = s
				seed := uint64(g*100 + iter)
				if err := fill.Launch(cfg, cuda.Ptr(dev.Ptr()), cuda.U64(n), cuda.U64(seed)); err != nil {
					errs <- err
					return
				}
				if err := s.Synchronize(); err != nil {
					errs <- err
					return
				}
				b := make([]byte, n*8)
				if err := dev.Read(0, b); err != nil {
					errs <- err
					return
				}
				for i, v := range u64s(b) {
					if v != kernels.Pattern64(seed, uint64(i)) {
						errs <- errors.New("goroutine saw wrong data")
						return
					}
				}
				if err := dev.Free(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGPUNVRTCKernel(t *testing.T) {
	ctx := cudatest.Device(t)
	ptx, _, err := cuda.CompilePTX(cuda.Source{
		Name:    "square.cu",
		Code:    squareSource,
		Headers: kernels.HeaderSources(),
	})
	if errors.Is(err, cuda.ErrNoNVRTC) {
		t.Skipf("NVRTC not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := ctx.LoadPTX(ptx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unload()
	f, err := m.Function("square_pattern")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	dev := cudatest.Alloc(t, ctx, n*8)
	if err := f.Launch(cuda.Linear(n, 256, 0), cuda.Ptr(dev.Ptr()), cuda.U64(n)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n*8)
	if err := dev.Read(0, b); err != nil {
		t.Fatal(err)
	}
	for i, v := range u64s(b) {
		p := kernels.Pattern64(2, uint64(i))
		if v != p*p {
			t.Fatalf("element %d = %#x, want %#x", i, v, p*p)
		}
	}
}
