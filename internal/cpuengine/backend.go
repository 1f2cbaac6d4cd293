package cpuengine

import (
	"context"
	"fmt"
	"sync"
	"unsafe"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/nvme"
	"github.com/bam-go/bam/vq"
)

// pageSize is the memory page size the Target interprets PRPs with.
const pageSize = nvme.DefaultPageSize

// backend is the cache's gpucache.Backend: it turns a line tag into NVMe
// Read and Write commands whose PRPs name the line's own bytes in the cache's
// data region (registered in the DMA space at its virtual address, so a
// line's DMA address is its address), and submits them through vq.
type backend struct {
	e        *Engine
	sub      *vq.Mapper
	lineSize int
	lpl      uint32 // logical blocks per line
	lists    chan nvme.PRPListPage
	tier     *hostTier // nil when the host-memory tier is off
	nsids    []uint32  // NSID of namespace index k
	flushPar int
}

var _ gpucache.Backend = (*backend)(nil)

// prp returns PRP1 and PRP2 for a line at buf, taking a list page when the
// line spans more than two pages. release returns the page.
func (b *backend) prp(ctx context.Context, buf []byte) (prp1, prp2 uint64, release func(), err error) {
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	pages := (b.lineSize + pageSize - 1) / pageSize
	switch {
	case pages <= 1:
		return addr, 0, func() {}, nil
	case pages == 2:
		return addr, addr + pageSize, func() {}, nil
	}
	var lp nvme.PRPListPage
	select {
	case lp = <-b.lists:
	case <-ctx.Done():
		return 0, 0, nil, ctx.Err()
	}
	entries := make([]uint64, pages)
	for i := range entries {
		entries[i] = addr + uint64(i*pageSize)
	}
	p1, p2, _, err := nvme.BuildPRP(entries, pageSize, []nvme.PRPListPage{lp})
	if err != nil {
		b.lists <- lp
		return 0, 0, nil, err
	}
	return p1, p2, func() { b.lists <- lp }, nil
}

// rw submits one Read or Write of a whole line.
func (b *backend) rw(ctx context.Context, op nvme.Opcode, ns int, lba uint64, buf []byte, hint uint64) error {
	p1, p2, release, err := b.prp(ctx, buf)
	if err != nil {
		return err
	}
	defer release()
	cmd := nvme.ReadWrite(op, b.nsids[ns], lba, b.lpl, p1, p2)
	if _, err := b.sub.SubmitHint(ctx, hint, &cmd); err != nil {
		return fmt.Errorf("%s namespace %d LBA %d: %w", op, ns, lba, err)
	}
	return nil
}

// split returns the namespace index and namespace line of a tag.
func split(tag uint64) (int, uint64) {
	return int(tag >> gpucache.TagNamespaceShift), tag & gpucache.TagLineMask
}

// ReadLine implements gpucache.Backend.
func (b *backend) ReadLine(ctx context.Context, tag uint64, dst []byte) error {
	ns, nsLine := split(tag)
	o := b.e.reg.lookup(ns, nsLine)
	if o != nil {
		o.st.misses.Add(1)
	}
	b.e.total.misses.Add(1)
	if b.tier != nil && b.tier.get(tag, dst) {
		return nil
	}
	lba := nsLine * uint64(b.lpl)
	if o != nil && o.n > 1 && o.desc.Replicas() > 1 {
		r := int(o.rr.Add(1) % o.n)
		ns, lba = r, o.desc.Extents[r].StartLBA+(nsLine-o.startLine[0])*uint64(b.lpl)
	}
	if err := b.rw(ctx, nvme.OpRead, ns, lba, dst, tag); err != nil {
		return err
	}
	n := uint64(len(dst))
	b.e.total.linesRead.Add(1)
	b.e.total.bytesRead.Add(n)
	if o != nil {
		o.st.linesRead.Add(1)
		o.st.bytesRead.Add(n)
	}
	if b.tier != nil {
		b.tier.put(tag, dst)
	}
	return nil
}

// WriteLine implements gpucache.Backend. A replicated line is written to
// every copy.
func (b *backend) WriteLine(ctx context.Context, tag uint64, src []byte) error {
	ns, nsLine := split(tag)
	o := b.e.reg.lookup(ns, nsLine)
	if b.tier != nil {
		// The tier holds clean copies only; drop the stale one first,
		// and any buffered Set of it with it.
		b.tier.del(tag)
		b.tier.sync()
	}
	type addr struct {
		ns  int
		lba uint64
	}
	addrs := []addr{{ns, nsLine * uint64(b.lpl)}}
	if o != nil && o.n > 1 && o.desc.Replicas() > 1 {
		addrs = addrs[:0]
		for r := range o.desc.Extents {
			addrs = append(addrs, addr{r, o.desc.Extents[r].StartLBA + (nsLine-o.startLine[0])*uint64(b.lpl)})
		}
	}
	for _, a := range addrs {
		if err := b.rw(ctx, nvme.OpWrite, a.ns, a.lba, src, tag); err != nil {
			return err
		}
		n := uint64(len(src))
		b.e.total.linesWritten.Add(1)
		b.e.total.bytesWritten.Add(n)
		if o != nil {
			o.st.linesWritten.Add(1)
			o.st.bytesWritten.Add(n)
		}
	}
	return nil
}

// Flush implements gpucache.Backend: an NVMe Flush on every namespace, in
// parallel.
func (b *backend) Flush(ctx context.Context) error {
	errs := make([]error, len(b.nsids))
	var wg sync.WaitGroup
	for k, nsid := range b.nsids {
		wg.Go(func() {
			cmd := nvme.Command{Opcode: nvme.OpFlush, NSID: nsid}
			if _, err := b.sub.SubmitHint(ctx, uint64(k), &cmd); err != nil {
				errs[k] = fmt.Errorf("flush namespace %d: %w", k, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
