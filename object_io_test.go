package bam

import (
	"context"
	"testing"

	"github.com/bam-go/bam/nvme"
)

// TestEngineObjectLayout: the engine's descriptor maps every line to the
// same (namespace, LBA) as Object.LineAddr, for both layouts.
func TestEngineObjectLayout(t *testing.T) {
	ctx := context.Background()
	var nss []nvme.Namespace
	for range 3 {
		ns, err := nvme.NewMemoryNamespace(512, 4096)
		if err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	s, err := CreateOn(ctx, nss, CreateOptions{LineSize: 1024, LBASize: 512, CatalogSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, lay := range []Layout{LayoutStriped, LayoutReplicated} {
		if _, err := s.CreateObject(ctx, ObjectSpec{Name: "pad", ElemType: "uint8", Length: 5000}); err != nil && lay == LayoutStriped {
			t.Fatal(err)
		}
		o, err := s.CreateObject(ctx, ObjectSpec{Name: "o" + lay.String(), ElemType: "x", ElemSize: 12, Length: 1000, Layout: lay})
		if err != nil {
			t.Fatal(err)
		}
		eo := engineObject(o)
		if err := eo.Validate(); err != nil {
			t.Fatal(err)
		}
		if eo.Lines() != o.Lines() || int(eo.ElemsPerLine()) != o.ElemsPerLine() {
			t.Fatalf("%s: lines %d/%d, per line %d/%d", lay, eo.Lines(), o.Lines(), eo.ElemsPerLine(), o.ElemsPerLine())
		}
		for line := range o.Lines() {
			for r := range o.Replicas() {
				want, err := o.LineAddr(line, r)
				if err != nil {
					t.Fatal(err)
				}
				ns, lba := eo.LineAddr(line, r)
				if ns != want.Namespace || lba != want.LBA {
					t.Fatalf("%s line %d replica %d: engine (%d, %d), store (%d, %d)", lay, line, r, ns, lba, want.Namespace, want.LBA)
				}
			}
		}
	}
}
