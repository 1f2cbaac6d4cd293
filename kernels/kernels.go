package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// The PTX of every family, the manifest, the device headers and the sources
// travel inside the binary: users need only the NVIDIA driver.
var (
	//go:embed ptx/*.ptx ptx/sm_90/*.ptx ptx/MANIFEST
	ptxFS embed.FS
	//go:embed include
	includeFS embed.FS
	//go:embed *.cu
	sourceFS embed.FS
)

// Kernel families (one .cu file and one .ptx file each).
const (
	FamilyBasic    = "basic"    // fill, gather, mapped host memory
	FamilyMembench = "membench" // memory-path measurements
	FamilyArray    = "array"    // arrays on storage through the GPU cache (internal/gpuengine)
)

// Kernel names, as exported by the PTX (extern "C").
const (
	FillPatternU64 = "bam_fill_pattern_u64" // (u64 *dst, u64 n, u64 seed)
	FillPatternU32 = "bam_fill_pattern_u32" // (u32 *dst, u64 n, u64 seed)
	GatherU64      = "bam_gather_u64"       // (u64 *out, const u64 *src, u64 src_len, const u64 *idx, u64 n, u64 fallback, u32 *out_of_range)
	GatherU32      = "bam_gather_u32"       // (u32 *out, const u32 *src, u64 src_len, const u64 *idx, u64 n, u32 fallback, u32 *out_of_range)
	MappedAddU32   = "bam_mapped_add_u32"   // (volatile u32 *data, u64 n, u32 delta)
	ReadSumU64     = "bam_read_sum_u64"     // (const ulonglong2 *src, u64 n16, u64 *sum)
)

// PTX returns the embedded PTX of a kernel family, e.g. PTX(FamilyBasic).
func PTX(family string) ([]byte, error) {
	if err := checkFamily(family); err != nil {
		return nil, err
	}
	b, err := ptxFS.ReadFile("ptx/" + family + ".ptx")
	if err != nil {
		return nil, fmt.Errorf("kernels: no PTX for family %q (have %s): %w", family, strings.Join(Families(), ", "), err)
	}
	return b, nil
}

// PTXFor returns the PTX of a kernel family built for a device of compute
// capability major.x: on 9.0 and later (H100, H200) the sm_90 build, whose
// queues read windows of completion entries with one bulk copy each
// (bam/detail/sync.cuh, BAM_BULK_CQ_READS), else the compute_80 build that
// PTX returns. Both builds come from the same sources and do the same
// work; only how the queues read host memory differs.
func PTXFor(family string, major int) ([]byte, error) {
	if major < 9 {
		return PTX(family)
	}
	if err := checkFamily(family); err != nil {
		return nil, err
	}
	b, err := ptxFS.ReadFile("ptx/sm_90/" + family + ".ptx")
	if err != nil {
		return nil, fmt.Errorf("kernels: no sm_90 PTX for family %q: %w", family, err)
	}
	return b, nil
}

// Build names, as gpuengine.Engine.KernelBuild reports them.
const (
	BuildPortable = "compute_80" // PTX, every GPU
	BuildSM90     = "sm_90"      // PTXFor on compute capability 9.0 and later
)

// NVRTCOptions returns the NVRTC options that compile code against the
// device headers the way build was compiled (make kernels), for an NVRTC
// of version nvrtcMajor: for the sm_90 build compute_90 and
// BAM_PTX_ISA_80, so that the code's queues read completion windows with
// bulk copies as the engine's own kernels do. The sm_90 build needs PTX
// ISA 8.0, which NVRTC writes from version 12 on; an older NVRTC, or the
// portable build, gets no options (NVRTC's caller then picks compute_80).
func NVRTCOptions(build string, nvrtcMajor int) []string {
	if build == BuildSM90 && nvrtcMajor >= 12 {
		return []string{"--gpu-architecture=compute_90", "-DBAM_PTX_ISA_80"}
	}
	return nil
}

// BuildEnv names the environment variable that can pin the build PTXFor's
// callers load: "compute_80" loads the portable build on every GPU, "" or
// "sm_90" leaves the choice to the device. For tools that cannot follow
// the sm_90 build: compute-sanitizer's racecheck reports every hand-over
// of a completion-window slot between threads, which go through atomics
// it does not model (bench/experiments/racecheck_slots.cu).
const BuildEnv = "BAM_KERNEL_BUILD"

// PortableFromEnv reports whether BuildEnv asks for the compute_80 build,
// or an error naming a value it does not know.
func PortableFromEnv() (bool, error) {
	switch v := os.Getenv(BuildEnv); v {
	case "", "sm_90":
		return false, nil
	case "compute_80":
		return true, nil
	default:
		return false, fmt.Errorf("kernels: %s=%q: want compute_80, sm_90 or nothing", BuildEnv, v)
	}
}

// Source returns the embedded CUDA source a family's PTX is built from,
// e.g. Source("graph") is kernels/graph.cu. Packages that mirror a kernel's
// constants in Go check them against it, in a test binary that needs no
// source tree.
func Source(family string) ([]byte, error) {
	if err := checkFamily(family); err != nil {
		return nil, err
	}
	b, err := sourceFS.ReadFile(family + ".cu")
	if err != nil {
		return nil, fmt.Errorf("kernels: no source for family %q (have %s): %w", family, strings.Join(Families(), ", "), err)
	}
	return b, nil
}

func checkFamily(family string) error {
	if family == "" || strings.ContainsAny(family, "/\\.") {
		return fmt.Errorf("kernels: invalid family name %q", family)
	}
	return nil
}

// Families lists the embedded kernel families, sorted.
func Families() []string {
	ents, _ := fs.ReadDir(ptxFS, "ptx")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".ptx"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Headers returns the device library headers as a file system rooted at the
// include directory, so names are as in #include lines ("bam/common.cuh").
func Headers() fs.FS {
	sub, err := fs.Sub(includeFS, "include")
	if err != nil {
		panic("kernels: embedded include directory missing: " + err.Error())
	}
	return sub
}

// HeaderSources returns every device header keyed by its include name, the
// form NVRTC takes (cuda.Source.Headers).
func HeaderSources() map[string]string {
	out := map[string]string{}
	_ = fs.WalkDir(Headers(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := path.Ext(p); ext == ".cuh" || ext == ".h" {
			b, err := fs.ReadFile(Headers(), p)
			if err != nil {
				return err
			}
			out[p] = string(b)
		}
		return nil
	})
	return out
}

// Mix64 is the splitmix64 finalizer, identical to bam::mix64 in
// bam/common.cuh.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Pattern64 is element i of the test pattern with the given seed, identical
// to bam::pattern64.
func Pattern64(seed, i uint64) uint64 {
	return Mix64(seed + (i+1)*0x9e3779b97f4a7c15)
}
