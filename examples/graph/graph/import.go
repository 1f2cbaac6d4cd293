package graph

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Format is an input format of Import.
type Format string

// Input formats.
const (
	FormatSNAP  Format = "snap"  // text edge list: "u v [w]" per line, '#' or '%' comments
	FormatMTX   Format = "mtx"   // Matrix Market coordinate file
	FormatBEL   Format = "bel"   // EMOGI/BaM binary CSR: FILE.col, FILE.dst [, FILE.val]
	FormatRaw32 Format = "raw32" // little-endian uint32 pairs
	FormatRaw64 Format = "raw64" // little-endian uint64 pairs
)

// Imported is an edge list read from a file, with what the file says about
// itself.
type Imported struct {
	Edges *EdgeList[uint64]
	// Undirected is set when the file declares the graph symmetric (Matrix
	// Market "symmetric"), so only one direction of each edge was stored.
	Undirected bool
}

// lineError formats a parse error at a line.
func lineError(line int, format string, a ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrFormat, line, fmt.Sprintf(format, a...))
}

// fields splits b at runs of ASCII white space into at most len(dst)
// fields and returns how many there were (possibly more than len(dst)).
func fields(b []byte, dst [][]byte) int {
	n := 0
	i := 0
	for {
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		if i == len(b) {
			return n
		}
		j := i
		for j < len(b) && !isSpace(b[j]) {
			j++
		}
		if n < len(dst) {
			dst[n] = b[i:j]
		}
		n++
		i = j
	}
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n'
}

func parseID(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// maxImportID bounds vertex ids so that N = max id + 1 fits.
const maxImportID = 1<<62 - 1

// ReadSNAP reads a SNAP-style text edge list: one edge "u v" or "u v w" per
// line, fields separated by any white space, lines starting with '#' or
// '%' and blank lines ignored. Vertex ids are used as they are (N is the
// largest id plus one); weights are kept when every edge has one. n, when
// positive, is the vertex count, and larger ids are an error.
func ReadSNAP(r io.Reader, n uint64) (*Imported, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	el := &EdgeList[uint64]{}
	var f [3][]byte
	weighted := -1 // unknown
	var maxID uint64
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		k := fields(b, f[:])
		if k == 0 || f[0][0] == '#' || f[0][0] == '%' {
			continue
		}
		if k != 2 && k != 3 {
			return nil, lineError(line, "%d fields, want \"u v\" or \"u v w\"", k)
		}
		if weighted == -1 {
			weighted = k - 2
		} else if weighted != k-2 {
			return nil, lineError(line, "%d fields, but earlier lines had %d", k, weighted+2)
		}
		u, ok1 := parseID(f[0])
		v, ok2 := parseID(f[1])
		if !ok1 || !ok2 {
			return nil, lineError(line, "vertex ids %q %q are not non-negative integers", f[0], f[1])
		}
		if u > maxImportID || v > maxImportID {
			return nil, lineError(line, "vertex id out of range")
		}
		if n > 0 && (u >= n || v >= n) {
			return nil, lineError(line, "edge (%d, %d) names a vertex outside [0, %d)", u, v, n)
		}
		maxID = max(maxID, u, v)
		el.Src = append(el.Src, u)
		el.Dst = append(el.Dst, v)
		if k == 3 {
			w, err := strconv.ParseFloat(string(f[2]), 32)
			if err != nil {
				return nil, lineError(line, "weight %q: %v", f[2], err)
			}
			el.W = append(el.W, float32(w))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, lineError(line+1, "line longer than 1 MiB")
		}
		return nil, fmt.Errorf("graph: read edge list: %w", err)
	}
	el.N = n
	if n == 0 && len(el.Src) > 0 {
		el.N = maxID + 1
	}
	return &Imported{Edges: el}, nil
}

