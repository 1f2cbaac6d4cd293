// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0 and
// 3.0) holding one C-ordered array of a fixed-size little-endian scalar type.
//
// It owns the header: the magic, the version, the header length and the
// Python-literal dictionary with 'descr', 'fortran_order' and 'shape'. The
// body is streamed, never loaded: NewReader returns the header and an
// io.Reader of exactly Header.BodyBytes() bytes that reports a truncated
// file as ErrTruncated; NewWriter checks that exactly that many bytes are
// written.
//
// Supported dtypes are bool, int8..int64, uint8..uint64, float32, float64,
// complex64 and complex128, named by the element type names of the store's
// catalog. Big-endian data, Fortran order, structured and object dtypes are
// refused with ErrUnsupported; malformed headers with ErrFormat.
//
// The package does no I/O of its own beyond the reader and writer it is
// handed and knows nothing about stores.
package npy
