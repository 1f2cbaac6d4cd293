package cuda

/*
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// jitLogBytes is the size of each JIT log buffer (info and error).
const jitLogBytes = 64 << 10

// Module is a loaded PTX (or cubin) module.
type Module struct {
	ctx      *Context
	h        C.bam_CUmodule
	infoLog  string
	unloaded atomic.Bool

	mu  sync.Mutex
	fns map[string]*Function // looked up so far, by name
}

// LoadPTX JIT-compiles PTX text for the context's device as one program
// (cuModuleLoadDataEx) and loads it. On failure the returned error
// contains the JIT compiler's error log.
func (c *Context) LoadPTX(ptx []byte) (*Module, error) {
	return c.loadPTX(ptx, false)
}

// LinkPTX is LoadPTX through the driver's linker (cuLinkCreate,
// cuLinkAddData, cuLinkComplete): each function is compiled on its own,
// as a relocatable object, and a call to a __noinline__ function follows
// the ABI, whose callee saves the registers it uses in its own prologue.
// Compiled as one program, ptxas gives a call to a function that itself
// makes calls a convention in which the caller keeps everything live
// across the call in local memory, on every pass of a loop that may call
// it, called or not: the bam device library's all-hit loops lose about
// half their rate to it (bench/results/logs/c3-call-convention-*).
//
// It is for comparisons, not for bam's modules. Calls may leave a warp
// diverged, and code written for a warp that runs through them together
// then fails in ways one program does not show (H200, CUDA 13 driver;
// bench/results/logs/p6-shuffle-H200-20261126.txt):
//   - the fallback ptxas emits for a diverged warp's shuffles on sm_90
//     uses predicate P6 as scratch, over a value a bulk predicate write
//     had put there: the taxi example's grouped average added one lane's
//     value to every group (its loop now stays rolled, which avoids it);
//   - the engine's scatter pass deadlocked: one lane waited at a
//     warp-synchronous step of an access, with a mask naming lanes that
//     had gone on to the next one. With bam::for_range's rounds
//     synchronised it passed, but a small-cache read-ahead pass then
//     timed out more often than as one program, and a racecheck run left
//     ways VALID without a tag after a dropped command
//     (bench/results/logs/linked-default-d49f88a-H200-20261126.txt).
//     With those fixed, the GPU tests passed linked, but with two test
//     processes sharing the GPU a read-ahead pass returned a wrong sum
//     with no error recorded
//     (bench/results/logs/linked-default-69723b1-H200-20261126.txt);
//     with four, in 2 of 32 linked runs and none of 24 as one program. A
//     scan of ptxas's SASS finds no predicate clobbered by its code for
//     a diverged warp, so the cause is still open
//     (bench/results/logs/shared-gpu-overrun-H200-20261126.txt).
func (c *Context) LinkPTX(ptx []byte) (*Module, error) {
	return c.loadPTX(ptx, true)
}

// linkStages names the calls of bam_link_ptx by its stage.
var linkStages = [...]string{"cuLinkCreate_v2", "cuLinkAddData_v2", "cuLinkComplete", "cuModuleLoadDataEx", "cuLinkDestroy"}

func (c *Context) loadPTX(ptx []byte, link bool) (*Module, error) {
	h, err := c.handle()
	if err != nil {
		return nil, err
	}
	if len(ptx) == 0 {
		return nil, errors.New("cuda: load module: empty PTX")
	}
	// The driver reads the image until a NUL: copy it to C memory with one.
	img := C.malloc(C.size_t(len(ptx) + 1))
	defer C.free(img)
	buf := unsafe.Slice((*byte)(img), len(ptx)+1)
	copy(buf, ptx)
	buf[len(ptx)] = 0
	info := (*C.char)(C.malloc(jitLogBytes))
	defer C.free(unsafe.Pointer(info))
	elog := (*C.char)(C.malloc(jitLogBytes))
	defer C.free(unsafe.Pointer(elog))

	var m C.bam_CUmodule
	var r C.bam_CUresult
	call := "cuModuleLoadDataEx"
	if link {
		var stage C.int
		r = C.bam_link_ptx(h, &m, (*C.char)(img), C.size_t(len(ptx)+1), info, jitLogBytes, elog, jitLogBytes, 1, &stage)
		if int(stage) >= 0 && int(stage) < len(linkStages) {
			call = linkStages[stage]
		}
	} else {
		r = C.bam_cuModuleLoadDataEx(h, &m, img, info, jitLogBytes, elog, jitLogBytes, 1)
	}
	infoText := strings.TrimSpace(C.GoString(info))
	if err := check(call, r); err != nil {
		log := strings.TrimSpace(C.GoString(elog))
		if log == "" {
			log = infoText
		}
		if log == "" {
			return nil, fmt.Errorf("cuda: load PTX module (%d bytes, no JIT log): %w", len(ptx), err)
		}
		return nil, fmt.Errorf("cuda: load PTX module (%d bytes): %w\nJIT error log:\n%s", len(ptx), err, log)
	}
	return &Module{ctx: c, h: m, infoLog: infoText}, nil
}

// InfoLog returns the JIT compiler's informational log (register use and
// the like).
func (m *Module) InfoLog() string { return m.infoLog }

func (m *Module) handle() (C.bam_CUcontext, error) {
	if m == nil || m.unloaded.Load() {
		return nil, ErrClosed
	}
	return m.ctx.handle()
}

// Unload unloads the module; its functions may no longer be launched.
func (m *Module) Unload() error {
	if m == nil || m.unloaded.Swap(true) {
		return nil
	}
	h, err := m.ctx.handle()
	if err != nil {
		return err
	}
	return check("cuModuleUnload", C.bam_cuModuleUnload(h, m.h))
}

// Function returns the kernel with the given (extern "C") name: the same
// *Function on every call for that name, so callers may key state by it.
func (m *Module) Function(name string) (*Function, error) {
	h, err := m.handle()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.fns[name]; ok {
		return f, nil
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.bam_CUfunction
	if err := check("cuModuleGetFunction", C.bam_cuModuleGetFunction(h, &f, m.h, cs)); err != nil {
		return nil, fmt.Errorf("cuda: kernel %q: %w", name, err)
	}
	fn := &Function{mod: m, h: f, name: name}
	if m.fns == nil {
		m.fns = map[string]*Function{}
	}
	m.fns[name] = fn
	return fn, nil
}

// Global returns the address and size of a __device__ variable.
func (m *Module) Global(name string) (DevicePtr, uint64, error) {
	h, err := m.handle()
	if err != nil {
		return 0, 0, err
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.bam_CUdeviceptr
	var n C.size_t
	if err := check("cuModuleGetGlobal_v2", C.bam_cuModuleGetGlobal(h, &p, &n, m.h, cs)); err != nil {
		return 0, 0, fmt.Errorf("cuda: global %q: %w", name, err)
	}
	return DevicePtr(p), uint64(n), nil
}

// Function is a kernel of a loaded module.
type Function struct {
	mod  *Module
	h    C.bam_CUfunction
	name string

	params paramTable
}

// Param is where one kernel parameter lies in the kernel's parameter
// buffer.
type Param struct{ Offset, Size uintptr }

// paramTable is what the driver said of a kernel's parameters, asked once
// per parameter. Drivers with cuFuncGetParamCount give the count; with
// only cuFuncGetParamInfo the count is known once a query past the last
// parameter fails, which a correct launch never makes (so that checking
// does not itself produce failed driver calls).
type paramTable struct {
	mu     sync.Mutex
	asked  bool
	noInfo bool    // the driver describes no parameters (no cuFuncGetParamInfo)
	count  int     // -1 while unknown
	known  []Param // the first len(known) parameters
}

// Params returns the kernel's parameters as the driver describes them
// (cuFuncGetParamInfo), or nil (and no error) while their number is
// unknown: the driver lacks cuFuncGetParamCount and no launch with too
// many arguments has found it. Launch checks its arguments against what
// the driver describes.
func (f *Function) Params() ([]Param, error) {
	h, err := f.mod.handle()
	if err != nil {
		return nil, err
	}
	t := &f.params
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := f.askCount(h); err != nil || t.noInfo || t.count < 0 {
		return nil, err
	}
	for i := 0; i < t.count; i++ {
		if _, _, err := f.param(h, i); err != nil || t.noInfo {
			return nil, err
		}
	}
	return append([]Param(nil), t.known...), nil
}

// askCount asks the driver for the parameter count once; f.params.mu held.
func (f *Function) askCount(h C.bam_CUcontext) error {
	t := &f.params
	if t.asked {
		return nil
	}
	t.asked, t.count = true, -1
	var n C.size_t
	switch r := C.bam_cuFuncGetParamCount(h, f.h, &n); r {
	case resultSuccess:
		t.count = int(n)
	case resultNoSymbol:
		// No count; parameters may still be described one by one.
	default:
		return fmt.Errorf("cuda: kernel %q: %w", f.name, check("cuFuncGetParamCount", r))
	}
	return nil
}

// param returns parameter i and whether the kernel has one; f.params.mu
// held, askCount called.
func (f *Function) param(h C.bam_CUcontext, i int) (Param, bool, error) {
	t := &f.params
	if t.count >= 0 && i >= t.count {
		return Param{}, false, nil
	}
	for len(t.known) <= i {
		var off, size C.size_t
		r := C.bam_cuFuncGetParamInfo(h, f.h, C.size_t(len(t.known)), &off, &size)
		if r == resultNoSymbol {
			t.noInfo = true
			return Param{}, false, nil
		}
		if r == resultInvalidValue && t.count < 0 {
			t.count = len(t.known) // past the last parameter
			return Param{}, false, nil
		}
		if err := check("cuFuncGetParamInfo", r); err != nil {
			return Param{}, false, fmt.Errorf("cuda: kernel %q parameter %d: %w", f.name, len(t.known), err)
		}
		t.known = append(t.known, Param{uintptr(off), uintptr(size)})
	}
	return t.known[i], true, nil
}

// checkArgs compares the arguments with the kernel's parameters as far as
// the driver describes them: each argument's size and offset, and their
// number where the driver gives it.
func (f *Function) checkArgs(h C.bam_CUcontext, args []Arg) error {
	t := &f.params
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := f.askCount(h); err != nil || t.noInfo {
		return err
	}
	if t.count >= 0 && t.count != len(args) {
		return fmt.Errorf("%w: kernel %s takes %d parameters, got %d arguments", ErrArgs, f.name, t.count, len(args))
	}
	offs, _ := argOffsets(args)
	for i, a := range args {
		p, ok, err := f.param(h, i)
		if err != nil || t.noInfo {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: kernel %s takes %d parameters, got %d arguments", ErrArgs, f.name, t.count, len(args))
		}
		if uintptr(a.size) != p.Size || offs[i] != p.Offset {
			return fmt.Errorf("%w: kernel %s parameter %d is %d bytes at offset %d, argument %d is %d bytes at offset %d",
				ErrArgs, f.name, i, p.Size, p.Offset, i, a.size, offs[i])
		}
	}
	return nil
}

// Name returns the kernel's name.
func (f *Function) Name() string { return f.name }

// FuncAttribute is a CUfunction_attribute value.
type FuncAttribute int

// Function attributes (CU_FUNC_ATTRIBUTE_*).
const (
	FuncMaxThreadsPerBlock FuncAttribute = 0
	FuncSharedSizeBytes    FuncAttribute = 1
	FuncConstSizeBytes     FuncAttribute = 2
	FuncLocalSizeBytes     FuncAttribute = 3
	FuncNumRegs            FuncAttribute = 4
	FuncPTXVersion         FuncAttribute = 5
	FuncBinaryVersion      FuncAttribute = 6
)

// Attribute returns one attribute of the compiled kernel.
func (f *Function) Attribute(a FuncAttribute) (int, error) {
	h, err := f.mod.handle()
	if err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuFuncGetAttribute", C.bam_cuFuncGetAttribute(h, &v, C.int(a), f.h)); err != nil {
		return 0, fmt.Errorf("cuda: kernel %q attribute %d: %w", f.name, int(a), err)
	}
	return int(v), nil
}

// MaxActiveBlocksPerSM returns how many blocks of blockSize threads (and
// sharedMem dynamic shared bytes) fit on one multiprocessor.
func (f *Function) MaxActiveBlocksPerSM(blockSize, sharedMem int) (int, error) {
	h, err := f.mod.handle()
	if err != nil {
		return 0, err
	}
	var n C.int
	r := C.bam_cuOccupancyMaxActiveBlocksPerMultiprocessor(h, &n, f.h, C.int(blockSize), C.size_t(sharedMem))
	if err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", r); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Dim3 is a grid or block shape; zero Y and Z mean 1.
type Dim3 struct{ X, Y, Z uint32 }

// LaunchConfig is the shape and placement of a kernel launch.
type LaunchConfig struct {
	Grid      Dim3
	Block     Dim3
	SharedMem uint32  // dynamic shared memory per block, bytes
	Stream    *Stream // nil: the default stream
}

// Linear returns a one-dimensional launch of blocks of block threads that
// covers n threads (at least one block), capped at maxBlocks blocks when
// maxBlocks > 0 (for grid-stride kernels).
func Linear(n uint64, block uint32, maxBlocks uint32) LaunchConfig {
	if block == 0 {
		block = 256
	}
	blocks := (n + uint64(block) - 1) / uint64(block)
	if blocks == 0 {
		blocks = 1
	}
	if maxBlocks > 0 && blocks > uint64(maxBlocks) {
		blocks = uint64(maxBlocks)
	}
	if blocks > math.MaxInt32 {
		blocks = math.MaxInt32
	}
	return LaunchConfig{Grid: Dim3{X: uint32(blocks)}, Block: Dim3{X: block}}
}

func (d Dim3) norm() (x, y, z C.uint) {
	x, y, z = C.uint(d.X), C.uint(d.Y), C.uint(d.Z)
	if y == 0 {
		y = 1
	}
	if z == 0 {
		z = 1
	}
	return x, y, z
}

// Launch enqueues the kernel with the given arguments, which must match
// the kernel's parameters in order, size and alignment. It returns launch
// errors (bad configuration, missing resources); faults inside the kernel
// surface from the next synchronising call.
func (f *Function) Launch(cfg LaunchConfig, args ...Arg) error {
	h, err := f.mod.handle()
	if err != nil {
		return err
	}
	if cfg.Grid.X == 0 || cfg.Block.X == 0 {
		return fmt.Errorf("cuda: launch %s: empty grid %v or block %v", f.name, cfg.Grid, cfg.Block)
	}
	var sh C.bam_CUstream
	if cfg.Stream != nil {
		if cfg.Stream.destroyed.Load() {
			return ErrClosed
		}
		sh = cfg.Stream.h
	}
	if err := f.checkArgs(h, args); err != nil {
		return err
	}
	params, free := packArgs(args)
	defer free()
	gx, gy, gz := cfg.Grid.norm()
	bx, by, bz := cfg.Block.norm()
	r := C.bam_cuLaunchKernel(h, f.h, gx, gy, gz, bx, by, bz, C.uint(cfg.SharedMem), sh, params)
	if err := check("cuLaunchKernel", r); err != nil {
		return fmt.Errorf("cuda: launch %s grid %v block %v: %w", f.name, cfg.Grid, cfg.Block, err)
	}
	return nil
}

// Arg is one kernel argument, held by value.
type Arg struct {
	data  [8]byte
	big   []byte // by-value structs larger than 8 bytes
	size  int
	align int
}

func word(v uint64, size int) Arg {
	a := Arg{size: size, align: size}
	for i := 0; i < size; i++ {
		a.data[i] = byte(v >> (8 * i))
	}
	return a
}

// U32 is a uint32 (unsigned int) argument.
func U32(v uint32) Arg { return word(uint64(v), 4) }

// I32 is an int32 (int) argument.
func I32(v int32) Arg { return word(uint64(uint32(v)), 4) }

// U64 is a uint64 (unsigned long long) argument.
func U64(v uint64) Arg { return word(v, 8) }

// I64 is an int64 (long long) argument.
func I64(v int64) Arg { return word(uint64(v), 8) }

// F32 is a float argument.
func F32(v float32) Arg { return word(uint64(math.Float32bits(v)), 4) }

// F64 is a double argument.
func F64(v float64) Arg { return word(math.Float64bits(v), 8) }

// Ptr is a device pointer argument (T* in the kernel).
func Ptr(p DevicePtr) Arg { return word(uint64(p), 8) }

// Uintptr is a pointer-sized integer argument (a host-mapped address the
// kernel receives as a pointer, say).
func Uintptr(v uintptr) Arg { return word(uint64(v), int(unsafe.Sizeof(v))) }

// Struct is a by-value struct argument: its bytes as the kernel sees them
// (build them with encoding/binary, little-endian) and its alignment (a
// power of two; other values round up to one, at most 256).
func Struct(b []byte, align int) Arg {
	a := 1
	for a < align && a < 256 {
		a <<= 1
	}
	align = a
	return Arg{big: append([]byte(nil), b...), size: len(b), align: align}
}

func (a Arg) bytes() []byte {
	if a.big != nil {
		return a.big
	}
	return a.data[:a.size]
}

// argOffsets places each argument at its alignment, in order, as the
// kernel's parameter buffer does, and returns the offsets and the total.
func argOffsets(args []Arg) (offs []uintptr, total uintptr) {
	offs = make([]uintptr, len(args))
	for i, a := range args {
		al := uintptr(max(a.align, 1))
		total = (total + al - 1) &^ (al - 1)
		offs[i] = total
		total += uintptr(a.size)
	}
	return offs, total
}

// packArgs lays the arguments out in C memory, each at its alignment, and
// returns the array of pointers to them that cuLaunchKernel takes. The
// driver copies the values during the launch call, so free may run right
// after it.
func packArgs(args []Arg) (params *unsafe.Pointer, free func()) {
	if len(args) == 0 {
		return nil, func() {}
	}
	offs, total := argOffsets(args)
	ptrBytes := uintptr(len(args)) * unsafe.Sizeof(unsafe.Pointer(nil))
	// One block: the pointer array first, then the 16-byte-aligned values.
	valStart := (ptrBytes + 15) &^ 15
	block := C.calloc(1, C.size_t(valStart+total+1))
	ptrs := unsafe.Slice((*unsafe.Pointer)(block), len(args))
	vals := unsafe.Add(block, valStart)
	for i, a := range args {
		dst := unsafe.Add(vals, offs[i])
		copy(unsafe.Slice((*byte)(dst), a.size), a.bytes())
		ptrs[i] = dst
	}
	return (*unsafe.Pointer)(block), func() { C.free(block) }
}
