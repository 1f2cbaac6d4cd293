package bam

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bam-go/bam/internal/format"
	"github.com/bam-go/bam/nvme"
	"golang.org/x/sys/unix"
)

// NamespaceFileName returns the file name of namespace i in a directory
// store: ns-000.bam, ns-001.bam, ...
func NamespaceFileName(i int) string { return fmt.Sprintf("ns-%03d.bam", i) }

var nsFileRE = regexp.MustCompile(`^ns-([0-9]{3,4})\.bam$`)

// namespace is one opened namespace of the store.
type namespace struct {
	dev   nvme.Namespace
	name  string // path, or "namespace N" for caller-supplied namespaces
	sb    format.Superblock
	owned bool // the store opened it and closes it
}

// Store is an open bam store: its namespaces, verified superblocks and the
// catalog of named objects. Lookups run concurrently; catalog updates are
// serialised and each is durable when it returns. All methods are safe for
// concurrent use.
type Store struct {
	dir      string
	opts     Options
	log      *slog.Logger
	ns       []*namespace // by index
	lock     *os.File     // holds the flock on namespace 0, when the store opened it
	lbaSize  uint64
	lineSize uint64
	uuid     [16]byte
	now      func() time.Time

	mu     sync.Mutex // serialises catalog updates and Close
	cat    atomic.Pointer[format.Catalog]
	closed atomic.Bool

	data dataPath // the engine, started on first data access (object_io.go)
}

// Create makes a new store and returns it open. A directory store (dir set)
// gets opts.Namespaces sparse files of opts.NamespaceSize bytes; a device
// store (dir empty, opts.Devices set) formats the listed block devices or
// files. Create fails with ErrExists if dir already holds namespace files, or
// a device already holds a store and opts.Overwrite is false.
//
// A crash during Create can leave an unusable store; remove it and retry.
func Create(ctx context.Context, dir string, opts CreateOptions) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("bam: create: %w", err)
	}
	if (dir == "") == (len(opts.Devices) == 0) {
		return nil, fmt.Errorf("bam: create: %w", invalidf("give either a directory or Options.Devices"))
	}
	if dir != "" {
		return createDir(ctx, dir, opts)
	}
	return createDevices(ctx, opts)
}

