package nvme

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/bam-go/bam/internal/prefetch"
	"golang.org/x/sys/unix"
)

// directAlign is the buffer alignment used for O_DIRECT I/O. 4 KiB satisfies
// every logical block size the project uses.
const directAlign = 4096

// directChunk is the size of the aligned bounce buffers of a direct
// FileNamespace; larger unaligned transfers go through them in pieces.
const directChunk = 256 << 10

// FileOptions configure OpenFileNamespace.
type FileOptions struct {
	// LBASize is the logical block size, 512 or 4096. Default 4096.
	LBASize int
	// Size, when positive, is the namespace size in bytes: a missing file
	// is created (with Create) and a regular file shorter than Size is
	// extended (sparse). Zero means use the existing size. Block devices
	// are never resized.
	Size int64
	// Create creates the file if it does not exist.
	Create bool
	// Direct opens with O_DIRECT, bypassing the page cache. Offsets and
	// lengths the Target passes are LBA aligned; buffers that are not
	// 4 KiB aligned go through aligned bounce buffers.
	Direct bool
	// ReadOnly opens the file read-only; writes fail.
	ReadOnly bool
	// Map chooses how a Target serves cached reads on its workers (see
	// MapMode). The zero value is MapAuto.
	Map MapMode
}

// MapMode chooses how a Target's workers serve Reads of a FileNamespace
// without handing them to an executor.
type MapMode int

const (
	// MapAuto maps regular files opened without O_DIRECT whose size is at
	// most half of the machine's memory, and uses preadv2(RWF_NOWAIT) for
	// the rest. Larger files could not stay in the page cache anyway, and
	// their page tables would cost memory.
	MapAuto MapMode = iota
	// MapOff never maps: every worker read is one preadv2(RWF_NOWAIT).
	MapOff
	// MapOn maps every regular file opened without O_DIRECT.
	MapOn
)

func (m MapMode) String() string {
	switch m {
	case MapAuto:
		return "auto"
	case MapOff:
		return "off"
	case MapOn:
		return "on"
	}
	return fmt.Sprintf("MapMode(%d)", int(m))
}

// Mapped reads. A worker copies the bytes of a Read from a read-only
// shared mapping of the file (created on the first such read) instead of
// making one system call per command: on a page-cache hit the copy costs a
// fraction of preadv2, which is most of a worker's time per small Read.
// Unlike RWF_NOWAIT, a copy cannot refuse a page that is not in memory: the
// page fault blocks the worker until the page is read. So copies are
// timed (all of a page or more, a sample of the shorter; see readMapped),
// and one that took longer than mapStall while the process's count of
// major faults grew (a page came from the device, not merely a descheduled
// thread) turns mapped reads off for mapPause; meanwhile reads take the
// preadv2(RWF_NOWAIT) path, whose misses go to executors. An I/O error
// under the mapping (SIGBUS) is caught on the copying goroutine and the read
// falls back to the paths that report it.
const (
	mapStall = 50 * time.Microsecond
	mapPause = 50 * time.Millisecond
	// timedOneInLog2: one in 8 copies shorter than a page is timed.
	timedOneInLog2 = 3
)

// FileNamespace is a namespace backed by a regular file or a block device,
// using pread/pwrite (os.File.ReadAt/WriteAt) and fdatasync for Flush.
type FileNamespace struct {
	f       *os.File
	fd      int
	path    string
	lbaSize int
	blocks  uint64
	direct  bool
	blockDv bool
	bounce  sync.Pool // *[]byte of directChunk aligned bytes

	// noNowait is set once preadv2(RWF_NOWAIT) is found unsupported for
	// this file, turning readNoWait off.
	noNowait atomic.Bool

	// Mapped reads (see MapMode): the mapping, made on the first worker
	// read when wantMap, and the monotonic time (ns since mapEpoch) before
	// which mapped reads are paused after a stall (0: not paused).
	wantMap   bool
	mapOnce   sync.Once
	mapped    []byte
	mapEpoch  time.Time
	mapPaused atomic.Int64
	mapStalls atomic.Uint64
	mapFaults atomic.Uint64
	majflt    atomic.Uint64 // the process's major faults at the last look
	mapReady  atomic.Bool   // the mapping exists
}

