package gpuengine

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/bam-go/bam/internal/cuda/cudatest"
	"github.com/bam-go/bam/nvme"
)

// TestGPUMirrorCopies drives the staging mirrors as the Target does, from
// one goroutine per worker, without a kernel: every copy must land (the
// mirror equals the staging slots afterwards) and finish within
// mirrorCopyTimeout. It logs the rate and latency of each way of
// tracking copies.
func TestGPUMirrorCopies(t *testing.T) {
	cudatest.Device(t)
	ns, err := nvme.NewMemoryNamespace(4096, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// No read-ahead pairs: they have no mirrors, and this test copies through every queue's.
	e, err := New(Config{QueuePairs: 64, QueueDepth: 256, StagingMirror: true, ReadAheadQueuePairs: -1}, []nvme.Namespace{ns})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, q := range e.queues {
		b := q.staging.Bytes()[q.stagingSkip:]
		for i := range b[:uint64(q.depth)*uint64(q.lineSize)] {
			b[i] = byte(rng.Uint32())
		}
	}
	workers := e.cfg.TargetWorkers
	for _, mode := range []string{"signal", "event"} {
		for _, run := range []uint64{128 << 10, 512 << 10} {
			e.mirrors.event.Store(mode == "event")
			var mu sync.Mutex
			var lat []time.Duration
			var bytesDone uint64
			var firstErr error
			start := time.Now()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					var mine []time.Duration
					var moved uint64
					var qs []*queuePair
					for i := w; i < len(e.queues); i += workers {
						qs = append(qs, e.queues[i])
					}
					size := uint64(e.queues[0].depth) * uint64(e.queues[0].lineSize)
					type flight struct {
						cp nvme.MirrorCopy
						t  time.Time
					}
					var fl []flight
					for k := 0; time.Since(start) < 300*time.Millisecond || len(fl) > 0; k++ {
						if time.Since(start) < 300*time.Millisecond && len(fl) < 2*len(qs) {
							q := qs[k%len(qs)]
							off := (uint64(k/len(qs)) * run) % size
							cp, err := q.mem.Mirror.Copy(w, off, run)
							if err != nil {
								mu.Lock()
								firstErr = err
								mu.Unlock()
								return
							}
							fl = append(fl, flight{cp, time.Now()})
						}
						kept := fl[:0]
						for _, f := range fl {
							done, err := f.cp.Done()
							if err != nil {
								mu.Lock()
								firstErr = err
								mu.Unlock()
								return
							}
							if done {
								mine = append(mine, time.Since(f.t))
								moved += run
							} else {
								kept = append(kept, f)
							}
						}
						fl = kept
					}
					mu.Lock()
					lat = append(lat, mine...)
					bytesDone += moved
					mu.Unlock()
				})
			}
			wg.Wait()
			if firstErr != nil {
				t.Fatalf("%s copies: %v", mode, firstErr)
			}
			el := time.Since(start)
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			t.Logf("%s-tracked copies of %d KiB from %d workers: %.1f GB/s, %d copies, latency p50 %v p99 %v",
				mode, run>>10, workers, float64(bytesDone)/el.Seconds()/1e9, len(lat), lat[len(lat)/2], lat[len(lat)*99/100])
		}
	}
	e.mirrors.event.Store(false)
	for _, q := range e.queues {
		n := uint64(q.depth) * uint64(q.lineSize)
		got := make([]byte, n)
		if err := e.ctx.CopyDtoH(got, q.mirror.Ptr()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, q.staging.Bytes()[q.stagingSkip:q.stagingSkip+n]) {
			t.Fatalf("queue %d: the mirror differs from the staging slots", q.id)
		}
	}
}
