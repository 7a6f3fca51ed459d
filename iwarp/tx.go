package iwarp

import (
	"os"
	"syscall"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// txDriver is the writer's state: system call plumbing for writev. It
// belongs to whoever holds engine.tx.owner.
type txDriver struct {
	sysIov  []unix.Iovec
	iov     [][]byte // the batch being written (from the engine)
	off     int      // bytes of iov[0] already written
	writeFn func(fd uintptr) bool
	wblock  bool // writeFn may wait for socket space
	wn      int  // bytes written by the last writeFn call
	wfull   bool // the socket had no room
	werr    error
	raw     rawRun // raw writev calls (rawsys.go)
	wcs     []WC
	term    [256]byte
	tap     tapState // the tap sees writes (from a batch's start on)
}

func (t *txDriver) init(qp *QP) {
	t.sysIov = make([]unix.Iovec, txMaxIov)
	t.wcs = make([]WC, 0, 16)
	t.writeFn = qp.doWrite
}

// write is the writer's loop: the caller has become the writer (txClaim).
// It lays out and writes batches until nothing is left; a writer that may
// not wait for socket space (not the send goroutine) hands over to the send
// goroutine when the socket is full. Completions are delivered between
// batches, outside the lock; work they post is picked up by the loop.
func (qp *QP) write(who writer) {
	qp.mu.Lock()
	qp.writeLocked(who)
}

// writeLocked is write for a caller that holds mu (and has just claimed the
// writer's turn under it); it unlocks mu.
func (qp *QP) writeLocked(who writer) {
	t := &qp.tx
	blocking := who == writerTx
	for {
		iov := qp.e.txLayout()
		if iov == nil {
			qp.e.txRelease(false)
			a := qp.takeActions()
			st := qp.e.state
			qp.mu.Unlock()
			if st == QPStateError || st == QPStateTerminate {
				qp.wake()
				qp.maybeFinish()
			}
			if a&actTx != 0 && who != writerTx {
				// Work came in as we let go: look again.
				qp.mu.Lock()
				claimed := qp.e.txClaim(who)
				a2 := qp.takeActions()
				if claimed {
					continue
				}
				qp.mu.Unlock()
				if a2&actTx != 0 {
					qp.wake()
				}
				a = (a | a2) &^ actTx
			}
			qp.apply(a&^actTx, who)
			if a&actTx != 0 && who == writerTx {
				qp.wake()
			}
			return
		}
		t.iov, t.off = iov, qp.e.txOffset()
		off := t.off
		tb := qp.tap.Load()
		if tb == nil {
			t.tap.on = false
		} else if qp.e.txAtBatchStart() {
			t.tap.on = true
		}
		qp.mu.Unlock()

		n, full, err := qp.writev(blocking)
		if tb != nil && t.tap.on && n > 0 {
			tb.t.TapTx(iov, off, n) // (writev advances t.iov and t.off)
		}

		qp.mu.Lock()
		if n > 0 {
			qp.e.txWritten(n)
		}
		t.wcs = qp.takeOut(t.wcs)
		if err != nil {
			if st := qp.e.state; st == QPStateRTS || st == QPStateClosing {
				qp.e.fail(err)
			}
		}
		qp.syncState()
		if err == nil && !full {
			if len(t.wcs) > 0 {
				// Completions are delivered outside the lock, while this
				// goroutine is still the writer: work they post is laid
				// out by the next turn of the loop.
				qp.mu.Unlock()
				qp.deliver(t.wcs)
				qp.mu.Lock()
			}
			continue // (without completions: the next layout under the same lock)
		}
		qp.e.txRelease(full && err == nil)
		a := qp.takeActions()
		qp.mu.Unlock()
		qp.deliver(t.wcs)
		qp.apply(a&^actTx, who)
		if a&actTx != 0 || err != nil {
			qp.wake()
		}
		qp.maybeFinish()
		return
	}
}

// writev writes the batch in t.iov with one or more writev calls. Without
// blocking it stops at a full socket (full).
func (qp *QP) writev(blocking bool) (n int, full bool, err error) {
	t := &qp.tx
	t.wblock, t.wn, t.wfull, t.werr = blocking, 0, false, nil
	if err := qp.raw.Write(t.writeFn); err != nil {
		return t.wn, false, err
	}
	return t.wn, t.wfull, t.werr
}

// doWrite is the RawConn write callback: writev of the pending iovecs until
// they are out, the socket is full, or an error. Returning false makes the
// runtime wait for socket space (blocking mode).
func (qp *QP) doWrite(fd uintptr) bool {
	t := &qp.tx
	if qp.txParked.Load() {
		qp.txParked.Store(false) // (the poller found room: called again)
	}
	for {
		n := 0
		skip := t.off
		for i := 0; i < len(t.iov) && n < len(t.sysIov); i++ {
			b := t.iov[i]
			if skip > 0 {
				k := min(skip, len(b))
				b, skip = b[k:], skip-k
			}
			if len(b) == 0 {
				continue
			}
			t.sysIov[n].Base = &b[0]
			t.sysIov[n].SetLen(len(b))
			n++
		}
		if n == 0 {
			return true
		}
		// Raw: see rawsys.go. The run is never ended here (a writer
		// does not know whether the QP is about to go idle): one writev
		// in 2*sysmonEvery goes through entersyscall.
		w, e := t.raw.syscall3(2*sysmonEvery, syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&t.sysIov[0])), uintptr(n))
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if t.wblock {
				qp.txParked.Store(true) // (until the poller calls us again)
				return false
			}
			t.wfull = true
			return true
		default:
			t.werr = os.NewSyscallError("writev", e)
			return true
		}
		t.wn += int(w)
		// Advance past what was written.
		left := int(w) + t.off
		t.off = 0
		for left > 0 && len(t.iov) > 0 {
			if left < len(t.iov[0]) {
				t.off = left
				break
			}
			left -= len(t.iov[0])
			t.iov = t.iov[1:]
		}
		for len(t.iov) > 0 && len(t.iov[0]) == t.off {
			t.iov, t.off = t.iov[1:], 0
		}
		if len(t.iov) == 0 {
			return true
		}
	}
}