// ReadMatrixMarket reads a Matrix Market coordinate file ("%%MatrixMarket
// matrix coordinate {pattern|integer|real} {general|symmetric|
// skew-symmetric}"). Entry (i, j) is the edge i-1 -> j-1; values become
// weights (pattern files have none). The vertex count is max(rows, cols).
// The entry count on the size line must match the entries present.
func ReadMatrixMarket(r io.Reader) (*Imported, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("graph: read matrix market: %w", err)
		}
		return nil, fmt.Errorf("%w: empty Matrix Market file", ErrFormat)
	}
	line++
	hdr := strings.Fields(strings.ToLower(sc.Text()))
	if len(hdr) != 5 || hdr[0] != "%%matrixmarket" || hdr[1] != "matrix" {
		return nil, lineError(1, "header %q: want \"%%%%MatrixMarket matrix coordinate <field> <symmetry>\"", sc.Text())
	}
	if hdr[2] != "coordinate" {
		return nil, lineError(1, "format %q: only coordinate (sparse) matrices are graphs", hdr[2])
	}
	field, sym := hdr[3], hdr[4]
	switch field {
	case "pattern", "integer", "real", "double":
	default:
		return nil, lineError(1, "field %q: want pattern, integer or real", field)
	}
	switch sym {
	case "general", "symmetric", "skew-symmetric":
	default:
		return nil, lineError(1, "symmetry %q: want general, symmetric or skew-symmetric", sym)
	}
	want := 3
	if field == "pattern" {
		want = 2
	}
	var rows, cols, nnz uint64
	sized := false
	el := &EdgeList[uint64]{}
	var f [4][]byte
	var count uint64
	for sc.Scan() {
		line++
		b := sc.Bytes()
		k := fields(b, f[:])
		if k == 0 || f[0][0] == '%' {
			continue
		}
		if !sized {
			if k != 3 {
				return nil, lineError(line, "size line has %d fields, want \"rows cols entries\"", k)
			}
			var ok [3]bool
			rows, ok[0] = parseID(f[0])
			cols, ok[1] = parseID(f[1])
			nnz, ok[2] = parseID(f[2])
			if !ok[0] || !ok[1] || !ok[2] || rows > maxImportID || cols > maxImportID || nnz > 1<<40 {
				return nil, lineError(line, "bad size line %q", b)
			}
			sized = true
			el.Src = make([]uint64, 0, min(nnz, 1<<24))
			el.Dst = make([]uint64, 0, min(nnz, 1<<24))
			continue
		}
		if k != want {
			return nil, lineError(line, "%d fields, want %d for a %s matrix", k, want, field)
		}
		if count == nnz {
			return nil, lineError(line, "more entries than the %d the size line declares", nnz)
		}
		i, ok1 := parseID(f[0])
		j, ok2 := parseID(f[1])
		if !ok1 || !ok2 || i < 1 || j < 1 || i > rows || j > cols {
			return nil, lineError(line, "entry (%s, %s) outside the %dx%d matrix (indices are 1-based)", f[0], f[1], rows, cols)
		}
		el.Src = append(el.Src, i-1)
		el.Dst = append(el.Dst, j-1)
		if want == 3 {
			w, err := strconv.ParseFloat(string(f[2]), 32)
			if err != nil {
				return nil, lineError(line, "value %q: %v", f[2], err)
			}
			el.W = append(el.W, float32(w))
		}
		count++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("graph: read matrix market: %w", err)
	}
	if !sized {
		return nil, fmt.Errorf("%w: Matrix Market file has no size line", ErrFormat)
	}
	if count != nnz {
		return nil, fmt.Errorf("%w: Matrix Market size line declares %d entries, file has %d (truncated?)", ErrFormat, nnz, count)
	}
	el.N = max(rows, cols)
	return &Imported{Edges: el, Undirected: sym != "general"}, nil
}

// ReadRawEdges reads little-endian (src, dst) pairs of width 4 or 8 bytes
// each. n, when positive, is the vertex count; otherwise it is the largest
// id plus one.
func ReadRawEdges(r io.Reader, width int, n uint64) (*Imported, error) {
	if width != 4 && width != 8 {
		return nil, fmt.Errorf("graph: raw edge width %d: want 4 or 8", width)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	el := &EdgeList[uint64]{}
	buf := make([]byte, 2*width)
	var maxID uint64
	for i := 0; ; i++ {
		k, err := io.ReadFull(br, buf)
		if err == io.EOF {
			break
		}
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: raw edge list truncated: %d trailing bytes after %d edges (pairs of %d-byte ids)", ErrFormat, k, i, width)
		}
		if err != nil {
			return nil, fmt.Errorf("graph: read raw edges: %w", err)
		}
		var u, v uint64
		if width == 4 {
			u, v = uint64(binary.LittleEndian.Uint32(buf)), uint64(binary.LittleEndian.Uint32(buf[4:]))
		} else {
			u, v = binary.LittleEndian.Uint64(buf), binary.LittleEndian.Uint64(buf[8:])
		}
		if u > maxImportID || v > maxImportID || (n > 0 && (u >= n || v >= n)) {
			return nil, fmt.Errorf("%w: raw edge %d (%d, %d) names a vertex out of range", ErrFormat, i, u, v)
		}
		maxID = max(maxID, u, v)
		el.Src = append(el.Src, u)
		el.Dst = append(el.Dst, v)
	}
	el.N = n
	if n == 0 && len(el.Src) > 0 {
		el.N = maxID + 1
	}
	return &Imported{Edges: el}, nil
}

// belHeader is the 16-byte header of .bel files: a count and a word the
// writers leave zero (some write the element type).
const belHeader = 16

