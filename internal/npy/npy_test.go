package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

// numpySaved is what np.save writes for np.arange(3, dtype='<f4').
func numpySaved() []byte {
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
	b := []byte("\x93NUMPY\x01\x00\x76\x00")
	b = append(b, dict...)
	for len(b) < 127 {
		b = append(b, ' ')
	}
	b = append(b, '\n')
	for _, v := range []float32{0, 1, 2} {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestReadNumPyOutput(t *testing.T) {
	r, err := NewReader(bytes.NewReader(numpySaved()))
	if err != nil {
		t.Fatal(err)
	}
	if r.Dtype.Name != "float32" || !reflect.DeepEqual(r.Shape, []int64{3}) || r.Major != 1 {
		t.Fatalf("header = %+v", r.Header)
	}
	body, err := io.ReadAll(r)
	if err != nil || len(body) != 12 {
		t.Fatalf("body %d bytes, err %v", len(body), err)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(body[8:])); got != 2 {
		t.Fatalf("element 2 = %v", got)
	}
	// The encoder reproduces NumPy's header byte for byte.
	enc, err := EncodeHeader(Header{Dtype: r.Dtype, Shape: []int64{3}})
	if err != nil || !bytes.Equal(enc, numpySaved()[:128]) {
		t.Fatalf("EncodeHeader = %q, %v", enc, err)
	}
}

func TestRoundTrip(t *testing.T) {
	shapes := [][]int64{{}, {0}, {7}, {3, 4}, {2, 3, 5}}
	for _, d := range dtypes {
		for _, shape := range shapes {
			for _, major := range []int{0, 1, 2, 3} {
				h := Header{Major: major, Dtype: d, Shape: shape}
				n, _ := h.BodyBytes()
				body := bytes.Repeat([]byte{0xab}, int(n))
				var buf bytes.Buffer
				w, err := NewWriter(&buf, h)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write(body); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				hdr := buf.Len() - int(n)
				if hdr%64 != 0 {
					t.Fatalf("header of %d bytes is not 64-aligned", hdr)
				}
				r, err := NewReader(&buf)
				if err != nil {
					t.Fatalf("%s %v v%d: %v", d.Name, shape, major, err)
				}
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("body mismatch: %v", err)
				}
				if r.Dtype != d || !reflect.DeepEqual(r.Shape, shape) {
					t.Fatalf("header %+v, want %v %v", r.Header, d, shape)
				}
			}
		}
	}
}

func TestErrors(t *testing.T) {
	hdr := func(dict string) []byte {
		b := []byte("\x93NUMPY\x01\x00")
		b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)))
		return append(b, dict...)
	}
	tests := []struct {
		name string
		in   []byte
		err  error
		msg  string
	}{
		{"empty", nil, ErrTruncated, "magic"},
		{"magic", []byte("PK\x03\x04zipfile!"), ErrFormat, "not a .npy"},
		{"version", []byte("\x93NUMPY\x04\x00\x00\x00"), ErrUnsupported, "version 4.0"},
		{"short header", hdr("{'descr': '<f4'")[:20], ErrTruncated, "header"},
		{"big endian", hdr("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }"), ErrUnsupported, "big-endian"},
		{"fortran", hdr("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }"), ErrUnsupported, "fortran_order"},
		{"float16", hdr("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }"), ErrUnsupported, "<f2"},
		{"object", hdr("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"), ErrUnsupported, "|O"},
		{"structured", hdr("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }"), ErrUnsupported, "structured"},
		{"missing shape", hdr("{'descr': '<i4', 'fortran_order': False}"), ErrFormat, "shape"},
		{"unknown key", hdr("{'descr': '<i4', 'fortran_order': False, 'shape': (), 'x': 1}"), ErrFormat, "unknown key"},
		{"bad tuple", hdr("{'descr': '<i4', 'fortran_order': False, 'shape': (2), }"), ErrFormat, "trailing comma"},
		{"overflow", hdr("{'descr': '<i8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"), ErrFormat, "2^63"},
		{"huge dim", hdr("{'descr': '<i8', 'fortran_order': False, 'shape': (99999999999999999999,), }"), ErrFormat, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.err, tc.msg)
			}
		})
	}
}

func TestTruncatedBody(t *testing.T) {
	b := numpySaved()
	r, err := NewReader(bytes.NewReader(b[:len(b)-3]))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v, want ErrTruncated", err)
	}
	// Extra bytes after the body are left unread.
	src := bytes.NewReader(append(b, "tail"...))
	r, _ = NewReader(src)
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if src.Len() != 4 {
		t.Fatalf("reader consumed past the body: %d bytes left", src.Len())
	}
}

func TestWriterLength(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Header{Dtype: dtypes[1], Shape: []int64{2}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte{1, 2, 3}); err == nil {
		t.Fatal("write past the body accepted")
	}
	w.Write([]byte{1})
	if err := w.Close(); err == nil {
		t.Fatal("Close accepted an incomplete body")
	}
}

func FuzzReadHeader(f *testing.F) {
	f.Add(numpySaved())
	h, _ := EncodeHeader(Header{Major: 3, Dtype: dtypes[4], Shape: []int64{2, 3}})
	f.Add(h)
	f.Add([]byte("\x93NUMPY\x02\x00\x10\x00\x00\x00{'shape':(1,),}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		h.Major = 0
		enc, err := EncodeHeader(h)
		if err != nil {
			t.Fatalf("valid header does not encode: %v", err)
		}
		h2, err := ReadHeader(bytes.NewReader(enc))
		if err != nil {
			t.Fatalf("re-read: %v", err)
		}
		if h2.Dtype != h.Dtype || !reflect.DeepEqual(h2.Shape, h.Shape) {
			t.Fatalf("round trip %+v != %+v", h2, h)
		}
	})
}
