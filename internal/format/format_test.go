package format

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func testSuperblock() Superblock {
	return Superblock{
		Version:     Version,
		Flags:       FlagCatalog,
		VolumeUUID:  [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		Index:       0,
		Count:       2,
		LBASize:     512,
		LineSize:    4096,
		CatalogA:    4096,
		CatalogB:    4096 + 1<<20,
		CatalogSize: 1 << 20,
		DataStart:   4096 + 2<<20,
		Capacity:    64 << 20,
		Created:     1700000000123456789,
	}
}

func TestSuperblockRoundTrip(t *testing.T) {
	s := testSuperblock()
	b := s.Encode()
	if len(b) != SuperblockSize {
		t.Fatalf("encoded %d bytes, want %d", len(b), SuperblockSize)
	}
	got, err := DecodeSuperblock(b, "ns-000.bam")
	if err != nil {
		t.Fatal(err)
	}
	if got != s {
		t.Fatalf("round trip: got %+v, want %+v", got, s)
	}
	if !bytes.Equal(got.Encode(), b) {
		t.Fatal("re-encoding differs")
	}
}

func TestSuperblockErrors(t *testing.T) {
	good := testSuperblock()
	tests := []struct {
		name    string
		mutate  func(b []byte) []byte // on encoded bytes
		edit    func(s *Superblock)   // on the struct before encoding
		field   string
		version bool
	}{
		{name: "short", mutate: func(b []byte) []byte { return b[:100] }, field: "length"},
		{name: "magic", mutate: func(b []byte) []byte { b[0] = 'X'; return b }, field: "magic"},
		{name: "version", edit: func(s *Superblock) { s.Version = 9 }, field: "version", version: true},
		{name: "checksum", mutate: func(b []byte) []byte { b[40] ^= 1; return b }, field: "checksum"},
		{name: "reserved bit flip", mutate: func(b []byte) []byte { b[200] ^= 0x80; return b }, field: "checksum"},
		{name: "zero uuid", edit: func(s *Superblock) { s.VolumeUUID = [16]byte{} }, field: "volume UUID"},
		{name: "count", edit: func(s *Superblock) { s.Count = 0 }, field: "namespace count"},
		{name: "index", edit: func(s *Superblock) { s.Index = 2 }, field: "namespace index"},
		{name: "catalog flag off ns0", edit: func(s *Superblock) { s.Flags = 0 }, field: "flags"},
		{name: "catalog flag on ns1", edit: func(s *Superblock) { s.Index = 1 }, field: "flags"},
		{name: "unknown flag", edit: func(s *Superblock) { s.Flags |= 8 }, field: "flags"},
		{name: "lba size", edit: func(s *Superblock) { s.LBASize = 1000 }, field: "LBA size"},
		{name: "line below lba", edit: func(s *Superblock) { s.LBASize = 8192 }, field: "line size"},
		{name: "line too big", edit: func(s *Superblock) { s.LineSize = 128 << 10 }, field: "line size"},
		{name: "catalog size", edit: func(s *Superblock) { s.CatalogSize = 100 }, field: "catalog slot size"},
		{name: "slot A overlaps superblock", edit: func(s *Superblock) { s.CatalogA = 0 }, field: "catalog slot A offset"},
		{name: "slot B", edit: func(s *Superblock) { s.CatalogB += 4096 }, field: "catalog slot B offset"},
		{name: "data start", edit: func(s *Superblock) { s.DataStart += 4096 }, field: "data start"},
		{name: "capacity", edit: func(s *Superblock) { s.Capacity = 4096 }, field: "capacity"},
		{name: "capacity unaligned", edit: func(s *Superblock) { s.Capacity += 512 }, field: "capacity"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			if tc.edit != nil {
				tc.edit(&s)
			}
			b := s.Encode()
			if tc.mutate != nil {
				b = tc.mutate(b)
			}
			_, err := DecodeSuperblock(b, "dir/ns-001.bam")
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want *FieldError", err)
			}
			if fe.Field != tc.field {
				t.Fatalf("field = %q, want %q (err %v)", fe.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), "dir/ns-001.bam") || !strings.Contains(err.Error(), "want") {
				t.Fatalf("error %q does not name the file and the expected value", err)
			}
			wantErr := ErrCorrupt
			if tc.version {
				wantErr = ErrVersion
			}
			if !errors.Is(err, wantErr) {
				t.Fatalf("err = %v, want errors.Is %v", err, wantErr)
			}
		})
	}
}

