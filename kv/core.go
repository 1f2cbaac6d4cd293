package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/bam-go/bam"
	"github.com/bam-go/bam/kv/wal"
)

// Catalog metadata of a table object.
const (
	metaFormat    = "kv.format"
	metaVariant   = "kv.variant"
	metaKeySize   = "kv.key_size"
	metaValSize   = "kv.value_size"
	metaKeyType   = "kv.key_type"
	metaValType   = "kv.value_type"
	metaID        = "kv.id"
	metaLen       = "kv.len"
	metaUsed      = "kv.used"
	metaCkpt      = "kv.ckpt_lsn"
	formatVersion = "1"

	// BucketElemType is the catalog element type of a table's bucket lines.
	BucketElemType = "kv-bucket"
	// rehashSuffix names the object a growing table is rebuilt into.
	rehashSuffix = ".rehash"
)

// Log record types.
const (
	recBatch  = 1 // logical operations: u64 len after, u64 used after, u32 n, n x (u8 op, key[, value])
	recImages = 2 // bucket images of a checkpoint: u32 n, n x (u64 bucket, line)
	recCommit = 3 // end of a checkpoint's images: u64 buckets, u64 len, u64 used

	opPut    = 1
	opDelete = 2
)

// Defaults of Options.
const (
	DefaultMaxLoad         = 0.85
	DefaultCheckpointBytes = 64 << 20
	DefaultLogBytes        = 256 << 20
	DefaultCapacity        = 1024
)

// Options configure Create and Open. The zero value is ready to use.
type Options struct {
	// SyncWrites makes every write durable before it returns (one log
	// sync, shared by concurrent writers). Without it, writes are durable
	// after Sync, Checkpoint or Close (DESIGN.md §7).
	SyncWrites bool

	// Capacity is the number of entries Create sizes the table for at
	// MaxLoad. Default 1024. Tables grow by rehashing when full.
	Capacity uint64

	// MaxLoad is the fraction of slots (live entries and tombstones) above
	// which the table is rehashed into a larger one. Default 0.85.
	MaxLoad float64

	// CheckpointBytes bounds the host memory of bucket lines changed since
	// the last checkpoint; reaching it checkpoints. Default 64 MiB.
	CheckpointBytes int64

	// LogBytes bounds the log; reaching it checkpoints. Default 256 MiB.
	LogBytes int64

	// LogDir is the directory of the table's log (kv-<id>.wal) and value
	// log (kv-<id>.vlog). Default: the store's directory. Required for
	// stores on block devices.
	LogDir string

	// TruncateCorruptLog lets Open drop a log's records from a corrupt
	// one on even when valid records follow it (losing them), instead of
	// failing with ErrCorrupt.
	TruncateCorruptLog bool

	// Logger receives recovery and checkpoint notes. Default: the store's.
	Logger *slog.Logger

	// openLogFile substitutes the log's file (tests).
	openLogFile func(path string) (wal.File, error)
}

func (o *Options) fill(s *bam.Store) error {
	if o.Capacity == 0 {
		o.Capacity = DefaultCapacity
	}
	if o.MaxLoad == 0 {
		o.MaxLoad = DefaultMaxLoad
	}
	if o.CheckpointBytes == 0 {
		o.CheckpointBytes = DefaultCheckpointBytes
	}
	if o.LogBytes == 0 {
		o.LogBytes = DefaultLogBytes
	}
	if o.Logger == nil {
		o.Logger = s.Logger()
	}
	switch {
	case o.MaxLoad < 0.1 || o.MaxLoad > 0.95:
		return fmt.Errorf("%w: MaxLoad %g: want 0.1..0.95", ErrInvalid, o.MaxLoad)
	case o.CheckpointBytes < 0 || o.LogBytes < 0:
		return fmt.Errorf("%w: negative CheckpointBytes or LogBytes", ErrInvalid)
	}
	if o.LogDir == "" {
		info, err := s.Info()
		if err != nil {
			return err
		}
		if info.Dir == "" {
			return ErrNoLog
		}
		o.LogDir = info.Dir
	}
	return nil
}