// OpenFileNamespace opens (or creates) path as a namespace.
func OpenFileNamespace(path string, opts FileOptions) (*FileNamespace, error) {
	if opts.LBASize == 0 {
		opts.LBASize = 4096
	}
	if err := checkLBASize(opts.LBASize); err != nil {
		return nil, err
	}
	if opts.Size < 0 {
		return nil, fmt.Errorf("nvme: file namespace %s: negative size %d", path, opts.Size)
	}
	flags := os.O_RDWR
	if opts.ReadOnly {
		flags = os.O_RDONLY
	}
	if opts.Create {
		flags |= os.O_CREATE
	}
	if opts.Direct {
		flags |= unix.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("nvme: open file namespace: %w", err)
	}
	ns := &FileNamespace{f: f, fd: int(f.Fd()), path: path, lbaSize: opts.LBASize, direct: opts.Direct}
	size, err := ns.size(opts.Size, opts.ReadOnly)
	if err != nil {
		f.Close()
		return nil, err
	}
	ns.blocks = uint64(size) / uint64(opts.LBASize)
	if ns.blocks == 0 {
		f.Close()
		return nil, fmt.Errorf("nvme: file namespace %s: %d bytes hold no %d-byte block", path, size, opts.LBASize)
	}
	switch opts.Map {
	case MapAuto:
		ns.wantMap = !opts.Direct && !ns.blockDv && (physicalMemory() == 0 || uint64(size) <= physicalMemory()/2)
	case MapOn:
		ns.wantMap = !opts.Direct && !ns.blockDv
	case MapOff:
	default:
		f.Close()
		return nil, fmt.Errorf("nvme: file namespace %s: unknown map mode %d", path, opts.Map)
	}
	ns.bounce.New = func() any {
		b := alignedBytes(directChunk, directAlign)
		return &b
	}
	return ns, nil
}

// size finds (and for regular files, establishes) the namespace size.
func (n *FileNamespace) size(want int64, readOnly bool) (int64, error) {
	fi, err := n.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("nvme: file namespace %s: %w", n.path, err)
	}
	if fi.Mode()&os.ModeDevice != 0 {
		n.blockDv = true
		var size uint64
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(n.fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno == 0 {
			return int64(size), nil
		}
		end, err := n.f.Seek(0, io.SeekEnd)
		if err != nil {
			return 0, fmt.Errorf("nvme: file namespace %s: size of block device: %w", n.path, err)
		}
		return end, nil
	}
	size := fi.Size()
	if want > size {
		if readOnly {
			return 0, fmt.Errorf("nvme: file namespace %s: %d bytes, want %d, and opened read-only", n.path, size, want)
		}
		if err := n.f.Truncate(want); err != nil {
			return 0, fmt.Errorf("nvme: file namespace %s: extend to %d: %w", n.path, want, err)
		}
		size = want
	}
	if want > 0 && want < size {
		size = want
	}
	return size, nil
}

// alignedBytes returns n bytes whose start is a multiple of align.
func alignedBytes(n, align int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) % uintptr(align)); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

func isAligned(p []byte) bool {
	return len(p) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign == 0
}

// LBASize implements Namespace.
func (n *FileNamespace) LBASize() int { return n.lbaSize }

// Blocks implements Namespace.
func (n *FileNamespace) Blocks() uint64 { return n.blocks }

// Path returns the file's path.
func (n *FileNamespace) Path() string { return n.path }

func (n *FileNamespace) check(off int64, l int) error {
	if off < 0 || uint64(off)+uint64(l) > n.blocks*uint64(n.lbaSize) {
		return fmt.Errorf("nvme: file namespace %s: %d+%d beyond %d blocks: %w", n.path, off, l, n.blocks, ErrOutOfRange)
	}
	if n.direct && (off%int64(n.lbaSize) != 0 || l%n.lbaSize != 0) {
		return fmt.Errorf("nvme: file namespace %s: O_DIRECT I/O %d+%d not LBA aligned", n.path, off, l)
	}
	return nil
}

