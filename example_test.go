package bam_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/bam-go/bam"
)

func ExampleCreate() {
	dir, _ := os.MkdirTemp("", "bam-example")
	defer os.RemoveAll(dir)

	// Two sparse namespace files of 64 MiB each, 4 KiB lines.
	s, err := bam.Create(context.Background(), dir, bam.CreateOptions{Namespaces: 2, NamespaceSize: 64 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	info, _ := s.Info()
	fmt.Println(len(info.Namespaces), "namespaces,", info.LineSize, "byte lines,", info.Objects, "objects")
	// Output: 2 namespaces, 4096 byte lines, 0 objects
}

func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "bam-example")
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, dir, bam.CreateOptions{NamespaceSize: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := s.CreateObject(ctx, bam.ObjectSpec{Name: "ranks", ElemType: "float32", Length: 1000}); err != nil {
		log.Fatal(err)
	}
	s.Close()

	s, err = bam.Open(ctx, dir, bam.Options{ReadOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for _, o := range s.Objects() {
		fmt.Println(o.Name, o.Kind, o.ElemType, o.Length, o.Layout)
	}
	// Output: ranks array float32 1000 striped
}

func ExampleStore_CreateObject() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "bam-example")
	defer os.RemoveAll(dir)
	s, err := bam.Create(ctx, dir, bam.CreateOptions{Namespaces: 4, NamespaceSize: 16 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// 12-byte records: 341 fit in a 4 KiB line, the last 4 bytes of each
	// line are padding, and no record straddles two lines.
	o, err := s.CreateObject(ctx, bam.ObjectSpec{Name: "edges", ElemType: "edge", ElemSize: 12, Length: 10000})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(o.ElemsPerLine(), "per line,", o.Lines(), "lines")
	loc, _ := o.Locate(5000)
	fmt.Printf("element 5000: line %d, byte %d, namespace %d\n", loc.Line, loc.Offset, loc.Namespace)
	// Output:
	// 341 per line, 30 lines
	// element 5000: line 14, byte 2712, namespace 2
}
