package cuda

import (
	"errors"
	"fmt"
)

// Sentinels callers branch on. Errors returned by this package wrap one of
// them where it applies; test with errors.Is.
var (
	// ErrNoDriver is returned when the CUDA driver library cannot be loaded
	// or cannot initialise (no libcuda.so.1, no kernel module, a stub
	// library, a driver too old). The CPU engine still works.
	ErrNoDriver = errors.New("cuda: no usable NVIDIA driver")
	// ErrNoDevice is returned when the driver loads but reports no
	// CUDA-capable device, or an ordinal names none.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrOutOfMemory is returned when device or pinned host memory cannot be
	// allocated.
	ErrOutOfMemory = errors.New("cuda: out of memory")
	// ErrNoNVRTC is returned when no NVRTC library can be loaded.
	ErrNoNVRTC = errors.New("cuda: NVRTC not available")
	// ErrClosed is returned by calls on a context, stream, event, module or
	// allocation that was already closed or freed.
	ErrClosed = errors.New("cuda: use after close")
	// ErrArgs is returned by Launch when the arguments do not match the
	// kernel's parameters in size or placement, or in number (checked as
	// far as the driver describes parameters: cuFuncGetParamInfo, and
	// cuFuncGetParamCount for the number of a launch with too few).
	ErrArgs = errors.New("cuda: arguments do not match the kernel's parameters")
)

// Driver result codes this package interprets (CUresult values).
const (
	resultSuccess                 = 0
	resultInvalidValue            = 1
	resultOutOfMemory             = 2
	resultStubLibrary             = 34
	resultInsufficientDriver      = 35
	resultNoDevice                = 100
	resultInvalidDevice           = 101
	resultSharedObjectInitFailed  = 303
	resultOperatingSystem         = 304
	resultNotReady                = 600
	resultSystemDriverMismatch    = 803
	resultCompatNotSupportedOnDev = 804
	resultNotLoaded               = 100000 // BAM_ERR_NOT_LOADED in driver.h
	resultNoSymbol                = 100001 // BAM_ERR_NO_SYMBOL in driver.h

	// nvrtcResult: NVRTC_ERROR_BUILTIN_OPERATION_FAILURE.
	nvrtcResultBuiltinOperationFailure = 7
)

// Error is a failed driver or NVRTC call.
type Error struct {
	Call   string // the API entry point, e.g. "cuMemAlloc_v2"
	Result int    // the CUresult (or nvrtcResult) value
	Name   string // the result's symbolic name, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg    string // the driver's description of the result
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = fmt.Sprintf("result %d", e.Result)
	}
	if e.Msg == "" {
		return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, name, e.Result)
	}
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, name, e.Result, e.Msg)
}

// Is reports whether the driver result corresponds to one of the package's
// sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrOutOfMemory:
		return e.Result == resultOutOfMemory && !isNVRTCCall(e.Call)
	case ErrNoDevice:
		return e.Result == resultNoDevice || e.Result == resultInvalidDevice
	case ErrNoNVRTC:
		// The library loaded but cannot load its own builtins library
		// (libnvrtc-builtins), a broken installation.
		return isNVRTCCall(e.Call) && e.Result == nvrtcResultBuiltinOperationFailure
	case ErrNoDriver:
		switch e.Result {
		case resultStubLibrary, resultInsufficientDriver, resultSharedObjectInitFailed,
			resultOperatingSystem, resultSystemDriverMismatch, resultCompatNotSupportedOnDev,
			resultNotLoaded, resultNoSymbol:
			return !isNVRTCCall(e.Call)
		}
	}
	return false
}

func isNVRTCCall(call string) bool { return len(call) >= 5 && call[:5] == "nvrtc" }

// newError builds the error for a failed driver call; it returns nil for
// success.
func newError(call string, r int) error {
	if r == resultSuccess {
		return nil
	}
	name, msg := resultText(r)
	return &Error{Call: call, Result: r, Name: name, Msg: msg}
}

// check is newError for the C result type.
func check[T ~int32 | ~int](call string, r T) error { return newError(call, int(r)) }