// ReadBEL reads an EMOGI/BaM binary CSR: col holds a 16-byte header (the
// number of offsets, then a reserved word) and that many little-endian
// uint64 offsets; dst a 16-byte header (the edge count) and the uint64
// edges; val, when not nil, a 16-byte header (the edge count) and one
// uint32 weight per edge. Files whose col header counts vertices rather
// than offsets (one offset more than declared) are accepted too.
func ReadBEL(col, dst, val io.Reader) (*CSR[uint64], error) {
	cb, err := io.ReadAll(col)
	if err != nil {
		return nil, fmt.Errorf("graph: read .col: %w", err)
	}
	db, err := io.ReadAll(dst)
	if err != nil {
		return nil, fmt.Errorf("graph: read .dst: %w", err)
	}
	if len(cb) < belHeader || len(db) < belHeader {
		return nil, fmt.Errorf("%w: .bel file shorter than its 16-byte header (.col %d bytes, .dst %d bytes)", ErrFormat, len(cb), len(db))
	}
	nOff := binary.LittleEndian.Uint64(cb)
	have := uint64(len(cb)-belHeader) / 8
	if (len(cb)-belHeader)%8 != 0 {
		return nil, fmt.Errorf("%w: .col body of %d bytes is not a whole number of uint64 offsets", ErrFormat, len(cb)-belHeader)
	}
	switch {
	case have == nOff && nOff >= 1:
	case have == nOff+1:
		nOff = have
	default:
		return nil, fmt.Errorf("%w: .col header declares %d offsets, file holds %d (truncated or wrong header)", ErrFormat, nOff, have)
	}
	m := binary.LittleEndian.Uint64(db)
	if (len(db)-belHeader)%8 != 0 || uint64(len(db)-belHeader)/8 != m {
		return nil, fmt.Errorf("%w: .dst header declares %d edges, file holds %d bytes of them (truncated or wrong header)", ErrFormat, m, len(db)-belHeader)
	}
	g := &CSR[uint64]{N: nOff - 1, Offsets: make([]uint64, nOff), Edges: make([]uint64, m), Directed: true}
	for i := range g.Offsets {
		g.Offsets[i] = binary.LittleEndian.Uint64(cb[belHeader+8*i:])
	}
	for i := range g.Edges {
		g.Edges[i] = binary.LittleEndian.Uint64(db[belHeader+8*i:])
	}
	if val != nil {
		vb, err := io.ReadAll(val)
		if err != nil {
			return nil, fmt.Errorf("graph: read .val: %w", err)
		}
		if len(vb) < belHeader || binary.LittleEndian.Uint64(vb) != m || uint64(len(vb)-belHeader) != 4*m {
			return nil, fmt.Errorf("%w: .val must hold a 16-byte header with the edge count %d and %d uint32 weights (%d bytes)", ErrFormat, m, m, len(vb))
		}
		g.Weights = make([]float32, m)
		for i := range g.Weights {
			g.Weights[i] = float32(binary.LittleEndian.Uint32(vb[belHeader+4*i:]))
		}
	}
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("graph: .bel: %w", err)
	}
	return g, nil
}

// WriteBEL writes g in the .bel layout ReadBEL reads (for exchanging
// graphs with EMOGI and BaM). val may be nil; it is written only when g
// has weights.
func WriteBEL[V VertexID](g *CSR[V], col, dst, val io.Writer) error {
	word := func(w io.Writer, vs ...uint64) error {
		b := make([]byte, 8*len(vs))
		for i, v := range vs {
			binary.LittleEndian.PutUint64(b[8*i:], v)
		}
		_, err := w.Write(b)
		return err
	}
	bw := bufio.NewWriterSize(col, 1<<20)
	if err := word(bw, uint64(len(g.Offsets)), 0); err != nil {
		return err
	}
	if err := word(bw, g.Offsets...); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	bw = bufio.NewWriterSize(dst, 1<<20)
	if err := word(bw, uint64(len(g.Edges)), 0); err != nil {
		return err
	}
	for _, e := range g.Edges {
		if err := word(bw, uint64(e)); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if val == nil || g.Weights == nil {
		return nil
	}
	var b bytes.Buffer
	_ = word(&b, uint64(len(g.Edges)), 0)
	for _, w := range g.Weights {
		_ = binary.Write(&b, binary.LittleEndian, uint32(w))
	}
	_, err := val.Write(b.Bytes())
	return err
}

// NarrowCSR converts a 64-bit CSR to 32-bit ids; it fails when the vertex
// count needs 64 bits.
func NarrowCSR(g *CSR[uint64]) (*CSR[uint32], error) {
	if Wide(g.N) {
		return nil, fmt.Errorf("graph: %d vertices need 64-bit ids", g.N)
	}
	out := &CSR[uint32]{N: g.N, Offsets: g.Offsets, Edges: make([]uint32, len(g.Edges)), Weights: g.Weights, Directed: g.Directed}
	for i, e := range g.Edges {
		out.Edges[i] = uint32(e)
	}
	return out, nil
}

// EdgeListOf returns the edges of g as an edge list (to rebuild it with
// other options).
func EdgeListOf[V VertexID](g *CSR[V]) *EdgeList[V] {
	el := &EdgeList[V]{N: g.N, Src: make([]V, len(g.Edges)), Dst: g.Edges, W: g.Weights}
	for v := uint64(0); v < g.N; v++ {
		for i := g.Offsets[v]; i < g.Offsets[v+1]; i++ {
			el.Src[i] = V(v)
		}
	}
	return el
}
