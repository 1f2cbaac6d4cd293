package nvme

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func openTestFile(t *testing.T, direct bool, lbaSize int) *FileNamespace {
	t.Helper()
	return openTestFileMap(t, direct, lbaSize, MapAuto)
}

func openTestFileMap(t *testing.T, direct bool, lbaSize int, m MapMode) *FileNamespace {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ns.img")
	ns, err := OpenFileNamespace(path, FileOptions{LBASize: lbaSize, Size: 1 << 20, Create: true, Direct: direct, Map: m})
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
		name     string
		direct   bool
		lbaSize  int
		noInline bool // TargetConfig.NoCachedReadInline
	}{
		{"buffered-512", false, 512, false}, {"buffered-4k", false, 4096, false},
		{"buffered-4k-executors", false, 4096, true},
		{"direct-512", true, 512, false}, {"direct-4k", true, 4096, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := openTestFile(t, tc.direct, tc.lbaSize)
			h := newHarness(t, TargetConfig{Executors: 4, NoCachedReadInline: tc.noInline}, ns, 8)
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
			// Just written, the blocks are in the page cache: buffered
			// reads are served on the worker unless configured off.
			cached := h.t.Stats().CachedReads
			if inline := !tc.direct && !tc.noInline; inline != (cached > 0) {
				t.Fatalf("%d reads served from the page cache on the worker", cached)
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

// TestFileNamespaceReadNoWait checks the non-blocking read the Target tries
// on its workers against ReadAt, and its refusals.
func TestFileNamespaceReadNoWait(t *testing.T) {
	for _, m := range []MapMode{MapOff, MapOn} {
		t.Run(map[MapMode]string{MapOff: "preadv2", MapOn: "mapped"}[m], func(t *testing.T) {
			testReadNoWait(t, m)
		})
	}
}

func testReadNoWait(t *testing.T, m MapMode) {
	ns := openTestFileMap(t, false, 512, m)
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	if _, err := ns.WriteAt(data, 4096); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off, n int
	}{{4096, 512}, {4096, 4096}, {8192 + 512, 3 * 512}, {4096, 64 << 10}} {
		got := make([]byte, tc.n)
		if !ns.readNoWait(got, int64(tc.off)) {
			t.Fatalf("%d+%d: refused a read of freshly written (cached) data", tc.off, tc.n)
		}
		if !bytes.Equal(got, data[tc.off-4096:tc.off-4096+tc.n]) {
			t.Fatalf("%d+%d: wrong data", tc.off, tc.n)
		}
	}
	// Out of range and empty reads are refused, leaving errors to ReadAt.
	size := int64(ns.Blocks()) * int64(ns.LBASize())
	for _, off := range []int64{-512, size, size - 256} {
		if ns.readNoWait(make([]byte, 512), off) {
			t.Fatalf("read at %d accepted", off)
		}
	}
	if ns.readNoWait(nil, 0) {
		t.Fatal("empty read accepted")
	}
	// O_DIRECT files never take this path.
	if d := openTestFile(t, true, 512); d.readNoWait(make([]byte, 512), 0) {
		t.Fatal("O_DIRECT read accepted")
	}
	// After the pages are dropped from the cache the read may be refused;
	// whatever it answers must agree with ReadAt.
	if err := ns.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = unix.Fadvise(ns.fd, 0, 0, unix.FADV_DONTNEED)
	got := make([]byte, 4096)
	if ns.readNoWait(got, 4096) && !bytes.Equal(got, data[:4096]) {
		t.Fatal("wrong data after eviction")
	}
	if st := ns.MappedReads(); st.Mapped != (m == MapOn) {
		t.Fatalf("map mode %d: mapped %v", m, st.Mapped)
	}
}

// TestFileNamespaceMappedReads checks what mapped reads add to readNoWait:
// they see writes made through WriteAt, a pause sends reads back to
// preadv2, and a fault under the mapping (the file truncated) is refused
// instead of crashing the process.
func TestFileNamespaceMappedReads(t *testing.T) {
	ns := openTestFileMap(t, false, 512, MapOn)
	data := bytes.Repeat([]byte("mapped!"), 4096/7+1)[:4096]
	if _, err := ns.WriteAt(data, 8192); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	if !ns.readNoWait(got, 8192) || !bytes.Equal(got, data) {
		t.Fatal("mapped read: wrong data")
	}
	// A write after the mapping exists is seen by the next read.
	if _, err := ns.WriteAt(data[:512], 8192+1024); err != nil {
		t.Fatal(err)
	}
	if !ns.readNoWait(got[:512], 8192+1024) || !bytes.Equal(got[:512], data[:512]) {
		t.Fatal("mapped read after a write: wrong data")
	}
	if st := ns.MappedReads(); !st.Mapped || st.Faults != 0 {
		t.Fatalf("counters %+v, want mapped, no faults", st)
	}
	copy(data[1024:], data[:512])
	// Paused: the read is still served, by preadv2.
	ns.mapPaused.Store(int64(time.Since(ns.mapEpoch) + time.Hour))
	if !ns.readNoWait(got, 8192) || !bytes.Equal(got, data) {
		t.Fatal("paused mapped reads: wrong data")
	}
	// Beyond the end of a truncated file the mapping faults (SIGBUS).
	if err := ns.f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if ns.readNoWait(got, 64<<10) {
		t.Fatal("a read past the truncated end was served")
	}
	if st := ns.MappedReads(); st.Faults != 0 {
		t.Fatalf("counters %+v: a paused namespace copied from its mapping", st)
	}
	ns.mapPaused.Store(0)
	if ns.readNoWait(got, 64<<10) {
		t.Fatal("a read past the truncated end was served")
	}
	if st := ns.MappedReads(); st.Faults != 1 {
		t.Fatalf("counters %+v, want 1 fault", st)
	}
	// The fault paused mapped reads; a read inside the file is served.
	if !ns.readNoWait(got[:512], 0) {
		t.Fatal("a read inside the file was refused after a fault")
	}
	if st := ns.MappedReads(); st.Faults != 1 {
		t.Fatalf("counters %+v: copied from the mapping while paused", st)
	}
	// Other panics are not swallowed.
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("copyFaulting swallowed a bounds panic")
		}
	}()
	copyFaulting(got, ns.mapped[len(ns.mapped):len(ns.mapped)+1])
}

