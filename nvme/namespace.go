package nvme

import (
	"errors"
	"fmt"
)

// Namespace is the storage behind one NSID: a run of fixed-size logical
// blocks. Offsets and lengths passed by the Target are always whole blocks
// inside the namespace. Implementations must be safe for concurrent use.
type Namespace interface {
	// LBASize is the logical block size in bytes (512 or 4096).
	LBASize() int
	// Blocks is the number of logical blocks.
	Blocks() uint64
	// ReadAt and WriteAt follow io.ReaderAt and io.WriterAt.
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Flush returns once every write completed before the call is durable.
	Flush() error
	// Close releases the namespace.
	Close() error
}

// Zeroer is implemented by namespaces that zero a byte range more cheaply
// than by writing zeros (hole punching, memory clear). The Target uses it for
// Write Zeroes and for deallocation.
type Zeroer interface {
	WriteZeroes(off, n int64) error
}

// Errors of namespaces.
var (
	// ErrClosed is returned by operations on a closed namespace or Target.
	ErrClosed = errors.New("nvme: closed")
	// ErrOutOfRange is returned by a namespace for I/O outside its blocks.
	ErrOutOfRange = errors.New("nvme: offset out of range")
	// ErrNoCrashSimulation is returned by Crash on a memory namespace that
	// does not track durability.
	ErrNoCrashSimulation = errors.New("nvme: namespace does not simulate crashes")
)

func checkLBASize(lbaSize int) error {
	if lbaSize != 512 && lbaSize != 4096 {
		return fmt.Errorf("nvme: LBA size %d: want 512 or 4096", lbaSize)
	}
	return nil
}

// zeroBlock is a read-only source of zeros for namespaces without a Zeroer.
var zeroBlock = make([]byte, 64<<10)

// writeZeroes zeroes n bytes at off in ns, through Zeroer when available.
func writeZeroes(ns Namespace, off, n int64) error {
	if z, ok := ns.(Zeroer); ok {
		return z.WriteZeroes(off, n)
	}
	for n > 0 {
		c := int64(len(zeroBlock))
		if c > n {
			c = n
		}
		if _, err := ns.WriteAt(zeroBlock[:c], off); err != nil {
			return err
		}
		off += c
		n -= c
	}
	return nil
}
