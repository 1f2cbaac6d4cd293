package bam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bam-go/bam/nvme"
)

func memStore(t *testing.T, n int, lineSize int, strict bool) (*Store, []nvme.Namespace) {
	t.Helper()
	nss := make([]nvme.Namespace, n)
	for i := range nss {
		var m *nvme.MemoryNamespace
		var err error
		if strict {
			m, err = nvme.NewStrictMemoryNamespace(512, 8192) // 4 MiB
		} else {
			m, err = nvme.NewMemoryNamespace(512, 8192)
		}
		if err != nil {
			t.Fatal(err)
		}
		nss[i] = m
	}
	s, err := CreateOn(context.Background(), nss, CreateOptions{LineSize: lineSize, CatalogSize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return s, nss
}

// TestLayoutProperties checks Locate and LineAddr against an independent
// oracle over random geometries: elements never straddle lines, every line
// copy lies inside its extent, and no two lines (or elements) share bytes.
func TestLayoutProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := range 60 {
		n := 1 + rng.IntN(5)
		line := 512 << rng.IntN(4)
		s, _ := memStore(t, n, line, false)
		elem := 1 + rng.IntN(line)
		if rng.IntN(2) == 0 {
			elem = 1 << rng.IntN(4)
		}
		layout := LayoutStriped
		if rng.IntN(3) == 0 {
			layout = LayoutReplicated
		}
		perLine := line / elem
		length := uint64(rng.IntN(40*perLine + 1))
		// A few objects first, so extents do not start at the data start.
		for j := range rng.IntN(3) {
			mustCreateObject(t, s, ObjectSpec{Name: fmt.Sprintf("pad%d", j), ElemType: "uint8", Length: uint64(rng.IntN(5000))})
		}
		o := mustCreateObject(t, s, ObjectSpec{Name: "x", ElemType: "rec", ElemSize: elem, Length: length, Layout: layout})
		name := fmt.Sprintf("iter %d: %d ns, line %d, elem %d, len %d, %s", iter, n, line, elem, length, layout)

		wantLines := (length + uint64(perLine) - 1) / uint64(perLine)
		if o.Lines() != wantLines || o.ElemsPerLine() != perLine {
			t.Fatalf("%s: lines %d (want %d), per line %d (want %d)", name, o.Lines(), wantLines, o.ElemsPerLine(), perLine)
		}
		// Oracle: deal lines out to namespaces one by one.
		next := make([]uint64, n)
		used := map[[2]uint64]bool{}
		for j := uint64(0); j < o.Lines(); j++ {
			for r := range o.Replicas() {
				ns := int(j % uint64(n))
				if layout == LayoutReplicated {
					ns = r
				}
				ext := o.info.Extents[ns]
				want := ext.StartLBA + next[ns]*uint64(line/512)
				a, err := o.LineAddr(j, r)
				if err != nil {
					t.Fatal(err)
				}
				if a.Namespace != ns || a.LBA != want || a.Offset != want*512 {
					t.Fatalf("%s: line %d replica %d at %+v, want ns %d LBA %d", name, j, r, a, ns, want)
				}
				if a.LBA+uint64(line/512) > ext.StartLBA+ext.Lines*uint64(line/512) {
					t.Fatalf("%s: line %d beyond its extent %+v", name, j, ext)
				}
				key := [2]uint64{uint64(a.Namespace), a.LBA}
				if used[key] {
					t.Fatalf("%s: two lines at %v", name, key)
				}
				used[key] = true
				if layout == LayoutReplicated {
					next[ns]++
				}
			}
			if layout == LayoutStriped {
				next[j%uint64(n)]++
			}
		}
		for i := uint64(0); i < length; i += 1 + uint64(rng.IntN(7)) {
			loc, err := o.Locate(i)
			if err != nil {
				t.Fatal(err)
			}
			if loc.Line != i/uint64(perLine) || loc.Offset != int(i%uint64(perLine))*elem || loc.Offset+elem > line {
				t.Fatalf("%s: element %d at %+v", name, i, loc)
			}
		}
		if _, err := o.Locate(length); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("%s: Locate(len) = %v", name, err)
		}
		if _, err := o.LineAddr(o.Lines(), 0); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("%s: LineAddr(lines) = %v", name, err)
		}
		if _, err := o.LineAddr(0, o.Replicas()); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("%s: LineAddr(replica) = %v", name, err)
		}
		if layout == LayoutReplicated && o.Lines() > 0 {
			seen := map[int]int{}
			for range 3 * n {
				a, _ := o.ReadLineAddr(0)
				seen[a.Namespace]++
			}
			for ns := range n {
				if seen[ns] != 3 {
					t.Fatalf("%s: round robin reads %v", name, seen)
				}
			}
		}
		s.Close()
	}
}

