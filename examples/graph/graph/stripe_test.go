package graph

import (
	"context"
	"strings"
	"testing"

	"github.com/bam-go/bam"
)

// stripeSpec places the edges for GPU lines other than the store's on a
// one-namespace store, and refuses what the engine could not address.
func TestStripeSpecLineSizes(t *testing.T) {
	ctx := context.Background()
	save := func(t *testing.T, namespaces int) (*bam.Store, *bam.Object) {
		t.Helper()
		s, err := bam.Create(ctx, t.TempDir(), bam.CreateOptions{NamespaceSize: 16 << 20, Namespaces: namespaces, LBASize: 512,
			Options: bam.Options{Engine: bam.EngineCPU}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		el, err := Generate[uint32](ctx, GenOptions{Kind: Uniform, Scale: 10, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Build(ctx, el, BuildOptions{Symmetrize: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := Save(ctx, s, "u10", c, SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		o, err := s.Object(edgesName("u10"))
		if err != nil {
			t.Fatal(err)
		}
		return s, o
	}

	s, o := save(t, 1)
	info := o.Info()
	// Since EdgeAlign, any line up to 64 KiB.
	for _, line := range []int{512, 1024, info.LineSize, 16 << 10, EdgeAlign} {
		spec, err := stripeSpec(o, s, line)
		if err != nil {
			t.Fatalf("line %d: %v", line, err)
		}
		if len(spec.Stripe) != 1 || spec.Len != info.Length || spec.ElemSize != uint64(info.ElemSize) {
			t.Fatalf("line %d: spec %+v", line, spec)
		}
		start := info.Extents[0].StartLBA * uint64(s.LBASize())
		if got := spec.Stripe[0].StartLine * uint64(line); got != start {
			t.Errorf("line %d: object placed at byte %d, want %d", line, got, start)
		}
	}
	for _, line := range []int{256, 1000, 0} {
		if _, err := stripeSpec(o, s, line); err == nil || !strings.Contains(err.Error(), "line size") {
			t.Errorf("line %d: err = %v, want a line size error", line, err)
		}
	}

	s2, o2 := save(t, 2)
	if _, err := stripeSpec(o2, s2, o2.Info().LineSize); err != nil {
		t.Errorf("striped store at its own line size: %v", err)
	}
	if _, err := stripeSpec(o2, s2, 1024); err == nil || !strings.Contains(err.Error(), "striped") {
		t.Errorf("striped store at 1 KiB lines: err = %v, want a striping error", err)
	}

	// CC's options take its longer lines where the store allows them.
	if got := CCOptions(s, "u10", GPUOptions{}).LineSize; got != DefaultCCLineSize {
		t.Errorf("CC's line on one namespace: %d, want %d", got, DefaultCCLineSize)
	}
	if got := CCOptions(s, "u10", GPUOptions{LineSize: 1024}).LineSize; got != 1024 {
		t.Errorf("CC's line when the caller chose 1024: %d", got)
	}
	if got := CCOptions(s2, "u10", GPUOptions{}).LineSize; got != 0 {
		t.Errorf("CC's line on a striped store: %d, want 0 (the store's)", got)
	}
	if got := CCOptions(s, "nosuch", GPUOptions{}).LineSize; got != 0 {
		t.Errorf("CC's line for a missing graph: %d, want 0", got)
	}
}
