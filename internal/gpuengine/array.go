package gpuengine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/internal/cuda"
)

// StripeMember is one namespace of an array's stripe: line l of the array
// lives on member l mod len(Stripe), at StartLine + l / len(Stripe) lines
// from the namespace's start.
type StripeMember struct {
	Namespace int    // index into the engine's namespaces (NSID - 1)
	StartLine uint64 // first line of the extent, in lines of the engine's line size
}

// ArraySpec places an array on the namespaces.
type ArraySpec struct {
	Name     string
	ElemSize uint64 // 1, 2, 4, 8 or 16
	Len      uint64
	Stripe   []StripeMember
	// LineSize chooses the cache (Config.LineSize or one of
	// Config.MoreCaches); 0 is the default cache. StartLine counts lines
	// of this size. An object must be bound to one cache only: caches of
	// different line sizes do not see each other's writes.
	LineSize int
}

// Array is an array bound to the engine: a descriptor in device memory
// that kernels take as a bam::array<T> argument.
type Array struct {
	e      *Engine
	spec   ArraySpec
	desc   *cuda.DeviceMem
	stripe *cuda.DeviceMem
	arg    []byte // the kernel argument (ArrayArg* layout)
}

// Bind makes an array usable by kernels.
func (e *Engine) Bind(spec ArraySpec) (*Array, error) {
	switch spec.ElemSize {
	case 1, 2, 4, 8, 16:
	default:
		return nil, fmt.Errorf("%w: array %q: element size %d (the device library serves 1, 2, 4, 8 and 16 bytes)", ErrUnsupported, spec.Name, spec.ElemSize)
	}
	c, ok := e.cacheFor(spec.LineSize)
	if !ok {
		return nil, fmt.Errorf("gpuengine: array %q: no cache of %d-byte lines (add one with Config.MoreCaches)", spec.Name, spec.LineSize)
	}
	if spec.ElemSize > uint64(c.lineSize) {
		return nil, fmt.Errorf("%w: array %q: element size %d exceeds the line size", ErrUnsupported, spec.Name, spec.ElemSize)
	}
	if len(spec.Stripe) == 0 {
		return nil, fmt.Errorf("gpuengine: array %q: no stripe members", spec.Name)
	}
	for i, m := range spec.Stripe {
		if m.Namespace < 0 || m.Namespace >= len(e.namespaces) {
			return nil, fmt.Errorf("gpuengine: array %q: stripe member %d names namespace %d of %d", spec.Name, i, m.Namespace, len(e.namespaces))
		}
	}
	a := &Array{e: e, spec: spec}
	n := uint64(len(spec.Stripe))
	var err error
	if a.stripe, err = e.alloc(16 * n); err != nil {
		return nil, err
	}
	sb := make([]byte, 16*n)
	for i, m := range spec.Stripe {
		binary.LittleEndian.PutUint64(sb[8*i:], m.StartLine)
		binary.LittleEndian.PutUint64(sb[8*(int(n)+i):], uint64(m.Namespace))
	}
	if err := a.stripe.Write(0, sb); err != nil {
		a.free()
		return nil, err
	}
	if a.desc, err = e.alloc(ArrayDescBytes); err != nil {
		a.free()
		return nil, err
	}
	var firstTag uint64
	if n == 1 {
		// Line l of the object is line StartLine+l of the namespace: its
		// tag is firstTag + l (the line index sits in the tag's low bits).
		firstTag = uint64(spec.Stripe[0].Namespace)<<gpucache.TagNamespaceShift | spec.Stripe[0].StartLine
	}
	d := e.encodeDesc(c, spec.ElemSize, spec.Len, n, a.stripe.Ptr(), a.stripe.Ptr().Add(8*n), firstTag)
	if err := a.desc.Write(0, d); err != nil {
		a.free()
		return nil, err
	}
	a.arg = encodeArg(a.desc.Ptr(), d)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		a.free()
		return nil, ErrClosed
	}
	e.arrays[a] = struct{}{}
	return a, nil
}

