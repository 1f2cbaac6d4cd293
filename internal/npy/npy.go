package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Errors. Each returned error wraps one of these and says what was wrong.
var (
	// ErrFormat: the bytes are not a well-formed .npy header.
	ErrFormat = errors.New("npy: malformed file")
	// ErrUnsupported: a well-formed file this package does not handle
	// (dtype, byte order, Fortran order, version).
	ErrUnsupported = errors.New("npy: unsupported")
	// ErrTruncated: the file ends inside the header or the body.
	ErrTruncated = errors.New("npy: truncated")
)

// Magic begins every .npy file.
const Magic = "\x93NUMPY"

// MaxHeaderLen bounds the header dictionary this package will read.
const MaxHeaderLen = 1 << 20

// Dtype is a supported scalar element type.
type Dtype struct {
	Name string // catalog element type name: "float32", "uint8", "bool", ...
	Size int    // bytes per element
	char byte   // NumPy kind character: b i u f c
}

// Descr returns the NumPy descr string, e.g. "<f4" or "|u1".
func (d Dtype) Descr() string {
	if d.Size == 1 {
		return "|" + string(d.char) + "1"
	}
	return "<" + string(d.char) + strconv.Itoa(d.Size)
}

var dtypes = []Dtype{
	{"bool", 1, 'b'},
	{"int8", 1, 'i'}, {"int16", 2, 'i'}, {"int32", 4, 'i'}, {"int64", 8, 'i'},
	{"uint8", 1, 'u'}, {"uint16", 2, 'u'}, {"uint32", 4, 'u'}, {"uint64", 8, 'u'},
	{"float32", 4, 'f'}, {"float64", 8, 'f'},
	{"complex64", 8, 'c'}, {"complex128", 16, 'c'},
}

// DtypeByName returns the dtype with catalog element type name, e.g. "int64".
func DtypeByName(name string) (Dtype, bool) {
	for _, d := range dtypes {
		if d.Name == name {
			return d, true
		}
	}
	return Dtype{}, false
}

// ParseDescr maps a NumPy descr string to a Dtype.
func ParseDescr(descr string) (Dtype, error) {
	if len(descr) < 3 {
		return Dtype{}, fmt.Errorf("%w: dtype %q", ErrUnsupported, descr)
	}
	order, char, sizeStr := descr[0], descr[1], descr[2:]
	size, err := strconv.Atoi(sizeStr)
	if err != nil || size <= 0 {
		return Dtype{}, fmt.Errorf("%w: dtype %q", ErrUnsupported, descr)
	}
	switch order {
	case '<', '|', '=':
	case '>':
		if size != 1 {
			return Dtype{}, fmt.Errorf("%w: dtype %q is big-endian; convert with arr.astype(arr.dtype.newbyteorder('<'))", ErrUnsupported, descr)
		}
	default:
		return Dtype{}, fmt.Errorf("%w: dtype %q: unknown byte order %q", ErrUnsupported, descr, order)
	}
	if char == '?' {
		char = 'b'
	}
	for _, d := range dtypes {
		if d.char == char && d.Size == size {
			return d, nil
		}
	}
	return Dtype{}, fmt.Errorf("%w: dtype %q (supported: bool, int8..int64, uint8..uint64, float32, float64, complex64, complex128)", ErrUnsupported, descr)
}

// Header is the decoded .npy header.
type Header struct {
	Major, Minor int // format version read (or to write; 0 = choose)
	Dtype        Dtype
	Shape        []int64 // empty for a scalar
}

// Elements is the product of the shape, or an error when it overflows.
func (h *Header) Elements() (int64, error) {
	n := int64(1)
	for _, d := range h.Shape {
		if d < 0 {
			return 0, fmt.Errorf("%w: negative dimension %d in shape %v", ErrFormat, d, h.Shape)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("%w: shape %v has more than 2^63 elements", ErrFormat, h.Shape)
		}
		n = int64(lo)
	}
	return n, nil
}

// BodyBytes is Elements() * Dtype.Size, or an error when it overflows.
func (h *Header) BodyBytes() (int64, error) {
	n, err := h.Elements()
	if err != nil {
		return 0, err
	}
	if h.Dtype.Size <= 0 {
		return 0, fmt.Errorf("%w: dtype with size %d", ErrFormat, h.Dtype.Size)
	}
	if n > math.MaxInt64/int64(h.Dtype.Size) {
		return 0, fmt.Errorf("%w: shape %v of %s is more than 2^63 bytes", ErrFormat, h.Shape, h.Dtype.Name)
	}
	return n * int64(h.Dtype.Size), nil
}

