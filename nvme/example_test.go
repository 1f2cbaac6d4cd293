package nvme_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bam-go/bam/nvme"
)

// Example drives a Target by hand: one queue pair, a memory namespace and a
// host buffer, a Write then a Read of the same block.
func Example() {
	ns, _ := nvme.NewMemoryNamespace(512, 1024)
	dma := nvme.NewDMASpace()
	target, _ := nvme.NewTarget(nvme.TargetConfig{Workers: 1}, dma)
	_ = target.AddNamespace(1, ns)
	qp, _ := nvme.NewQueuePairMemory(1, 4)
	_ = target.AddQueuePair(qp)
	_ = target.Start(context.Background())
	defer target.Close()

	buf := make([]byte, 512)
	addr, _ := dma.RegisterHost(buf) // the DMA address of buf
	copy(buf, "hello, block 7")

	var sqTail, cqHead uint32
	phase := true
	run := func(op nvme.Opcode, cid uint16) nvme.Completion {
		cmd := nvme.ReadWrite(op, 1, 7, 1, addr, 0)
		cmd.CID = cid
		cmd.Encode(qp.SQE(sqTail))
		sqTail = (sqTail + 1) % qp.Depth
		qp.RingSQTail(sqTail) // publish the SQE, then tell the Target
		target.Kick(qp.ID)
		deadline := time.Now().Add(5 * time.Second)
		for {
			dw3 := atomic.LoadUint32(qp.CQEDW3(cqHead))
			if (dw3&(1<<16) != 0) == phase {
				break
			}
			if time.Now().After(deadline) {
				fmt.Println("no completion")
				return nvme.Completion{}
			}
		}
		e, _ := nvme.DecodeCompletion(qp.CQE(cqHead))
		if cqHead = (cqHead + 1) % qp.Depth; cqHead == 0 {
			phase = !phase
		}
		qp.RingCQHead(cqHead)
		return e
	}
	w := run(nvme.OpWrite, 1)
	clear(buf)
	r := run(nvme.OpRead, 2)
	fmt.Printf("write CID %d: %v\n", w.CID, w.Status)
	fmt.Printf("read CID %d SQHD %d: %q\n", r.CID, r.SQHD, buf[:14])
	// Output:
	// write CID 1: success (SCT 0h SC 00h)
	// read CID 2 SQHD 2: "hello, block 7"
}
