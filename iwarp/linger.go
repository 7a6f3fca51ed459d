package iwarp

import (
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Lingering in the kernel before parking (issue 25, experimental, off
// unless NVMETD_RX_LINGER is set). A sleeping receive loop (no busy
// polling) whose socket has nothing to read parks on the runtime's
// netpoller; the next bytes then wake it through the netpoller, which on
// this machine kind costs about 17 µs more per round trip than a thread
// that sleeps in the kernel on the socket itself (test/bench/floor.sh:
// p50 46 µs blocking read(2) against 63 µs Go net.Conn, QD1 4 KiB
// ping-pong). With NVMETD_RX_LINGER=D the loop first waits up to D in
// ppoll(2) on its socket alone (its thread asleep in the kernel, woken
// by the bytes directly), and parks on the netpoller only when D passes
// without any: an active connection gets the kernel's wake-up, an idle one
// holds no thread. At most rxLingerMax loops linger at once (each holds a
// thread); the others park at once.
//
// NVMETD_RX_LINGER_RAW=1 makes the ppoll a raw system call (no
// entersyscall: the goroutine keeps its P while it sleeps, no other
// goroutine runs on it meanwhile; sysmon's preemption signal ends the wait
// early), the other variant measured.
var (
	rxLinger    = lingerFromEnv(os.Getenv("NVMETD_RX_LINGER"))
	rxLingerRaw = os.Getenv("NVMETD_RX_LINGER_RAW") == "1"
	rxLingering atomic.Int32
	rxLingerMax = int32(max(1, runtime.GOMAXPROCS(0)) * 8)
)

func lingerFromEnv(s string) time.Duration {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0
	}
	return min(d, 10*time.Millisecond)
}

// lingerState is a receive loop's ppoll arguments (no allocation per wait).
type lingerState struct {
	pfd [1]unix.PollFd
	ts  unix.Timespec
	// waits and woken count the lingers and those that bytes ended (tests).
	waits, woken uint64
}

// linger waits up to rxLinger for fd to become readable, reporting whether
// it did (false: the wait timed out, was interrupted, or no slot was
// free: park on the poller).
func (l *lingerState) linger(fd uintptr) bool {
	if rxLinger <= 0 {
		return false
	}
	if rxLingering.Add(1) > rxLingerMax {
		rxLingering.Add(-1)
		return false
	}
	defer rxLingering.Add(-1)
	l.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}
	l.ts = unix.NsecToTimespec(int64(rxLinger))
	l.waits++
	var n uintptr
	var e syscall.Errno
	if rxLingerRaw {
		n, _, e = syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&l.pfd[0])), 1, uintptr(unsafe.Pointer(&l.ts)), 0, 0, 0)
	} else {
		n, _, e = syscall.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&l.pfd[0])), 1, uintptr(unsafe.Pointer(&l.ts)), 0, 0, 0)
	}
	if e != 0 || n == 0 {
		return false
	}
	l.woken++
	return true
}
