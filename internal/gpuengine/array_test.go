package gpuengine

import (
	"encoding/binary"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
)

// TestEncodeArg checks the by-value kernel argument of bam::array<T>
// against the descriptor it is built from: the descriptor's address, the
// tag and way record arrays as addresses (metadata region plus offset),
// and the hit path's fields copied word for word.
func TestEncodeArg(t *testing.T) {
	d := make([]byte, ArrayDescBytes)
	put := func(off int, v uint64) { binary.LittleEndian.PutUint64(d[off:], v) }
	const meta = 0x7f0000100000
	put(ArrayCacheMetaOffset, meta)
	put(ArrayCacheDataOffset, 0x7f0040000000)
	put(ArraySetsOffset, 4096)
	put(ArrayWaysOffset, 8)
	put(ArrayLineShiftOffset, 12)
	put(ArrayTagsOffset, 0x10000)
	put(ArrayWaysRecOffset, 0x30000)
	put(ArrayNNSOffset, 1)
	put(ArrayFirstTagOffset, 0x1234)
	put(ArrayElemCountOffset, 1<<30)
	put(ArrayStatsOffset, 0x7f0000900000)
	const desc = cuda.DevicePtr(0x7f0000200000)
	b := encodeArg(desc, d)
	if len(b) != ArrayArgBytes {
		t.Fatalf("argument of %d bytes, want %d", len(b), ArrayArgBytes)
	}
	for _, c := range []struct {
		name string
		off  int
		want uint64
	}{
		{"desc", ArrayArgDescOffset, uint64(desc)},
		{"tags", ArrayArgTagsOffset, meta + 0x10000},
		{"recs", ArrayArgRecsOffset, meta + 0x30000},
		{"data", ArrayArgDataOffset, 0x7f0040000000},
		{"sets", ArrayArgSetsOffset, 4096},
		{"ways", ArrayArgWaysOffset, 8},
		{"nns", ArrayArgNNSOffset, 1},
		{"first tag", ArrayArgFirstTagOffset, 0x1234},
		{"count", ArrayArgElemCountOffset, 1 << 30},
		{"stats", ArrayArgStatsOffset, 0x7f0000900000},
		{"line shift", ArrayArgLineShiftOffset, 12},
	} {
		if got := binary.LittleEndian.Uint64(b[c.off:]); got != c.want {
			t.Errorf("%s at %d = %#x, want %#x", c.name, c.off, got, c.want)
		}
	}
}