// ReadHeader reads the magic, version and header dictionary from r, leaving r
// at the first byte of the body.
func ReadHeader(r io.Reader) (Header, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Header{}, readErr("magic and version", err)
	}
	if string(pre[:6]) != Magic {
		return Header{}, fmt.Errorf("%w: magic %q, want %q (not a .npy file)", ErrFormat, pre[:6], Magic)
	}
	h := Header{Major: int(pre[6]), Minor: int(pre[7])}
	var hlen int
	switch h.Major {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Header{}, readErr("header length", err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Header{}, readErr("header length", err)
		}
		n := binary.LittleEndian.Uint32(b[:])
		if n > MaxHeaderLen {
			return Header{}, fmt.Errorf("%w: header length %d exceeds %d", ErrFormat, n, MaxHeaderLen)
		}
		hlen = int(n)
	default:
		return Header{}, fmt.Errorf("%w: format version %d.%d (want 1.0, 2.0 or 3.0)", ErrUnsupported, h.Major, h.Minor)
	}
	buf := make([]byte, hlen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return Header{}, readErr(fmt.Sprintf("%d-byte header", hlen), err)
	}
	text := string(buf)
	if h.Major < 3 {
		for i := 0; i < len(text); i++ {
			if text[i] >= 0x80 {
				return Header{}, fmt.Errorf("%w: non-ASCII byte in a version %d.%d header", ErrFormat, h.Major, h.Minor)
			}
		}
	}
	if err := parseDict(text, &h); err != nil {
		return Header{}, err
	}
	if _, err := h.BodyBytes(); err != nil {
		return Header{}, err
	}
	return h, nil
}

func readErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: file ends inside the %s", ErrTruncated, what)
	}
	return fmt.Errorf("npy: reading %s: %w", what, err)
}

// EncodeHeader returns the magic, version, length and padded dictionary for
// h. The total is a multiple of 64 bytes, as NumPy writes it. Version 1.0 is
// used unless the dictionary needs more than 65535 bytes (then 2.0), or h
// names a version.
func EncodeHeader(h Header) ([]byte, error) {
	if _, ok := DtypeByName(h.Dtype.Name); !ok {
		return nil, fmt.Errorf("%w: element type %q", ErrUnsupported, h.Dtype.Name)
	}
	if _, err := h.BodyBytes(); err != nil {
		return nil, err
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "{'descr': '%s', 'fortran_order': False, 'shape': (", h.Dtype.Descr())
	for i, d := range h.Shape {
		if i > 0 {
			sb.WriteString(" ")
		}
		sb.WriteString(strconv.FormatInt(d, 10))
		sb.WriteString(",")
	}
	if len(h.Shape) > 1 {
		// NumPy writes (3, 4) not (3, 4,); only 1-tuples carry the comma.
		s := strings.TrimSuffix(sb.String(), ",")
		sb.Reset()
		sb.WriteString(s)
	}
	sb.WriteString("), }")
	dict := sb.String()
	major := h.Major
	if major == 0 {
		major = 1
		if len(dict)+1+10 > math.MaxUint16 {
			major = 2
		}
	}
	pre := 10
	if major != 1 {
		pre = 12
	}
	if major < 1 || major > 3 {
		return nil, fmt.Errorf("%w: format version %d", ErrUnsupported, major)
	}
	total := (pre + len(dict) + 1 + 63) / 64 * 64
	hlen := total - pre
	if major == 1 && hlen > math.MaxUint16 {
		return nil, fmt.Errorf("%w: header of %d bytes does not fit version 1.0", ErrUnsupported, hlen)
	}
	out := make([]byte, 0, total)
	out = append(out, Magic...)
	out = append(out, byte(major), 0)
	if major == 1 {
		out = binary.LittleEndian.AppendUint16(out, uint16(hlen))
	} else {
		out = binary.LittleEndian.AppendUint32(out, uint32(hlen))
	}
	out = append(out, dict...)
	for len(out) < total-1 {
		out = append(out, ' ')
	}
	return append(out, '\n'), nil
}

// Reader streams the body of a .npy file.
type Reader struct {
	Header
	r    io.Reader
	left int64
}

// NewReader reads the header from r and returns a Reader of the body.
func NewReader(r io.Reader) (*Reader, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	n, err := h.BodyBytes()
	if err != nil {
		return nil, err
	}
	return &Reader{Header: h, r: r, left: n}, nil
}

// Remaining is the number of body bytes not yet read.
func (r *Reader) Remaining() int64 { return r.left }

// Read reads body bytes. It returns io.EOF after exactly BodyBytes bytes and
// an error wrapping ErrTruncated if the underlying reader ends before.
// Bytes after the body are not read.
func (r *Reader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.left -= int64(n)
	if err == io.EOF {
		if r.left > 0 {
			return n, fmt.Errorf("%w: body ends %d bytes early", ErrTruncated, r.left)
		}
		err = nil
	}
	return n, err
}

// Writer writes a .npy file: the header at creation, then exactly
// BodyBytes of body.
type Writer struct {
	w    io.Writer
	left int64
}

// NewWriter writes h's header to w and returns a Writer for the body.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	b, err := EncodeHeader(h)
	if err != nil {
		return nil, err
	}
	n, _ := h.BodyBytes()
	if _, err := w.Write(b); err != nil {
		return nil, fmt.Errorf("npy: writing header: %w", err)
	}
	return &Writer{w: w, left: n}, nil
}

// Write writes body bytes; writing past the body is an error.
func (w *Writer) Write(p []byte) (int, error) {
	if int64(len(p)) > w.left {
		return 0, fmt.Errorf("npy: write of %d bytes past the end of the body (%d left)", len(p), w.left)
	}
	n, err := w.w.Write(p)
	w.left -= int64(n)
	return n, err
}

// Close reports an error if the body is incomplete. It does not close the
// underlying writer.
func (w *Writer) Close() error {
	if w.left != 0 {
		return fmt.Errorf("npy: body incomplete: %d bytes not written", w.left)
	}
	return nil
}
