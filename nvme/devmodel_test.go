package nvme

import (
	"context"
	"testing"
	"time"
)

func TestDeviceModelPresets(t *testing.T) {
	m, ok := DeviceModelByName("p5800x")
	if !ok || m.Latency != 10*time.Microsecond || m.ReadIOPS512 != 5.1e6 {
		t.Fatalf("Optane preset %+v", m)
	}
	if m, ok := DeviceModelByName("980"); !ok || m.WriteIOPS4K != 172e3 {
		t.Fatalf("980 Pro preset %+v", m)
	}
	if _, ok := DeviceModelByName("floppy"); ok {
		t.Fatal("unknown model found")
	}
	// 4 KiB read on the 980 Pro: 1/750K s.
	if c := Samsung980Pro.cost(false, 4096); c < 1300*time.Nanosecond || c > 1400*time.Nanosecond {
		t.Fatalf("cost %v", c)
	}
	// Bandwidth bounds big transfers: 1 MiB at 4K-IOPS×4 KiB.
	secs := float64(1<<20) / (1.5e6 * 4096)
	want := time.Duration(secs * float64(time.Second))
	if c := OptaneP5800X.cost(true, 1<<20); c < want-time.Microsecond || c > want+time.Microsecond {
		t.Fatalf("1 MiB write cost %v, want %v", c, want)
	}
}

// TestThrottledNamespace checks that latency and IOPS limits are roughly
// honoured through a Target.
func TestThrottledNamespace(t *testing.T) {
	model := DeviceModel{Name: "slow", Latency: 2 * time.Millisecond, ReadIOPS4K: 2000, ReadIOPS512: 2000, WriteIOPS4K: 2000, WriteIOPS512: 2000}
	m, _ := NewMemoryNamespace(4096, 64)
	ns := NewThrottledNamespace(m, model)
	h := newHarness(t, TargetConfig{Executors: 16}, ns, 16)

	// Latency: one command at a time takes at least Latency.
	start := time.Now()
	for i := 0; i < 3; i++ {
		cmd := ReadWrite(OpRead, 1, uint64(i), 1, h.bufDMA, 0)
		if e := h.do(t, cmd); !e.Status.Success() {
			t.Fatal(e.Status)
		}
	}
	if el := time.Since(start); el < 3*model.Latency {
		t.Fatalf("3 serial reads took %v, model latency %v", el, model.Latency)
	}

	// Throughput: 60 reads at queue depth 15 need at least 60/2000 s.
	const n = 60
	start = time.Now()
	done := 0
	next := 0
	for done < n {
		for next < n && h.c.canSubmit() {
			cmd := ReadWrite(OpRead, 1, uint64(next%64), 1, h.bufDMA+uint64(next%240)*4096, 0)
			cmd.CID = uint16(next)
			h.c.put(&cmd)
			next++
		}
		h.c.ring()
		if _, err := h.c.wait(h.ctx); err != nil {
			t.Fatal(err)
		}
		done++
	}
	el := time.Since(start)
	min := time.Duration(n) * time.Second / 2000
	if el < min*9/10 {
		t.Fatalf("%d reads took %v; the model allows no faster than %v", n, el, min)
	}
	if el > 20*min {
		t.Fatalf("%d reads took %v; expected near %v", n, el, min+model.Latency)
	}
	t.Logf("%d reads in %v (model minimum %v)", n, el, min)
}

func TestFaultInjection(t *testing.T) {
	m, _ := NewMemoryNamespace(512, 64)
	h := newHarness(t, TargetConfig{}, m, 8)
	inj := NewFaultInjector(1,
		&FaultRule{Match: MatchOpcode(OpWrite), Fault: Fault{Kind: FaultFail, Status: StatusWriteFault}},
		&FaultRule{Match: func(_ uint16, c *Command) bool { return c.Opcode == OpRead && c.SLBA() == 7 },
			Fault: Fault{Kind: FaultDrop}},
		&FaultRule{Match: func(_ uint16, c *Command) bool { return c.Opcode == OpRead && c.SLBA() == 9 },
			Fault: Fault{Delay: 20 * time.Millisecond}},
		&FaultRule{Match: MatchOpcode(OpFlush), Every: 2, Fault: Fault{Kind: FaultFail, Status: StatusInternalError}},
	)
	h.t.SetFaultHook(inj.Hook())

	// Fail.
	if e := h.do(t, h.rw(t, OpWrite, 0, 1, 0)); e.Status != StatusWriteFault {
		t.Fatalf("write: %v", e.Status)
	}
	// Every second flush fails.
	var flushStatus []Status
	for i := 0; i < 4; i++ {
		flushStatus = append(flushStatus, h.do(t, Command{Opcode: OpFlush, NSID: 1}).Status)
	}
	if flushStatus[0] != StatusSuccess || flushStatus[1] != StatusInternalError || flushStatus[3] != StatusInternalError {
		t.Fatalf("flush statuses %v", flushStatus)
	}
	// Drop: the read of LBA 7 never completes; a later command does, and
	// its SQHD shows the dropped one was consumed.
	drop := h.rw(t, OpRead, 7, 1, 0)
	drop.CID = 700
	h.c.submit(&drop)
	// Delay: the read of LBA 9 completes after the delay, after a read
	// submitted behind it.
	delayed := h.rw(t, OpRead, 9, 1, 0)
	delayed.CID = 900
	start := time.Now()
	h.c.submit(&delayed)
	quick := h.rw(t, OpRead, 1, 1, 4096)
	quick.CID = 100
	h.c.submit(&quick)
	e1, err := h.c.wait(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := h.c.wait(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e1.CID != 100 || e2.CID != 900 || !e2.Status.Success() {
		t.Fatalf("completion order %d then %d (%v)", e1.CID, e2.CID, e2.Status)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("delayed command completed after %v", el)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Millisecond)
	defer cancel()
	if e, err := h.c.wait(ctx); err == nil {
		t.Fatalf("dropped command completed: %+v", e)
	}
	if s := h.t.Stats(); s.Dropped != 1 || s.Delayed != 1 {
		t.Fatalf("stats %+v", s)
	}
	if inj.Fired() != 5 {
		t.Fatalf("injector fired %d times", inj.Fired())
	}
}
