// clock_linux.go: the client's clock on Linux, CLOCK_BOOTTIME, which goes
// on while the machine is suspended, as the server's clock and a lease do.

//go:build linux

package dlockd

import (
	"syscall"
	"time"
	"unsafe"
)

const clockBoottime = 7

var monoStart = time.Now()

// nowMs is the client's clock in milliseconds.
func nowMs() float64 {
	var ts syscall.Timespec
	_, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		return float64(time.Since(monoStart)) / float64(time.Millisecond)
	}
	return float64(ts.Sec)*1000 + float64(ts.Nsec)/1e6
}
