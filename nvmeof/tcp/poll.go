package tcp

import (
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollReader reads a queue's socket through its raw connection: one read
// or readv(2) per call, through the runtime poller. With spin > 0 it busy
// polls, as the iWARP engine's receive loop does (iwarp.Config.BusyPoll,
// transport.busy_poll): a read that would block is retried for up to spin
// before the runtime parks the goroutine on the poller; lower latency for
// a busy core, at the price of the CPU it spins. With spin 0 it parks at
// once, as a read of the connection would. Read deadlines apply as on the
// connection (syscall.RawConn.Read honours them). The read callback is
// bound once and its arguments travel in fields: a read allocates nothing.
type pollReader struct {
	rc   syscall.RawConn
	spin time.Duration
	fn   func(fd uintptr) bool
	iov  [2]unix.Iovec
	nIov int
	n    int
	err  error
	// reads counts the reads that returned data (for tests).
	reads atomic.Uint64
}

// newPollReader returns a reader of c's socket, busy polling for up to spin
// (0: not at all), or nil if c has no raw connection.
func newPollReader(c syscall.Conn, spin time.Duration) *pollReader {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &pollReader{rc: rc, spin: spin}
	r.fn = r.read
	return r
}

// read is the RawConn callback: one readv(2) into the prepared iovecs,
// retried while it would block until the spin time has run out.
func (r *pollReader) read(fd uintptr) bool {
	var deadline time.Time
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(r.nIov))
		switch e {
		case 0:
			raceAcquire(fd)
			r.reads.Add(1)
			r.n = int(n)
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.spin <= 0 {
				return false // park on the poller
			}
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
			r.err = os.NewSyscallError("readv", e)
			return true
		}
	}
}

// Read implements io.Reader.
func (r *pollReader) Read(p []byte) (int, error) {
	return r.readv(p, nil)
}

// readv reads into a, then b, with one system call (b may be empty). It
// returns at least one byte or an error.
func (r *pollReader) readv(a, b []byte) (int, error) {
	r.nIov = 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			r.iov[r.nIov].Base = &p[0]
			r.iov[r.nIov].SetLen(len(p))
			r.nIov++
		}
	}
	if r.nIov == 0 {
		return 0, nil
	}
	r.n, r.err = 0, nil
	err := r.rc.Read(r.fn)
	r.iov[0].Base, r.iov[1].Base = nil, nil
	if err != nil {
		return 0, err
	}
	return r.n, r.err
}
