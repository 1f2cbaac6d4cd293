package bam

import (
	"fmt"

	"github.com/bam-go/bam/internal/gpuengine"
	"github.com/bam-go/bam/internal/hook"
)

func init() {
	hook.StoreGPU = func(store any) (*gpuengine.Engine, error) {
		s, ok := store.(*Store)
		if !ok {
			return nil, fmt.Errorf("%w: not a *bam.Store: %T", ErrInvalid, store)
		}
		r, err := s.gpuRouter()
		if err != nil {
			return nil, err
		}
		return r.gpu.Engine(), nil
	}
	hook.DeviceArray = func(store, object any) (*gpuengine.Array, error) {
		s, ok := store.(*Store)
		if !ok {
			return nil, fmt.Errorf("%w: not a *bam.Store: %T", ErrInvalid, store)
		}
		o, ok := object.(*Object)
		if !ok {
			return nil, fmt.Errorf("%w: not a *bam.Object: %T", ErrInvalid, object)
		}
		r, err := s.gpuRouter()
		if err != nil {
			return nil, err
		}
		return r.gpu.Device(engineObject(o))
	}
}

// gpuRouter returns the store's engine when it runs on a GPU.
func (s *Store) gpuRouter() (*layoutRouter, error) {
	e, err := s.engine()
	if err != nil {
		return nil, err
	}
	r, ok := e.(*layoutRouter)
	if !ok {
		return nil, fmt.Errorf("%w: the store runs on the %s engine; GPU kernels need a GPU (Options.Engine auto or gpu)", ErrEngineUnavailable, e.Name())
	}
	return r, nil
}