func createDir(ctx context.Context, dir string, opts CreateOptions) (s *Store, err error) {
	if opts.NamespaceSize <= 0 {
		return nil, fmt.Errorf("bam: create %s: %w", dir, invalidf("NamespaceSize is required for a directory store"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bam: create %s: %w", dir, err)
	}
	if found, _ := listNamespaceFiles(dir); len(found) > 0 {
		return nil, fmt.Errorf("bam: create %s: %w: directory holds namespace files", dir, ErrExists)
	}
	var created []string
	var nss []*namespace
	var lock *os.File
	defer func() {
		if err == nil {
			return
		}
		for _, ns := range nss {
			ns.dev.Close()
		}
		if lock != nil {
			lock.Close()
		}
		for _, p := range created {
			os.Remove(p)
		}
	}()
	for i := range opts.Namespaces {
		p := filepath.Join(dir, NamespaceFileName(i))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("bam: create %s: %w: %s", dir, ErrExists, p)
			}
			return nil, fmt.Errorf("bam: create %s: %w", dir, err)
		}
		created = append(created, p)
		if i == 0 {
			lock = f
			if err := flock(f, false); err != nil {
				return nil, fmt.Errorf("bam: create %s: %w", dir, err)
			}
		} else {
			f.Close()
		}
		dev, err := nvme.OpenFileNamespace(p, nvme.FileOptions{LBASize: opts.LBASize, Size: opts.NamespaceSize, Direct: opts.DirectIO})
		if err != nil {
			return nil, fmt.Errorf("bam: create %s: %w", dir, err)
		}
		nss = append(nss, &namespace{dev: dev, name: p, owned: true})
	}
	if err := formatNamespaces(ctx, nss, opts); err != nil {
		return nil, fmt.Errorf("bam: create %s: %w", dir, err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("bam: create %s: %w", dir, err)
	}
	s, err = openVolume(ctx, dir, nss, lock, opts.Options)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func createDevices(ctx context.Context, opts CreateOptions) (s *Store, err error) {
	var nss []*namespace
	var lock *os.File
	defer func() {
		if err != nil {
			closeAll(nss)
			if lock != nil {
				lock.Close()
			}
		}
	}()
	for i, p := range opts.Devices {
		lba, err := deviceLBASize(p, opts.LBASize)
		if err != nil {
			return nil, fmt.Errorf("bam: create: %w", err)
		}
		if i == 0 {
			if lock, err = os.Open(p); err != nil {
				return nil, fmt.Errorf("bam: create: %w", err)
			}
			if err := flock(lock, false); err != nil {
				return nil, fmt.Errorf("bam: create %s: %w", p, err)
			}
		}
		dev, err := nvme.OpenFileNamespace(p, nvme.FileOptions{LBASize: lba, Direct: opts.DirectIO})
		if err != nil {
			return nil, fmt.Errorf("bam: create: %w", err)
		}
		nss = append(nss, &namespace{dev: dev, name: p, owned: true})
	}
	if !opts.Overwrite {
		for _, ns := range nss {
			b, err := readBlocks(ns.dev, 0, format.SuperblockSize)
			if err == nil && len(b) >= 8 && [8]byte(b[:8]) == format.Magic {
				return nil, fmt.Errorf("bam: create: %w: %s holds a bam namespace (set Overwrite to reuse it)", ErrExists, ns.name)
			}
		}
	}
	opts.Namespaces = len(nss)
	if err := formatNamespaces(ctx, nss, opts); err != nil {
		return nil, fmt.Errorf("bam: create: %w", err)
	}
	return openVolume(ctx, "", nss, lock, opts.Options)
}

// CreateOn formats caller-supplied namespaces (memory namespaces in tests,
// namespaces of another controller) as a store and returns it open. The
// caller keeps ownership: Close does not close them.
func CreateOn(ctx context.Context, nss []nvme.Namespace, opts CreateOptions) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("bam: create: %w", err)
	}
	if len(nss) == 0 || len(nss) > format.MaxNamespaces {
		return nil, fmt.Errorf("bam: create: %w", invalidf("%d namespaces: want 1..%d", len(nss), format.MaxNamespaces))
	}
	opts.Namespaces = len(nss)
	handles := wrapNamespaces(nss)
	if err := formatNamespaces(ctx, handles, opts); err != nil {
		return nil, fmt.Errorf("bam: create: %w", err)
	}
	return openVolume(ctx, "", handles, nil, opts.Options)
}

// OpenOn opens a store on caller-supplied namespaces, in any order. The
// caller keeps ownership: Close does not close them.
func OpenOn(ctx context.Context, nss []nvme.Namespace, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("bam: open: %w", err)
	}
	if len(nss) == 0 {
		return nil, fmt.Errorf("bam: open: %w", invalidf("no namespaces"))
	}
	handles := wrapNamespaces(nss)
	for _, ns := range handles {
		if err := ns.readSuperblock(); err != nil {
			return nil, fmt.Errorf("bam: open: %w", err)
		}
	}
	return openVolume(ctx, "", handles, nil, opts)
}

func wrapNamespaces(nss []nvme.Namespace) []*namespace {
	out := make([]*namespace, len(nss))
	for i, d := range nss {
		name := fmt.Sprintf("namespace %d", i)
		if p, ok := d.(interface{ Path() string }); ok {
			name = p.Path()
		}
		out[i] = &namespace{dev: d, name: name}
	}
	return out
}