// schema is what a table's metadata fixes at creation.
type schema struct {
	variant          string // "fixed" or "bytes"
	ks, vs           int
	keyType, valType string
}

// core is the untyped table: byte keys of one size, byte values of one
// size. Table[K, V] and BytesTable[K] are typed views of it.
//
// Lines of the live bucket object are written only by checkpoints and by
// recovery finishing one; between checkpoints every changed bucket lives in
// dirty, so the object on storage always holds the state of the last
// completed checkpoint, and a checkpoint that is cut short is finished from
// the images in the log (see checkpoint.go).
type core struct {
	s      *bam.Store
	name   string
	opts   Options
	sch    schema
	geo    geometry
	id     [16]byte
	log    *wal.Log
	logger *slog.Logger

	mu      sync.RWMutex
	obj     *bam.Object
	data    *bam.Data
	nb      uint64            // buckets, a power of two
	dirty   map[uint64][]byte // bucket -> line changed since the last checkpoint
	count   uint64            // live entries
	used    uint64            // live entries + tombstones
	gen     uint64            // bumped when the lines on storage change (checkpoint, rehash)
	closed  bool
	failed  error
	stats   Stats
	statsMu sync.Mutex
}

// Stats counts a table's work since it was opened.
type Stats struct {
	Gets        uint64 `json:"gets"`
	Puts        uint64 `json:"puts"`
	Deletes     uint64 `json:"deletes"`
	Probes      uint64 `json:"probes"` // bucket lines examined by lookups
	Checkpoints uint64 `json:"checkpoints"`
	Rehashes    uint64 `json:"rehashes"`
	Replayed    uint64 `json:"replayed"` // log records replayed by the last open
}

// Info describes a table.
type Info struct {
	Name          string  `json:"name"`
	Variant       string  `json:"variant"`
	KeySize       int     `json:"key_size"`
	ValueSize     int     `json:"value_size"`
	KeyType       string  `json:"key_type"`
	ValueType     string  `json:"value_type"`
	Len           uint64  `json:"len"`
	Buckets       uint64  `json:"buckets"`
	SlotsPerLine  int     `json:"slots_per_bucket"`
	LineSize      int     `json:"line_size"`
	Load          float64 `json:"load"` // used slots / slots
	DirtyBuckets  int     `json:"dirty_buckets"`
	LogPath       string  `json:"log_path"`
	LogBytes      int64   `json:"log_bytes"`
	CheckpointLSN uint64  `json:"checkpoint_lsn"`
	LastLSN       uint64  `json:"last_lsn"`
	Stats         Stats   `json:"stats"`
}

func (c *core) errorf(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("kv: %s %q: %w", op, c.name, err)
}

func (c *core) logPath() string {
	return filepath.Join(c.opts.LogDir, "kv-"+hex.EncodeToString(c.id[:])+".wal")
}

func (c *core) capacity() uint64 { return c.nb * uint64(c.geo.slots) }

// bucketsFor returns the power-of-two bucket count holding n entries at
// load.
func bucketsFor(n uint64, slots int, load float64) uint64 {
	need := uint64(float64(n)/(load*float64(slots))) + 1
	nb := uint64(1)
	for nb < need {
		nb <<= 1
	}
	return nb
}

func (c *core) meta(ckpt, count, used uint64) map[string]string {
	return map[string]string{
		metaFormat:  formatVersion,
		metaVariant: c.sch.variant,
		metaKeySize: strconv.Itoa(c.sch.ks),
		metaValSize: strconv.Itoa(c.sch.vs),
		metaKeyType: c.sch.keyType,
		metaValType: c.sch.valType,
		metaID:      hex.EncodeToString(c.id[:]),
		metaLen:     strconv.FormatUint(count, 10),
		metaUsed:    strconv.FormatUint(used, 10),
		metaCkpt:    strconv.FormatUint(ckpt, 10),
	}
}

