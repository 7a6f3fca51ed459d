package iwarp

import (
	"syscall"
	"testing"
)

// TestRawRun: one call in every run of sysmonEvery goes through
// entersyscall (so the runtime's sysmon is woken while a loop stays
// busy), and a loop that parks starts a new run (so a QD1 receive loop,
// which parks after every I/O, never makes a call the slow way).
func TestRawRun(t *testing.T) {
	var c rawRun
	for round := 0; round < 3; round++ {
		for i := 1; i <= sysmonEvery; i++ {
			if got, want := c.next(sysmonEvery), i == sysmonEvery; got != want {
				t.Fatalf("round %d call %d: slow=%v, want %v", round, i, got, want)
			}
		}
	}
	for i := 0; i < 10*sysmonEvery; i++ {
		if c.next(sysmonEvery) {
			t.Fatalf("call %d after parking: slow, want raw (the run restarts on every park)", i)
		}
		if i%(sysmonEvery-1) == sysmonEvery-2 {
			c.parked()
		}
	}
	// Both paths issue the call: a read of a closed descriptor fails the
	// same way whichever way it goes.
	var d rawRun
	for i := 0; i < 2*sysmonEvery; i++ {
		_, e := d.syscall3(sysmonEvery, syscall.SYS_READ, ^uintptr(0), 0, 0)
		if e != syscall.EBADF {
			t.Fatalf("call %d: errno %v, want EBADF", i, e)
		}
	}
}
