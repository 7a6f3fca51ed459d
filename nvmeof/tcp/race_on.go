//go:build race

package tcp

import (
	"sync"
	"syscall"
)

// ioSync gives the race detector the edge from the bytes one goroutine
// writes to a socket to the goroutine that reads them, which
// syscall.Write and syscall.Read give it (race.ReleaseMerge before a
// write, race.Acquire after a read, on the syscall package's ioSync) and
// which the queues' writes (pollConn.writev: a raw writev(2)) and reads
// (pollConn: a raw readv(2)) do not. Race builds only; like the
// syscall package's, one edge for every socket of the process.
var ioSync sync.Mutex

// raceRelease is called before a write to a socket.
func raceRelease() {
	ioSync.Lock()
	ioSync.Unlock() //nolint:staticcheck // an empty critical section: the edge is the point
}

// raceAcquire is called after a read from socket fd returned bytes. (A
// read of no bytes, syscall.Read(fd, nil), acquires the syscall package's
// edge only when more bytes are waiting: EAGAIN skips it. The final CI
// of session 8 found the race detector reporting the initiator's
// retire after a response against its Submit's read of the request
// before the capsule left.)
func raceAcquire(fd uintptr) {
	_, _ = syscall.Read(int(fd), nil)
	ioSync.Lock()
	ioSync.Unlock() //nolint:staticcheck // as raceRelease
}
