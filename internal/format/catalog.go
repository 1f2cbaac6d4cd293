package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"unicode/utf8"
)

// Catalog slot record. Layout (little-endian):
//
//	off  size  field
//	  0     8  magic "BAMCATLG"
//	  8     4  format version
//	 12     4  body length in bytes
//	 16     8  generation
//	 24     4  CRC32C (Castagnoli) of bytes [0, 24) and of the body
//	 28     4  reserved, zero (included in neither length nor checksum)
//	 32     -  body
//
// The body is a sequence of unsigned LEB128 varints (u), zig-zag varints (i),
// single bytes (b) and strings (s = u length, then the bytes):
//
//	16 bytes volume UUID (equal to the superblocks')
//	u namespaces  u LBA size  u next object ID  u object count
//	per object, in strictly increasing byte order of name:
//	  u ID  s name  b kind  s element type  u element size  u length
//	  u line size  b layout
//	  per namespace k = 0..namespaces-1: u start LBA  u lines
//	  i creation time (Unix nanoseconds)
//	  u metadata count, then per entry in strictly increasing key order: s key  s value
//
// Varints must be minimal; decoding rejects anything that would not
// re-encode to the same bytes.
const (
	CatalogHeaderSize = 32

	MaxNameLen     = 1024
	MaxElemTypeLen = 256
	MaxMetaLen     = 1 << 20
)

// CatalogMagic begins every catalog slot.
var CatalogMagic = [8]byte{'B', 'A', 'M', 'C', 'A', 'T', 'L', 'G'}

// Kind says what an object holds.
type Kind uint8

// Object kinds.
const (
	KindArray Kind = 1 // array.Array[T]
	KindTable Kind = 2 // kv.Table (index, value log, ...)
	KindOther Kind = 3 // anything else a layer stores
)