// txLoop is the send goroutine: it writes when a writer had to give up for
// lack of socket space, sends the Terminate and the graceful disconnect's
// FIN, and exits when the connection is over.
func (qp *QP) txLoop() {
	defer qp.loopDone()
	for {
		<-qp.kick
		qp.mu.Lock()
		st := qp.e.state
		switch st {
		case QPStateError:
			qp.mu.Unlock()
			return
		case QPStateTerminate:
			if qp.e.tx.owner {
				// A writer is still at it: it wakes us when it lets go.
				qp.mu.Unlock()
				continue
			}
			qp.e.tx.owner = true
			fr := qp.e.terminateFrame(qp.tx.term[:0])
			qp.mu.Unlock()
			if fr != nil {
				n, err := qp.conn.Write(fr)
				if err != nil {
					qp.log.Debug("iwarp: terminate not sent", zap.Error(err))
				}
				if tb := qp.tap.Load(); tb != nil && qp.tx.tap.on && n > 0 {
					tb.t.TapTx([][]byte{fr}, 0, n)
				}
			}
			_ = qp.conn.CloseWrite()
			qp.mu.Lock()
			qp.e.tx.owner = false
			qp.mu.Unlock()
			return
		}
		claimed := qp.e.txClaim(writerTx)
		drained := st == QPStateClosing && !qp.e.tx.owner && qp.e.sendDrained()
		qp.mu.Unlock()
		if claimed {
			qp.write(writerTx)
			qp.mu.Lock()
			drained = qp.e.state == QPStateClosing && !qp.e.tx.owner && qp.e.sendDrained()
			qp.mu.Unlock()
		}
		if drained {
			// Everything posted before Disconnect is out: FIN. The peer's
			// close (or the linger timer) ends the QP.
			_ = qp.conn.CloseWrite()
			return
		}
	}
}