// createCore makes a new table object and its empty log.
func createCore(ctx context.Context, s *bam.Store, name string, sch schema, opts *Options) (*core, error) {
	c := &core{s: s, name: name, sch: sch, dirty: map[uint64][]byte{}}
	if opts != nil {
		c.opts = *opts
	}
	if err := c.opts.fill(s); err != nil {
		return nil, c.errorf("create", err)
	}
	c.logger = c.opts.Logger
	var err error
	if c.geo, err = newGeometry(s.LineSize(), sch.ks, sch.vs); err != nil {
		return nil, c.errorf("create", err)
	}
	if _, err := rand.Read(c.id[:]); err != nil {
		return nil, c.errorf("create", err)
	}
	if _, err := s.Object(name); err == nil {
		return nil, c.errorf("create", bam.ErrExists)
	}
	c.nb = bucketsFor(c.opts.Capacity, c.geo.slots, c.opts.MaxLoad)
	// The log exists before the object names it, so a table in the
	// catalog always has one.
	if c.log, err = c.openLog(0, func(wal.Record) error { return nil }); err != nil {
		return nil, c.errorf("create", err)
	}
	obj, err := s.CreateObject(ctx, bam.ObjectSpec{Name: name, Kind: bam.KindTable, ElemType: BucketElemType,
		ElemSize: c.geo.line, Length: c.nb, Meta: c.meta(0, 0, 0)})
	if err != nil {
		c.log.Close(ctx)
		return nil, err
	}
	if err := c.bind(obj); err != nil {
		c.log.Close(ctx)
		return nil, c.errorf("create", err)
	}
	return c, nil
}

func (c *core) openLog(after uint64, fn func(wal.Record) error) (*wal.Log, error) {
	l, err := wal.Open(c.logPath(), wal.Options{ID: c.id, After: after, TruncateCorrupt: c.opts.TruncateCorruptLog,
		OpenFile: c.opts.openLogFile, Logger: c.logger}, fn)
	if err != nil {
		return nil, logErr(err)
	}
	return l, nil
}

// logErr adds the package's sentinels to a log error.
func logErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wal.ErrNoSpace):
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, wal.ErrCorrupt), errors.Is(err, wal.ErrMismatch), errors.Is(err, wal.ErrVersion):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

func (c *core) bind(obj *bam.Object) error {
	d, err := c.s.Data(obj)
	if err != nil {
		return err
	}
	c.obj, c.data, c.nb = obj, d, obj.Len()
	if c.nb == 0 || c.nb&(c.nb-1) != 0 {
		return fmt.Errorf("%w: %d buckets is not a power of two", ErrCorrupt, c.nb)
	}
	return nil
}

