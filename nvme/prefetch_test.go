package nvme

import (
	"path/filepath"
	"testing"
)

// TestPrefetchIgnoresBadCommands hands the Target's prefetch commands it
// must not act on, or whose fields are out of range: it hints only, so it
// must return without touching anything, whatever the command says.
func TestPrefetchIgnoresBadCommands(t *testing.T) {
	ns, err := OpenFileNamespace(filepath.Join(t.TempDir(), "ns.img"), FileOptions{LBASize: 512, Size: 1 << 20, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	dma := NewDMASpace()
	buf := make([]byte, 8192)
	addr, err := dma.RegisterHost(buf)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := NewTarget(TargetConfig{}, dma)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.AddNamespace(1, ns); err != nil {
		t.Fatal(err)
	}
	// Map the file the way a served read does, so prefetch acts.
	if !ns.readNoWait(buf[:512], 0) {
		t.Log("mapped reads unavailable here; prefetch returns early")
	}
	blocks := uint64(1<<20) / 512
	for _, c := range []Command{
		ReadWrite(OpRead, 1, 0, 1, addr, 0),                // ordinary: acts
		ReadWrite(OpRead, 1, blocks-1, 1, addr+8192-64, 0), // last block, destination runs past the region
		ReadWrite(OpRead, 1, blocks, 1, addr, 0),           // beyond the namespace
		ReadWrite(OpRead, 1, 1<<62, 1, addr, 0),            // LBA overflows the byte offset
		ReadWrite(OpRead, 1, 0, 65536, addr, 0),            // longer than prefetched reads
		ReadWrite(OpRead, 7, 0, 1, addr, 0),                // unknown namespace
		ReadWrite(OpRead, 1, 0, 1, 1<<40, 0),               // unmapped destination
		ReadWrite(OpWrite, 1, 0, 1, addr, 0),               // not a Read
	} {
		sqe := make([]byte, SQESize)
		c.Encode(sqe)
		tg.prefetch(sqe)
	}
	for i := range buf {
		if buf[i] != 0 {
			t.Fatalf("prefetch changed byte %d of the destination", i)
		}
	}
}
