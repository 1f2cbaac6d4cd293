package nvme

import (
	"runtime"
	"strings"
	"sync"
	"time"
)

// DeviceModel describes an SSD class for ThrottledNamespace: a fixed device
// latency per command plus IOPS and bandwidth ceilings. Zero fields impose no
// limit.
type DeviceModel struct {
	Name    string
	Latency time.Duration // average device latency of one command

	ReadIOPS512, ReadIOPS4K   float64 // random read IOPS at 512 B and 4 KiB
	WriteIOPS512, WriteIOPS4K float64 // random write IOPS at 512 B and 4 KiB

	ReadBandwidth, WriteBandwidth float64 // bytes per second; 0 = 4 KiB IOPS × 4 KiB
}

// Device presets with the figures of table 2.1 of the BaM dissertation
// (measured random IOPS at 512 B and 4 KiB, and average latency).
var (
	OptaneP5800X = DeviceModel{
		Name: "Intel Optane P5800X", Latency: 10 * time.Microsecond,
		ReadIOPS512: 5.1e6, ReadIOPS4K: 1.5e6, WriteIOPS512: 1e6, WriteIOPS4K: 1.5e6,
	}
	ZNANDP1735 = DeviceModel{
		Name: "Samsung P1735 (Z-NAND)", Latency: 25 * time.Microsecond,
		ReadIOPS512: 1.1e6, ReadIOPS4K: 1.6e6, WriteIOPS512: 351e3, WriteIOPS4K: 351e3,
	}
	Samsung980Pro = DeviceModel{
		Name: "Samsung 980 Pro", Latency: 100 * time.Microsecond,
		ReadIOPS512: 750e3, ReadIOPS4K: 750e3, WriteIOPS512: 172e3, WriteIOPS4K: 172e3,
	}
)

// DeviceModels lists the presets.
func DeviceModels() []DeviceModel { return []DeviceModel{OptaneP5800X, ZNANDP1735, Samsung980Pro} }

// DeviceModelByName finds a preset by a case-insensitive substring of its
// name ("optane", "p5800x", "z-nand", "980").
func DeviceModelByName(name string) (DeviceModel, bool) {
	n := strings.ToLower(name)
	for _, m := range DeviceModels() {
		if n != "" && strings.Contains(strings.ToLower(m.Name), n) {
			return m, true
		}
	}
	return DeviceModel{}, false
}

// cost returns how long the device is busy with one transfer of n bytes:
// the larger of its IOPS slot (a transfer above 512 B counts as one 4 KiB
// operation per started 4 KiB) and its bandwidth time.
func (m *DeviceModel) cost(write bool, n int) time.Duration {
	iops512, iops4k, bw := m.ReadIOPS512, m.ReadIOPS4K, m.ReadBandwidth
	if write {
		iops512, iops4k, bw = m.WriteIOPS512, m.WriteIOPS4K, m.WriteBandwidth
	}
	if bw == 0 {
		bw = iops4k * 4096
	}
	var sec float64
	switch {
	case n <= 512 && iops512 > 0:
		sec = 1 / iops512
	case iops4k > 0:
		sec = float64((n+4095)/4096) / iops4k
	}
	if bw > 0 {
		sec = max(sec, float64(n)/bw)
	}
	return time.Duration(sec * float64(time.Second))
}

// ThrottledNamespace wraps a namespace so that it behaves like a DeviceModel:
// commands are admitted no faster than the model's IOPS and bandwidth
// (a virtual clock reserves each command's busy time in arrival order) and
// each completes no sooner than the model latency after its slot. The inner
// I/O runs first and overlaps the modelled time. Enough commands must be in
// flight (TargetConfig.Executors) to reach the model's throughput:
// Little's law, IOPS × latency.
type ThrottledNamespace struct {
	Namespace
	model DeviceModel

	mu   sync.Mutex
	next time.Time // when the modelled device is free again
}

// NewThrottledNamespace wraps ns with model m.
func NewThrottledNamespace(ns Namespace, m DeviceModel) *ThrottledNamespace {
	return &ThrottledNamespace{Namespace: ns, model: m}
}

// Model returns the device model.
func (t *ThrottledNamespace) Model() DeviceModel { return t.model }

// reserve books the device for one command and returns when it completes.
func (t *ThrottledNamespace) reserve(write bool, n int) time.Time {
	c := t.model.cost(write, n)
	now := time.Now()
	t.mu.Lock()
	start := t.next
	if start.Before(now) {
		start = now
	}
	t.next = start.Add(c)
	t.mu.Unlock()
	return start.Add(c + t.model.Latency)
}

// ReadAt implements Namespace.
func (t *ThrottledNamespace) ReadAt(p []byte, off int64) (int, error) {
	done := t.reserve(false, len(p))
	n, err := t.Namespace.ReadAt(p, off)
	sleepUntil(done)
	return n, err
}

// WriteAt implements Namespace.
func (t *ThrottledNamespace) WriteAt(p []byte, off int64) (int, error) {
	done := t.reserve(true, len(p))
	n, err := t.Namespace.WriteAt(p, off)
	sleepUntil(done)
	return n, err
}

// WriteZeroes implements Zeroer; the device is charged one write slot.
func (t *ThrottledNamespace) WriteZeroes(off, n int64) error {
	done := t.reserve(true, 512)
	err := writeZeroes(t.Namespace, off, n)
	sleepUntil(done)
	return err
}

// Flush implements Namespace; a flush costs the model latency.
func (t *ThrottledNamespace) Flush() error {
	done := time.Now().Add(t.model.Latency)
	err := t.Namespace.Flush()
	sleepUntil(done)
	return err
}

// sleepUntil waits until deadline: with the timer for long waits, then by
// yielding for the last stretch, which timers cannot hit at microsecond
// precision.
func sleepUntil(deadline time.Time) {
	const slack = 60 * time.Microsecond
	if d := time.Until(deadline); d > 2*slack {
		time.Sleep(d - slack)
	}
	for time.Now().Before(deadline) {
		runtime.Gosched()
	}
}