// formatNamespaces writes fresh superblocks and an empty catalog.
func formatNamespaces(ctx context.Context, nss []*namespace, opts CreateOptions) error {
	lba := uint64(nss[0].dev.LBASize())
	line := uint64(opts.LineSize)
	for _, ns := range nss {
		if l := uint64(ns.dev.LBASize()); l != lba {
			return invalidf("%s has %d-byte blocks, %s has %d-byte blocks", ns.name, l, nss[0].name, lba)
		}
	}
	if err := format.ValidateGeometry(lba, line); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var uuid [16]byte
	if _, err := rand.Read(uuid[:]); err != nil {
		return err
	}
	uuid[6] = uuid[6]&0x0f | 0x40 // RFC 9562 version 4
	uuid[8] = uuid[8]&0x3f | 0x80
	catSize := uint64(opts.CatalogSize)
	base := format.Superblock{
		Version:     format.Version,
		VolumeUUID:  uuid,
		Count:       uint32(len(nss)),
		LBASize:     uint32(lba),
		LineSize:    uint32(line),
		CatalogA:    line, // the superblock gets the first line to itself
		CatalogB:    line + catSize,
		CatalogSize: catSize,
		DataStart:   line + 2*catSize,
		Created:     time.Now().UnixNano(),
	}
	for i, ns := range nss {
		if err := ctx.Err(); err != nil {
			return err
		}
		sb := base
		sb.Index = uint32(i)
		if i == 0 {
			sb.Flags = format.FlagCatalog
		}
		size := ns.dev.Blocks() * lba
		if opts.NamespaceSize > 0 {
			size = min(size, uint64(opts.NamespaceSize))
		}
		sb.Capacity = size / line * line
		if sb.Capacity <= sb.DataStart {
			return invalidf("%s: %d bytes is too small: need more than %d (superblock and two %d-byte catalog slots)",
				ns.name, size, sb.DataStart, catSize)
		}
		if err := sb.Validate(ns.name); err != nil {
			return err
		}
		// Invalidate catalog slots a previous store may have left.
		zero := make([]byte, lba)
		for _, off := range []uint64{sb.CatalogA, sb.CatalogB} {
			if _, err := ns.dev.WriteAt(zero, int64(off)); err != nil {
				return fmt.Errorf("%s: %w", ns.name, err)
			}
		}
		if _, err := ns.dev.WriteAt(padTo(sb.Encode(), lba), 0); err != nil {
			return fmt.Errorf("%s: write superblock: %w", ns.name, err)
		}
		ns.sb = sb
	}
	cat := &format.Catalog{Generation: 0, Volume: uuid, Namespaces: uint32(len(nss)), LBASize: lba, NextID: 1}
	if err := writeCatalog(nss[0], cat); err != nil {
		return err
	}
	for _, ns := range nss {
		if err := ns.dev.Flush(); err != nil {
			return fmt.Errorf("%s: flush: %w", ns.name, err)
		}
	}
	return nil
}

