package nvme

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func openTestFile(t *testing.T, direct bool, lbaSize int) *FileNamespace {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ns.img")
	ns, err := OpenFileNamespace(path, FileOptions{LBASize: lbaSize, Size: 1 << 20, Create: true, Direct: direct})
	if err != nil {
		if direct && errors.Is(err, syscall.EINVAL) {
			t.Skipf("O_DIRECT not supported here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func TestFileNamespaceOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a")
	if _, err := OpenFileNamespace(path, FileOptions{}); err == nil {
		t.Fatal("missing file opened without Create")
	}
	ns, err := OpenFileNamespace(path, FileOptions{Create: true, Size: 10 * 4096})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Blocks() != 10 || ns.LBASize() != 4096 {
		t.Fatalf("%d blocks of %d", ns.Blocks(), ns.LBASize())
	}
	ns.Close()
	// Reopen with the existing size, as 512-byte blocks.
	ns, err = OpenFileNamespace(path, FileOptions{LBASize: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if ns.Blocks() != 80 {
		t.Fatalf("reopened with %d blocks", ns.Blocks())
	}
	if _, err := ns.ReadAt(make([]byte, 512), 80*512); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	if _, err := OpenFileNamespace(empty, FileOptions{}); err == nil {
		t.Fatal("empty file opened as a namespace")
	}
	if _, err := OpenFileNamespace(empty, FileOptions{LBASize: 100}); err == nil {
		t.Fatal("LBA size 100 accepted")
	}
}

func TestFileNamespaceTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		direct  bool
		lbaSize int
	}{{"buffered-512", false, 512}, {"buffered-4k", false, 4096}, {"direct-512", true, 512}, {"direct-4k", true, 4096}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := openTestFile(t, tc.direct, tc.lbaSize)
			h := newHarness(t, TargetConfig{Executors: 4}, ns, 8)
			lba := tc.lbaSize
			blocksPer := 16384 / lba // 16 KiB transfers
			// Aligned buffer, then a PRP1 offset that splits blocks
			// across pages (bounced), then a dword offset.
			for i, off := range []int{0, 512, 1000} {
				slba := uint64(i * blocksPer)
				pattern(h.buf[off:], lba, slba, uint32(10+i))
				if e := h.do(t, h.rw(t, OpWrite, slba, uint32(blocksPer), off)); !e.Status.Success() {
					t.Fatalf("write at buffer offset %d: %v", off, e.Status)
				}
				clear(h.buf[:64<<10])
				if e := h.do(t, h.rw(t, OpRead, slba, uint32(blocksPer), off)); !e.Status.Success() {
					t.Fatalf("read at buffer offset %d: %v", off, e.Status)
				}
				for _, g := range checkPattern(t, h.buf[off:off+16384], lba, slba) {
					if g != uint32(10+i) {
						t.Fatalf("generation %d", g)
					}
				}
			}
			if e := h.do(t, Command{Opcode: OpFlush, NSID: 1}); !e.Status.Success() {
				t.Fatal(e.Status)
			}
			// Write Zeroes, then Dataset Management deallocate.
			if e := h.do(t, Command{Opcode: OpWriteZeroes, NSID: 1, CDW10: 1, CDW12: 1}); !e.Status.Success() {
				t.Fatal(e.Status)
			}
			rng := h.buf[32<<10:]
			binary.LittleEndian.PutUint32(rng[4:], 2)                 // length in blocks
			binary.LittleEndian.PutUint64(rng[8:], uint64(blocksPer)) // SLBA
			dsm := Command{Opcode: OpDatasetManagement, NSID: 1, CDW11: dsmDeallocate, PRP1: h.bufDMA + 32<<10}
			if e := h.do(t, dsm); !e.Status.Success() {
				t.Fatal(e.Status)
			}
			got := make([]byte, (blocksPer+3)*lba)
			ns.ReadAt(got, 0)
			zero := make([]byte, 2*lba)
			if !bytes.Equal(got[lba:3*lba], zero) || !bytes.Equal(got[blocksPer*lba:(blocksPer+2)*lba], zero) {
				t.Fatal("zeroed ranges hold data")
			}
			checkPattern(t, got[:lba], lba, 0)
			checkPattern(t, got[3*lba:blocksPer*lba], lba, 3)
			checkPattern(t, got[(blocksPer+2)*lba:], lba, uint64(blocksPer+2))
		})
	}
}

func TestDatasetManagementRange(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 4)
	rng := h.buf[8192:]
	binary.LittleEndian.PutUint32(rng[4:], 8)
	binary.LittleEndian.PutUint64(rng[8:], 1020)
	dsm := Command{Opcode: OpDatasetManagement, NSID: 1, CDW11: dsmDeallocate, PRP1: h.bufDMA + 8192}
	if e := h.do(t, dsm); e.Status.Code() != StatusLBAOutOfRange {
		t.Fatalf("range past end: %v", e.Status)
	}
	dsm.PRP1 += 2
	if e := h.do(t, dsm); e.Status.Code() != StatusInvalidField {
		t.Fatalf("bad PRP: %v", e.Status)
	}
}