func (k Kind) String() string {
	switch k {
	case KindArray:
		return "array"
	case KindTable:
		return "table"
	case KindOther:
		return "other"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Layout says how an object's lines are spread over the namespaces.
type Layout uint8

// Layouts.
const (
	LayoutStriped    Layout = 1 // line j on namespace j mod N
	LayoutReplicated Layout = 2 // every line on every namespace
)

func (l Layout) String() string {
	switch l {
	case LayoutStriped:
		return "striped"
	case LayoutReplicated:
		return "replicated"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// Extent is the run of lines an object owns on one namespace.
type Extent struct {
	StartLBA uint64 // first LBA, a multiple of LineSize/LBASize; 0 when Lines is 0
	Lines    uint64
}

// Object is one catalog entry.
type Object struct {
	ID       uint64
	Name     string
	Kind     Kind
	ElemType string // "float32", "uint64", ... or a layer-defined name
	ElemSize uint64 // bytes, 1..LineSize
	Length   uint64 // elements
	LineSize uint64
	Layout   Layout
	Extents  []Extent // one per namespace, index = namespace
	Created  int64    // Unix nanoseconds
	Meta     map[string]string
}

// Catalog is the decoded content of a catalog slot.
type Catalog struct {
	Generation uint64
	Volume     [16]byte // volume UUID; a catalog left by an earlier volume is foreign
	Namespaces uint32
	LBASize    uint64
	NextID     uint64
	Objects    []Object // sorted by Name, names unique
}

// Slot returns the slot (0 = A, 1 = B) that generation gen is written to.
func Slot(gen uint64) int { return int(gen & 1) }

// SlotName returns "A" or "B".
func SlotName(slot int) string { return string(rune('A' + slot&1)) }

// Clone returns a deep copy of c.
func (c *Catalog) Clone() *Catalog {
	d := *c
	d.Objects = make([]Object, len(c.Objects))
	for i, o := range c.Objects {
		d.Objects[i] = o.Clone()
	}
	return &d
}

// Clone returns a deep copy of o.
func (o Object) Clone() Object {
	o.Extents = slices.Clone(o.Extents)
	if o.Meta != nil {
		o.Meta = maps.Clone(o.Meta)
	}
	return o
}

// Find returns the index of the object named name, or -1.
func (c *Catalog) Find(name string) int {
	i, ok := slices.BinarySearchFunc(c.Objects, name, func(o Object, n string) int {
		switch {
		case o.Name < n:
			return -1
		case o.Name > n:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

// Sort orders the objects by name, restoring the catalog's invariant after
// an update.
func (c *Catalog) Sort() {
	slices.SortFunc(c.Objects, func(a, b Object) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
}

// ValidateName checks an object name: 1..MaxNameLen bytes of valid UTF-8
// without NUL or control characters.
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("object name %q: want 1..%d bytes", name, MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("object name %q: not valid UTF-8", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("object name %q: contains control character %U", name, r)
		}
	}
	return nil
}

// Validate checks c for internal consistency: names, kinds, layouts, element
// sizes, and that every extent is line-aligned and exactly as long as the
// object's layout requires. rec names the record in errors ("catalog slot A").
// It does not check extents against namespace capacities or each other; the
// store does that with the superblocks at hand.
func (c *Catalog) Validate(file, rec string) error {
	if c.Namespaces == 0 || c.Namespaces > MaxNamespaces {
		return corrupt(file, rec, "namespaces", fmt.Sprintf("1..%d", MaxNamespaces), c.Namespaces)
	}
	if !isPow2(c.LBASize) || c.LBASize < MinLBASize || c.LBASize > MaxLBASize {
		return corrupt(file, rec, "LBA size", fmt.Sprintf("power of two in [%d, %d]", MinLBASize, MaxLBASize), c.LBASize)
	}
	ids := make(map[uint64]struct{}, len(c.Objects))
	for i := range c.Objects {
		o := &c.Objects[i]
		f := func(field string) string { return fmt.Sprintf("object %d (%q) %s", i, o.Name, field) }
		if err := ValidateName(o.Name); err != nil {
			return corrupt(file, rec, f("name"), "1..1024 bytes of UTF-8 without control characters", fmt.Sprintf("%q", o.Name))
		}
		if i > 0 && c.Objects[i-1].Name >= o.Name {
			return corrupt(file, rec, f("name"), fmt.Sprintf("greater than previous name %q", c.Objects[i-1].Name), fmt.Sprintf("%q", o.Name))
		}
		if o.ID >= c.NextID {
			return corrupt(file, rec, f("ID"), fmt.Sprintf("< next ID %d", c.NextID), o.ID)
		}
		if _, dup := ids[o.ID]; dup {
			return corrupt(file, rec, f("ID"), "unique", o.ID)
		}
		ids[o.ID] = struct{}{}
		if o.Kind < KindArray || o.Kind > KindOther {
			return corrupt(file, rec, f("kind"), "array, table or other", o.Kind)
		}
		if o.ElemType == "" || len(o.ElemType) > MaxElemTypeLen || !utf8.ValidString(o.ElemType) {
			return corrupt(file, rec, f("element type"), fmt.Sprintf("1..%d bytes of UTF-8", MaxElemTypeLen), fmt.Sprintf("%q", o.ElemType))
		}
		if err := ValidateGeometry(c.LBASize, o.LineSize); err != nil {
			return corrupt(file, rec, f("line size"), fmt.Sprintf("power of two in [%d, %d], >= LBA size %d", MinLineSize, MaxLineSize, c.LBASize), o.LineSize)
		}
		if o.ElemSize == 0 || o.ElemSize > o.LineSize {
			return corrupt(file, rec, f("element size"), fmt.Sprintf("1..line size %d", o.LineSize), o.ElemSize)
		}
		if o.Layout != LayoutStriped && o.Layout != LayoutReplicated {
			return corrupt(file, rec, f("layout"), "striped or replicated", o.Layout)
		}
		if len(o.Extents) != int(c.Namespaces) {
			return corrupt(file, rec, f("extent count"), fmt.Sprint(c.Namespaces), len(o.Extents))
		}
		lines := ObjectLines(o.Length, o.LineSize, o.ElemSize)
		lbasPerLine := o.LineSize / c.LBASize
		for k, e := range o.Extents {
			want := ExtentLines(o.Layout, lines, uint32(k), c.Namespaces)
			if e.Lines != want {
				return corrupt(file, rec, f(fmt.Sprintf("extent %d lines", k)), fmt.Sprint(want), e.Lines)
			}
			if e.Lines == 0 && e.StartLBA != 0 {
				return corrupt(file, rec, f(fmt.Sprintf("extent %d start LBA", k)), "0 for an empty extent", e.StartLBA)
			}
			if e.StartLBA%lbasPerLine != 0 {
				return corrupt(file, rec, f(fmt.Sprintf("extent %d start LBA", k)), fmt.Sprintf("multiple of %d (line-aligned)", lbasPerLine), e.StartLBA)
			}
			if e.Lines > (math.MaxUint64-e.StartLBA)/lbasPerLine/c.LBASize {
				return corrupt(file, rec, f(fmt.Sprintf("extent %d lines", k)), "an extent that ends below 2^64 bytes", e.Lines)
			}
		}
		for k, v := range o.Meta {
			if len(k) > MaxMetaLen || len(v) > MaxMetaLen {
				return corrupt(file, rec, f("metadata"), fmt.Sprintf("keys and values of at most %d bytes", MaxMetaLen), fmt.Sprintf("%d-byte entry", len(k)+len(v)))
			}
		}
	}
	return nil
}

// EncodeBody returns the deterministic encoding of c's body (without the slot
// header). c must be valid.
func (c *Catalog) EncodeBody() []byte {
	b := make([]byte, 0, 64+len(c.Objects)*(64+16*int(c.Namespaces)))
	b = append(b, c.Volume[:]...)
	b = binary.AppendUvarint(b, uint64(c.Namespaces))
	b = binary.AppendUvarint(b, c.LBASize)
	b = binary.AppendUvarint(b, c.NextID)
	b = binary.AppendUvarint(b, uint64(len(c.Objects)))
	for i := range c.Objects {
		o := &c.Objects[i]
		b = binary.AppendUvarint(b, o.ID)
		b = appendString(b, o.Name)
		b = append(b, byte(o.Kind))
		b = appendString(b, o.ElemType)
		b = binary.AppendUvarint(b, o.ElemSize)
		b = binary.AppendUvarint(b, o.Length)
		b = binary.AppendUvarint(b, o.LineSize)
		b = append(b, byte(o.Layout))
		for _, e := range o.Extents {
			b = binary.AppendUvarint(b, e.StartLBA)
			b = binary.AppendUvarint(b, e.Lines)
		}
		b = binary.AppendVarint(b, o.Created)
		keys := slices.Sorted(maps.Keys(o.Meta))
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, o.Meta[k])
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Encode validates c and returns its full slot encoding: header then body.
func (c *Catalog) Encode() ([]byte, error) {
	if err := c.Validate("", "catalog"); err != nil {
		return nil, err
	}
	body := c.EncodeBody()
	if uint64(len(body)) > math.MaxUint32 {
		return nil, fmt.Errorf("catalog body of %d bytes exceeds 4 GiB", len(body))
	}
	out := make([]byte, CatalogHeaderSize, CatalogHeaderSize+len(body))
	copy(out[0:8], CatalogMagic[:])
	le := binary.LittleEndian
	le.PutUint32(out[8:], Version)
	le.PutUint32(out[12:], uint32(len(body)))
	le.PutUint64(out[16:], c.Generation)
	crc := crc32Update(Checksum(out[:24]), body)
	le.PutUint32(out[24:], crc)
	return append(out, body...), nil
}

// DecodeCatalogSlot decodes and validates one catalog slot. slot (0 = A,
// 1 = B) is checked against the generation's parity.
func DecodeCatalogSlot(b []byte, file string, slot int) (*Catalog, error) {
	rec := "catalog slot " + SlotName(slot)
	if len(b) < CatalogHeaderSize {
		return nil, corrupt(file, rec, "length", fmt.Sprintf("at least %d bytes", CatalogHeaderSize), fmt.Sprintf("%d bytes", len(b)))
	}
	if [8]byte(b[0:8]) != CatalogMagic {
		return nil, corrupt(file, rec, "magic", fmt.Sprintf("%q", CatalogMagic[:]), fmt.Sprintf("%q", b[0:8]))
	}
	le := binary.LittleEndian
	if v := le.Uint32(b[8:]); v != Version {
		return nil, &FieldError{File: file, Record: rec, Field: "version", Got: fmt.Sprint(v), Want: fmt.Sprint(Version), Err: ErrVersion}
	}
	n := uint64(le.Uint32(b[12:]))
	if n > uint64(len(b)-CatalogHeaderSize) {
		return nil, corrupt(file, rec, "body length", fmt.Sprintf("at most the %d bytes after the header", len(b)-CatalogHeaderSize), n)
	}
	body := b[CatalogHeaderSize : CatalogHeaderSize+int(n)]
	if got, want := le.Uint32(b[24:]), crc32Update(Checksum(b[:24]), body); got != want {
		return nil, corrupt(file, rec, "checksum", fmt.Sprintf("%#08x", want), fmt.Sprintf("%#08x", got))
	}
	gen := le.Uint64(b[16:])
	if Slot(gen) != slot {
		return nil, corrupt(file, rec, "generation", fmt.Sprintf("a generation of parity %d", slot), gen)
	}
	c, err := decodeBody(body, file, rec)
	if err != nil {
		return nil, err
	}
	c.Generation = gen
	if err := c.Validate(file, rec); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeCatalog decodes both slots and returns the valid catalog with the
// highest generation. When neither is valid it returns a *CatalogError.
func DecodeCatalog(slotA, slotB []byte, file string) (*Catalog, error) {
	a, errA := DecodeCatalogSlot(slotA, file, 0)
	b, errB := DecodeCatalogSlot(slotB, file, 1)
	switch {
	case errA == nil && errB == nil:
		if b.Generation > a.Generation {
			return b, nil
		}
		return a, nil
	case errA == nil:
		return a, nil
	case errB == nil:
		return b, nil
	}
	return nil, &CatalogError{File: file, SlotA: errA, SlotB: errB}
}

func crc32Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// decoder reads the body encoding; the first failure sticks.
type decoder struct {
	b    []byte
	off  int
	file string
	rec  string
	err  error
}

func (d *decoder) fail(field, want string, got any) {
	if d.err == nil {
		d.err = corrupt(d.file, d.rec, field, want, got)
	}
}

func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail(field, "a varint", fmt.Sprintf("truncated or overflowing bytes at body offset %d", d.off))
		return 0
	}
	if n != uvarintLen(v) {
		d.fail(field, "a minimal varint", fmt.Sprintf("%d-byte encoding of %d at body offset %d", n, v, d.off))
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint(field string) int64 {
	u := d.uvarint(field)
	// Zig-zag, as binary.AppendVarint writes it.
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) byte1(field string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail(field, "one byte", "end of body")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) str(field string, max uint64) string {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return ""
	}
	if n > max || n > uint64(len(d.b)-d.off) {
		d.fail(field+" length", fmt.Sprintf("at most %d and within the body (%d bytes left)", max, len(d.b)-d.off), n)
		return ""
	}
	s := string(d.b[d.off : d.off+int(n)])
	d.off += int(n)
	return s
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func decodeBody(b []byte, file, rec string) (*Catalog, error) {
	d := &decoder{b: b, file: file, rec: rec}
	c := &Catalog{}
	if len(b) < len(c.Volume) {
		return nil, corrupt(file, rec, "volume UUID", "16 bytes", fmt.Sprintf("%d-byte body", len(b)))
	}
	copy(c.Volume[:], b)
	d.off = len(c.Volume)
	ns := d.uvarint("namespaces")
	if d.err == nil && (ns == 0 || ns > MaxNamespaces) {
		d.fail("namespaces", fmt.Sprintf("1..%d", MaxNamespaces), ns)
	}
	c.Namespaces = uint32(ns)
	c.LBASize = d.uvarint("LBA size")
	c.NextID = d.uvarint("next ID")
	count := d.uvarint("object count")
	// Every object takes at least 9 + 2*namespaces bytes, so count is bounded
	// by the body before anything is allocated.
	if d.err == nil && count > uint64(len(b)-d.off)/(9+2*ns) {
		d.fail("object count", fmt.Sprintf("at most %d for a %d-byte body", uint64(len(b)-d.off)/(9+2*ns), len(b)), count)
	}
	if d.err != nil {
		return nil, d.err
	}
	if count > 0 {
		c.Objects = make([]Object, 0, count)
	}
	for i := uint64(0); i < count && d.err == nil; i++ {
		var o Object
		f := func(field string) string { return fmt.Sprintf("object %d %s", i, field) }
		o.ID = d.uvarint(f("ID"))
		o.Name = d.str(f("name"), MaxNameLen)
		o.Kind = Kind(d.byte1(f("kind")))
		o.ElemType = d.str(f("element type"), MaxElemTypeLen)
		o.ElemSize = d.uvarint(f("element size"))
		o.Length = d.uvarint(f("length"))
		o.LineSize = d.uvarint(f("line size"))
		o.Layout = Layout(d.byte1(f("layout")))
		if d.err != nil {
			break
		}
		o.Extents = make([]Extent, ns)
		for k := range o.Extents {
			o.Extents[k].StartLBA = d.uvarint(f(fmt.Sprintf("extent %d start LBA", k)))
			o.Extents[k].Lines = d.uvarint(f(fmt.Sprintf("extent %d lines", k)))
		}
		o.Created = d.varint(f("creation time"))
		nm := d.uvarint(f("metadata count"))
		if d.err == nil && nm > uint64(len(b)-d.off)/2 {
			d.fail(f("metadata count"), "entries that fit in the body", nm)
		}
		prev := ""
		for j := uint64(0); j < nm && d.err == nil; j++ {
			k := d.str(f("metadata key"), MaxMetaLen)
			v := d.str(f("metadata value"), MaxMetaLen)
			if d.err != nil {
				break
			}
			if j > 0 && k <= prev {
				d.fail(f("metadata key"), fmt.Sprintf("greater than previous key %q", prev), fmt.Sprintf("%q", k))
				break
			}
			prev = k
			if o.Meta == nil {
				o.Meta = make(map[string]string, nm)
			}
			o.Meta[k] = v
		}
		c.Objects = append(c.Objects, o)
	}
	if d.err == nil && d.off != len(b) {
		d.fail("body length", fmt.Sprintf("%d bytes used by the objects", d.off), len(b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return c, nil
}
