package gpuengine

import (
	"strings"
	"testing"

	"github.com/bam-go/bam/gpucache"
	"github.com/bam-go/bam/nvme"
)

func TestConfigMoreCaches(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{MoreCaches: []CacheConfig{{LineSize: 1024}}}, ""},
		{Config{MoreCaches: []CacheConfig{{LineSize: 4096}}}, "two caches of 4096-byte lines"},
		{Config{MoreCaches: []CacheConfig{{LineSize: 3000}}}, "line size 3000"},
		{Config{MoreCaches: []CacheConfig{{}}}, "line size 0"},
		{Config{MoreCaches: []CacheConfig{{LineSize: 65536, CacheBytes: 4096}}}, "holds less than one set"},
		{Config{QueuePairs: 600, MoreCaches: []CacheConfig{{LineSize: 1024}}}, "want at most 1024 in all"},
		{Config{QueuePairs: 16, ReadAheadQueuePairs: -1, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 1009}}}, "1025 queue pairs over 2 caches"},
		{Config{QueuePairs: 16, ReadAheadQueuePairs: -1, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 1008}}}, ""},
		// Each cache's read-ahead pairs count too.
		{Config{QueuePairs: 16, ReadAheadQueuePairs: 4, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 1001}}}, "1025 queue pairs over 2 caches"},
		{Config{QueuePairs: 16, ReadAheadQueuePairs: 4, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 1000}}}, ""},
		{Config{QueuePairs: -1}, "-1 queue pairs for the cache of 4096-byte lines"},
		{Config{ReadAheadReadBytes: 12 << 10}, "read-ahead Reads of 12288 bytes"},
		{Config{ReadAheadReadBytes: 2 << 20}, "read-ahead Reads of 2097152 bytes"},
		{Config{ReadAheadReadBytes: -4096}, "read-ahead Reads of -4096 bytes"},
		{Config{ReadAheadReadBytes: 1024}, ""}, // below the line size: one line
		{Config{MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: -2}}}, "-2 queue pairs for the cache of 1024-byte lines"},
	} {
		err := tc.cfg.fill()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg.MoreCaches, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one saying %q", tc.cfg.MoreCaches, err, tc.want)
		}
	}
	mine := []CacheConfig{{LineSize: 1024}}
	c := Config{MoreCaches: mine}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if mine[0].CacheBytes != 0 {
		t.Errorf("fill wrote its default into the caller's slice")
	}
	if c.MoreCaches[0].CacheBytes != 256<<20 {
		t.Errorf("default cache size %d", c.MoreCaches[0].CacheBytes)
	}
	if got := c.caches(); len(got) != 2 || got[0].LineSize != 4096 || got[1].LineSize != 1024 {
		t.Errorf("caches %+v", got)
	}
	if c.MoreCaches[0].QueuePairs != DefaultQueuePairs {
		t.Errorf("default queue pairs of a further cache %d, want the engine's %d", c.MoreCaches[0].QueuePairs, DefaultQueuePairs)
	}
	c = Config{QueuePairs: 3, ReadAheadQueuePairs: -1, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 2}}}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.totalQueuePairs() != 5 || c.TargetWorkers > 5 {
		t.Errorf("%d queue pairs in all and %d target workers, want 5 and at most 5", c.totalQueuePairs(), c.TargetWorkers)
	}
	c = Config{QueuePairs: 3, ReadAheadQueuePairs: 4, MoreCaches: []CacheConfig{{LineSize: 1024, QueuePairs: 2}}}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.totalQueuePairs() != 13 {
		t.Errorf("%d queue pairs in all with 4 read-ahead pairs a cache, want 13", c.totalQueuePairs())
	}
	// Read-ahead pairs of 16 KiB Reads: 4-line slots, a quarter of the
	// entries, the same staging bytes.
	c = Config{QueuePairs: 2, QueueDepth: 64, ReadAheadQueuePairs: 3, ReadAheadReadBytes: 16 << 10}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if l, d := c.aheadLines(4096), c.aheadDepth(4096, 64); l != 4 || d != 16 {
		t.Errorf("read-ahead slots of %d lines, %d entries; want 4 and 16", l, d)
	}
	if l, d := c.aheadLines(65536), c.aheadDepth(65536, 2); l != 1 || d != 2 {
		t.Errorf("64 KiB lines: read-ahead slots of %d lines, %d entries; want 1 and 2", l, d)
	}
	if c.totalQueueEntries() != 2*64+3*16 {
		t.Errorf("%d queue entries, want %d", c.totalQueueEntries(), 2*64+3*16)
	}
}