func testCatalog(rng *rand.Rand, ns uint32, objects int) *Catalog {
	c := &Catalog{Generation: rng.Uint64N(100), Volume: [16]byte{9: 1}, Namespaces: ns, LBASize: 512, NextID: 1}
	next := make([]uint64, ns)
	for i := 0; i < objects; i++ {
		line := uint64(512) << rng.IntN(8)
		es := uint64(1) + rng.Uint64N(line)
		if rng.IntN(2) == 0 {
			es = 1 << rng.IntN(4)
		}
		o := Object{
			ID:       c.NextID,
			Name:     fmt.Sprintf("obj-%03d", i),
			Kind:     Kind(1 + rng.IntN(3)),
			ElemType: "float32",
			ElemSize: es,
			Length:   rng.Uint64N(100000),
			LineSize: line,
			Layout:   Layout(1 + rng.IntN(2)),
			Created:  rng.Int64() - rng.Int64(),
		}
		if rng.IntN(3) == 0 {
			o.Meta = map[string]string{"schema": "k:u64,v:f32", "": "empty key", "x": ""}
		}
		c.NextID++
		lines := ObjectLines(o.Length, o.LineSize, o.ElemSize)
		for k := uint32(0); k < ns; k++ {
			n := ExtentLines(o.Layout, lines, k, ns)
			e := Extent{Lines: n}
			if n > 0 {
				lpl := line / 512
				next[k] = (next[k] + lpl - 1) / lpl * lpl
				e.StartLBA = next[k]
				next[k] += n * lpl
			}
			o.Extents = append(o.Extents, e)
		}
		c.Objects = append(c.Objects, o)
	}
	return c
}

func TestCatalogRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ns := range []uint32{1, 2, 3, 8} {
		for _, n := range []int{0, 1, 5, 50} {
			c := testCatalog(rng, ns, n)
			b, err := c.Encode()
			if err != nil {
				t.Fatal(err)
			}
			b2, _ := c.Clone().Encode()
			if !bytes.Equal(b, b2) {
				t.Fatal("encoding is not deterministic")
			}
			got, err := DecodeCatalogSlot(b, "f", Slot(c.Generation))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
			}
		}
	}
}

func TestCatalogPicksNewestValidSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	older := testCatalog(rng, 2, 3)
	older.Generation = 6
	newer := older.Clone()
	newer.Generation = 7
	newer.Objects = newer.Objects[:2]
	a, _ := older.Encode()
	b, _ := newer.Encode()
	slotA := append(a, make([]byte, 100)...) // slots are larger than their content
	slotB := append(b, make([]byte, 100)...)

	got, err := DecodeCatalog(slotA, slotB, "f")
	if err != nil || got.Generation != 7 {
		t.Fatalf("both valid: got gen %v err %v, want 7", got, err)
	}
	// Torn write of the newer slot: only a prefix reached the disk, the rest
	// still holds zeros (or an older generation's bytes).
	for _, cut := range []int{0, 10, CatalogHeaderSize, len(b) / 2, len(b) - 1} {
		torn := bytes.Repeat([]byte{0x5a}, len(slotB))
		copy(torn, b[:cut])
		got, err := DecodeCatalog(slotA, torn, "f")
		if err != nil || got.Generation != 6 {
			t.Fatalf("torn at %d: got %v err %v, want generation 6", cut, got, err)
		}
	}
	// Generation in the wrong slot is rejected.
	if _, err := DecodeCatalogSlot(slotB, "f", 0); err == nil || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("odd generation in slot A: err = %v", err)
	}
	// Both bad: ErrCorrupt naming file and both fields.
	bad := bytes.Clone(slotA)
	bad[CatalogHeaderSize+1] ^= 0xff
	_, err = DecodeCatalog(bad, make([]byte, 64), "dir/ns-000.bam")
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	for _, want := range []string{"dir/ns-000.bam", "slot A", "checksum", "slot B", "magic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestCatalogValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	base := testCatalog(rng, 2, 3)
	tests := []struct {
		name  string
		edit  func(c *Catalog)
		field string
	}{
		{"unsorted", func(c *Catalog) { c.Objects[0].Name = "zzz" }, "name"},
		{"empty name", func(c *Catalog) { c.Objects[0].Name = "" }, "name"},
		{"control char", func(c *Catalog) { c.Objects[0].Name = "a\nb" }, "name"},
		{"duplicate id", func(c *Catalog) { c.Objects[1].ID = c.Objects[0].ID }, "ID"},
		{"id beyond next", func(c *Catalog) { c.NextID = 1 }, "ID"},
		{"kind", func(c *Catalog) { c.Objects[0].Kind = 9 }, "kind"},
		{"layout", func(c *Catalog) { c.Objects[0].Layout = 0 }, "layout"},
		{"elem size", func(c *Catalog) { c.Objects[0].ElemSize = c.Objects[0].LineSize + 1 }, "element size"},
		{"elem type", func(c *Catalog) { c.Objects[0].ElemType = "" }, "element type"},
		{"line size", func(c *Catalog) { c.Objects[0].LineSize = 3000 }, "line size"},
		{"extent count", func(c *Catalog) { c.Objects[0].Extents = c.Objects[0].Extents[:1] }, "extent count"},
		{"extent lines", func(c *Catalog) { c.Objects[0].Length += c.Objects[0].LineSize * 8 }, "extent 0 lines"},
		{"unaligned", func(c *Catalog) {
			c.Objects[0].LineSize = 4096
			c.Objects[0].ElemSize = 8
			c.Objects[0].Length = 512 * 4
			c.Objects[0].Layout = LayoutStriped
			c.Objects[0].Extents = []Extent{{StartLBA: 3, Lines: 2}, {StartLBA: 8, Lines: 2}}
		}, "extent 0 start LBA"},
		{"namespaces", func(c *Catalog) { c.Namespaces = 0 }, "namespaces"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base.Clone()
			tc.edit(c)
			err := c.Validate("f", "catalog")
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Field, tc.field) {
				t.Fatalf("err = %v, want a FieldError on %q", err, tc.field)
			}
			if _, err := c.Encode(); err == nil {
				t.Fatal("Encode accepted an invalid catalog")
			}
		})
	}
}

