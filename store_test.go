package bam

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bam-go/bam/internal/format"
)

func testCreate(t *testing.T, dir string, n int) *Store {
	t.Helper()
	s, err := Create(context.Background(), dir, CreateOptions{Namespaces: n, NamespaceSize: 8 << 20, CatalogSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustCreateObject(t *testing.T, s *Store, spec ObjectSpec) *Object {
	t.Helper()
	o, err := s.CreateObject(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func names(s *Store) []string {
	var out []string
	for _, o := range s.Objects() {
		out = append(out, o.Name)
	}
	return out
}

func TestCreateOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := testCreate(t, dir, 3)
	mustCreateObject(t, s, ObjectSpec{Name: "weights", ElemType: "float32", Length: 100000})
	mustCreateObject(t, s, ObjectSpec{Name: "edges", ElemType: "edge", ElemSize: 12, Length: 5000, Layout: LayoutReplicated,
		Meta: map[string]string{"src": "graph.npy"}})
	mustCreateObject(t, s, ObjectSpec{Name: "index", Kind: KindTable, ElemType: "bucket", ElemSize: 4096, Length: 7})
	mustCreateObject(t, s, ObjectSpec{Name: "empty", ElemType: "uint8", Length: 0})
	before := s.Objects()
	info, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(dir, NamespaceFileName(i))); err != nil {
			t.Fatal(err)
		}
	}

	s, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if after := s.Objects(); !reflect.DeepEqual(before, after) {
		t.Fatalf("objects after reopen:\n%+v\nwant\n%+v", after, before)
	}
	info2, _ := s.Info()
	if !reflect.DeepEqual(info, info2) {
		t.Fatalf("info after reopen: %+v, want %+v", info2, info)
	}
	if info.CatalogGeneration != 4 || info.Objects != 4 || len(info.Namespaces) != 3 || info.LineSize != 4096 {
		t.Fatalf("info = %+v", info)
	}
	e, err := s.Object("edges")
	if err != nil {
		t.Fatal(err)
	}
	if e.ElemsPerLine() != 341 || e.Lines() != 15 || e.Replicas() != 3 {
		t.Fatalf("edges: %d per line, %d lines, %d replicas", e.ElemsPerLine(), e.Lines(), e.Replicas())
	}
	if v, _ := e.Meta("src"); v != "graph.npy" {
		t.Fatalf("meta src = %q", v)
	}
	if err := e.CheckType(KindArray, "edge", 12); err != nil {
		t.Fatal(err)
	}
	if err := e.CheckType(KindArray, "float32", 4); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("CheckType: %v, want ErrTypeMismatch", err)
	}
	if _, err := s.Object("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Object(nope): %v", err)
	}
}

func TestCatalogOperations(t *testing.T) {
	ctx := context.Background()
	s := testCreate(t, t.TempDir(), 2)
	defer s.Close()
	a := mustCreateObject(t, s, ObjectSpec{Name: "a", ElemType: "int64", Length: 10})
	b := mustCreateObject(t, s, ObjectSpec{Name: "b", ElemType: "int32", Length: 10})

	tests := []struct {
		name string
		err  error
		f    func() error
	}{
		{"duplicate", ErrExists, func() error { _, err := s.CreateObject(ctx, ObjectSpec{Name: "a", ElemType: "int8"}); return err }},
		{"bad name", ErrInvalid, func() error { _, err := s.CreateObject(ctx, ObjectSpec{Name: "", ElemType: "int8"}); return err }},
		{"size mismatch", ErrInvalid, func() error {
			_, err := s.CreateObject(ctx, ObjectSpec{Name: "x", ElemType: "int64", ElemSize: 4})
			return err
		}},
		{"no size", ErrInvalid, func() error { _, err := s.CreateObject(ctx, ObjectSpec{Name: "x", ElemType: "rec"}); return err }},
		{"elem > line", ErrInvalid, func() error {
			_, err := s.CreateObject(ctx, ObjectSpec{Name: "x", ElemType: "rec", ElemSize: 4097})
			return err
		}},
		{"too big", ErrNoSpace, func() error {
			_, err := s.CreateObject(ctx, ObjectSpec{Name: "x", ElemType: "uint8", Length: 1 << 40})
			return err
		}},
		{"huge length", ErrNoSpace, func() error {
			_, err := s.CreateObject(ctx, ObjectSpec{Name: "x", ElemType: "uint8", Length: 1<<64 - 1})
			return err
		}},
		{"delete missing", ErrNotFound, func() error { return s.DeleteObject(ctx, "zz") }},
		{"rename onto existing", ErrExists, func() error { return s.RenameObject(ctx, "a", "b") }},
		{"rename missing", ErrNotFound, func() error { return s.RenameObject(ctx, "zz", "y") }},
		{"swap missing", ErrNotFound, func() error { return s.SwapObjects(ctx, "a", "zz") }},
		{"cancelled", context.Canceled, func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			_, err := s.CreateObject(c, ObjectSpec{Name: "x", ElemType: "int8"})
			return err
		}},
	}
	for _, tc := range tests {
		if err := tc.f(); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		}
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("failed operations changed the catalog: %v", got)
	}

	if err := s.SwapObjects(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if o, _ := s.Object("a"); o.ID() != b.ID() {
		t.Fatalf("after swap, a has ID %d, want %d", o.ID(), b.ID())
	}
	if err := s.RenameObject(ctx, "a", "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetObjectMeta(ctx, "c", map[string]string{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("names = %v", got)
	}
	o, _ := s.Object("c")
	if v, ok := o.Meta("k"); !ok || v != "v" || o.ElemType() != "int32" {
		t.Fatalf("c = %+v", o.Info())
	}
	if a.Name() != "a" {
		t.Fatal("handles must be snapshots")
	}
	// IDs are never reused.
	d := mustCreateObject(t, s, ObjectSpec{Name: "d", ElemType: "int8"})
	if d.ID() <= b.ID() {
		t.Fatalf("new ID %d reuses an old one", d.ID())
	}
}

