package kv_test

import (
	"context"
	"fmt"
	"os"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv"
)

func ExampleBytesTable() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kv-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, dir, bam.CreateOptions{Namespaces: 1, NamespaceSize: 16 << 20, LineSize: 512,
		CatalogSize: 64 << 10, Options: bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	docs, err := kv.CreateBytes[uint64](ctx, s, "docs", &kv.Options{SyncWrites: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	docs.Put(ctx, 1, []byte("short"))
	docs.Put(ctx, 2, []byte("a somewhat longer value, kept in the value log"))
	docs.Delete(ctx, 1)
	if err := docs.Close(ctx); err != nil {
		fmt.Println(err)
		return
	}

	docs, err = kv.OpenBytes[uint64](ctx, s, "docs", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer docs.Close(ctx)
	v, ok, _ := docs.Get(ctx, 2)
	fmt.Printf("%d entries; key 2: %q %v\n", docs.Len(), v, ok)
	_, ok, _ = docs.Get(ctx, 1)
	fmt.Println("key 1 present:", ok)
	// Output:
	// 1 entries; key 2: "a somewhat longer value, kept in the value log" true
	// key 1 present: false
}

func ExampleBytesTable_Compact() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kv-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, dir, bam.CreateOptions{Namespaces: 1, NamespaceSize: 16 << 20, LineSize: 512,
		CatalogSize: 64 << 10, Options: bam.Options{CacheBytes: 256 << 10, Engine: bam.EngineCPU}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	docs, err := kv.CreateBytes[uint64](ctx, s, "docs", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer docs.Close(ctx)
	// Ten versions of each of four documents: nine in ten are dead.
	for version := range 10 {
		for id := range uint64(4) {
			docs.Put(ctx, id, fmt.Appendf(nil, "document %d, version %d", id, version))
		}
	}
	st := docs.ValueLogStats()
	fmt.Printf("before: %d live bytes, %d dead, dead ratio %.2f\n", st.LiveBytes, st.DeadBytes, st.DeadRatio)
	res, err := docs.Compact(ctx, &kv.CompactOptions{MinDeadRatio: 0.5})
	if err != nil {
		fmt.Println(err)
		return
	}
	st = docs.ValueLogStats()
	fmt.Printf("moved %d values, reclaimed %d bytes\n", res.Entries, res.ReclaimedBytes)
	fmt.Printf("after: %d live bytes, %d dead, %d segment\n", st.LiveBytes, st.DeadBytes, st.Segments)
	v, _, _ := docs.Get(ctx, 2)
	fmt.Printf("%s\n", v)
	// Output:
	// before: 180 live bytes, 1620 dead, dead ratio 0.90
	// moved 4 values, reclaimed 1620 bytes
	// after: 180 live bytes, 0 dead, 1 segment
	// document 2, version 9
}