// TestAllocationModel runs random creates and deletes and checks that the
// catalog stays valid (disjoint, in-bounds extents: OpenOn re-verifies),
// that holes are reused, and that new objects read as zeros even where a
// deleted object wrote data.
func TestAllocationModel(t *testing.T) {
	ctx := context.Background()
	s, nss := memStore(t, 3, 4096, false)
	rng := rand.New(rand.NewPCG(21, 22))
	live := map[string]bool{}
	for i := range 300 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for name := range live {
				o, _ := s.Object(name)
				// Scribble on the object's first line before deleting it.
				if o.Lines() > 0 {
					a, _ := o.LineAddr(0, 0)
					nss[a.Namespace].WriteAt([]byte("garbage"), int64(a.Offset))
				}
				if err := s.DeleteObject(ctx, name); err != nil {
					t.Fatal(err)
				}
				delete(live, name)
				break
			}
			continue
		}
		name := fmt.Sprintf("o%d", i)
		layout := LayoutStriped
		if rng.IntN(4) == 0 {
			layout = LayoutReplicated
		}
		o, err := s.CreateObject(ctx, ObjectSpec{Name: name, ElemType: "uint64", Length: uint64(rng.IntN(40000)), Layout: layout})
		if errors.Is(err, ErrNoSpace) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		live[name] = true
		for j := uint64(0); j < o.Lines(); j += 1 + o.Lines()/4 {
			a, _ := o.LineAddr(j, 0)
			buf := make([]byte, 8)
			nss[a.Namespace].ReadAt(buf, int64(a.Offset))
			if string(buf) != "\x00\x00\x00\x00\x00\x00\x00\x00" {
				t.Fatalf("new object %s line %d reads %q, want zeros", name, j, buf)
			}
		}
	}
	s.Close()
	s, err := OpenOn(ctx, nss, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Objects()) != len(live) {
		t.Fatalf("%d objects after reopen, want %d", len(s.Objects()), len(live))
	}
	info, _ := s.Info()
	for _, ns := range info.Namespaces {
		if ns.UsedLines > ns.DataLines || ns.LargestFree > ns.DataLines-ns.UsedLines {
			t.Fatalf("namespace info %+v", ns)
		}
	}
}

// faultyNamespace tears the write number failAt: it writes only the first
// half, makes that half durable, and fails.
type faultyNamespace struct {
	*nvme.MemoryNamespace
	writes, failAt int
}

func (f *faultyNamespace) WriteAt(p []byte, off int64) (int, error) {
	f.writes++
	if f.writes == f.failAt {
		n, _ := f.MemoryNamespace.WriteAt(p[:len(p)/2], off)
		f.MemoryNamespace.Flush()
		return n, errors.New("injected write fault")
	}
	return f.MemoryNamespace.WriteAt(p, off)
}

// TestCrashInProcess simulates power loss (strict memory namespaces drop
// every unflushed write) and torn writes at every write of a sequence of
// catalog updates. After each crash the store must open with exactly the
// objects whose updates were acknowledged.
func TestCrashInProcess(t *testing.T) {
	ctx := context.Background()
	for failAt := 1; failAt <= 40; failAt++ {
		mems := make([]*nvme.MemoryNamespace, 2)
		nss := make([]nvme.Namespace, 2)
		for i := range mems {
			mems[i], _ = nvme.NewStrictMemoryNamespace(512, 4096)
			nss[i] = mems[i]
		}
		s, err := CreateOn(ctx, nss, CreateOptions{LineSize: 4096, CatalogSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		f0 := &faultyNamespace{MemoryNamespace: mems[0], failAt: failAt}
		s, err = OpenOn(ctx, []nvme.Namespace{f0, mems[1]}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		acked := map[string]bool{}
		pending := ""
		for i := 0; ; i++ {
			name := fmt.Sprintf("o%d", i)
			var err error
			if i%4 == 3 {
				victim := fmt.Sprintf("o%d", i-2)
				pending = victim
				if err = s.DeleteObject(ctx, victim); err == nil || errors.Is(err, ErrNotFound) {
					delete(acked, victim)
					err = nil
				}
			} else {
				pending = name
				if _, err = s.CreateObject(ctx, ObjectSpec{Name: name, ElemType: "int32", Length: 3000}); err == nil {
					acked[name] = true
				}
			}
			if err != nil {
				break
			}
		}
		// The failed update left the published catalog unchanged; the next
		// one rewrites the torn slot and must survive the crash.
		if _, err := s.CreateObject(ctx, ObjectSpec{Name: "after", ElemType: "int32", Length: 10}); err != nil {
			t.Fatalf("fault at write %d: update after the fault: %v", failAt, err)
		}
		acked["after"] = true
		s.Close()
		for _, m := range mems {
			if err := m.Crash(); err != nil {
				t.Fatal(err)
			}
		}
		s, err = OpenOn(ctx, nss, Options{})
		if err != nil {
			t.Fatalf("fault at write %d: open after crash: %v", failAt, err)
		}
		got := map[string]bool{}
		for _, o := range s.Objects() {
			got[o.Name] = true
		}
		for n := range acked {
			if !got[n] && n != pending {
				t.Fatalf("fault at write %d: acknowledged object %s lost (have %v)", failAt, n, got)
			}
		}
		for n := range got {
			if !acked[n] && n != pending {
				t.Fatalf("fault at write %d: unexpected object %s", failAt, n)
			}
		}
		s.Close()
	}
}