// Open opens the store in directory dir, or, with dir empty, on
// opts.Devices. It verifies every superblock (same volume, namespaces
// 0..N-1 present once each, consistent geometry, sizes) and the catalog,
// and fails with an error wrapping ErrNotFound, ErrCorrupt, ErrVersion or
// ErrLocked that names the file, field and expected value.
func Open(ctx context.Context, dir string, opts Options) (s *Store, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("bam: open: %w", err)
	}
	if (dir == "") == (len(opts.Devices) == 0) {
		return nil, fmt.Errorf("bam: open: %w", invalidf("give either a directory or Options.Devices"))
	}
	what := dir
	var paths []string
	nameIndex := map[string]int{} // index encoded in a directory store's file name
	if dir != "" {
		found, err := listNamespaceFiles(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("bam: open %s: %w: %v", dir, ErrNotFound, err)
			}
			return nil, fmt.Errorf("bam: open %s: %w", dir, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("bam: open %s: %w: no store here (no ns-NNN.bam files)", dir, ErrNotFound)
		}
		for p, i := range found {
			paths = append(paths, p)
			nameIndex[p] = i
		}
		slices.Sort(paths)
	} else {
		paths = opts.Devices
		what = fmt.Sprint(paths)
	}

	var nss []*namespace
	var lock *os.File
	defer func() {
		if err != nil {
			closeAll(nss)
			if lock != nil {
				lock.Close()
			}
		}
	}()
	for _, p := range paths {
		sb, err := readSuperblockFile(p)
		if err != nil {
			return nil, fmt.Errorf("bam: open %s: %w", what, err)
		}
		if i, ok := nameIndex[p]; ok && uint32(i) != sb.Index {
			return nil, fmt.Errorf("bam: open %s: %w", what, &FieldError{File: p, Record: "superblock", Field: "namespace index",
				Got: fmt.Sprint(sb.Index), Want: fmt.Sprintf("%d (from the file name)", i), Err: ErrCorrupt})
		}
		if sb.Index == 0 && lock == nil {
			// Lock before reading the catalog, so a writer in another
			// process is never caught mid-update.
			if lock, err = os.Open(p); err != nil {
				return nil, fmt.Errorf("bam: open %s: %w", what, err)
			}
			if err := flock(lock, opts.ReadOnly); err != nil {
				return nil, fmt.Errorf("bam: open %s: %w", what, err)
			}
		}
		dev, err := nvme.OpenFileNamespace(p, nvme.FileOptions{LBASize: int(sb.LBASize), Direct: opts.DirectIO, ReadOnly: opts.ReadOnly})
		if err != nil {
			return nil, fmt.Errorf("bam: open %s: %w", what, err)
		}
		nss = append(nss, &namespace{dev: dev, name: p, owned: true, sb: sb})
	}
	return openVolume(ctx, dir, nss, lock, opts)
}