func TestFileNamespaceMapModes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	if _, err := OpenFileNamespace(path, FileOptions{Size: 1 << 20, Create: true, Map: MapMode(9)}); err == nil {
		t.Fatal("unknown map mode accepted")
	}
	for _, tc := range []struct {
		m    MapMode
		want bool
	}{{MapAuto, true}, {MapOn, true}, {MapOff, false}} {
		ns, err := OpenFileNamespace(path, FileOptions{Size: 1 << 20, Create: true, Map: tc.m})
		if err != nil {
			t.Fatal(err)
		}
		if ns.wantMap != tc.want {
			t.Errorf("mode %d: maps %v, want %v", tc.m, ns.wantMap, tc.want)
		}
		if err := ns.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFileNamespaceTargetUncached reads blocks that were dropped from the
// page cache through a Target: whether the worker serves them or passes
// them to an executor, the data must be right.
func TestFileNamespaceTargetUncached(t *testing.T) {
	ns := openTestFile(t, false, 4096)
	h := newHarness(t, TargetConfig{Executors: 2}, ns, 8)
	pattern(h.buf[:64<<10], 4096, 0, 7)
	if _, err := ns.WriteAt(h.buf[:64<<10], 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = unix.Fadvise(ns.fd, 0, 0, unix.FADV_DONTNEED)
	clear(h.buf[:64<<10])
	for lba := uint64(0); lba < 16; lba++ {
		if e := h.do(t, h.rw(t, OpRead, lba, 1, int(lba)*4096)); !e.Status.Success() {
			t.Fatalf("read %d: %v", lba, e.Status)
		}
	}
	for _, g := range checkPattern(t, h.buf[:64<<10], 4096, 0) {
		if g != 7 {
			t.Fatalf("generation %d", g)
		}
	}
	t.Logf("%d of 16 reads served from the page cache", h.t.Stats().CachedReads)
}
