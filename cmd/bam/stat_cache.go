package main

import (
	"github.com/bam-go/bam"
	"github.com/bam-go/bam/internal/cpuengine"
)

// cacheSection is the "cache" section of `bam stat`: the line cache the
// store opens with (CPU engine geometry) and the engine's counters in this
// process (for an object: its own).
type cacheSection struct {
	Engine        string        `json:"engine"`
	Sets          uint32        `json:"sets"`
	Ways          uint32        `json:"ways"`
	LineSize      int           `json:"line_size"`
	Bytes         int64         `json:"bytes"`
	HostTierBytes int64         `json:"host_tier_bytes"`
	Stats         bam.DataStats `json:"stats"`
}

func init() {
	statSections = append(statSections, func(s *bam.Store, object string) (string, any, bool) {
		o := s.Options()
		sets, ways := cpuengine.Geometry(o.CacheBytes, s.LineSize())
		sec := cacheSection{Engine: "cpu", Sets: sets, Ways: ways, LineSize: s.LineSize(),
			Bytes: int64(sets) * int64(ways) * int64(s.LineSize()), HostTierBytes: o.HostTierBytes, Stats: s.DataStats()}
		if object != "" {
			obj, err := s.Object(object)
			if err != nil {
				return "", nil, false
			}
			d, err := s.Data(obj)
			if err != nil {
				return "", nil, false
			}
			sec.Stats = d.Stats()
		}
		return "cache", sec, true
	})
}
