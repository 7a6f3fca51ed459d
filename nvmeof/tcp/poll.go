package tcp

import (
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// pollReader reads a queue's socket with busy polling, as the iWARP
// engine's receive loop does (iwarp.Config.BusyPoll, transport.busy_poll):
// a read that would block is retried for up to spin before the runtime
// parks the goroutine on the poller; lower latency for a busy core, at the
// price of the CPU it spins. Read deadlines apply as on the connection
// (syscall.RawConn.Read honours them). The read callback is bound once and
// its arguments travel in fields: a read allocates nothing.
type pollReader struct {
	rc   syscall.RawConn
	spin time.Duration
	fn   func(fd uintptr) bool
	p    []byte
	n    int
	err  error
	// reads counts the reads that returned data (for tests).
	reads atomic.Uint64
}

// newPollReader returns a busy-polling reader of c, or nil if c has no raw
// connection.
func newPollReader(c syscall.Conn, spin time.Duration) *pollReader {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &pollReader{rc: rc, spin: spin}
	r.fn = r.read
	return r
}

// read is the RawConn callback: one read(2), retried while it would block
// until the spin time has run out.
func (r *pollReader) read(fd uintptr) bool {
	var deadline time.Time
	for {
		n, err := syscall.Read(int(fd), r.p)
		switch err {
		case nil:
			r.reads.Add(1)
			r.n = n
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(r.spin)
			} else if now.After(deadline) {
				return false // park on the poller
			}
			// Let other goroutines of this P run between polls (the
			// host's may be one of them when both ends share a process).
			runtime.Gosched()
		default:
			r.err = os.NewSyscallError("read", err)
			return true
		}
	}
}

// Read implements io.Reader.
func (r *pollReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.fn)
	r.p = nil
	if err != nil {
		return 0, err
	}
	return r.n, r.err
}
