package kernels

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"
)

// embeddedFile reads a manifest path ("basic.cu", "include/bam/x.cuh",
// "ptx/basic.ptx") from the embedded file systems.
func embeddedFile(p string) ([]byte, error) {
	switch {
	case strings.HasPrefix(p, "ptx/"):
		return ptxFS.ReadFile(p)
	case strings.HasPrefix(p, "include/"):
		return includeFS.ReadFile(p)
	default:
		return sourceFS.ReadFile(p)
	}
}

// embeddedInputs lists every source, header and PTX file in the binary.
func embeddedInputs(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, fsys := range []fs.FS{sourceFS, includeFS, ptxFS} {
		err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch path.Ext(p) {
			case ".cu", ".cuh", ".h", ".ptx":
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(out)
	return out
}

func readManifest(t *testing.T) map[string]string {
	t.Helper()
	b, err := ptxFS.ReadFile("ptx/MANIFEST")
	if err != nil {
		t.Fatalf("no manifest: %v", err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("malformed manifest line %q", line)
		}
		m[name] = sum
	}
	return m
}

// TestManifestCurrent fails when a kernel source or header changed (or was
// added or removed) after the PTX was last generated, or the PTX was edited.
func TestManifestCurrent(t *testing.T) {
	manifest := readManifest(t)
	files := embeddedInputs(t)
	seen := map[string]bool{}
	for _, f := range files {
		seen[f] = true
		b, err := embeddedFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want, ok := manifest[f]
		switch {
		case !ok && strings.HasPrefix(f, "include/"):
			// A header no kernel includes does not affect the PTX; once a
			// source includes it, the source's own hash changes.
		case !ok:
			t.Errorf("kernels/%s is not in kernels/ptx/MANIFEST: the PTX predates it; run `make kernels`", f)
		case want != hex.EncodeToString(sum[:]):
			t.Errorf("kernels/%s changed since the PTX was generated; run `make kernels`", f)
		}
	}
	for f := range manifest {
		if !seen[f] {
			t.Errorf("kernels/ptx/MANIFEST lists %s, which no longer exists; run `make kernels`", f)
		}
	}
}

func TestEveryFamilyHasPTX(t *testing.T) {
	srcs, err := fs.Glob(sourceFS, "*.cu")
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]bool{}
	for _, f := range Families() {
		fams[f] = true
	}
	for _, s := range srcs {
		if fam := strings.TrimSuffix(s, ".cu"); !fams[fam] {
			t.Errorf("kernels/%s has no PTX; run `make kernels`", s)
		}
	}
	if len(srcs) != len(fams) {
		t.Errorf("%d sources but %d PTX families %v", len(srcs), len(fams), Families())
	}
}

func TestPTXExportsKernels(t *testing.T) {
	tests := []struct {
		family string
		names  []string
	}{
		{FamilyBasic, []string{FillPatternU64, FillPatternU32, GatherU64, GatherU32, MappedAddU32}},
		{FamilyMembench, []string{ReadSumU64}},
	}
	for _, tc := range tests {
		ptx, err := PTX(tc.family)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(ptx, []byte(".target sm_80")) {
			t.Errorf("%s: PTX does not target sm_80 (compute_80)", tc.family)
		}
		for _, n := range tc.names {
			if !bytes.Contains(ptx, []byte(".entry "+n+"(")) {
				t.Errorf("%s: PTX has no kernel %s", tc.family, n)
			}
		}
	}
}

// TestPTXForBuilds checks that every family has an sm_90 build exporting
// the kernels of its compute_80 build, and that PTXFor picks by compute
// capability.
func TestPTXForBuilds(t *testing.T) {
	for _, fam := range Families() {
		base, err := PTXFor(fam, 8)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := PTX(fam); !bytes.Equal(base, want) {
			t.Errorf("%s: PTXFor(8) is not the compute_80 build", fam)
		}
		sm90, err := PTXFor(fam, 9)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(sm90, []byte("\n.target sm_90\n")) || !bytes.Contains(sm90, []byte("\n.version 8.")) {
			t.Errorf("%s: the sm_90 build does not say .target sm_90 and .version 8.x", fam)
		}
		if got, want := entries(sm90), entries(base); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: the sm_90 build exports %v, the compute_80 build %v", fam, got, want)
		}
	}
	if _, err := PTXFor("nope", 9); err == nil {
		t.Error("PTXFor(nope, 9) returned no error")
	}
}

