//go:build race

package tcp

import "syscall"

// raceAcquire gives the race detector the edge syscall.Read gives it after
// a read (race.Acquire on the syscall package's ioSync, which every
// syscall.Write releases): pollReader reads with a raw readv(2), which the
// detector does not see, and tests rely on the edge from the bytes a
// goroutine wrote to a socket to the goroutine that read them. A read of
// no bytes returns at once and carries the annotation; race builds only.
func raceAcquire(fd uintptr) { _, _ = syscall.Read(int(fd), nil) }
