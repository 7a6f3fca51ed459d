// Package perfcount counts what one I/O costs inside a process: lock
// acquisitions of the data path's mutexes, goroutine schedulings,
// goroutines, threads and heap allocations. It exists to show the effect of
// performance work by numbers (test/bench/loopback.sh COUNT=1).
//
// Without the build tag perfcount, Mutex and RWMutex are sync.Mutex and
// sync.RWMutex and every function is an empty stub: nothing is counted and
// nothing costs. Built with -tags perfcount:
//
//   - every Lock, RLock and successful TryLock of a Mutex or RWMutex adds to
//     a process-wide counter; one in 64 (chosen at random, so that a
//     periodic locking pattern is not aliased) also records its call site,
//     so that the report can say which locks the total is made of;
//   - with NVMETD_PERFCOUNT=FILE in the environment, SIGUSR2 appends to
//     FILE one JSON line with the counts since the previous SIGUSR2 (or
//     since the start), and Begin/End append one with the counts between
//     them (nvmeof bench brackets its measured window with them).
//
// Goroutine schedulings come from the runtime's /sched/latencies:seconds
// histogram, which samples one in 8 transitions of each goroutine out of
// running (gTrackingPeriod): its count times 8 estimates how many times a
// goroutine was made runnable and then run (wake-ups, yields and new
// goroutines).
package perfcount