// readSchema checks a table object's metadata.
func readSchema(obj *bam.Object) (schema, [16]byte, map[string]uint64, error) {
	var sch schema
	var id [16]byte
	nums := map[string]uint64{}
	if err := obj.CheckType(bam.KindTable, BucketElemType, obj.LineSize()); err != nil {
		return sch, id, nil, err
	}
	get := func(k string) (string, error) {
		v, ok := obj.Meta(k)
		if !ok {
			return "", fmt.Errorf("%w: metadata %q missing", ErrCorrupt, k)
		}
		return v, nil
	}
	f, err := get(metaFormat)
	if err != nil {
		return sch, id, nil, err
	}
	if f != formatVersion {
		return sch, id, nil, fmt.Errorf("%w: table format %q, this code reads %q", bam.ErrVersion, f, formatVersion)
	}
	if sch.variant, err = get(metaVariant); err != nil {
		return sch, id, nil, err
	}
	sch.keyType, _ = obj.Meta(metaKeyType)
	sch.valType, _ = obj.Meta(metaValType)
	for _, k := range []string{metaKeySize, metaValSize, metaLen, metaUsed, metaCkpt} {
		v, err := get(k)
		if err != nil {
			return sch, id, nil, err
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return sch, id, nil, fmt.Errorf("%w: metadata %s=%q: %v", ErrCorrupt, k, v, err)
		}
		nums[k] = n
	}
	sch.ks, sch.vs = int(nums[metaKeySize]), int(nums[metaValSize])
	h, err := get(metaID)
	if err != nil {
		return sch, id, nil, err
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 16 {
		return sch, id, nil, fmt.Errorf("%w: metadata %s=%q is not 16 hex bytes", ErrCorrupt, metaID, h)
	}
	copy(id[:], b)
	return sch, id, nums, nil
}

// openCore opens a table, checks its schema against want and recovers it.
func openCore(ctx context.Context, s *bam.Store, name string, want schema, opts *Options) (*core, error) {
	c := &core{s: s, name: name, dirty: map[uint64][]byte{}}
	if opts != nil {
		c.opts = *opts
	}
	if err := c.opts.fill(s); err != nil {
		return nil, c.errorf("open", err)
	}
	c.logger = c.opts.Logger
	obj, err := s.Object(name)
	if err != nil {
		return nil, err
	}
	sch, id, nums, err := readSchema(obj)
	if err != nil {
		return nil, c.errorf("open", err)
	}
	if sch.variant != want.variant {
		return nil, c.errorf("open", fmt.Errorf("%w: table is of the %s variant, opened as %s", ErrTypeMismatch, sch.variant, want.variant))
	}
	if sch.ks != want.ks || sch.vs != want.vs || (want.keyType != "" && sch.keyType != want.keyType) || (want.valType != "" && sch.valType != want.valType) {
		return nil, c.errorf("open", fmt.Errorf("%w: table has %d-byte keys (%s) and %d-byte values (%s), opened with %d-byte keys (%s) and %d-byte values (%s)",
			ErrTypeMismatch, sch.ks, sch.keyType, sch.vs, sch.valType, want.ks, want.keyType, want.vs, want.valType))
	}
	c.sch, c.id = sch, id
	if c.geo, err = newGeometry(s.LineSize(), sch.ks, sch.vs); err != nil {
		return nil, c.errorf("open", err)
	}
	if err := c.bind(obj); err != nil {
		return nil, c.errorf("open", err)
	}
	c.count, c.used = nums[metaLen], nums[metaUsed]
	// A rehash cut short leaves its object behind; the live name is
	// right either way (SwapObjects is atomic).
	if _, err := s.Object(name + rehashSuffix); err == nil && !s.Options().ReadOnly {
		if err := s.DeleteObject(ctx, name+rehashSuffix); err != nil {
			return nil, c.errorf("open", fmt.Errorf("remove leftover rehash object: %w", err))
		}
	}
	if err := c.recover(ctx, nums[metaCkpt]); err != nil {
		if c.log != nil {
			c.log.Close(ctx)
		}
		return nil, c.errorf("open", err)
	}
	return c, nil
}

// usable reports why the table cannot be used, if it cannot.
func (c *core) usable(write bool) error {
	if c.closed {
		return ErrClosed
	}
	if write && c.failed != nil {
		return c.failed
	}
	return nil
}

func (c *core) addStats(f func(*Stats)) {
	c.statsMu.Lock()
	f(&c.stats)
	c.statsMu.Unlock()
}

// info describes the table.
func (c *core) info() Info {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ck, _ := c.obj.Meta(metaCkpt)
	ckpt, _ := strconv.ParseUint(ck, 10, 64)
	c.statsMu.Lock()
	st := c.stats
	c.statsMu.Unlock()
	return Info{Name: c.name, Variant: c.sch.variant, KeySize: c.sch.ks, ValueSize: c.sch.vs, KeyType: c.sch.keyType,
		ValueType: c.sch.valType, Len: c.count, Buckets: c.nb, SlotsPerLine: c.geo.slots, LineSize: c.geo.line,
		Load: float64(c.used) / float64(c.capacity()), DirtyBuckets: len(c.dirty), LogPath: c.logPath(),
		LogBytes: c.log.Size(), CheckpointLSN: ckpt, LastLSN: c.log.LastLSN(), Stats: st}
}

func putU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
