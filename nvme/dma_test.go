package nvme

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// deviceRegion stands in for device memory: no host bytes, copies only.
type deviceRegion struct {
	mu  sync.Mutex
	mem []byte
}

func (d *deviceRegion) ReadAt(p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off+uint64(len(p)) > uint64(len(d.mem)) {
		return fmt.Errorf("device read beyond end")
	}
	copy(p, d.mem[off:])
	return nil
}

func (d *deviceRegion) WriteAt(p []byte, off uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off+uint64(len(p)) > uint64(len(d.mem)) {
		return fmt.Errorf("device write beyond end")
	}
	copy(d.mem[off:], p)
	return nil
}

func TestDMASpaceRegions(t *testing.T) {
	d := NewDMASpace()
	dev := &deviceRegion{mem: make([]byte, 8192)}
	if err := d.Register(0x10000, 8192, dev); err != nil {
		t.Fatal(err)
	}
	host := make([]byte, 4096)
	if err := d.Register(0x12000, 4096, HostRegion(host)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ base, size uint64 }{{0x10000, 1}, {0xF000, 0x1001}, {0x11FFF, 2}, {0x12FFF, 10}, {0x9000, 0x10000}} {
		if err := d.Register(r.base, r.size, dev); !errors.Is(err, ErrDMAOverlap) {
			t.Errorf("overlap [%#x,+%#x): %v", r.base, r.size, err)
		}
	}
	if err := d.Register(0x20000, 0, dev); err == nil {
		t.Error("zero-size region accepted")
	}
	if err := d.Register(^uint64(0)-10, 100, dev); err == nil {
		t.Error("wrapping region accepted")
	}
	// A transfer spanning the device and the adjacent host region.
	src := bytes.Repeat([]byte("0123456789abcdef"), 256)
	if err := d.Write(0x11800, src[:4096]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dev.mem[0x1800:], src[:2048]) || !bytes.Equal(host[:2048], src[2048:4096]) {
		t.Fatal("spanning write landed wrong")
	}
	got := make([]byte, 4096)
	if err := d.Read(0x11800, got); err != nil || !bytes.Equal(got, src[:4096]) {
		t.Fatalf("spanning read: %v", err)
	}
	if b, ok := d.Bytes(0x12010, 16); !ok || &b[0] != &host[16] {
		t.Fatal("host fast path missing")
	}
	if _, ok := d.Bytes(0x10000, 16); ok {
		t.Fatal("device region exposed host bytes")
	}
	if _, ok := d.Bytes(0x12ff0, 32); ok {
		t.Fatal("Bytes ran past its region")
	}
	if err := d.Read(0x13000, got[:1]); !errors.Is(err, ErrDMAUnmapped) {
		t.Fatalf("unmapped read: %v", err)
	}
	if err := d.Unregister(0x12000); err != nil {
		t.Fatal(err)
	}
	if err := d.Unregister(0x12000); !errors.Is(err, ErrDMAUnmapped) {
		t.Fatalf("double unregister: %v", err)
	}
	if d.Len() != 1 {
		t.Fatalf("%d regions", d.Len())
	}
}

func TestDMASpaceRegisterHost(t *testing.T) {
	d := NewDMASpace()
	a, b := make([]byte, 100), make([]byte, 100)
	ba, err := d.RegisterHost(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := d.RegisterHost(b)
	if err != nil {
		t.Fatal(err)
	}
	if ba != uint64(addrOf(a)) || bb != uint64(addrOf(b)) {
		t.Fatal("host regions not at their virtual addresses")
	}
	if _, err := d.RegisterHost(a[10:20]); !errors.Is(err, ErrDMAOverlap) {
		t.Fatalf("sub-slice registered twice: %v", err)
	}
	if _, err := d.RegisterHost(nil); err == nil {
		t.Fatal("empty buffer registered")
	}
	if err := d.Write(bb+5, []byte("hi")); err != nil || string(b[5:7]) != "hi" {
		t.Fatalf("write: %v", err)
	}
}

func TestDMASpaceConcurrentLookups(t *testing.T) {
	d := NewDMASpace()
	bufs := make([][]byte, 64)
	bases := make([]uint64, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 256)
		bases[i], _ = d.RegisterHost(bufs[i])
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				k := (i*7 + g) % 64
				if k%8 == 0 {
					continue // churned below
				}
				if _, ok := d.Bytes(bases[k]+10, 10); !ok {
					t.Errorf("lookup of region %d failed", k)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 200; i++ {
			k := (i % 8) * 8
			_ = d.Unregister(bases[k])
			bases2, _ := d.RegisterHost(bufs[k])
			_ = bases2
		}
	})
	wg.Wait()
}

// TestTargetDeviceRegion reads into a region without host bytes, the way
// the GPU engine's device-memory regions work.
func TestTargetDeviceRegion(t *testing.T) {
	h := newHarness(t, TargetConfig{}, nil, 4)
	dev := &deviceRegion{mem: make([]byte, 16384)}
	const base = 0x7000_0000_0000
	if err := h.t.DMA().Register(base, 16384, dev); err != nil {
		t.Fatal(err)
	}
	pattern(h.buf, 512, 5, 3)
	if e := h.do(t, h.rw(t, OpWrite, 5, 16, 0)); !e.Status.Success() {
		t.Fatal(e.Status)
	}
	if e := h.do(t, ReadWrite(OpRead, 1, 5, 16, base+4096, base+8192)); !e.Status.Success() {
		t.Fatal(e.Status)
	}
	checkPattern(t, dev.mem[4096:12288], 512, 5)
	// And back out of device memory into another LBA range.
	if e := h.do(t, ReadWrite(OpWrite, 1, 100, 16, base+4096, base+8192)); !e.Status.Success() {
		t.Fatal(e.Status)
	}
	got := make([]byte, 8192)
	h.ns.ReadAt(got, 100*512)
	if !bytes.Equal(got, dev.mem[4096:12288]) {
		t.Fatal("write from device region differs")
	}
}