// openVolume verifies the superblocks of nss (already read into ns.sb, or
// read here when zero), orders them by index, loads the catalog and returns
// the open store. On error it leaves closing nss to the caller.
func openVolume(ctx context.Context, dir string, nss []*namespace, lock *os.File, opts Options) (*Store, error) {
	if err := checkEngine(opts); err != nil {
		return nil, fmt.Errorf("bam: open: %w", err)
	}
	what := dir
	if what == "" {
		what = fmt.Sprintf("%d namespaces", len(nss))
	}
	for _, ns := range nss {
		if err := ns.readSuperblock(); err != nil {
			return nil, fmt.Errorf("bam: open %s: %w", what, err)
		}
	}
	ordered, err := verifyVolume(dir, nss)
	if err != nil {
		return nil, fmt.Errorf("bam: open %s: %w", what, err)
	}
	sb0 := &ordered[0].sb
	s := &Store{
		dir:      dir,
		opts:     opts,
		log:      opts.Logger,
		ns:       ordered,
		lock:     lock,
		lbaSize:  uint64(sb0.LBASize),
		lineSize: uint64(sb0.LineSize),
		uuid:     sb0.VolumeUUID,
		now:      time.Now,
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cat, err := s.readCatalog()
	if err != nil {
		return nil, fmt.Errorf("bam: open %s: %w", what, err)
	}
	s.cat.Store(cat)
	s.log.Info("opened store", "store", what, "namespaces", len(ordered), "line_size", s.lineSize,
		"catalog_generation", cat.Generation, "objects", len(cat.Objects))
	return s, nil
}

// readSuperblock fills ns.sb from the device when it is still zero.
func (ns *namespace) readSuperblock() error {
	if ns.sb.Version != 0 {
		return nil
	}
	b, err := readBlocks(ns.dev, 0, format.SuperblockSize)
	if err != nil {
		return fmt.Errorf("%s: read superblock: %w", ns.name, err)
	}
	ns.sb, err = format.DecodeSuperblock(b, ns.name)
	return err
}

// verifyVolume checks that nss are the namespaces 0..N-1 of one volume with
// the same geometry and returns them ordered by index.
func verifyVolume(dir string, nss []*namespace) ([]*namespace, error) {
	ref := nss[0]
	for _, ns := range nss {
		if ns.sb.Index == 0 {
			ref = ns
		}
	}
	count := ref.sb.Count
	ordered := make([]*namespace, count)
	mismatch := func(ns *namespace, field string, got, want any) error {
		return &FieldError{File: ns.name, Record: "superblock", Field: field, Got: fmt.Sprint(got),
			Want: fmt.Sprintf("%v (as in %s)", want, ref.name), Err: ErrCorrupt}
	}
	for _, ns := range nss {
		sb, r := &ns.sb, &ref.sb
		switch {
		case sb.VolumeUUID != r.VolumeUUID:
			return nil, mismatch(ns, "volume UUID", uuidString(sb.VolumeUUID), uuidString(r.VolumeUUID))
		case sb.Count != r.Count:
			return nil, mismatch(ns, "namespace count", sb.Count, r.Count)
		case sb.LBASize != r.LBASize:
			return nil, mismatch(ns, "LBA size", sb.LBASize, r.LBASize)
		case sb.LineSize != r.LineSize:
			return nil, mismatch(ns, "line size", sb.LineSize, r.LineSize)
		case sb.CatalogA != r.CatalogA || sb.CatalogSize != r.CatalogSize:
			return nil, mismatch(ns, "catalog slot A offset/size", fmt.Sprintf("%d/%d", sb.CatalogA, sb.CatalogSize), fmt.Sprintf("%d/%d", r.CatalogA, r.CatalogSize))
		}
		if sb.Index >= count {
			return nil, mismatch(ns, "namespace index", sb.Index, fmt.Sprintf("< %d", count))
		}
		if prev := ordered[sb.Index]; prev != nil {
			return nil, &FieldError{File: ns.name, Record: "superblock", Field: "namespace index", Got: fmt.Sprint(sb.Index),
				Want: fmt.Sprintf("unique, but %s has it too", prev.name), Err: ErrCorrupt}
		}
		if have := ns.dev.Blocks() * uint64(ns.dev.LBASize()); have < sb.Capacity {
			return nil, &FieldError{File: ns.name, Record: "superblock", Field: "capacity", Got: fmt.Sprint(sb.Capacity),
				Want: fmt.Sprintf("at most the namespace size %d (truncated file or wrong device?)", have), Err: ErrCorrupt}
		}
		if uint64(ns.dev.LBASize()) != uint64(sb.LBASize) {
			return nil, &FieldError{File: ns.name, Record: "superblock", Field: "LBA size", Got: fmt.Sprint(sb.LBASize),
				Want: fmt.Sprintf("%d (the namespace's block size)", ns.dev.LBASize()), Err: ErrCorrupt}
		}
		ordered[sb.Index] = ns
	}
	for i, ns := range ordered {
		if ns == nil {
			file := fmt.Sprintf("namespace %d", i)
			if dir != "" {
				file = filepath.Join(dir, NamespaceFileName(i))
			}
			return nil, &FieldError{File: file, Record: "volume " + uuidString(ref.sb.VolumeUUID), Field: "namespace " + strconv.Itoa(i),
				Got: "missing", Want: fmt.Sprintf("present (the volume has %d namespaces)", count), Err: ErrCorrupt}
		}
	}
	return ordered, nil
}

// readCatalog reads both slots on namespace 0, picks the newest valid one
// and checks it against the superblocks.
func (s *Store) readCatalog() (*format.Catalog, error) {
	ns0 := s.ns[0]
	var slots [2][]byte
	for i, off := range []uint64{ns0.sb.CatalogA, ns0.sb.CatalogB} {
		head, err := readBlocks(ns0.dev, off, format.CatalogHeaderSize)
		if err != nil {
			return nil, fmt.Errorf("%s: read catalog slot %s: %w", ns0.name, format.SlotName(i), err)
		}
		n := uint64(binary.LittleEndian.Uint32(head[12:])) + format.CatalogHeaderSize
		if n > uint64(len(head)) && n <= ns0.sb.CatalogSize && [8]byte(head[:8]) == format.CatalogMagic {
			if head, err = readBlocks(ns0.dev, off, n); err != nil {
				return nil, fmt.Errorf("%s: read catalog slot %s: %w", ns0.name, format.SlotName(i), err)
			}
		}
		slots[i] = head
	}
	cat, err := format.DecodeCatalog(slots[0], slots[1], ns0.name)
	if err != nil {
		return nil, err
	}
	if err := s.checkCatalog(cat); err != nil {
		return nil, err
	}
	return cat, nil
}

// checkCatalog verifies what the catalog says against the superblocks:
// same volume and geometry, every extent inside its namespace's data area,
// no two extents overlapping.
func (s *Store) checkCatalog(c *format.Catalog) error {
	ns0 := s.ns[0]
	rec := fmt.Sprintf("catalog generation %d", c.Generation)
	bad := func(field string, got, want any) error {
		return &FieldError{File: ns0.name, Record: rec, Field: field, Got: fmt.Sprint(got), Want: fmt.Sprint(want), Err: ErrCorrupt}
	}
	switch {
	case c.Volume != s.uuid:
		return bad("volume UUID", uuidString(c.Volume), uuidString(s.uuid)+" (the superblocks')")
	case c.Namespaces != uint32(len(s.ns)):
		return bad("namespaces", c.Namespaces, len(s.ns))
	case c.LBASize != s.lbaSize:
		return bad("LBA size", c.LBASize, s.lbaSize)
	}
	lpl := s.lineSize / s.lbaSize
	for i := range c.Objects {
		o := &c.Objects[i]
		if o.LineSize != s.lineSize {
			return bad(fmt.Sprintf("object %q line size", o.Name), o.LineSize, s.lineSize)
		}
		for k, e := range o.Extents {
			if e.Lines == 0 {
				continue
			}
			sb := &s.ns[k].sb
			lo, hi := sb.DataStart/s.lbaSize, sb.Capacity/s.lbaSize
			if e.StartLBA < lo || e.StartLBA > hi || e.Lines > (hi-e.StartLBA)/lpl {
				return bad(fmt.Sprintf("object %q extent %d", o.Name, k), fmt.Sprintf("LBAs %d+%d lines", e.StartLBA, e.Lines),
					fmt.Sprintf("inside the data area [%d, %d) of %s", lo, hi, s.ns[k].name))
			}
		}
	}
	for k := range s.ns {
		runs := usedRuns(c, k, lpl)
		for j := 1; j < len(runs); j++ {
			if runs[j][0] < runs[j-1][1] {
				return bad(fmt.Sprintf("extents on namespace %d", k), fmt.Sprintf("LBA runs %v and %v overlap", runs[j-1], runs[j]), "disjoint extents")
			}
		}
	}
	return nil
}

// update applies fn to a copy of the catalog with the next generation,
// writes it to the slot of that generation's parity, flushes, and only then
// publishes it. If anything fails the published catalog is unchanged, and
// the on-disk slot holding it is untouched.
func (s *Store) update(ctx context.Context, fn func(c *format.Catalog) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	next := s.cat.Load().Clone()
	next.Generation++
	if err := fn(next); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := writeCatalog(s.ns[0], next); err != nil {
		return err
	}
	s.cat.Store(next)
	return nil
}

// writeCatalog writes c to its slot on ns and flushes.
func writeCatalog(ns *namespace, c *format.Catalog) error {
	enc, err := c.Encode()
	if err != nil {
		return fmt.Errorf("encode catalog generation %d: %w", c.Generation, err)
	}
	if uint64(len(enc)) > ns.sb.CatalogSize {
		return fmt.Errorf("%w: catalog of %d bytes does not fit its %d-byte slot (create the store with a larger CatalogSize)",
			ErrNoSpace, len(enc), ns.sb.CatalogSize)
	}
	off := ns.sb.CatalogA
	if format.Slot(c.Generation) == 1 {
		off = ns.sb.CatalogB
	}
	if _, err := ns.dev.WriteAt(padTo(enc, uint64(ns.dev.LBASize())), int64(off)); err != nil {
		return fmt.Errorf("%s: write catalog generation %d to slot %s: %w", ns.name, c.Generation, format.SlotName(format.Slot(c.Generation)), err)
	}
	if err := ns.dev.Flush(); err != nil {
		return fmt.Errorf("%s: flush catalog generation %d: %w", ns.name, c.Generation, err)
	}
	return nil
}

// Close closes the namespaces the store opened and releases its lock. It
// waits for a catalog update in progress. The GPU engine waits for
// commands still running in the namespaces at most its wait bound: past
// it, Close returns an error wrapping nvme.ErrStillRunning, and the
// engine's memory is freed once those commands return. Closing twice
// returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	err := s.closeEngine(context.Background())
	err = errors.Join(err, closeAll(s.ns))
	if s.lock != nil {
		err = errors.Join(err, s.lock.Close())
	}
	if err != nil {
		return fmt.Errorf("bam: close: %w", err)
	}
	return nil
}