func TestReadOnlyAndLocking(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := testCreate(t, dir, 1)
	if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	if _, err := Open(ctx, dir, Options{ReadOnly: true}); !errors.Is(err, ErrLocked) {
		t.Fatalf("reader beside a writer: %v, want ErrLocked", err)
	}
	mustCreateObject(t, s, ObjectSpec{Name: "a", ElemType: "int8", Length: 3})
	s.Close()

	r1, err := Open(ctx, dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := Open(ctx, dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("two readers: %v", err)
	}
	defer r2.Close()
	if _, err := r1.CreateObject(ctx, ObjectSpec{Name: "b", ElemType: "int8"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("create on read-only: %v", err)
	}
	if got := names(r2); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("names = %v", got)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s := testCreate(t, t.TempDir(), 1)
	s.Close()
	if _, err := s.CreateObject(ctx, ObjectSpec{Name: "a", ElemType: "int8"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Object("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("object: %v", err)
	}
	if _, err := s.Info(); !errors.Is(err, ErrClosed) {
		t.Fatalf("info: %v", err)
	}
	if s.Objects() != nil {
		t.Fatal("objects of a closed store")
	}
}

func TestCreateErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := testCreate(t, dir, 2)
	s.Close()
	if _, err := Create(ctx, dir, CreateOptions{NamespaceSize: 8 << 20}); !errors.Is(err, ErrExists) {
		t.Fatalf("create over a store: %v", err)
	}
	tests := []CreateOptions{
		{NamespaceSize: 0},
		{NamespaceSize: 8 << 20, LineSize: 3000},
		{NamespaceSize: 8 << 20, LineSize: 512, LBASize: 4096},
		{NamespaceSize: 8 << 20, Namespaces: 2000},
		{NamespaceSize: 8 << 20, Options: Options{QueueDepth: 100}},
		{NamespaceSize: 64 << 10}, // smaller than two catalog slots
		{NamespaceSize: 8 << 20, Options: Options{Devices: []string{"/dev/null"}}},
	}
	for i, o := range tests {
		d := filepath.Join(t.TempDir(), "s")
		if _, err := Create(ctx, d, o); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: err = %v, want ErrInvalid", i, err)
		}
		if m, _ := filepath.Glob(filepath.Join(d, "*.bam")); len(m) > 0 {
			t.Errorf("case %d: failed Create left %v", i, m)
		}
	}
}

// TestOpenBadInput damages a store in one way at a time and checks that
// Open fails with the right sentinel and names the file and field.
func TestOpenBadInput(t *testing.T) {
	ctx := context.Background()
	other := t.TempDir()
	so := testCreate(t, other, 2)
	so.Close()

	writeAt := func(t *testing.T, p string, off int64, b []byte) {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		err    error
		want   []string
	}{
		{"missing dir", func(t *testing.T, dir string) { os.RemoveAll(dir) }, ErrNotFound, nil},
		{"empty dir", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "ns-000.bam"))
			os.Remove(filepath.Join(dir, "ns-001.bam"))
		}, ErrNotFound, []string{"no store"}},
		{"truncated superblock", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "ns-001.bam"), 100)
		}, ErrCorrupt, []string{"ns-001.bam", "superblock", "length"}},
		{"wrong magic", func(t *testing.T, dir string) {
			writeAt(t, filepath.Join(dir, "ns-000.bam"), 0, []byte("NOTBAM!!"))
		}, ErrCorrupt, []string{"ns-000.bam", "magic"}},
		{"version", func(t *testing.T, dir string) {
			writeAt(t, filepath.Join(dir, "ns-001.bam"), 8, []byte{9})
		}, ErrVersion, []string{"ns-001.bam", "version", "want 1"}},
		{"checksum", func(t *testing.T, dir string) {
			writeAt(t, filepath.Join(dir, "ns-001.bam"), 44, []byte{0, 0x20})
		}, ErrCorrupt, []string{"ns-001.bam", "checksum"}},
		{"mismatched uuid", func(t *testing.T, dir string) {
			b, _ := os.ReadFile(filepath.Join(other, "ns-001.bam"))
			os.WriteFile(filepath.Join(dir, "ns-001.bam"), b, 0o644)
		}, ErrCorrupt, []string{"ns-001.bam", "volume UUID", "as in"}},
		{"missing namespace", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "ns-001.bam"))
		}, ErrCorrupt, []string{"ns-001.bam", "namespace 1", "missing"}},
		{"renamed namespace", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "ns-001.bam"), filepath.Join(dir, "ns-002.bam"))
		}, ErrCorrupt, []string{"ns-002.bam", "namespace index", "file name"}},
		{"truncated data", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "ns-001.bam"), 4<<20)
		}, ErrCorrupt, []string{"ns-001.bam", "capacity"}},
		{"both catalog slots", func(t *testing.T, dir string) {
			writeAt(t, filepath.Join(dir, "ns-000.bam"), 4096+40, []byte{0xff})
			writeAt(t, filepath.Join(dir, "ns-000.bam"), 4096+64<<10+40, []byte{0xff})
		}, ErrCorrupt, []string{"ns-000.bam", "slot A", "slot B", "checksum"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := testCreate(t, dir, 2)
			mustCreateObject(t, s, ObjectSpec{Name: "a", ElemType: "int8", Length: 100})
			mustCreateObject(t, s, ObjectSpec{Name: "b", ElemType: "int8", Length: 100})
			s.Close()
			tc.damage(t, dir)
			s, err := Open(ctx, dir, Options{})
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if errors.Is(tc.err, ErrCorrupt) || errors.Is(tc.err, ErrVersion) {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Errorf("error %v has no *FieldError", err)
				}
			}
		})
	}
}

