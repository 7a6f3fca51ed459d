package target

import (
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// tryAsync starts a read or a write on a backend with an asynchronous path
// (backend.AsyncIO, the rbd backend on librbd's aio) from the queue's
// goroutine and returns at once: the backend completes it (IODone) from
// its own completion goroutine, with no hop to a worker and no goroutine
// waiting. false: nothing was started (another opcode, or the backend's
// cap on operations in flight is reached): the caller hands the command to
// a worker, where it waits its turn and runs the synchronous call. The
// checks and accounting are execIO's.
func (s *server) tryAsync(c *command) bool {
	q, r, ns := c.q, c.r, c.ns
	sqe := r.SQE()
	op := sqe.Opcode()
	if op != nvmeof.NVMRead && op != nvmeof.NVMWrite {
		return false
	}
	if ns.pastServingDeadline(s) {
		return false // execIO answers it
	}
	ctrl := q.ctrl.Load()
	if ctrl == nil || !q.link().Live() || !ctrl.io.get() {
		return false // execIO answers it
	}
	rw := sqe.RWCmd()
	off := int64(rw.SLBA() << ns.lbaShift)
	c.ctrl, c.issued = ctrl, time.Time{}
	if s.timed.Load() {
		c.issued = time.Now()
	}
	// From here c belongs to the backend until IODone, which may run
	// before Start returns.
	c.enterBackend()
	var ok bool
	if op == nvmeof.NVMRead {
		ok = ns.async.StartReadAt(r.Data(), off, c)
	} else {
		ok = ns.async.StartWriteAt(r.Data(), off, rw.FUA(), c)
	}
	if !ok {
		c.io.Store(ioIdle)
		c.ctrl = nil
		ctrl.io.put()
	}
	return ok
}

// IODone completes a command started by tryAsync (backend.Completion): as
// execIO after its backend call.
func (c *command) IODone(err error) {
	q, r, ns, ctrl := c.q, c.r, c.ns, c.ctrl
	c.ctrl = nil
	op := r.SQE().Opcode()
	var t1 time.Time // the response's time; zero: untimed (server.timed)
	if !c.issued.IsZero() {
		t1 = time.Now()
		ns.met.observe(op, t1.Sub(c.issued))
	}
	st := ns.rwDone(q.s, op, len(r.Data()), err)
	c.putNS()
	ctrl.io.put()
	q.finishIO(c, r, st, t1)
}

var _ backend.Completion = (*command)(nil)