// ReadAt implements Namespace.
func (n *FileNamespace) ReadAt(p []byte, off int64) (int, error) {
	if err := n.check(off, len(p)); err != nil {
		return 0, err
	}
	if !n.direct || isAligned(p) {
		return n.f.ReadAt(p, off)
	}
	bp := n.bounce.Get().(*[]byte)
	defer n.bounce.Put(bp)
	done := 0
	for done < len(p) {
		c := min(len(p)-done, directChunk)
		if _, err := n.f.ReadAt((*bp)[:c], off+int64(done)); err != nil {
			return done, err
		}
		copy(p[done:], (*bp)[:c])
		done += c
	}
	return done, nil
}

// readNoWait reads len(p) bytes at off only if that needs no device I/O:
// on a file opened without O_DIRECT it issues preadv2 with RWF_NOWAIT,
// which the kernel serves from the page cache or refuses with EAGAIN. It
// reports whether p was filled. false (a page not cached, a short read,
// any error, an O_DIRECT file or a kernel without RWF_NOWAIT) means
// nothing is settled and the caller must fall back to ReadAt, which also
// reports any error properly. The Target uses it to serve cached reads on
// the fetching worker.
func (n *FileNamespace) readNoWait(p []byte, off int64) bool {
	if n.direct || len(p) == 0 || n.noNowait.Load() {
		return false
	}
	if off < 0 || uint64(off)+uint64(len(p)) > n.blocks*uint64(n.lbaSize) {
		return false
	}
	if n.wantMap && n.readMapped(p, off) {
		return true
	}
	got, err := unix.Preadv2(n.fd, [][]byte{p}, off, unix.RWF_NOWAIT)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			n.noNowait.Store(true)
		}
		return false
	}
	return got == len(p)
}

// WriteAt implements Namespace.
func (n *FileNamespace) WriteAt(p []byte, off int64) (int, error) {
	if err := n.check(off, len(p)); err != nil {
		return 0, err
	}
	if !n.direct || isAligned(p) {
		return n.f.WriteAt(p, off)
	}
	bp := n.bounce.Get().(*[]byte)
	defer n.bounce.Put(bp)
	done := 0
	for done < len(p) {
		c := min(len(p)-done, directChunk)
		copy((*bp)[:c], p[done:])
		if _, err := n.f.WriteAt((*bp)[:c], off+int64(done)); err != nil {
			return done, err
		}
		done += c
	}
	return done, nil
}

// WriteZeroes implements Zeroer: it punches a hole (regular files) or
// zero-fills the range through the device, falling back to writing zeros.
func (n *FileNamespace) WriteZeroes(off, l int64) error {
	if l < 0 || l > int64(n.blocks)*int64(n.lbaSize) {
		return fmt.Errorf("nvme: file namespace %s: zero %d+%d: %w", n.path, off, l, ErrOutOfRange)
	}
	if err := n.check(off, int(l)); err != nil {
		return err
	}
	mode := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	if n.blockDv {
		mode = unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE
	}
	if err := unix.Fallocate(n.fd, mode, off, l); err == nil {
		return nil
	}
	zero := alignedBytes(min(int(l), directChunk), directAlign)
	for l > 0 {
		c := min(l, int64(len(zero)))
		if _, err := n.f.WriteAt(zero[:c], off); err != nil {
			return err
		}
		off += c
		l -= c
	}
	return nil
}

// Flush implements Namespace with fdatasync.
func (n *FileNamespace) Flush() error {
	for {
		err := unix.Fdatasync(n.fd)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("nvme: file namespace %s: fdatasync: %w", n.path, err)
			}
			return nil
		}
	}
}

