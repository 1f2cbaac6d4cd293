package cuda

/*
#include "driver.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
)

// Context is a retained reference to a device's primary context. Every
// method makes the context current on the OS thread that runs the driver
// call, inside that same call, so a Context can be used from any goroutine
// without runtime.LockOSThread. Methods are safe for concurrent use.
//
// Close releases the reference; free everything allocated through the
// context (memory, streams, events, modules) before closing the last
// reference, because the driver destroys the primary context then.
type Context struct {
	dev    Device
	h      C.bam_CUcontext
	closed atomic.Bool
}

// Primary retains the primary context of the device with the given ordinal.
func Primary(ordinal int) (*Context, error) {
	d, err := GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	return d.Primary()
}

// Primary retains the device's primary context.
func (d Device) Primary() (*Context, error) {
	var h C.bam_CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.bam_cuDevicePrimaryCtxRetain(&h, d.h)); err != nil {
		return nil, fmt.Errorf("device %d: %w", d.ordinal, err)
	}
	return &Context{dev: d, h: h}, nil
}

// Device returns the context's device.
func (c *Context) Device() Device { return c.dev }

// Close releases the context reference. Further calls return ErrClosed.
func (c *Context) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return check("cuDevicePrimaryCtxRelease_v2", C.bam_cuDevicePrimaryCtxRelease(c.dev.h))
}

func (c *Context) handle() (C.bam_CUcontext, error) {
	if c == nil || c.closed.Load() {
		return nil, ErrClosed
	}
	return c.h, nil
}

// Synchronize blocks until all work queued in the context has finished and
// returns the first asynchronous error (a kernel fault, say). It cannot be
// interrupted; Stream.Wait is the bounded alternative.
func (c *Context) Synchronize() error {
	h, err := c.handle()
	if err != nil {
		return err
	}
	return check("cuCtxSynchronize", C.bam_cuCtxSynchronize(h))
}

// MemInfo returns the free and total device memory in bytes.
func (c *Context) MemInfo() (free, total uint64, err error) {
	h, err := c.handle()
	if err != nil {
		return 0, 0, err
	}
	var f, t C.size_t
	if err := check("cuMemGetInfo_v2", C.bam_cuMemGetInfo(h, &f, &t)); err != nil {
		return 0, 0, err
	}
	return uint64(f), uint64(t), nil
}