// Desc is the address of the array's descriptor (a const array_desc *).
func (a *Array) Desc() cuda.DevicePtr { return a.desc.Ptr() }

// Arg is the launch argument of a bam::array<T> parameter: the descriptor's
// address and the fields a hit needs, by value.
func (a *Array) Arg() cuda.Arg { return cuda.Struct(a.arg, 8) }

// NoArrayArg is the argument for a bam::array<T> parameter that a launch
// leaves unused: every field zero, the descriptor's address included, so
// the kernel must not access it (size() is 0).
func NoArrayArg() cuda.Arg { return cuda.Struct(make([]byte, ArrayArgBytes), 8) }

// encodeArg builds the kernel argument of the array whose descriptor d
// (ArrayDescBytes, as encodeDesc built it) lies at desc.
func encodeArg(desc cuda.DevicePtr, d []byte) []byte {
	get := func(off int) uint64 { return binary.LittleEndian.Uint64(d[off:]) }
	b := make([]byte, ArrayArgBytes)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }
	meta := get(ArrayCacheMetaOffset)
	put(ArrayArgDescOffset, uint64(desc))
	put(ArrayArgTagsOffset, meta+get(ArrayTagsOffset))
	put(ArrayArgRecsOffset, meta+get(ArrayWaysRecOffset))
	put(ArrayArgDataOffset, get(ArrayCacheDataOffset))
	put(ArrayArgSetsOffset, get(ArraySetsOffset))
	put(ArrayArgWaysOffset, get(ArrayWaysOffset))
	put(ArrayArgNNSOffset, get(ArrayNNSOffset))
	put(ArrayArgFirstTagOffset, get(ArrayFirstTagOffset))
	put(ArrayArgElemCountOffset, get(ArrayElemCountOffset))
	put(ArrayArgStatsOffset, get(ArrayStatsOffset))
	put(ArrayArgLineShiftOffset, get(ArrayLineShiftOffset))
	return b
}

// Spec returns the array's placement.
func (a *Array) Spec() ArraySpec { return a.spec }

// Unbind frees the array's descriptor.
func (a *Array) Unbind() {
	a.e.mu.Lock()
	delete(a.e.arrays, a)
	a.e.mu.Unlock()
	a.free()
}

// free frees the array's device memory, under launchMu as Engine.free.
func (a *Array) free() {
	a.e.launchMu.Lock()
	defer a.e.launchMu.Unlock()
	a.freeLocked()
}

// freeLocked is free with launchMu held (Engine.Close).
func (a *Array) freeLocked() {
	if a.desc != nil {
		a.desc.Free()
	}
	if a.stripe != nil {
		a.stripe.Free()
	}
}

func (a *Array) suffix() string { return fmt.Sprintf("e%d", a.spec.ElemSize) }

// launchPass launches one of the array's pass kernels (kernels/array.cu)
// over n positions: the array, args, and last the engine's work counter
// (Engine.launchPass).
func (a *Array) launchPass(ctx context.Context, fn *cuda.Function, n uint64, args ...cuda.Arg) error {
	cfg, err := a.e.passGrid(fn, n)
	if err != nil {
		return err
	}
	return a.e.launchPass(ctx, fn, cfg, append([]cuda.Arg{a.Arg()}, args...)...)
}

// Gather reads elements idx[i] into out[i*ElemSize:].
func (a *Array) Gather(ctx context.Context, idx []uint64, out []byte) error {
	es := a.spec.ElemSize
	if uint64(len(out)) != uint64(len(idx))*es {
		return fmt.Errorf("gpuengine: gather %q: out has %d bytes, want %d", a.spec.Name, len(out), uint64(len(idx))*es)
	}
	if len(idx) == 0 {
		return nil
	}
	fn, err := a.e.function("bam_array_gather_" + a.suffix())
	if err != nil {
		return err
	}
	dIdx, err := a.e.upload(u64Bytes(idx))
	if err != nil {
		return err
	}
	defer a.e.free(dIdx)
	dOut, err := a.e.alloc(uint64(len(out)))
	if err != nil {
		return err
	}
	defer a.e.free(dOut)
	n := uint64(len(idx))
	if err := a.launchPass(ctx, fn, n, cuda.Ptr(dIdx.Ptr()), cuda.U64(n), cuda.Ptr(dOut.Ptr())); err != nil {
		return fmt.Errorf("array %q: %w", a.spec.Name, err)
	}
	return dOut.Read(0, out)
}

