// clock_other.go: the client's clock elsewhere than Linux: Go's monotonic
// clock (which may stop while the machine sleeps).

//go:build !linux

package dlockd

import "time"

var monoStart = time.Now()

// nowMs is the client's clock in milliseconds.
func nowMs() float64 {
	return float64(time.Since(monoStart)) / float64(time.Millisecond)
}