// NamespaceInfo describes one namespace of an open store.
type NamespaceInfo struct {
	Index     int    `json:"index"`
	Path      string `json:"path"`
	LBASize   int    `json:"lba_size"`
	Capacity  uint64 `json:"capacity"`   // bytes, end of the data area
	DataStart uint64 `json:"data_start"` // bytes
	DataLines uint64 `json:"data_lines"`
	UsedLines uint64 `json:"used_lines"`
	// LargestFree is the longest run of free lines: the largest extent a
	// new object can get on this namespace.
	LargestFree uint64 `json:"largest_free"`
}

// StoreInfo describes an open store.
type StoreInfo struct {
	Dir               string          `json:"dir,omitempty"`
	VolumeUUID        string          `json:"volume_uuid"`
	FormatVersion     int             `json:"format_version"`
	LineSize          int             `json:"line_size"`
	LBASize           int             `json:"lba_size"`
	Created           time.Time       `json:"created"`
	ReadOnly          bool            `json:"read_only"`
	CatalogGeneration uint64          `json:"catalog_generation"`
	CatalogBytes      int             `json:"catalog_bytes"`      // encoded size of the current catalog
	CatalogSlotBytes  uint64          `json:"catalog_slot_bytes"` // room in each slot
	Objects           int             `json:"objects"`
	Namespaces        []NamespaceInfo `json:"namespaces"`
}

