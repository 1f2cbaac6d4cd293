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
