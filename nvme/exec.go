package nvme

import (
	"encoding/binary"
	"errors"
)

// execCtx is the scratch state of one goroutine that executes commands.
type execCtx struct {
	walker prpWalker
	bounce []byte
}

func (ec *execCtx) buf(n int) []byte {
	if cap(ec.bounce) < n {
		ec.bounce = make([]byte, n)
	}
	return ec.bounce[:n]
}

// Command dword fields used by execute.
const (
	dsmDeallocate = 1 << 2 // Dataset Management CDW11 AD
	dsmRangeSize  = 16     // bytes per Dataset Management range
)

// execute runs one command and returns the completion's dword 0 and status.
// It never panics on any command contents.
func (t *Target) execute(ec *execCtx, q *queue, cmd *Command) (uint32, Status) {
	switch cmd.Opcode {
	case OpRead, OpWrite, OpFlush, OpWriteZeroes, OpDatasetManagement:
	default:
		return 0, StatusInvalidOpcode.WithDNR()
	}
	if cmd.Fuse != 0 || cmd.PSDT != 0 {
		// Fused operations and SGLs are not supported.
		return 0, StatusInvalidField.WithDNR()
	}
	if cmd.Opcode == OpFlush {
		return 0, t.flush(q, cmd.NSID)
	}
	e, ok := (*t.nss.Load())[cmd.NSID]
	if !ok {
		return 0, StatusInvalidNamespace.WithDNR()
	}
	switch cmd.Opcode {
	case OpRead, OpWrite:
		return 0, t.readWrite(ec, q, e, cmd)
	case OpWriteZeroes:
		slba, nb := cmd.SLBA(), uint64(cmd.Blocks())
		if !inRange(e, slba, nb) {
			return 0, StatusLBAOutOfRange.WithDNR()
		}
		if err := writeZeroes(e.ns, int64(slba*e.lbaSize), int64(nb*e.lbaSize)); err != nil {
			return 0, ioStatus(err, StatusWriteFault)
		}
		q.stats.other.Add(1)
		return 0, StatusSuccess
	default: // OpDatasetManagement
		return 0, t.datasetManagement(ec, q, e, cmd)
	}
}

func inRange(e *nsEntry, slba, nb uint64) bool {
	return slba < e.blocks && nb <= e.blocks-slba
}

// ioStatus maps a namespace error to a status: a *StatusError keeps its own
// status, anything else becomes def.
func ioStatus(err error, def Status) Status {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return def
}

func (t *Target) flush(q *queue, nsid uint32) Status {
	nss := *t.nss.Load()
	if nsid == nsidAll {
		for _, e := range nss {
			if err := e.ns.Flush(); err != nil {
				return ioStatus(err, StatusWriteFault)
			}
		}
		q.stats.flushes.Add(1)
		return StatusSuccess
	}
	e, ok := nss[nsid]
	if !ok {
		return StatusInvalidNamespace.WithDNR()
	}
	if err := e.ns.Flush(); err != nil {
		return ioStatus(err, StatusWriteFault)
	}
	q.stats.flushes.Add(1)
	return StatusSuccess
}

// nowaitReader is implemented by namespaces that can serve a read without
// blocking when the data is at hand (FileNamespace: page-cache hits). See
// FileNamespace.readNoWait.
type nowaitReader interface {
	readNoWait(p []byte, off int64) bool
}

// prefetcher is implemented by namespaces that can start loading the bytes
// of a read the Target will serve soon (FileNamespace: from its mapping).
type prefetcher interface {
	prefetch(off int64, n int)
}

// nsRead reads len(b) bytes at off. With nowait it only tries a read that
// cannot block and reports blocked when the namespace declined; the caller
// then runs the whole command again on an executor (reads are idempotent).
func nsRead(e *nsEntry, b []byte, off int64, nowait bool) (blocked bool, err error) {
	if nowait {
		return !e.nowait.readNoWait(b, off), nil
	}
	_, err = e.ns.ReadAt(b, off)
	return false, err
}

func (t *Target) readWrite(ec *execCtx, q *queue, e *nsEntry, cmd *Command) Status {
	st, _ := t.transfer(ec, q, e, cmd, false)
	return st
}

