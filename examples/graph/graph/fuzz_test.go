package graph

import (
	"bytes"
	"testing"
)

// The importers never panic, and what they accept builds into a valid CSR.

func FuzzReadSNAP(f *testing.F) {
	f.Add([]byte(snapFixture))
	f.Add([]byte("0 1 2.5\n1 2 0.5\n"))
	f.Add([]byte("# only a comment\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := ReadSNAP(bytes.NewReader(b), 0)
		if err != nil || im.Edges.N > 1<<16 {
			return
		}
		if _, err := Build(t.Context(), im.Edges, BuildOptions{Symmetrize: true}); err != nil {
			t.Fatalf("accepted input fails to build: %v", err)
		}
	})
}

func FuzzReadMatrixMarket(f *testing.F) {
	f.Add([]byte(mtxFixture))
	f.Add([]byte("%%MatrixMarket matrix coordinate real general\n3 4 2\n1 4 2.5\n3 1 -1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := ReadMatrixMarket(bytes.NewReader(b))
		if err != nil || im.Edges.N > 1<<16 {
			return
		}
		if _, err := Build(t.Context(), im.Edges, BuildOptions{Symmetrize: im.Undirected}); err != nil {
			t.Fatalf("accepted input fails to build: %v", err)
		}
	})
}

func FuzzReadBEL(f *testing.F) {
	g, _ := Build(f.Context(), edgeList(4, 0, 1, 1, 2, 3, 0), BuildOptions{})
	var col, dst bytes.Buffer
	if err := WriteBEL(g, &col, &dst, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(col.Bytes(), dst.Bytes())
	f.Fuzz(func(t *testing.T, c, d []byte) {
		h, err := ReadBEL(bytes.NewReader(c), bytes.NewReader(d), nil)
		if err != nil {
			return
		}
		if err := h.Check(); err != nil {
			t.Fatalf("accepted .bel fails its check: %v", err)
		}
	})
}

func FuzzReadRawEdges(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 3, 0, 0, 0}, uint8(4))
	f.Fuzz(func(t *testing.T, b []byte, w uint8) {
		width := 4 + 4*int(w%2)
		im, err := ReadRawEdges(bytes.NewReader(b), width, 0)
		if err != nil {
			return
		}
		if err := im.Edges.Check(); err != nil {
			t.Fatalf("accepted input fails its check: %v", err)
		}
	})
}