// readMapped copies len(p) bytes at off (inside the namespace) from the
// mapping. It reports false, having settled nothing, while mapped reads are
// paused or unavailable, and after a fault.
//
// Copies of a page or more are timed, and so is one in 1<<timedOneInLog2
// of the shorter ones, picked by a hash of the offset: reading the clock twice
// took about a tenth of the workers' time on A1's scattered 512-byte
// reads (H200 host), and a device stall shows in many copies at once.
func (n *FileNamespace) readMapped(p []byte, off int64) bool {
	n.mapOnce.Do(n.mapFile)
	if n.mapped == nil {
		return false
	}
	if until := n.mapPaused.Load(); until != 0 {
		if int64(time.Since(n.mapEpoch)) < until {
			return false
		}
		n.mapPaused.CompareAndSwap(until, 0)
	}
	timed := len(p) >= 4096 || uint64(off)*0x9E3779B97F4A7C15>>(64-timedOneInLog2) == 0
	var start time.Duration
	if timed {
		start = time.Since(n.mapEpoch)
	}
	if !copyFaulting(p, n.mapped[off:off+int64(len(p))]) {
		n.mapFaults.Add(1)
		n.pauseMapped()
		return false
	}
	if timed && time.Since(n.mapEpoch)-start > mapStall && n.majorFaulted() {
		n.mapStalls.Add(1)
		n.pauseMapped()
	}
	return true
}

// prefetch starts loading the n bytes at off from the mapping, when reads
// are served from it now. It never faults.
func (n *FileNamespace) prefetch(off int64, l int) {
	if !n.mapReady.Load() || n.mapPaused.Load() != 0 || off < 0 || off > int64(len(n.mapped)) {
		return
	}
	prefetch.Bytes(n.mapped[off:], l, prefetchLines)
}

// pauseMapped turns mapped reads off for mapPause.
func (n *FileNamespace) pauseMapped() {
	n.mapPaused.Store(int64(time.Since(n.mapEpoch) + mapPause))
}

// majorFaulted reports whether the process took a major page fault since
// the last call: a slow copy is a stall on the device only then, not the
// worker's thread being descheduled.
func (n *FileNamespace) majorFaulted() bool {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return true
	}
	return uint64(ru.Majflt) > n.majflt.Swap(uint64(ru.Majflt))
}

// mapFile makes the read-only shared mapping of the namespace's bytes;
// on failure reads keep the preadv2 path.
func (n *FileNamespace) mapFile() {
	size := int(n.blocks) * n.lbaSize
	m, err := unix.Mmap(n.fd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return
	}
	n.majorFaulted() // the count so far
	n.mapEpoch = time.Now()
	n.mapped = m
	n.mapReady.Store(true)
}

// copyFaulting copies src into dst and reports false instead of crashing
// when the copy faults (SIGBUS: an I/O error or a file truncated under a
// mapping).
func copyFaulting(dst, src []byte) (ok bool) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	copy(dst, src)
	return true
}

// MappedReadStats says whether the namespace serves worker reads from a
// mapping, and counts the copies that stalled on a page read from the
// device (each pauses mapped reads) and the copies that faulted. Reads
// served are not counted here: a counter shared by every worker, bumped on
// each read, took most of the workers' time on the GPU host
// (TargetStats.CachedReads counts them per queue).
type MappedReadStats struct {
	Mapped bool   `json:"mapped"`
	Stalls uint64 `json:"stalls"`
	Faults uint64 `json:"faults"`
}

// MappedReads returns the namespace's mapped-read state and counters.
func (n *FileNamespace) MappedReads() MappedReadStats {
	return MappedReadStats{Mapped: n.mapReady.Load(), Stalls: n.mapStalls.Load(), Faults: n.mapFaults.Load()}
}

// Close implements Namespace. A Target must be done with the namespace.
func (n *FileNamespace) Close() error {
	n.mapOnce.Do(func() {}) // no mapping after Close
	if n.mapped != nil {
		if err := unix.Munmap(n.mapped); err != nil {
			n.f.Close()
			return fmt.Errorf("nvme: file namespace %s: unmap: %w", n.path, err)
		}
		n.mapped = nil
		n.mapReady.Store(false)
	}
	return n.f.Close()
}

// physicalMemory returns the machine's memory in bytes, or 0 when unknown.
func physicalMemory() uint64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}