// Info describes the store: volume, geometry, catalog and space per
// namespace.
func (s *Store) Info() (StoreInfo, error) {
	c, err := s.catalog()
	if err != nil {
		return StoreInfo{}, err
	}
	sb0 := &s.ns[0].sb
	info := StoreInfo{
		Dir:               s.dir,
		VolumeUUID:        uuidString(s.uuid),
		FormatVersion:     int(sb0.Version),
		LineSize:          int(s.lineSize),
		LBASize:           int(s.lbaSize),
		Created:           time.Unix(0, sb0.Created),
		ReadOnly:          s.opts.ReadOnly,
		CatalogGeneration: c.Generation,
		CatalogBytes:      format.CatalogHeaderSize + len(c.EncodeBody()),
		CatalogSlotBytes:  sb0.CatalogSize,
		Objects:           len(c.Objects),
	}
	lpl := s.lineSize / s.lbaSize
	for k, ns := range s.ns {
		ni := NamespaceInfo{Index: k, Path: ns.name, LBASize: int(ns.sb.LBASize), Capacity: ns.sb.Capacity,
			DataStart: ns.sb.DataStart, DataLines: ns.sb.DataLines()}
		var free uint64
		s.freeRuns(c, k, func(start, end uint64) bool {
			n := (end - start) / lpl
			free += n
			ni.LargestFree = max(ni.LargestFree, n)
			return true
		})
		ni.UsedLines = ni.DataLines - free
		info.Namespaces = append(info.Namespaces, ni)
	}
	return info, nil
}