func TestGeometry(t *testing.T) {
	tests := []struct {
		line, elem, length, lines uint64
	}{
		{4096, 8, 0, 0},
		{4096, 8, 1, 1},
		{4096, 8, 512, 1},
		{4096, 8, 513, 2},
		{4096, 12, 341, 1}, // 4096/12 = 341 elements, 4 bytes padding
		{4096, 12, 342, 2},
		{4096, 4096, 3, 3},
		{512, 1, 1 << 40, 1 << 31},
	}
	for _, tc := range tests {
		if got := ObjectLines(tc.length, tc.line, tc.elem); got != tc.lines {
			t.Errorf("ObjectLines(%d, %d, %d) = %d, want %d", tc.length, tc.line, tc.elem, got, tc.lines)
		}
	}
	// Striped extents sum to the object's lines and differ by at most one.
	for lines := uint64(0); lines < 40; lines++ {
		for n := uint32(1); n <= 5; n++ {
			var sum uint64
			for k := uint32(0); k < n; k++ {
				sum += ExtentLines(LayoutStriped, lines, k, n)
			}
			if sum != lines {
				t.Fatalf("lines %d over %d namespaces: extents sum to %d", lines, n, sum)
			}
		}
	}
}

func FuzzDecodeSuperblock(f *testing.F) {
	s := testSuperblock()
	f.Add(s.Encode())
	s.Index, s.Flags = 1, 0
	f.Add(s.Encode())
	f.Add([]byte("BAMSTORE"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSuperblock(b, "fuzz")
		if err != nil {
			return
		}
		b2 := s.Encode()
		s2, err := DecodeSuperblock(b2, "fuzz")
		if err != nil || s2 != s {
			t.Fatalf("re-decode: %+v %v, want %+v", s2, err, s)
		}
		// Reserved bytes are ignored, everything else must agree.
		if !bytes.Equal(b2[:96], b[:96]) {
			t.Fatal("re-encoding changed a field")
		}
	})
}

func FuzzDecodeCatalog(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 4} {
		c := testCatalog(rng, uint32(1+n), n)
		b, err := c.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, Slot(c.Generation) == 1)
	}
	f.Fuzz(func(t *testing.T, b []byte, slotB bool) {
		slot := 0
		if slotB {
			slot = 1
		}
		c, err := DecodeCatalogSlot(b, "fuzz", slot)
		if err != nil {
			return
		}
		enc, err := c.Encode()
		if err != nil {
			t.Fatalf("decoded catalog does not encode: %v", err)
		}
		c2, err := DecodeCatalogSlot(enc, "fuzz", slot)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("decode(encode(x)) != x:\n%+v\n%+v", c, c2)
		}
		// Decoding is canonical: the encoding is the input's prefix.
		if !bytes.Equal(enc, b[:len(enc)]) {
			t.Fatal("accepted a non-canonical encoding")
		}
	})
}
