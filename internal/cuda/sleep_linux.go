package cuda

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepFor blocks the calling thread for about d in nanosleep, whose
// wake-up is bounded by the thread's timer slack rather than by the Go
// runtime's millisecond poller (see pollUntil).
func sleepFor(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil) // an interrupted sleep is only shorter
}
