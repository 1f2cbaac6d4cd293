package prefetch

import "testing"

func TestBytesChangesNothing(t *testing.T) {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i)
	}
	for _, c := range []struct{ n, max int }{{0, 4}, {1, 1}, {1000, 100}, {5000, 100}, {1000, 0}, {-3, 2}} {
		Bytes(b, c.n, c.max)
	}
	Bytes(nil, 10, 10)
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d changed", i)
		}
	}
}