// TestCatalogTornWrite simulates a crash in the middle of writing the newest
// catalog slot: the previous generation must be used, and the next update
// must overwrite the torn slot, not the good one.
func TestCatalogTornWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := testCreate(t, dir, 2)
	for _, n := range []string{"a", "b", "c"} { // generations 1, 2, 3
		mustCreateObject(t, s, ObjectSpec{Name: n, ElemType: "int16", Length: 1000})
	}
	sb := s.ns[0].sb
	s.Close()
	p := filepath.Join(dir, "ns-000.bam")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Generation 3 is in slot B. Tear it: keep the header and the start of
	// the body, garble the rest as a partially written sector would.
	head := make([]byte, format.CatalogHeaderSize)
	f.ReadAt(head, int64(sb.CatalogB))
	if gen := binary.LittleEndian.Uint64(head[16:]); gen != 3 {
		t.Fatalf("slot B holds generation %d, want 3", gen)
	}
	f.WriteAt([]byte("torn sector torn sector"), int64(sb.CatalogB)+format.CatalogHeaderSize+30)
	f.Close()

	s, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("after torn write: %v, want [a b]", got)
	}
	mustCreateObject(t, s, ObjectSpec{Name: "d", ElemType: "int16", Length: 1000}) // generation 3 again, slot B
	s.Close()
	s, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := names(s); !reflect.DeepEqual(got, []string{"a", "b", "d"}) {
		t.Fatalf("after rewrite: %v, want [a b d]", got)
	}
	// d must not overlap the extents of the lost c (which nobody owns).
	info, _ := s.Info()
	if info.CatalogGeneration != 3 {
		t.Fatalf("generation %d", info.CatalogGeneration)
	}
}

