// Package sysmon keeps the Go runtime's system monitor thread (sysmon) out
// of its deep sleep, which costs a process that sleeps between I/Os two
// extra thread wake-ups per I/O.
//
// When every P of the scheduler is idle, sysmon parks on a note until the
// next timer; the next goroutine that enters a system call through the
// runtime (entersyscall: every readv and writev on a socket) wakes it with a
// futex, and sysmon then polls (nanosleep, sched_yield) until the process
// is idle again. In nvmetd's and nvmeof's sleeping mode at queue depth 1
// that is every I/O: measured with test/bench/loopback.sh COUNT=1, 3.0 and
// 3.2 context switches per I/O (target, host) with it, 1.05 and 1.04
// without. The runtime skips the deep sleep only while the schedtrace
// debug variable is set, and reads it only from GODEBUG at start, so
// KeepAwake starts the program again (execve, same PID) with a schedtrace
// period the monitor never reaches in practice. Sysmon then wakes at most
// every 10 ms when idle, instead of twice per I/O.
//
// Making readv and writev raw system calls (no entersyscall) avoids the
// wake-up too, but was measured worse: mean QD1 latency 4x, QD64 IOPS
// 0.2-0.5x on a loaded machine, with or without sysmon awake (commit
// bf2b8b2 and issue 14's notes).
package sysmon

import (
	"os"
	"strings"
	"syscall"
)

// Period is the schedtrace period KeepAwake sets, in milliseconds: the
// largest the runtime accepts (about 24.8 days). The runtime prints a SCHED
// line to standard error when the monotonic clock (time since boot) passes
// a multiple of it, so a daemon started on a machine up for longer prints
// one at start and one every 24.8 days.
const Period = "2147483647"

// Env is the variable that turns KeepAwake off ("sleep": let sysmon sleep
// as the runtime's default does).
const Env = "NVMETD_SYSMON"

// KeepAwake re-executes the running program with GODEBUG=schedtrace=Period
// added, unless GODEBUG already sets schedtrace or Env is "sleep". Call it
// first thing in main, before any goroutine or file is opened; it returns
// when nothing was to be done or the exec failed (the program then runs as
// it would have).
func KeepAwake() {
	if os.Getenv(Env) == "sleep" {
		return
	}
	gd := os.Getenv("GODEBUG")
	for _, kv := range strings.Split(gd, ",") {
		if strings.HasPrefix(kv, "schedtrace=") {
			return
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	if gd != "" {
		gd += ","
	}
	gd += "schedtrace=" + Period
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	out = append(out, "GODEBUG="+gd)
	_ = syscall.Exec(exe, os.Args, out)
}
