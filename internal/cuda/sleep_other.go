//go:build !linux

package cuda

import "time"

// sleepFor pauses for about d (see pollUntil).
func sleepFor(d time.Duration) { time.Sleep(d) }