// transfer runs a Read or Write. With nowait (Reads on a nowaitReader
// namespace only) it returns done false, having posted nothing and counted
// nothing, as soon as the namespace would block.
func (t *Target) transfer(ec *execCtx, q *queue, e *nsEntry, cmd *Command, nowait bool) (st Status, done bool) {
	slba, nb := cmd.SLBA(), uint64(cmd.Blocks())
	length := nb * e.lbaSize
	if length > uint64(t.cfg.MaxTransfer) {
		return StatusInvalidField.WithDNR(), true
	}
	if !inRange(e, slba, nb) {
		return StatusLBAOutOfRange.WithDNR(), true
	}
	segs, st := ec.walker.walk(t.dma, cmd.PRP1, cmd.PRP2, int(length))
	if !st.Success() {
		return st.WithDNR(), true
	}
	off := int64(slba * e.lbaSize)
	read := cmd.Opcode == OpRead
	if !lbaMultiples(segs, e.lbaSize) {
		// A PRP1 offset splits blocks across pages. Namespaces see only
		// whole blocks, so the transfer goes through one bounce buffer.
		st, blocked := t.bounced(ec, e, segs, off, int(length), read, nowait)
		if blocked {
			return 0, false
		}
		if !st.Success() {
			return st, true
		}
		segs = nil
	}
	for _, s := range segs {
		if b, ok := t.dma.Bytes(s.Addr, s.Len); ok {
			// Host memory: straight between the namespace and the
			// destination bytes.
			if read {
				blocked, err := nsRead(e, b, off, nowait)
				if blocked {
					return 0, false
				}
				if err != nil {
					return ioStatus(err, StatusUnrecoveredRead), true
				}
			} else if _, err := e.ns.WriteAt(b, off); err != nil {
				return ioStatus(err, StatusWriteFault), true
			}
		} else {
			buf := ec.buf(s.Len)
			if read {
				blocked, err := nsRead(e, buf, off, nowait)
				if blocked {
					return 0, false
				}
				if err != nil {
					return ioStatus(err, StatusUnrecoveredRead), true
				}
				if err := t.dma.Write(s.Addr, buf); err != nil {
					return StatusDataTransferError, true
				}
			} else {
				if err := t.dma.Read(s.Addr, buf); err != nil {
					return StatusDataTransferError, true
				}
				if _, err := e.ns.WriteAt(buf, off); err != nil {
					return ioStatus(err, StatusWriteFault), true
				}
			}
		}
		off += int64(s.Len)
	}
	if read {
		q.stats.reads.Add(1)
		q.stats.bytesRead.Add(length)
		return StatusSuccess, true
	}
	if cmd.FUA() {
		if err := e.ns.Flush(); err != nil {
			return ioStatus(err, StatusWriteFault), true
		}
	}
	q.stats.writes.Add(1)
	q.stats.bytesWritten.Add(length)
	return StatusSuccess, true
}

func lbaMultiples(segs []Segment, lbaSize uint64) bool {
	for _, s := range segs {
		if uint64(s.Len)%lbaSize != 0 {
			return false
		}
	}
	return true
}

// bounced moves a whole transfer through the execution context's buffer:
// one namespace call, scattered to or gathered from the segments.
// With nowait a Read that would block reports blocked and changes nothing.
func (t *Target) bounced(ec *execCtx, e *nsEntry, segs []Segment, off int64, length int, read, nowait bool) (st Status, blocked bool) {
	buf := ec.buf(length)
	if read {
		blocked, err := nsRead(e, buf, off, nowait)
		if blocked {
			return 0, true
		}
		if err != nil {
			return ioStatus(err, StatusUnrecoveredRead), false
		}
	}
	pos := 0
	for _, s := range segs {
		var err error
		if read {
			err = t.dma.Write(s.Addr, buf[pos:pos+s.Len])
		} else {
			err = t.dma.Read(s.Addr, buf[pos:pos+s.Len])
		}
		if err != nil {
			return StatusDataTransferError, false
		}
		pos += s.Len
	}
	if !read {
		if _, err := e.ns.WriteAt(buf, off); err != nil {
			return ioStatus(err, StatusWriteFault), false
		}
	}
	return StatusSuccess, false
}

// datasetManagement reads the range list and deallocates (zeroes) the ranges
// when the AD attribute is set; other attributes are hints and ignored.
func (t *Target) datasetManagement(ec *execCtx, q *queue, e *nsEntry, cmd *Command) Status {
	nr := int(cmd.CDW10&0xFF) + 1
	length := nr * dsmRangeSize
	segs, st := ec.walker.walk(t.dma, cmd.PRP1, cmd.PRP2, length)
	if !st.Success() {
		return st.WithDNR()
	}
	ranges := ec.buf(length)
	pos := 0
	for _, s := range segs {
		if err := t.dma.Read(s.Addr, ranges[pos:pos+s.Len]); err != nil {
			return StatusDataTransferError
		}
		pos += s.Len
	}
	le := binary.LittleEndian
	// Validate every range before changing anything.
	for i := 0; i < nr; i++ {
		r := ranges[i*dsmRangeSize:]
		nb, slba := uint64(le.Uint32(r[4:])), le.Uint64(r[8:])
		if nb > 0 && !inRange(e, slba, nb) {
			return StatusLBAOutOfRange.WithDNR()
		}
	}
	if cmd.CDW11&dsmDeallocate != 0 {
		for i := 0; i < nr; i++ {
			r := ranges[i*dsmRangeSize:]
			nb, slba := uint64(le.Uint32(r[4:])), le.Uint64(r[8:])
			if nb == 0 {
				continue
			}
			if err := writeZeroes(e.ns, int64(slba*e.lbaSize), int64(nb*e.lbaSize)); err != nil {
				return ioStatus(err, StatusWriteFault)
			}
		}
	}
	q.stats.other.Add(1)
	return StatusSuccess
}