// hugeNamespace claims more blocks than a cache tag can name; nothing reads
// or writes it.
type hugeNamespace struct{ blocks uint64 }

func (h hugeNamespace) LBASize() int                             { return 512 }
func (h hugeNamespace) Blocks() uint64                           { return h.blocks }
func (h hugeNamespace) ReadAt(p []byte, off int64) (int, error)  { return 0, nil }
func (h hugeNamespace) WriteAt(p []byte, off int64) (int, error) { return 0, nil }
func (h hugeNamespace) Flush() error                             { return nil }
func (h hugeNamespace) Close() error                             { return nil }

// TestNewRejectsUntaggableNamespace: a namespace with more lines than a
// tag's line field holds is refused before any GPU work, since two of its
// lines would share a tag.
func TestNewRejectsUntaggableNamespace(t *testing.T) {
	lines := uint64(gpucache.TagLineMask) + 2
	ns := hugeNamespace{blocks: lines * 4096 / 512}
	_, err := New(Config{LineSize: 4096}, []nvme.Namespace{ns})
	if err == nil || !strings.Contains(err.Error(), "cache tags hold at most") {
		t.Fatalf("New over a namespace of %d lines: %v, want a refusal naming the tag limit", lines, err)
	}
}

func TestConfigQueueDepth(t *testing.T) {
	for _, tc := range []struct {
		cfg       Config
		want      int   // the default cache's depth
		wantMore  []int // MoreCaches' depths
		wantError string
	}{
		{cfg: Config{}, want: 256},
		{cfg: Config{LineSize: 8192}, want: 128},
		{cfg: Config{LineSize: 65536}, want: 16},
		{cfg: Config{LineSize: 65536, QueuePairs: 1}, want: 256},
		{cfg: Config{LineSize: 65536, QueuePairs: 1024, ReadAheadQueuePairs: -1}, want: MinAutoQueueDepth},
		{cfg: Config{LineSize: 65536, QueueDepth: 512}, want: 512},
		{cfg: Config{QueuePairs: 128, MoreCaches: []CacheConfig{{LineSize: 16384, QueuePairs: 32}, {LineSize: 1024}}}, want: 128, wantMore: []int{128, 256}},
		{cfg: Config{QueueDepth: 64, MoreCaches: []CacheConfig{{LineSize: 16384}, {LineSize: 1024, QueueDepth: 8}}}, want: 64, wantMore: []int{64, 8}},
		{cfg: Config{QueueDepth: 3}, wantError: "queue depth 3 for the cache of 4096-byte lines"},
		{cfg: Config{MoreCaches: []CacheConfig{{LineSize: 1024, QueueDepth: 8192}}}, wantError: "queue depth 8192 for the cache of 1024-byte lines"},
	} {
		c := tc.cfg
		err := c.fill()
		if tc.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("%+v: error %v, want one saying %q", tc.cfg, err, tc.wantError)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.cfg, err)
			continue
		}
		if c.QueueDepth != tc.want {
			t.Errorf("%+v: depth %d, want %d", tc.cfg, c.QueueDepth, tc.want)
		}
		for i, w := range tc.wantMore {
			if got := c.MoreCaches[i].QueueDepth; got != w {
				t.Errorf("%+v: cache %d depth %d, want %d", tc.cfg, i, got, w)
			}
		}
		for _, cc := range c.caches() {
			if tc.cfg.QueueDepth == 0 && cc.QueueDepth > MinAutoQueueDepth && uint64(cc.QueuePairs*cc.QueueDepth*cc.LineSize) > DefaultStagingBytes {
				t.Errorf("%+v: cache of %d-byte lines keeps %d bytes of staging", tc.cfg, cc.LineSize, cc.QueuePairs*cc.QueueDepth*cc.LineSize)
			}
		}
	}
}
