package kv

import (
	"context"
	"errors"
	"testing"
)

// OpenRaw must refuse a bytes table: its values are value-log pointers, and
// raw writes would bypass the log.
func TestOpenRawRefusesBytesTable(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, t.TempDir(), 512)
	b, err := CreateBytes[uint64](ctx, s, "docs", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, 7, []byte("value")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRaw(ctx, s, "docs", nil); !errors.Is(err, ErrTypeMismatch) {
		t.Fatalf("OpenRaw on a bytes table: err = %v, want ErrTypeMismatch", err)
	}
	v, err := VariantOf(s, "docs")
	if err != nil || v != VariantBytes {
		t.Fatalf("VariantOf = %q, %v; want %q", v, err, VariantBytes)
	}
}
