package iwarp

import "syscall"

// The socket's readv and writev are raw system calls (syscall.RawSyscall,
// no entersyscall/exitsyscall): the descriptor is the runtime's own
// non-blocking one, so neither call can sleep; each returns data, EAGAIN or
// an error in the time of a copy. What entersyscall adds is the cost
// measured in issue 14: when the process has been idle the runtime's sysmon
// thread sleeps on a note that the next entersyscall wakes (at QD1 in the
// sleeping mode, a futex wake and two of the three context switches per I/O
// per side), and an awake sysmon retakes the P of a call that has lasted
// 20 us (a loopback writev runs the peer's receive path inline) and hands
// it to another thread. With raw calls a QD1 4 KiB read costs one context
// switch per side (test/bench/loopback.sh COUNT=1 BP=0s).
//
// sysmon must still run while the process is busy: it is what polls the
// network when the scheduler has had no idle moment for 10 ms and what
// preempts a goroutine that runs for 10 ms. A sysmon left asleep by raw
// calls alone would sleep through a busy stretch (up to the next timer or a
// minute): with one P always busy, a goroutine whose socket became readable
// waits that long (seen: stalls of 100+ ms at QD64). So one call in a run
// of sysmonEvery consecutive calls goes through entersyscall, which wakes
// sysmon when it sleeps and costs nothing measurable when it does not; a
// receive loop that parks ends its run (at QD1 no call is ever made the
// slow way on the receive side).
const sysmonEvery = 32

// rawRun counts a goroutine's consecutive raw system calls (one counter per
// receive loop and per transmit side, each touched by one goroutine at a
// time).
type rawRun uint32

// syscall3 issues a non-blocking system call raw, or through entersyscall
// when the run has reached every calls.
func (c *rawRun) syscall3(every rawRun, nr, a1, a2, a3 uintptr) (uintptr, syscall.Errno) {
	if c.next(every) {
		r, _, e := syscall.Syscall(nr, a1, a2, a3)
		return r, e
	}
	r, _, e := syscall.RawSyscall(nr, a1, a2, a3)
	return r, e
}

// next counts a call and reports whether it is the one of its run of
// every that goes through entersyscall.
func (c *rawRun) next(every rawRun) bool {
	*c++
	if *c >= every {
		*c = 0
		return true
	}
	return false
}

// parked ends the run: the goroutine is about to sleep in the poller, and
// the call that follows its wake-up is the first of a new run.
func (c *rawRun) parked() { *c = 0 }