// entries lists the kernels a PTX text exports, sorted.
func entries(ptx []byte) []string {
	var out []string
	for _, line := range strings.Split(string(ptx), "\n") {
		if name, ok := strings.CutPrefix(line, ".visible .entry "); ok {
			name, _, _ = strings.Cut(name, "(")
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestPTXRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "nope", "../kernels", "basic.ptx", "ptx/basic"} {
		if _, err := PTX(name); err == nil {
			t.Errorf("PTX(%q) succeeded", name)
		}
	}
}

func TestSource(t *testing.T) {
	for _, fam := range Families() {
		src, err := Source(fam)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := sourceFS.ReadFile(fam + ".cu"); !bytes.Equal(src, want) || len(src) == 0 {
			t.Errorf("Source(%q): %d bytes, want kernels/%s.cu's %d", fam, len(src), fam, len(want))
		}
	}
	for _, name := range []string{"", "nope", "../kernels", "basic.cu", "include/bam"} {
		if _, err := Source(name); err == nil {
			t.Errorf("Source(%q) succeeded", name)
		}
	}
}

func TestHeaderSources(t *testing.T) {
	h := HeaderSources()
	src, ok := h["bam/common.cuh"]
	if !ok {
		t.Fatalf("bam/common.cuh missing from %v", h)
	}
	if !strings.Contains(src, "pattern64") {
		t.Error("bam/common.cuh lacks pattern64")
	}
	if strings.Contains(src, "#include <") {
		t.Error("bam/common.cuh includes a system header; NVRTC users have none")
	}
}

// TestPattern64KnownAnswers pins the pattern to splitmix64's published
// first outputs (state 0, then successive increments), so a change to
// either the Go or the CUDA copy shows up.
func TestPattern64KnownAnswers(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	for i, w := range want {
		if got := Pattern64(0, uint64(i)); got != w {
			t.Errorf("Pattern64(0, %d) = %#x, want %#x", i, got, w)
		}
	}
}

func FuzzMix64Bijective(f *testing.F) {
	f.Add(uint64(0), uint64(1))
	f.Add(uint64(1<<63), uint64(42))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		if a != b && Mix64(a) == Mix64(b) {
			t.Fatalf("Mix64(%#x) == Mix64(%#x)", a, b)
		}
	})
}

func ExamplePattern64() {
	fmt.Printf("%#x\n", Pattern64(0, 0))
	// Output: 0xe220a8397b1dcdaf
}

func TestPortableFromEnv(t *testing.T) {
	for _, tc := range []struct {
		val      string
		portable bool
		ok       bool
	}{{"", false, true}, {"sm_90", false, true}, {"compute_80", true, true}, {"sm_80", false, false}} {
		t.Setenv(BuildEnv, tc.val)
		got, err := PortableFromEnv()
		if got != tc.portable || (err == nil) != tc.ok {
			t.Errorf("%s=%q: got %v, %v; want %v, error %v", BuildEnv, tc.val, got, err, tc.portable, !tc.ok)
		}
	}
}

func TestNVRTCOptions(t *testing.T) {
	for _, tc := range []struct {
		build string
		major int
		want  []string
	}{
		{BuildSM90, 12, []string{"--gpu-architecture=compute_90", "-DBAM_PTX_ISA_80"}},
		{BuildSM90, 13, []string{"--gpu-architecture=compute_90", "-DBAM_PTX_ISA_80"}},
		{BuildSM90, 11, nil},
		{BuildPortable, 13, nil},
		{"", 13, nil},
	} {
		if got := NVRTCOptions(tc.build, tc.major); !slices.Equal(got, tc.want) {
			t.Errorf("NVRTCOptions(%q, %d) = %q, want %q", tc.build, tc.major, got, tc.want)
		}
	}
}
