package target

import (
	"errors"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// handleIO checks an NVM command on an I/O queue and starts it: the
// checks run on the engine goroutine, the backend call on a worker (or
// inline for RAM backends). Nothing here allocates.
func (q *queue) handleIO(ctrl *controller, c *command) {
	r := c.r
	sqe := r.SQE()
	if sqe.IsFabrics() {
		// Authentication Send/Receive; nothing else is valid on an I/O
		// queue (nvmet_parse_fabrics_io_cmd).
		if sqe.IsAuth() {
			q.handleAuth(ctrl, r)
			return
		}
		q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
		return
	}
	if ctrl.dead.Load() {
		// The controller is being torn down (keep-alive expiry, a lost
		// admin queue) and its queues are closing: the host retries the
		// command on its next association. Command Sequence Error with
		// DNR, as for a disabled controller, would fail it for good (nvmet
		// keeps CSTS.RDY until the last queue is gone, so it never
		// answers that in this window).
		q.respond(r, nvmeof.StatusAbortSQDeleted)
		return
	}
	if !ctrl.ready() {
		q.respond(r, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)
		return
	}
	if !q.authorized() {
		q.respond(r, nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
		return
	}
	if ctrl.revoked.Load() {
		// The host is no longer allowed into the subsystem; its
		// controller is being torn down.
		q.respond(r, nvmeof.StatusAccessDenied|nvmeof.StatusDNR)
		return
	}
	op := sqe.Opcode()
	nsid := sqe.NSID()
	if op == nvmeof.NVMFlush && nsid == nvmeof.NSIDAll {
		// Identify VWC says Flush of every namespace is supported.
		if len(r.Data()) != 0 {
			q.respond(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			return
		}
		c.kind = cmdFlushAll
		q.s.shared.push(c)
		return
	}
	ns, ref, st := q.lookupNS(ctrl, ctrl.sub.ns.Load(), nsid)
	if st != nvmeof.StatusSuccess {
		q.respond(r, st)
		return
	}
	c.ns, c.ref = ns, ref
	st = ns.check(sqe, len(r.Data()))
	if st == nvmeof.StatusSuccess {
		// nvmet_check_ana_state: a path whose group is not accessible
		// answers with a path-related status, and the host tries another.
		st = anaStatus(ctrl.anaState(ns.cfg.ANAGroup))
	}
	if st != nvmeof.StatusSuccess {
		ns.errors.Add(1)
		c.putNS()
		q.respond(r, st)
		return
	}
	c.kind = cmdIO
	switch op {
	case nvmeof.NVMWrite, nvmeof.NVMDatasetManagement:
		r.FetchData() // DataReady submits it
	default:
		ns.submit(q.s, c)
	}
}

// check validates an NVM command against the namespace before any data
// moves: opcode, write protection, the transfer length the command implies
// against the SGL's (nvmet_check_transfer_len answers SGL Data Block
// Invalid; for Dataset Management the SGL may be longer), and the LBA
// range.
func (ns *namespace) check(sqe *nvmeof.SQE, dataLen int) nvmeof.Status {
	op := sqe.Opcode()
	var want uint64
	switch op {
	case nvmeof.NVMRead, nvmeof.NVMWrite:
		want = uint64(sqe.RWCmd().Blocks()) << ns.lbaShift
	case nvmeof.NVMWriteZeroes, nvmeof.NVMFlush:
	case nvmeof.NVMDatasetManagement:
		want = uint64(sqe.DSMCmd().DataLength())
	default:
		return nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR
	}
	if ns.readOnly && op != nvmeof.NVMRead && op != nvmeof.NVMFlush {
		// nvmet_io_cmd_check_access: no DNR, write protection may be
		// lifted.
		return nvmeof.StatusNamespaceWriteProtected
	}
	if uint64(dataLen) != want && (op != nvmeof.NVMDatasetManagement || uint64(dataLen) < want) {
		// Dataset Management may carry more than its ranges: the Linux
		// host always sends the 4 KiB range buffer of nvme_setup_discard
		// (256 ranges) whatever NR says, and nvmet accepts it
		// (nvmet_check_data_len_lte).
		return nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR
	}
	switch op {
	case nvmeof.NVMRead, nvmeof.NVMWrite, nvmeof.NVMWriteZeroes:
		last, ok := sqe.RWCmd().LastLBA()
		if !ok || last >= ns.nsze.Load() {
			return nvmeof.StatusLBAOutOfRange | nvmeof.StatusDNR
		}
	}
	return nvmeof.StatusSuccess
}

// submit runs a checked command: inline for backends that never sleep,
// inline too for a read or write that the backend can do without waiting
// (page cache), started on the backend's asynchronous path when it has
// one, else on the namespace's worker pool.
func (ns *namespace) submit(s *server, c *command) {
	if ns.inline {
		s.execIO(c)
		return
	}
	if ns.async != nil && s.tryAsync(c) {
		return
	}
	if ns.nowait != nil && s.tryNowait(c) {
		return
	}
	ns.pool.push(c)
}

// tryNowait runs a read or a non-FUA write on the queue's goroutine if the
// backend can do it without sleeping (backend.NowaitIO, as nvmet's file
// backend with IOCB_NOWAIT) and completes it; false: it would have had to
// wait (or the command is of another kind), nothing was done, and the
// caller hands it to a worker. The checks and accounting are execIO's.
func (s *server) tryNowait(c *command) bool {
	q, r, ns := c.q, c.r, c.ns
	sqe := r.SQE()
	op := sqe.Opcode()
	if op != nvmeof.NVMRead && (op != nvmeof.NVMWrite || sqe.RWCmd().FUA()) {
		return false
	}
	if ns.pastServingDeadline(s) {
		return false // execIO answers it
	}
	ctrl := q.ctrl.Load()
	if ctrl == nil || !q.link().Live() || !ctrl.io.get() {
		return false // execIO answers it
	}
	data := r.Data()
	off := int64(sqe.RWCmd().SLBA() << ns.lbaShift)
	var done bool
	var err error
	var t0, t1 time.Time
	timed := s.timed.Load()
	if timed {
		t0 = time.Now()
	}
	if op == nvmeof.NVMRead {
		done, err = ns.nowait.TryReadAt(data, off)
	} else {
		done, err = ns.nowait.TryWriteAt(data, off, false)
	}
	ctrl.io.put()
	if !done {
		return false
	}
	if timed {
		t1 = time.Now()
		ns.met.observe(op, t1.Sub(t0))
	}
	st := ns.rwDone(s, op, len(data), err)
	c.putNS()
	q.respondAt(r, st, t1)
	return true
}

// rwDone counts a read or write (op) of n bytes that ended with err and
// returns its status: the accounting of every path that runs one
// (execIO's exec, tryNowait, the asynchronous path's IODone).
func (ns *namespace) rwDone(s *server, op uint8, n int, err error) nvmeof.Status {
	bop := backend.OpWrite
	if op == nvmeof.NVMRead {
		bop = backend.OpRead
		ns.readCmds.Add(1)
		if err == nil {
			ns.readBytes.Add(uint64(n))
		}
	} else {
		ns.writeCmds.Add(1)
		if err == nil {
			ns.writeBytes.Add(uint64(n))
		}
	}
	if err != nil {
		return ns.ioFailed(s, bop, err)
	}
	ns.succeeded.Add(1)
	return nvmeof.StatusSuccess
}

// execIO runs a command's backend work and completes it: an NVM command on
// c.ns (with a reference held), or a Flush of every namespace of the
// controller's subsystem.
//
// A command whose connection has ended, or whose controller is gone, is
// not executed: nobody would get its answer, and a write that ran after
// the host's next association had written the same blocks would overwrite
// newer data (see ioRef).
func (s *server) execIO(c *command) {
	q, r := c.q, c.r
	sqe := r.SQE()
	ctrl := q.ctrl.Load()
	if ctrl == nil || !q.link().Live() || !ctrl.io.get() {
		if c.kind == cmdIO {
			c.putNS()
		}
		q.respond(r, nvmeof.StatusAbortSQDeleted)
		return
	}
	var st nvmeof.Status
	var t1 time.Time
	switch c.kind {
	case cmdFlushAll:
		st = flushAll(ctrl.sub)
	case cmdIO:
		c.enterBackend()
		if !s.timed.Load() {
			st = c.ns.exec(s, sqe, r.Data())
			c.putNS()
			ctrl.io.put()
			q.finishIO(c, r, st, t1)
			return
		}
		op := sqe.Opcode()
		t0 := time.Now()
		st = c.ns.exec(s, sqe, r.Data())
		t1 = time.Now() // also the response's time (one clock read less)
		c.ns.met.observe(op, t1.Sub(t0))
		c.putNS()
		ctrl.io.put()
		q.finishIO(c, r, st, t1)
		return
	default:
		st = nvmeof.StatusInternalError | nvmeof.StatusDNR
	}
	ctrl.io.put()
	q.respondAt(r, st, t1)
}

// exec does the backend work of one command. It reads sqe only before the
// backend call: a command answered early (AnswerGroupInFlight) may have
// given the SQE's receive buffer back to the host meanwhile.
func (ns *namespace) exec(s *server, sqe *nvmeof.SQE, data []byte) nvmeof.Status {
	if ns.pastServingDeadline(s) {
		ns.errors.Add(1)
		return statusPastDeadline
	}
	var err error
	var op backend.Op
	switch sqe.Opcode() {
	case nvmeof.NVMRead:
		return ns.rwDone(s, nvmeof.NVMRead, len(data), ns.be.ReadAt(data, int64(sqe.RWCmd().SLBA()<<ns.lbaShift)))
	case nvmeof.NVMWrite:
		rw := sqe.RWCmd()
		return ns.rwDone(s, nvmeof.NVMWrite, len(data), ns.be.WriteAt(data, int64(rw.SLBA()<<ns.lbaShift), rw.FUA()))
	case nvmeof.NVMWriteZeroes:
		op = backend.OpWriteZeroes
		wz := sqe.WriteZeroesCmd()
		fua := wz.FUA() // read before the backend call: see execIO
		err = ns.be.WriteZeroes(int64(wz.SLBA()<<ns.lbaShift), int64(wz.Blocks())<<ns.lbaShift, wz.CDW12()&nvmeof.WZDEAC != 0)
		if err == nil && fua {
			err = ns.be.Flush()
		}
		ns.otherCmds.Add(1)
	case nvmeof.NVMFlush:
		op = backend.OpFlush
		err = ns.be.Flush()
		ns.otherCmds.Add(1)
	case nvmeof.NVMDatasetManagement:
		ns.otherCmds.Add(1)
		return ns.dsm(sqe, data)
	default:
		return nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR
	}
	if err != nil {
		return ns.ioFailed(s, op, err)
	}
	ns.succeeded.Add(1)
	return nvmeof.StatusSuccess
}

// dsm runs Dataset Management: with the Deallocate attribute, a discard of
// each range (at most 256, checked against the namespace first); the other
// attributes are hints and need nothing. A backend that cannot deallocate
// makes it a no-op: deallocation is advisory.
func (ns *namespace) dsm(sqe *nvmeof.SQE, data []byte) nvmeof.Status {
	cmd := sqe.DSMCmd()
	ranges, err := nvmeof.ParseDSMRanges(data, cmd.NumRanges())
	if err != nil {
		return nvmeof.StatusFromError(err)
	}
	if !cmd.AD() {
		ns.succeeded.Add(1)
		return nvmeof.StatusSuccess
	}
	for i := 0; i < ranges.Len(); i++ {
		rg := ranges.At(i)
		end := rg.SLBA() + uint64(rg.NLB())
		if end < rg.SLBA() || end > ns.nsze.Load() {
			return nvmeof.StatusLBAOutOfRange | nvmeof.StatusDNR
		}
	}
	for i := 0; i < ranges.Len(); i++ {
		rg := ranges.At(i)
		if rg.NLB() == 0 {
			continue
		}
		err := ns.be.Discard(int64(rg.SLBA()<<ns.lbaShift), int64(rg.NLB())<<ns.lbaShift)
		if errors.Is(err, backend.ErrNotSupported) {
			ns.succeeded.Add(1)
			return nvmeof.StatusSuccess
		}
		if err != nil {
			return ns.ioFailed(nil, backend.OpDiscard, err)
		}
	}
	ns.succeeded.Add(1)
	return nvmeof.StatusSuccess
}

// ioFailed maps a backend error to the NVMe status, as the backend
// package documents it, and counts it.
func (ns *namespace) ioFailed(s *server, op backend.Op, err error) nvmeof.Status {
	ns.errors.Add(1)
	ns.notePathError(err)
	st := backendStatus(op, err)
	if errors.Is(err, backend.ErrUnavailable) && s != nil && s.adm != nil {
		// The storage is unreachable (a Ceph cluster lost): hosts get a
		// path error and fail over; say so, rate-limited.
		s.adm.Log(zap.WarnLevel, "backend_unavailable", "backend unavailable: I/O fails with a path error",
			zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid), zap.Error(err))
	}
	var ioe *backend.IOError
	if errors.As(err, &ioe) {
		ns.mediaErrors.Add(1)
		if s != nil {
			s.log.Warn("backend I/O error", zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid), zap.Error(err))
		}
	}
	return st
}

// backendStatus is the NVMe status for a backend error (see package
// backend): range errors are LBA Out of Range or Invalid Field, a
// read-only backend is Namespace Write Protected, storage failures are
// Unrecovered Read Error for reads and Write Fault otherwise (ENOSPC is
// Capacity Exceeded, as nvmet's errno_to_nvme_status), an unsupported
// operation is Invalid Opcode, a closed backend (being replaced or shut
// down) a path error the host retries.
func backendStatus(op backend.Op, err error) nvmeof.Status {
	switch {
	case err == nil:
		return nvmeof.StatusSuccess
	case errors.Is(err, backend.ErrOutOfRange):
		return nvmeof.StatusLBAOutOfRange | nvmeof.StatusDNR
	case errors.Is(err, backend.ErrUnaligned):
		return nvmeof.StatusInvalidField | nvmeof.StatusDNR
	case errors.Is(err, backend.ErrReadOnly):
		return nvmeof.StatusNamespaceWriteProtected
	case errors.Is(err, backend.ErrNotSupported):
		return nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR
	case errors.Is(err, backend.ErrClosed):
		return nvmeof.StatusInternalPathError
	case errors.Is(err, syscall.ENOSPC):
		return nvmeof.StatusCapacityExceeded | nvmeof.StatusDNR
	}
	var ioe *backend.IOError
	if errors.As(err, &ioe) {
		if op == backend.OpRead {
			return nvmeof.StatusUnrecoveredReadError
		}
		return nvmeof.StatusWriteFault
	}
	return nvmeof.StatusInternalError | nvmeof.StatusDNR
}

// flushAll flushes every online namespace of a subsystem (Flush with NSID
// 0xFFFFFFFF).
func flushAll(sub *subsystem) nvmeof.Status {
	tab := sub.ns.Load()
	st := nvmeof.StatusSuccess
	for _, id := range tab.active {
		ns, lst := tab.lookup(id)
		if lst != nvmeof.StatusSuccess {
			continue
		}
		ns.otherCmds.Add(1)
		if err := ns.be.Flush(); err != nil {
			if st == nvmeof.StatusSuccess {
				st = ns.ioFailed(nil, backend.OpFlush, err)
			}
		} else {
			ns.succeeded.Add(1)
		}
		ns.put()
	}
	return st
}
