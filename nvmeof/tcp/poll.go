package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollConn reads and writes a queue's socket through its raw connection:
// one read or readv(2) per read call, through the runtime poller. With
// spin > 0 it busy polls, as the iWARP engine's receive loop does
// (iwarp.Config.BusyPoll, transport.busy_poll): a read that would block is
// retried for up to spin before the runtime parks the goroutine on the
// poller; lower latency for a busy core, at the price of the CPU it spins.
// With spin 0 it parks at once, as a read of the connection would. Read
// and write deadlines apply as on the connection (syscall.RawConn.Read and
// Write honour them). The callbacks are bound once and their arguments
// travel in fields: a read or a write allocates nothing.
//
// Writes (writev) go through the same raw connection so that the reader
// knows when a writer waits for socket space (txParked): it does not spin
// then. A goroutine that spins with Gosched keeps the Go scheduler from
// polling the network (with one P, GOMAXPROCS 1: a pinned process), so a
// writer parked on a full socket would not be woken when the peer makes
// room until the spin ended or sysmon polled (10 ms); a peer that keeps
// sending keeps the spin going. The iWARP engine does the same
// (iwarp QP.txParked).
type pollConn struct {
	rc   syscall.RawConn
	spin time.Duration
	fn   func(fd uintptr) bool
	iov  [2]unix.Iovec
	nIov int
	n    int
	err  error
	// reads counts the reads that returned data (for tests).
	reads atomic.Uint64

	// Writer state: one writer at a time (the queue's write lock).
	wfn   func(fd uintptr) bool
	wiov  [maxWriteIov]unix.Iovec
	wbufs [][]byte // what is left to write; wbufs[0] from woff
	woff  int
	wn    int
	werr  error
	// txParked: a writer found the socket full and waits on the poller
	// for room; the reader does not spin meanwhile.
	txParked atomic.Bool
	// writeParks counts the writes that found the socket full and parked;
	// spinYields the reads that parked at once instead of spinning
	// because a writer was parked (Stats, tests).
	writeParks, spinYields atomic.Uint64
}

// maxWriteIov is the iovecs of one writev(2) (a longer batch takes more
// than one call; IOV_MAX is 1024).
const maxWriteIov = 64

// newPollConn returns a reader and writer of c's socket, busy polling for up to spin
// (0: not at all), or nil if c has no raw connection.
func newPollConn(c syscall.Conn, spin time.Duration) *pollConn {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	r := &pollConn{rc: rc, spin: spin}
	r.fn = r.read
	r.wfn = r.write
	return r
}

// read is the RawConn callback: one readv(2) into the prepared iovecs,
// retried while it would block until the spin time has run out.
func (r *pollConn) read(fd uintptr) bool {
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
			if r.txParked.Load() {
				// A writer waits for socket space: park, so that the
				// scheduler polls the network and wakes it (see
				// pollConn).
				r.spinYields.Add(1)
				return false
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
func (r *pollConn) Read(p []byte) (int, error) {
	return r.readv(p, nil)
}

// readv reads into a, then b, with one system call (b may be empty). It
// returns at least one byte or an error.
func (r *pollConn) readv(a, b []byte) (int, error) {
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

// writev writes bufs to the socket, all of it or an error, within the
// connection's write deadline (RawConn.Write honours it: the caller sets
// it). A write that finds the socket full marks the connection txParked
// and waits on the poller until there is room. The caller holds the
// queue's write lock; bufs is not modified. This is the one socket write
// of both the host and the controller queue.
func (c *pollConn) writev(bufs [][]byte) (int, error) {
	c.wbufs, c.woff, c.wn, c.werr = bufs, 0, 0, nil
	raceRelease()
	err := c.rc.Write(c.wfn)
	if c.txParked.Load() {
		c.txParked.Store(false) // (a deadline or a close ends the wait without a call)
	}
	c.wbufs = nil
	clear(c.wiov[:])
	if err == nil {
		err = c.werr
	}
	return c.wn, err
}

// write is the RawConn write callback: writev(2) of what is left until it
// is all written, the socket is full (false: the runtime waits for room,
// then calls again) or an error.
func (c *pollConn) write(fd uintptr) bool {
	if c.txParked.Load() {
		// Called again: the poller found room. (Loaded first: no store
		// to the reader's cache line on every write.)
		c.txParked.Store(false)
	}
	for {
		n, skip := 0, c.woff
		for i := 0; i < len(c.wbufs) && n < len(c.wiov); i++ {
			b := c.wbufs[i]
			if skip > 0 {
				b, skip = b[skip:], 0
			}
			if len(b) == 0 {
				continue
			}
			c.wiov[n].Base = &b[0]
			c.wiov[n].SetLen(len(b))
			n++
		}
		if n == 0 {
			return true
		}
		w, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&c.wiov[0])), uintptr(n))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.writeParks.Add(1)
			c.txParked.Store(true)
			return false
		default:
			c.werr = os.NewSyscallError("writev", e)
			return true
		}
		c.wn += int(w)
		left := int(w) + c.woff
		c.woff = 0
		for len(c.wbufs) > 0 && left >= len(c.wbufs[0]) {
			left -= len(c.wbufs[0])
			c.wbufs = c.wbufs[1:]
		}
		if len(c.wbufs) == 0 {
			return true
		}
		c.woff = left
	}
}

// writeBuffers writes bufs to a queue's connection within timeout (the
// write deadline, set here): through the queue's socket, c, so that its
// reader does not spin while the write waits for room, or, without one
// (a connection that is not a socket), through net.Buffers.WriteTo. bufs
// is consumed, as by WriteTo. The caller holds the queue's write lock.
func writeBuffers(conn net.Conn, c *pollConn, bufs *net.Buffers, timeout time.Duration) error {
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if c == nil {
		raceRelease()
		_, err := bufs.WriteTo(conn)
		return err
	}
	_, err := c.writev(*bufs)
	*bufs = (*bufs)[len(*bufs):]
	return err
}
