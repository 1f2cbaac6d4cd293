package array_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/array"
)

// An array eight times the cache: writes, gathers and scatters go through
// the cache, and its misses to the store's namespace files.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bam-array-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, dir, bam.CreateOptions{Namespaces: 2, NamespaceSize: 16 << 20,
		Options: bam.Options{CacheBytes: 1 << 20}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	a, err := array.Create[float64](ctx, s, "x", 1<<20, nil) // 8 MiB
	if err != nil {
		log.Fatal(err)
	}
	chunk := make([]float64, 64<<10)
	for start := uint64(0); start < a.Len(); start += uint64(len(chunk)) {
		for i := range chunk {
			chunk[i] = float64(start) + float64(i)
		}
		if err := a.WriteRange(ctx, start, chunk); err != nil {
			log.Fatal(err)
		}
	}

	out := make([]float64, 3)
	if err := a.Gather(ctx, []uint64{7, 1 << 19, 1<<20 - 1}, out); err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)

	if err := a.Scatter(ctx, []uint64{0, 1}, []float64{100, 200}); err != nil {
		log.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil { // durable once it returns
		log.Fatal(err)
	}
	var sum float64
	var rerr error
	for _, v := range a.Range(ctx, 0, 4, &rerr) {
		sum += v
	}
	fmt.Println(sum, rerr)

	_, err = a.Get(ctx, a.Len())
	fmt.Println(errors.Is(err, bam.ErrOutOfRange))
	// Output:
	// [7 524288 1.048575e+06]
	// 305 <nil>
	// true
}
