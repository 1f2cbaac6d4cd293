package cuda

/*
#include <stdlib.h>
#include "driver.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

var (
	nvrtcOnce sync.Once
	nvrtcErr  error
	nvrtcLib  string
	// nvrtcMu serialises compilations: NVRTC programs are independent, but
	// one at a time keeps memory use bounded and logs in order.
	nvrtcMu sync.Mutex
)

// nvrtcCandidates lists the library names tried, newest first. $BAM_NVRTC,
// when set, is tried before all of them.
func nvrtcCandidates() []string {
	var names []string
	if p := os.Getenv("BAM_NVRTC"); p != "" {
		names = append(names, p)
	}
	sonames := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}
	names = append(names, sonames...)
	var dirs []string
	for _, env := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if d := os.Getenv(env); d != "" {
			dirs = append(dirs, filepath.Join(d, "lib64"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
	for _, d := range dirs {
		for _, s := range sonames {
			names = append(names, filepath.Join(d, s))
		}
	}
	return names
}

// OpenNVRTC loads the NVRTC library. The error wraps ErrNoNVRTC when none
// of the candidate libraries loads.
func OpenNVRTC() error {
	nvrtcOnce.Do(func() {
		names := nvrtcCandidates()
		cnames := make([]*C.char, len(names))
		for i, n := range names {
			cnames[i] = C.CString(n)
		}
		defer func() {
			for _, p := range cnames {
				C.free(unsafe.Pointer(p))
			}
		}()
		arr := (**C.char)(C.malloc(C.size_t(len(cnames)) * C.size_t(unsafe.Sizeof(cnames[0]))))
		defer C.free(unsafe.Pointer(arr))
		copy(unsafe.Slice(arr, len(cnames)), cnames)
		var msg [512]C.char
		i := int(C.bam_nvrtc_load(arr, C.int(len(names)), &msg[0], C.size_t(len(msg))))
		if i < 0 {
			nvrtcErr = fmt.Errorf("%w: tried %s: %s", ErrNoNVRTC, strings.Join(names[:min(len(names), 5)], ", "), C.GoString(&msg[0]))
			return
		}
		nvrtcLib = names[i]
	})
	return nvrtcErr
}

// NVRTCVersion returns the loaded NVRTC's version.
func NVRTCVersion() (major, minor int, err error) {
	if err := OpenNVRTC(); err != nil {
		return 0, 0, err
	}
	var ma, mi C.int
	if err := nvrtcCheck("nvrtcVersion", C.bam_nvrtcVersion(&ma, &mi)); err != nil {
		return 0, 0, err
	}
	return int(ma), int(mi), nil
}

func nvrtcCheck(call string, r C.bam_nvrtcResult) error {
	if r == 0 {
		return nil
	}
	msg := "NVRTC not loaded"
	if int(r) != resultNotLoaded {
		msg = C.GoString(C.bam_nvrtcGetErrorString(r))
	}
	return &Error{Call: call, Result: int(r), Name: msg}
}

// Source is a CUDA C++ translation unit to compile at run time.
type Source struct {
	Name    string            // file name used in diagnostics, e.g. "user.cu"
	Code    string            // the source text
	Headers map[string]string // include name (as in #include "bam/x.cuh") -> contents
	Options []string          // extra NVRTC options, e.g. "-DLINE=4096"
}

// DefaultArch is the virtual architecture run-time compiled code targets,
// the same as the embedded kernels (compute_80 serves A100, H100, H200).
const DefaultArch = "compute_80"

// NamesArch reports whether NVRTC options name the target architecture
// (--gpu-architecture or -arch, in any of their spellings).
func NamesArch(options []string) bool {
	for _, o := range options {
		if strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch") {
			return true
		}
	}
	return false
}

// CompileError is a failed NVRTC compilation with its log.
type CompileError struct {
	Name string
	Err  error
	Log  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("cuda: NVRTC compile %s: %v\n%s", e.Name, e.Err, e.Log)
}

func (e *CompileError) Unwrap() error { return e.Err }

// CompilePTX compiles src to PTX with NVRTC (options always include
// --gpu-architecture=compute_80 unless src names another, -lineinfo and
// -std=c++17). It returns the PTX and the compiler's log (warnings). A
// failed compilation returns a *CompileError holding the log.
func CompilePTX(src Source) (ptx []byte, log string, err error) {
	if err := OpenNVRTC(); err != nil {
		return nil, "", err
	}
	if src.Name == "" {
		src.Name = "kernel.cu"
	}
	nvrtcMu.Lock()
	defer nvrtcMu.Unlock()

	var alloc []unsafe.Pointer
	defer func() {
		for _, p := range alloc {
			C.free(p)
		}
	}()
	cs := func(s string) *C.char {
		p := C.CString(s)
		alloc = append(alloc, unsafe.Pointer(p))
		return p
	}
	carray := func(ss []string) **C.char {
		if len(ss) == 0 {
			return nil
		}
		arr := C.malloc(C.size_t(len(ss)) * C.size_t(unsafe.Sizeof((*C.char)(nil))))
		alloc = append(alloc, arr)
		s := unsafe.Slice((**C.char)(arr), len(ss))
		for i, v := range ss {
			s[i] = cs(v)
		}
		return (**C.char)(arr)
	}

	names := make([]string, 0, len(src.Headers))
	for n := range src.Headers {
		names = append(names, n)
	}
	sort.Strings(names)
	bodies := make([]string, len(names))
	for i, n := range names {
		bodies[i] = src.Headers[n]
	}
	var prog C.bam_nvrtcProgram
	if err := nvrtcCheck("nvrtcCreateProgram", C.bam_nvrtcCreateProgram(&prog, cs(src.Code), cs(src.Name),
		C.int(len(names)), carray(bodies), carray(names))); err != nil {
		return nil, "", err
	}
	defer C.bam_nvrtcDestroyProgram(&prog)

	opts := []string{"-lineinfo", "-std=c++17"}
	if !NamesArch(src.Options) {
		opts = append(opts, "--gpu-architecture="+DefaultArch)
	}
	opts = append(opts, src.Options...)
	cerr := nvrtcCheck("nvrtcCompileProgram", C.bam_nvrtcCompileProgram(prog, C.int(len(opts)), carray(opts)))

	var logSize C.size_t
	if err := nvrtcCheck("nvrtcGetProgramLogSize", C.bam_nvrtcGetProgramLogSize(prog, &logSize)); err == nil && logSize > 1 {
		buf := C.malloc(logSize)
		alloc = append(alloc, buf)
		if C.bam_nvrtcGetProgramLog(prog, (*C.char)(buf)) == 0 {
			log = strings.TrimSpace(C.GoString((*C.char)(buf)))
		}
	}
	if cerr != nil {
		return nil, log, &CompileError{Name: src.Name, Err: cerr, Log: log}
	}
	var n C.size_t
	if err := nvrtcCheck("nvrtcGetPTXSize", C.bam_nvrtcGetPTXSize(prog, &n)); err != nil {
		return nil, log, err
	}
	if n == 0 {
		return nil, log, errors.New("cuda: NVRTC produced empty PTX")
	}
	buf := C.malloc(n)
	alloc = append(alloc, buf)
	if err := nvrtcCheck("nvrtcGetPTX", C.bam_nvrtcGetPTX(prog, (*C.char)(buf))); err != nil {
		return nil, log, err
	}
	// The PTX is NUL-terminated; n counts the NUL.
	out := C.GoBytes(buf, C.int(n))
	if k := len(out); k > 0 && out[k-1] == 0 {
		out = out[:k-1]
	}
	return out, log, nil
}

// NVRTCLibrary returns the name of the NVRTC library that was loaded, or ""
// if none.
func NVRTCLibrary() string {
	if OpenNVRTC() != nil {
		return ""
	}
	return nvrtcLib
}