func TestConcurrentLookupsAndUpdates(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, 2, 4096, false)
	defer s.Close()
	mustCreateObject(t, s, ObjectSpec{Name: "fixed", ElemType: "int64", Length: 100})
	done := make(chan struct{})
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				o, err := s.Object("fixed")
				if err != nil {
					errc <- err
					return
				}
				if _, err := o.Locate(99); err != nil {
					errc <- err
					return
				}
				s.Objects()
				s.Info()
			}
		}()
	}
	for i := range 50 {
		name := fmt.Sprintf("o%d", i)
		if _, err := s.CreateObject(ctx, ObjectSpec{Name: name, ElemType: "int8", Length: 10}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.DeleteObject(ctx, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.Objects()); n != 26 {
		t.Fatalf("%d objects, want 26", n)
	}
}

func TestCatalogFull(t *testing.T) {
	ctx := context.Background()
	s, _ := memStore(t, 1, 4096, false) // 32 KiB catalog slots
	defer s.Close()
	big := strings.Repeat("x", 20<<10)
	mustCreateObject(t, s, ObjectSpec{Name: "a", ElemType: "int8", Meta: map[string]string{"schema": big}})
	_, err := s.CreateObject(ctx, ObjectSpec{Name: "b", ElemType: "int8", Meta: map[string]string{"schema": big}})
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "CatalogSize") {
		t.Fatalf("err = %v, want ErrNoSpace about the catalog", err)
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("names = %v", got)
	}
}

func TestDeviceStore(t *testing.T) {
	ctx := context.Background()
	d := t.TempDir()
	var devs []string
	for _, n := range []string{"x", "y", "z"} {
		p := filepath.Join(d, n)
		os.WriteFile(p, nil, 0o644)
		os.Truncate(p, 8<<20)
		devs = append(devs, p)
	}
	s, err := Create(ctx, "", CreateOptions{Options: Options{Devices: devs}, LineSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	mustCreateObject(t, s, ObjectSpec{Name: "v", ElemType: "uint32", Length: 12345})
	s.Close()
	if _, err := Create(ctx, "", CreateOptions{Options: Options{Devices: devs}}); !errors.Is(err, ErrExists) {
		t.Fatalf("create over devices: %v", err)
	}
	// Any order; the superblocks give the indices.
	s, err = Open(ctx, "", Options{Devices: []string{devs[2], devs[0], devs[1]}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(s); !reflect.DeepEqual(got, []string{"v"}) || s.LineSize() != 16<<10 {
		t.Fatalf("names %v, line %d", got, s.LineSize())
	}
	s.Close()
	if _, err := Open(ctx, "", Options{Devices: devs[:2]}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "namespace 2") {
		t.Fatalf("open with a device missing: %v", err)
	}
	s, err = Create(ctx, "", CreateOptions{Options: Options{Devices: devs}, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Objects()) != 0 {
		t.Fatal("overwritten store kept its catalog")
	}
}

func TestCreateObjectAlign(t *testing.T) {
	ctx := context.Background()
	s := testCreate(t, t.TempDir(), 2)
	defer s.Close()
	lba := uint64(s.LBASize())
	mustCreateObject(t, s, ObjectSpec{Name: "small", ElemType: "uint8", Length: 100})
	big := mustCreateObject(t, s, ObjectSpec{Name: "big", ElemType: "uint32", Length: 100000, Align: 64 << 10})
	for _, e := range big.Info().Extents {
		if e.Lines > 0 && e.StartLBA*lba%(64<<10) != 0 {
			t.Errorf("big: extent on namespace %d starts at byte %d, want a multiple of 64 KiB", e.Namespace, e.StartLBA*lba)
		}
	}
	// First fit still uses the space the alignment skipped.
	after := mustCreateObject(t, s, ObjectSpec{Name: "after", ElemType: "uint8", Length: 100})
	for i, e := range after.Info().Extents {
		if b := big.Info().Extents[i]; e.Lines > 0 && b.Lines > 0 && e.StartLBA > b.StartLBA {
			t.Errorf("after: extent on namespace %d at LBA %d, past big's at %d: the gap before big went unused", i, e.StartLBA, b.StartLBA)
		}
	}
	for _, a := range []int{-4096, 1000, 2048, 4096 + 512, 2 << 20} {
		_, err := s.CreateObject(ctx, ObjectSpec{Name: fmt.Sprintf("bad%d", a), ElemType: "uint8", Length: 10, Align: a})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "alignment") {
			t.Errorf("Align %d: error %v, want ErrInvalid about the alignment", a, err)
		}
	}
	// An alignment no free run can satisfy is ErrNoSpace, though the same
	// object fits unaligned.
	huge := ObjectSpec{Name: "huge", ElemType: "uint8", Length: 2 * (7<<20 + 64<<10), Align: 1 << 20}
	if _, err := s.CreateObject(ctx, huge); !errors.Is(err, ErrNoSpace) {
		t.Errorf("huge aligned object: error %v, want ErrNoSpace", err)
	}
	huge.Align = 0
	mustCreateObject(t, s, huge)
}