// Scatter writes vals[i*ElemSize:] to elements idx[i]. With repeated
// indices the surviving value is one of theirs, unspecified which.
func (a *Array) Scatter(ctx context.Context, idx []uint64, vals []byte) error {
	es := a.spec.ElemSize
	if uint64(len(vals)) != uint64(len(idx))*es {
		return fmt.Errorf("gpuengine: scatter %q: vals has %d bytes, want %d", a.spec.Name, len(vals), uint64(len(idx))*es)
	}
	if len(idx) == 0 {
		return nil
	}
	fn, err := a.e.function("bam_array_scatter_" + a.suffix())
	if err != nil {
		return err
	}
	dIdx, err := a.e.upload(u64Bytes(idx))
	if err != nil {
		return err
	}
	defer a.e.free(dIdx)
	dVals, err := a.e.upload(vals)
	if err != nil {
		return err
	}
	defer a.e.free(dVals)
	n := uint64(len(idx))
	if err := a.launchPass(ctx, fn, n, cuda.Ptr(dIdx.Ptr()), cuda.Ptr(dVals.Ptr()), cuda.U64(n)); err != nil {
		return fmt.Errorf("array %q: %w", a.spec.Name, err)
	}
	return nil
}

// ReadRange reads len(out)/ElemSize elements from start.
func (a *Array) ReadRange(ctx context.Context, start uint64, out []byte) error {
	es := a.spec.ElemSize
	if uint64(len(out))%es != 0 {
		return fmt.Errorf("gpuengine: read range %q: %d bytes is not a whole number of %d-byte elements", a.spec.Name, len(out), es)
	}
	n := uint64(len(out)) / es
	if n == 0 {
		return nil
	}
	dOut, err := a.e.alloc(uint64(len(out)))
	if err != nil {
		return err
	}
	defer a.e.free(dOut)
	if err := a.ReadRangeTo(ctx, start, n, dOut.Ptr()); err != nil {
		return err
	}
	return dOut.Read(0, out)
}

// ReadRangeTo reads n elements from start into GPU memory at dst (n
// elements of room, on this engine's device): the warps take the range a
// line at a time through the cache, as ReadRange, without the copy back
// to the host. It is how a caller stages a piece of an array in GPU memory
// for kernels of its own.
func (a *Array) ReadRangeTo(ctx context.Context, start, n uint64, dst cuda.DevicePtr) error {
	if n == 0 {
		return nil
	}
	if start > a.spec.Len || n > a.spec.Len-start {
		return fmt.Errorf("gpuengine: read range %q: elements %d up to %d of %d: %w", a.spec.Name, start, start+n, a.spec.Len, ErrOutOfRange)
	}
	fn, err := a.e.function("bam_array_read_range_" + a.suffix())
	if err != nil {
		return err
	}
	if err := a.launchPass(ctx, fn, n, cuda.U64(start), cuda.U64(n), cuda.Ptr(dst)); err != nil {
		return fmt.Errorf("array %q: %w", a.spec.Name, err)
	}
	return nil
}

// WriteRange writes len(in)/ElemSize elements from start.
func (a *Array) WriteRange(ctx context.Context, start uint64, in []byte) error {
	es := a.spec.ElemSize
	if uint64(len(in))%es != 0 {
		return fmt.Errorf("gpuengine: write range %q: %d bytes is not a whole number of %d-byte elements", a.spec.Name, len(in), es)
	}
	n := uint64(len(in)) / es
	if n == 0 {
		return nil
	}
	fn, err := a.e.function("bam_array_write_range_" + a.suffix())
	if err != nil {
		return err
	}
	dIn, err := a.e.upload(in)
	if err != nil {
		return err
	}
	defer a.e.free(dIn)
	if err := a.launchPass(ctx, fn, n, cuda.U64(start), cuda.U64(n), cuda.Ptr(dIn.Ptr())); err != nil {
		return fmt.Errorf("array %q: %w", a.spec.Name, err)
	}
	return nil
}

