package bam

import (
	"context"
	"errors"
	"sync"

	"github.com/bam-go/bam/internal/cpuengine"
	"github.com/bam-go/bam/internal/engine"
	"github.com/bam-go/bam/internal/gpuengine"
)

// layoutRouter is the store's engine when a GPU is in use: striped objects
// run on the GPU engine; replicated objects, which the device library does
// not write back to every copy, run on a CPU engine started on first use.
// Objects own disjoint lines, so the two caches never hold the same line.
type layoutRouter struct {
	gpu      *gpuengine.Objects
	startCPU func() (*cpuengine.Engine, error)

	mu  sync.Mutex
	cpu *cpuengine.Engine
}

var _ engine.Engine = (*layoutRouter)(nil)

func (r *layoutRouter) Name() string { return "gpu" }

func (r *layoutRouter) cpuEngine() (*cpuengine.Engine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cpu == nil {
		e, err := r.startCPU()
		if err != nil {
			return nil, err
		}
		r.cpu = e
	}
	return r.cpu, nil
}

func (r *layoutRouter) startedCPU() *cpuengine.Engine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpu
}

func (r *layoutRouter) pick(o *engine.Object) (engine.Engine, error) {
	if o.Layout == engine.Replicated {
		return r.cpuEngine()
	}
	return r.gpu, nil
}

func (r *layoutRouter) ReadAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	e, err := r.pick(o)
	if err != nil {
		return err
	}
	return e.ReadAt(ctx, o, p, off)
}

func (r *layoutRouter) WriteAt(ctx context.Context, o *engine.Object, p []byte, off uint64) error {
	e, err := r.pick(o)
	if err != nil {
		return err
	}
	return e.WriteAt(ctx, o, p, off)
}

func (r *layoutRouter) Gather(ctx context.Context, o *engine.Object, idx []uint64, dst []byte) error {
	e, err := r.pick(o)
	if err != nil {
		return err
	}
	return e.Gather(ctx, o, idx, dst)
}

func (r *layoutRouter) Scatter(ctx context.Context, o *engine.Object, idx []uint64, src []byte) error {
	e, err := r.pick(o)
	if err != nil {
		return err
	}
	return e.Scatter(ctx, o, idx, src)
}

func (r *layoutRouter) Flush(ctx context.Context) error {
	err := r.gpu.Flush(ctx)
	if c := r.startedCPU(); c != nil {
		err = errors.Join(err, c.Flush(ctx))
	}
	return err
}

func (r *layoutRouter) Evict(ctx context.Context, o *engine.Object) error {
	e, err := r.pick(o)
	if err != nil {
		return err
	}
	return e.Evict(ctx, o)
}

func (r *layoutRouter) Stats() engine.Stats {
	st := r.gpu.Stats()
	if c := r.startedCPU(); c != nil {
		st = addStats(st, c.Stats())
	}
	return st
}

func (r *layoutRouter) ObjectStats(o *engine.Object) engine.Stats {
	if o.Layout == engine.Replicated {
		if c := r.startedCPU(); c != nil {
			return c.ObjectStats(o)
		}
		return engine.Stats{}
	}
	return r.gpu.ObjectStats(o)
}

func (r *layoutRouter) Close() error {
	err := r.gpu.Close()
	if c := r.startedCPU(); c != nil {
		err = errors.Join(err, c.Close())
	}
	return err
}

func addStats(a, b engine.Stats) engine.Stats {
	a.Requests += b.Requests
	a.Elements += b.Elements
	a.BytesAsked += b.BytesAsked
	a.Acquires += b.Acquires
	a.Hits += b.Hits
	a.Misses += b.Misses
	a.LinesRead += b.LinesRead
	a.LinesWritten += b.LinesWritten
	a.BytesRead += b.BytesRead
	a.BytesWritten += b.BytesWritten
	a.Flushes += b.Flushes
	return a
}
