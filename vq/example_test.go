package vq_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// A software controller serves one queue pair; the vq client writes a block
// and reads it back.
func Example() {
	ctx := context.Background()
	dma := nvme.NewDMASpace()
	target, err := nvme.NewTarget(nvme.TargetConfig{}, dma)
	if err != nil {
		log.Fatal(err)
	}
	defer target.Close()
	ns, err := nvme.NewMemoryNamespace(512, 64)
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Close()
	if err := target.AddNamespace(1, ns); err != nil {
		log.Fatal(err)
	}
	mem, err := nvme.NewQueuePairMemory(1, 16)
	if err != nil {
		log.Fatal(err)
	}
	if err := target.AddQueuePair(mem); err != nil {
		log.Fatal(err)
	}
	if err := target.Start(ctx); err != nil {
		log.Fatal(err)
	}
	q, err := vq.New(mem, vq.Options{Notify: func() { target.Kick(mem.ID) }})
	if err != nil {
		log.Fatal(err)
	}

	buf := make([]byte, 4096) // one page: a 512-byte block never crosses it
	addr, err := dma.RegisterHost(buf)
	if err != nil {
		log.Fatal(err)
	}
	copy(buf, "hello, block 7")
	w := nvme.ReadWrite(nvme.OpWrite, 1, 7, 1, addr, 0)
	if _, err := q.Submit(ctx, &w); err != nil {
		log.Fatal(err)
	}
	clear(buf)
	r := nvme.ReadWrite(nvme.OpRead, 1, 7, 1, addr, 0)
	if _, err := q.Submit(ctx, &r); err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(buf[:14]))

	// A read past the namespace's end comes back as an NVMe status error.
	bad := nvme.ReadWrite(nvme.OpRead, 1, 1000, 1, addr, 0)
	_, err = q.Submit(ctx, &bad)
	fmt.Println(err != nil, errors.Is(err, nvme.ErrLBAOutOfRange))
	// Output:
	// hello, block 7
	// true true
}
