package kv

import (
	"errors"
	"testing"
)

func FuzzDecodeBucket(f *testing.F) {
	g, err := newGeometry(512, 8, 8)
	if err != nil {
		f.Fatal(err)
	}
	empty := make([]byte, 512)
	f.Add(empty)
	line := make([]byte, 512)
	g.initBucket(line)
	g.ctrl(line)[3] = fingerprint(42)
	g.setCounts(line, 1, 1)
	f.Add(append([]byte(nil), line...))
	g.seal(line)
	f.Add(line)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := g.decodeBucket(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if h.slots != g.slots || h.live > h.used || h.used > g.slots {
			t.Fatalf("accepted inconsistent header %+v", h)
		}
		// A valid bucket can be probed for any key without panicking.
		g.probe(b, make([]byte, 8), fingerprint(7))
	})
}

func FuzzDecodeBatch(f *testing.F) {
	rec := putU64(putU64(nil, 3), 4)
	rec = append(rec, 2, 0, 0, 0)
	rec = append(rec, opPut, 1, 2, 3, 4, 9, 9)
	rec = append(rec, opDelete, 5, 6, 7, 8)
	f.Add(rec)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, _, _, err := decodeBatch(b, 4, 2)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		for _, o := range ops {
			if len(o.key) != 4 || (o.kind == opPut && len(o.val) != 2) {
				t.Fatalf("bad op %+v", o)
			}
		}
	})
}

func TestGeometry(t *testing.T) {
	cases := []struct{ line, ks, vs, slots int }{
		{4096, 8, 8, 0},
		{4096, 8, 64, 0},
		{512, 16, 480, 0},
	}
	for _, c := range cases {
		g, err := newGeometry(c.line, c.ks, c.vs)
		if c.line-BucketHeaderSize < 1+c.ks+c.vs+15 {
			if err == nil {
				t.Fatalf("%+v: want an error", c)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if end := g.valOff + g.slots*g.vs; end > c.line || g.keyOff%16 != 0 {
			t.Fatalf("%+v: layout %+v overflows", c, g)
		}
		if g2 := g.slots + 1; BucketHeaderSize+align16(g2)+g2*(c.ks+c.vs) <= c.line {
			t.Fatalf("%+v: %d slots would fit, geometry has %d", c, g2, g.slots)
		}
	}
	if _, err := newGeometry(512, 8, 600); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized value: %v", err)
	}
}
