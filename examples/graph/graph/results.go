package graph

import (
	"bufio"
	"fmt"
	"os"

	"github.com/bam-go/bam/internal/npy"
)

// Summary is the JSON summary of one bfs or cc run.
type Summary struct {
	Algorithm string  `json:"algorithm"` // "bfs" or "cc"
	Graph     string  `json:"graph"`
	Engine    string  `json:"engine"`              // "cpu" or "gpu"
	Placement string  `json:"placement,omitempty"` // GPU: storage, device, pinned; CPU: storage, memory
	Vertices  uint64  `json:"vertices"`
	Edges     uint64  `json:"edges"`
	Source    *uint64 `json:"source,omitempty"`
	Levels    int     `json:"levels,omitempty"`
	BottomUp  int     `json:"bottom_up_levels,omitempty"` // BFS levels run bottom-up
	// ReadBackLevel and LateDepths: a GPU BFS read its depths back while
	// the levels after the first ReadBackLevel ran, and patched in the
	// LateDepths vertices they reached (BFSResult).
	ReadBackLevel int    `json:"read_back_level,omitempty"`
	LateDepths    uint64 `json:"late_depths,omitempty"`
	// ReadBackSeconds is the part of Seconds after the last level (GPU).
	ReadBackSeconds float64 `json:"read_back_s,omitempty"`
	Reached         uint64  `json:"reached,omitempty"`
	Components      uint64  `json:"components,omitempty"`
	Largest         uint64  `json:"largest_component,omitempty"`
	Seconds         float64 `json:"time_s"`
	EdgesTouched    uint64  `json:"edges_touched"`
	EdgesPerSec     float64 `json:"edges_per_s"`
	// Cache and I/O. HitRatio is nil where the engine does not count
	// hits (the GPU engine counts misses only).
	HitRatio      *float64 `json:"cache_hit_ratio"`
	CacheMisses   uint64   `json:"cache_misses"`
	BytesRead     uint64   `json:"bytes_read"`
	BytesNeeded   uint64   `json:"bytes_needed"`     // edges touched * id size
	Amplification float64  `json:"io_amplification"` // bytes read / bytes needed
	CacheBytes    uint64   `json:"cache_bytes,omitempty"`
	Validated     bool     `json:"validated"`
	Output        string   `json:"output,omitempty"` // the .npy written
	// LevelTrace is what each BFS level did and cost (GPU engine).
	LevelTrace []BFSLevel `json:"level_trace,omitempty"`
	// StageTrace is what each stage of a CC run cost (GPU engine).
	StageTrace []Stage `json:"stage_trace,omitempty"`
}

// Fill computes the derived fields from the counts.
func (s *Summary) Fill(idBytes int) {
	if s.Seconds > 0 {
		s.EdgesPerSec = float64(s.EdgesTouched) / s.Seconds
	}
	s.BytesNeeded = s.EdgesTouched * uint64(idBytes)
	if s.BytesNeeded > 0 {
		s.Amplification = float64(s.BytesRead) / float64(s.BytesNeeded)
	}
}

// WriteNPY writes a one-dimensional .npy file of data.
func WriteNPY[T int32 | uint32 | uint64](path string, data []T) error {
	var zero T
	name := map[uintptr]string{4: "uint32", 8: "uint64"}[sizeOf(zero)]
	if _, ok := any(zero).(int32); ok {
		name = "int32"
	}
	dt, ok := npy.DtypeByName(name)
	if !ok {
		return fmt.Errorf("graph: no npy dtype %s", name)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := npy.NewWriter(bw, npy.Header{Dtype: dt, Shape: []int64{int64(len(data))}})
	if err == nil {
		_, err = w.Write(bytesOf(data))
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("graph: write %s: %w", path, err)
	}
	return nil
}