// SumKind names the element type of a reduction.
type SumKind string

// Reductions the device library provides.
const (
	SumU32 SumKind = "u32"
	SumU64 SumKind = "u64"
	SumF32 SumKind = "f32"
	SumF64 SumKind = "f64"
)

// Sum reduces elements [start, start+n) on the device. Integer sums wrap
// mod 2^64 and come back in u; floating sums are accumulated in float64 and
// come back in f.
func (a *Array) Sum(ctx context.Context, kind SumKind, start, n uint64) (u uint64, f float64, err error) {
	want := map[SumKind]uint64{SumU32: 4, SumU64: 8, SumF32: 4, SumF64: 8}[kind]
	if want == 0 || want != a.spec.ElemSize {
		return 0, 0, fmt.Errorf("%w: sum %s over %q with %d-byte elements", ErrUnsupported, kind, a.spec.Name, a.spec.ElemSize)
	}
	fn, err := a.e.function("bam_array_sum_" + string(kind))
	if err != nil {
		return 0, 0, err
	}
	out, err := a.e.alloc(8)
	if err != nil {
		return 0, 0, err
	}
	defer a.e.free(out)
	if err := out.Memset8(0); err != nil {
		return 0, 0, err
	}
	if n > 0 {
		if err := a.launchPass(ctx, fn, n, cuda.U64(start), cuda.U64(n), cuda.Ptr(out.Ptr())); err != nil {
			return 0, 0, fmt.Errorf("array %q: %w", a.spec.Name, err)
		}
	}
	b := make([]byte, 8)
	if err := out.Read(0, b); err != nil {
		return 0, 0, err
	}
	v := binary.LittleEndian.Uint64(b)
	if kind == SumF32 || kind == SumF64 {
		return 0, math.Float64frombits(v), nil
	}
	return v, 0, nil
}

// The device memory a call allocates for itself (indices, values, results)
// comes and goes under launchMu, never while one of the engine's kernels
// runs. A free may wait for the device to go idle; under compute-sanitizer's
// racecheck, frees issued beside a running pass kernel (TestGPUDifferential's
// concurrent readers and writers) stalled the driver for minutes, the
// kernel, a stream query and the frees together, in three runs of four
// (bench/results/logs/sanitizers-a419bb4-H200-20261125.txt).

// Alloc allocates n bytes of device memory in the engine's context for a
// caller that launches its own kernels through the engine from several
// goroutines (kv's GPU lookups): it waits for the engine's running launch,
// so memory never comes beside one of its kernels. Free it with
// Engine.Free.
func (e *Engine) Alloc(n uint64) (*cuda.DeviceMem, error) { return e.alloc(n) }

// Upload copies b into device memory of its own, as Alloc does. Free it
// with Engine.Free.
func (e *Engine) Upload(b []byte) (*cuda.DeviceMem, error) { return e.upload(b) }

// Free frees memory from Alloc or Upload, between the engine's launches.
func (e *Engine) Free(m *cuda.DeviceMem) error { return e.free(m) }

// alloc allocates n bytes of device memory for one call.
func (e *Engine) alloc(n uint64) (*cuda.DeviceMem, error) {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	return e.ctx.Alloc(n)
}

// free frees memory from alloc or upload.
func (e *Engine) free(m *cuda.DeviceMem) error {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	return m.Free()
}

// upload copies b into device memory of its own, for one call.
func (e *Engine) upload(b []byte) (*cuda.DeviceMem, error) {
	e.launchMu.Lock()
	defer e.launchMu.Unlock()
	m, err := e.ctx.Alloc(uint64(max(len(b), 1)))
	if err != nil {
		return nil, err
	}
	if len(b) > 0 {
		if err := m.Write(0, b); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}

func u64Bytes(s []uint64) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*8)
}