// LineSize returns the store's line size in bytes.
func (s *Store) LineSize() int { return int(s.lineSize) }

// LBASize returns the logical block size of the store's namespaces.
func (s *Store) LBASize() int { return int(s.lbaSize) }

// NamespaceCount returns the number of namespaces.
func (s *Store) NamespaceCount() int { return len(s.ns) }

// Options returns the options the store was opened with, defaults applied.
func (s *Store) Options() Options { return s.opts }

// Logger returns the store's logger.
func (s *Store) Logger() *slog.Logger { return s.log }

// dataNamespaces returns the store's namespaces by index. This is the seam
// for the data path: the engine (CPU or GPU) builds its nvme.Target, queue
// pairs and cache over these. Metadata I/O (superblocks, catalog) stays in
// this file; the engine must not write below a namespace's DataStart.
func (s *Store) dataNamespaces() []nvme.Namespace {
	out := make([]nvme.Namespace, len(s.ns))
	for i, ns := range s.ns {
		out[i] = ns.dev
	}
	return out
}

func closeAll(nss []*namespace) error {
	var errs []error
	for _, ns := range nss {
		if ns != nil && ns.owned {
			if err := ns.dev.Close(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ns.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// readBlocks reads at least n bytes at off, rounded out to whole blocks so
// that O_DIRECT namespaces accept it. off must be block-aligned.
func readBlocks(dev nvme.Namespace, off, n uint64) ([]byte, error) {
	lba := uint64(dev.LBASize())
	b := make([]byte, (n+lba-1)/lba*lba)
	if _, err := dev.ReadAt(b, int64(off)); err != nil {
		return nil, err
	}
	return b, nil
}

func padTo(b []byte, lba uint64) []byte {
	if r := uint64(len(b)) % lba; r != 0 {
		b = append(b, make([]byte, lba-r)...)
	}
	return b
}

// readSuperblockFile reads the superblock of a namespace file or device
// before it is opened as a namespace (whose LBA size it gives).
func readSuperblockFile(p string) (format.Superblock, error) {
	f, err := os.Open(p)
	if err != nil {
		return format.Superblock{}, err
	}
	defer f.Close()
	b := make([]byte, format.SuperblockSize)
	n, err := f.ReadAt(b, 0)
	if n < len(b) {
		return format.DecodeSuperblock(b[:n], p)
	}
	if err != nil {
		return format.Superblock{}, fmt.Errorf("%s: read superblock: %w", p, err)
	}
	return format.DecodeSuperblock(b, p)
}

// listNamespaceFiles maps the paths of dir's ns-NNN.bam files to the index
// in their names.
func listNamespaceFiles(dir string) (map[string]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range ents {
		m := nsFileRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		out[filepath.Join(dir, e.Name())] = i
	}
	return out, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// flock takes a non-blocking advisory lock: shared for readers, exclusive
// for writers.
func flock(f *os.File, shared bool) error {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("%w: %s", ErrLocked, f.Name())
		}
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
}

// deviceLBASize returns the logical block size of a block device, or def
// for a regular file.
func deviceLBASize(p string, def int) (int, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, err
	}
	if fi.Mode()&os.ModeDevice == 0 {
		return def, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, fmt.Errorf("%s: logical block size: %w", p, err)
	}
	return size, nil
}

func uuidString(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
