package pciebench

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1}, 2},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range tests {
		in := append([]float64(nil), tc.in...)
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("Median reordered its input")
			}
		}
	}
}

// TestMedianProperty: at least half the values are <= the median and at
// least half are >= it.
func TestMedianProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		v := make([]float64, 1+rng.IntN(20))
		for i := range v {
			v[i] = float64(rng.IntN(10))
		}
		m := Median(v)
		le, ge := 0, 0
		for _, x := range v {
			if x <= m {
				le++
			}
			if x >= m {
				ge++
			}
		}
		if 2*le < len(v) || 2*ge < len(v) {
			t.Fatalf("Median(%v) = %v", v, m)
		}
	}
}

func TestFillPatternMatchesKernelsAndChecksum(t *testing.T) {
	for _, n := range []int{0, 8, 8 * 7, 8 * 1001} {
		b := make([]byte, n)
		sum := FillPattern(b, 9)
		var want uint64
		for i := 0; i < n/8; i++ {
			v := binary.LittleEndian.Uint64(b[8*i:])
			if v != kernels.Pattern64(9, uint64(i)) {
				t.Fatalf("n=%d: word %d = %#x", n, i, v)
			}
			want += v
		}
		if sum != want {
			t.Errorf("n=%d: checksum %#x, want %#x", n, sum, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	bad := []Config{{Bytes: 100}, {Bytes: 1 << 20, Block: 100}, {Bytes: 1<<20 + 8}, {Block: 2048}}
	for _, c := range bad {
		if err := c.defaults(); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	c := Config{}
	if err := c.defaults(); err != nil || c.Bytes != 256<<20 || c.Runs != 10 || c.Block != 512 {
		t.Errorf("defaults %+v, %v", c, err)
	}
}

// TestRunWithoutGPU: with no GPU, Run fails cleanly with ErrNoGPU. (On a GPU
// host this test does nothing: measuring is the CLI's job, not a test's.)
func TestRunWithoutGPU(t *testing.T) {
	if cuda.Available() == nil {
		t.Skip("a GPU is present; bam bench pcie measures it")
	}
	_, err := Run(context.Background(), Config{})
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Run without GPU: %v, want ErrNoGPU", err)
	}
}
