package iwarp

import (
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// Read-ahead buffer sizes. A connection starts with a small one and moves
// to Config.ReadBuffer the first time a read fills it: an idle or silent
// connection (one that never got past its handshake) holds 4 KiB, a busy one
// the full buffer, and steady state allocates nothing.
const rxStartBuffer = 4 << 10

// Placement of large payloads (issue 25). The rest of a payload of at least
// rxDirectMin bytes (the FPDU's whole payload) that has not arrived yet is
// read straight into its destination, and that read stops at the end of the
// next FPDU's header (its second iovec is rxTail bytes of the read-ahead
// buffer: this FPDU's pad and CRC, then at most the longest DDP header):
// what arrives after the header is read by the next readv, the read-ahead
// way. What one read already brought into the read-ahead buffer together
// with its header is copied from there.
//
// Measured on this machine kind (2 vCPUs, loopback, FPDUs of the 64 KiB
// MSS; test/bench/results/placement/2026-11-28-s5): a mode that also read
// only as far as the next header between FPDUs and for the two small
// payloads after a large one (so that a stream of large FPDUs was never
// copied: 0.0 % against 99.9 %) cost three times the readv calls and 2.5
// times the poller waits per 128 KiB write (strace -c: 12.7 readv and 3.4
// epoll_pwait per I/O against 3.9 and 1.4), which made
// BenchmarkTargetIO/memory/seqwrite/128KiB/qd8 13 % slower than copying
// everything; this rule, with no such credit, is the fastest of the three
// on both directions (seqwrite 368 µs against 378 copying and 428 exact,
// seqread 218 against 254 and 228, medians of 8 interleaved rounds): a
// copy of a few tens of KiB out of a buffer the read just filled costs
// less than a system call and a wake-up. On paths whose MSS gives FPDUs
// under rxDirectMin (1460-byte Ethernet) every payload takes the
// read-ahead way.
//
// NVMETD_RX_PLACEMENT=copy in the environment turns the placement off for
// every QP of the process (rxCopyAll: every payload byte through the
// read-ahead buffer), for an on/off comparison of one build; nvmeof/tcp
// reads the same variable.
const (
	rxDirectMin = 16 << 10
	rxTail      = 3 + wire.CRCLen + wire.UntaggedHeaderLen
)

// rxCopyAll: NVMETD_RX_PLACEMENT=copy (see rxDirectMin). rxWide:
// NVMETD_RX_PLACEMENT=wide, the rest of a large payload is read straight
// and the same readv fills the read-ahead buffer behind it (what follows is
// copied, as after a small payload): fewer reads, more copies; for the
// lead's comparison of the three on one build.
var (
	rxCopyAll = strings.EqualFold(os.Getenv("NVMETD_RX_PLACEMENT"), "copy")
	rxWide    = strings.EqualFold(os.Getenv("NVMETD_RX_PLACEMENT"), "wide")
)

// rxDriver is the receive loop's state: the read-ahead buffer and the
// system call plumbing. Only the receive goroutine touches it.
type rxDriver struct {
	buf   []byte // read-ahead: what one read brings, fed to the engine
	full  int    // the size buf grows to
	place []byte // the payload destination the engine asked to be filled straight
	wcs   []WC   // completions being delivered

	// readv through the runtime poller without allocating: the callback
	// is bound once; its arguments travel in these fields.
	iov    [2]unix.Iovec
	iovCnt int
	readFn func(fd uintptr) bool
	readN  int
	rerr   error
	spin   time.Duration
	raw    rawRun // consecutive raw readv calls (rawsys.go)

	// tap: the tap sees reads; boundary: the engine was at an FPDU
	// boundary after the last read (a tap may start with the next).
	tap      tapState
	boundary bool
	// placeLarge: place is part of a payload of at least rxDirectMin.
	placeLarge bool
	// lingerState: the wait in the kernel before parking (linger.go).
	lingerState
}

func (r *rxDriver) init(qp *QP) {
	r.full = qp.cfg.ReadBuffer
	r.buf = make([]byte, min(rxStartBuffer, r.full))
	r.wcs = make([]WC, 0, 16)
	r.readFn = qp.doRead
	r.spin = qp.cfg.BusyPoll
	r.boundary = true
}

// doRead is the RawConn read callback: one readv into the prepared iovecs.
// With busy polling it retries a would-block read until the spin time runs
// out before letting the runtime park the goroutine.
func (qp *QP) doRead(fd uintptr) bool {
	r := &qp.rx
	var deadline time.Time
	for {
		// Raw: see rawsys.go.
		n, e := r.raw.syscall3(sysmonEvery, syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(r.iovCnt))
		switch e {
		case 0:
			r.readN = int(n)
			if n == 0 {
				r.rerr = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.spin <= 0 && !qp.txParked.Load() && r.linger(fd) {
				continue
			}
			if r.spin <= 0 || qp.txParked.Load() {
				// No busy polling while the send goroutine waits for
				// socket space: with one P (a process pinned to one
				// core: GOMAXPROCS 1) a goroutine that spins with
				// Gosched keeps the scheduler from polling the network,
				// so the writer would not be woken when the peer makes
				// room until the spin ends (or sysmon polls, 10 ms);
				// a peer that keeps sending keeps the spin going. A
				// large transfer (a 128 KiB Read Response or RDMA Write
				// that fills the socket) hit that on every I/O.
				r.raw.parked()
				return false
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(r.spin)
			} else if now.After(deadline) {
				r.raw.parked()
				return false
			}
			// Let other goroutines of this P run between polls (the
			// peer's loop may be one of them when both ends share a
			// process).
			runtime.Gosched()
			continue
		default:
			r.rerr = os.NewSyscallError("readv", e)
			return true
		}
	}
}

// readv reads into a then b with one system call.
func (qp *QP) readv(a, b []byte) (int, error) {
	r := &qp.rx
	r.iovCnt = 0
	for _, p := range [2][]byte{a, b} {
		if len(p) > 0 {
			r.iov[r.iovCnt].Base = &p[0]
			r.iov[r.iovCnt].SetLen(len(p))
			r.iovCnt++
		}
	}
	r.readN, r.rerr = 0, nil
	err := qp.raw.Read(r.readFn)
	r.iov[0].Base, r.iov[1].Base = nil, nil
	if err != nil {
		return 0, err
	}
	return r.readN, r.rerr
}

// rxLoop reads the socket and feeds the engine until the connection ends.
//
// Placement: each read goes into the read-ahead buffer, except that when
// the engine is in the middle of a payload whose bytes have not arrived
// yet, the read goes straight into the payload's destination (registered
// memory, or the posted receive buffer) and only what follows it lands in
// the read-ahead buffer (one readv of two iovecs). Payload bytes that one
// read already brought into the read-ahead buffer together with their
// header are copied from there: one copy of a few KiB costs less than the
// system call a separate read would. EngineStats counts both
// (PayloadCopied, PayloadDirect).
func (qp *QP) rxLoop() {
	defer qp.loopDone()
	r := &qp.rx
	for {
		var n, direct int
		var err error
		switch {
		case len(r.place) > 0 && r.placeLarge && !rxWide:
			// The rest of a large payload: straight, stopping at the next
			// header.
			n, err = qp.readv(r.place, r.buf[:min(rxTail, len(r.buf))])
			direct = min(n, len(r.place))
		case len(r.place) > 0:
			n, err = qp.readv(r.place, r.buf)
			direct = min(n, len(r.place))
		default:
			n, err = qp.readv(r.buf, nil)
			if n == len(r.buf) && len(r.buf) < r.full {
				// A busy connection: read more at a time from now on.
				nb := make([]byte, r.full)
				copy(nb, r.buf[:n])
				r.buf = nb
			}
		}
		if n > 0 {
			if tb := qp.tap.Load(); tb != nil {
				if r.tap.on || (r.boundary && direct == 0) {
					r.tap.on = true
					tb.t.TapRx(r.place[:direct], r.buf[:n-direct])
				}
			} else {
				r.tap.on = false
			}
			qp.mu.Lock()
			qp.e.rxBusy = true
			if direct > 0 {
				qp.e.rxPlaced(direct)
			}
			_, place, perr := qp.e.rxConsume(r.buf[:n-direct])
			r.place = place
			if rxCopyAll {
				r.place = nil // (a hint the engine does without: rxConsume)
			}
			// The FPDU's whole payload, not what is left of it: a read
			// that ended inside a large payload stays in the exact mode.
			r.placeLarge = len(place) > 0 && len(qp.e.rx.dst) >= rxDirectMin
			r.boundary = !qp.e.rx.midFrame()
			r.wcs = qp.takeOut(r.wcs)
			qp.syncState()
			a := qp.takeActions()
			qp.mu.Unlock()
			qp.deliver(r.wcs)
			// Done with this read: write what the handlers posted, all of
			// it at once (see txClaim); the claim is made under the same
			// acquisition of the lock.
			qp.mu.Lock()
			qp.e.rxBusy = false
			if qp.e.txClaim(writerRx) {
				a |= qp.takeActions()
				qp.writeLocked(writerRx)
				a &^= actTx
			} else {
				a |= qp.takeActions()
				if qp.e.txHasWork() {
					a |= actTx
				}
				qp.mu.Unlock()
			}
			qp.apply(a, writerRx)
			if perr != nil {
				qp.rxDrain()
				return
			}
		}
		if err != nil {
			qp.rxEnd(err)
			return
		}
	}
}

// rxEnd handles the end of the read side.
func (qp *QP) rxEnd(err error) {
	qp.mu.Lock()
	st := qp.e.state
	switch {
	case st == QPStateClosing && (errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || isClosedErr(err)):
		// The graceful disconnect completed (or lingered out).
		qp.e.fail(nil)
	case errors.Is(err, io.EOF):
		qp.e.fail(ErrPeerClosed)
	case isClosedErr(err) && st != QPStateRTS:
		// We closed it.
	default:
		qp.e.fail(err)
	}
	qp.syncState()
	a := qp.takeActions()
	terminating := qp.e.state == QPStateTerminate
	qp.mu.Unlock()
	qp.apply(a&^actTx, writerRx)
	if terminating {
		qp.rxDrain()
	}
}

// rxDrain lets a Terminate reach the peer: it reads and drops what comes
// until the peer closes or the linger time ends.
func (qp *QP) rxDrain() {
	qp.mu.Lock()
	terminating := qp.e.state == QPStateTerminate
	qp.mu.Unlock()
	if !terminating {
		return
	}
	_ = qp.conn.SetReadDeadline(time.Now().Add(qp.cfg.LingerTimeout))
	for {
		if _, err := qp.readv(qp.rx.buf, nil); err != nil {
			return
		}
	}
}
