package target

import (
	"errors"
	"net"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// queue is the target's side of one NVMe/RDMA queue: the rdma.Handler of a
// ControllerQueue. Until a Connect succeeds on it, it belongs to no
// controller and accepts only Connect.
type queue struct {
	s      *server
	port   *port
	qid    uint16 // from the CM private data; Connect must name the same
	size   int    // HSQSIZE+1
	remote net.Addr
	local  net.Addr
	log    *zap.Logger

	cq   atomic.Pointer[rdma.ControllerQueue]
	ctrl atomic.Pointer[controller]

	// inflight counts commands between HandleCommand and their completion
	// (held AERs and parked commands excluded), for a graceful shutdown.
	inflight atomic.Int64

	// host is the host NQN whose queue count includes this queue (set by
	// a successful Connect; see hostUsage).
	host string

	mu         perfcount.Mutex
	connecting bool
	closed     bool
	// parked are commands received while the target shuts down: they are
	// never answered, so the host retries them after it reconnects; they
	// are released once the connection is gone.
	parked []*rdma.Request

	reads, writes, others, rbytes, wbytes, errs atomic.Uint64
}

func (q *queue) counters() IOCounters {
	return IOCounters{
		ReadCommands: q.reads.Load(), WriteCommands: q.writes.Load(), OtherCommands: q.others.Load(),
		ReadBytes: q.rbytes.Load(), WriteBytes: q.wbytes.Load(), Errors: q.errs.Load(),
	}
}

// close disconnects the queue gracefully.
func (q *queue) close() {
	if cq := q.cq.Load(); cq != nil {
		cq.Close()
	}
}

// fields are the log fields of the queue.
func (q *queue) fields() []zap.Field {
	return []zap.Field{zap.Stringer("remote", q.remote), zap.Uint16("qid", q.qid)}
}

// HandleCommand is the entry of every command capsule (rdma.Handler). It
// runs on the queue's engine goroutine and never blocks: backend I/O goes
// to a worker pool (or runs inline for RAM backends), admin commands are
// answered here.
func (q *queue) HandleCommand(r *rdma.Request) {
	q.inflight.Add(1)
	if cq := r.Queue(); cq.Ctx == nil {
		// The first command of a queue comes before any other callback
		// of it, on the engine goroutine; workers find the queue here
		// (the accept goroutine must not write Ctx: the host may send
		// its Connect before Accept returns).
		cq.Ctx = q
		q.cq.CompareAndSwap(nil, cq)
	}
	sqe := r.SQE()
	// nvmet_req_init: no fused commands; on fabrics PSDT must select SGLs
	// with a contiguous metadata buffer (01b).
	if sqe.FUSE() != 0 || sqe.PSDT() != 1 {
		q.finish(r, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
		return
	}
	c := q.ctrl.Load()
	if c == nil {
		q.handleUnconnected(r)
		return
	}
	c.ka.touch()
	if q.s.stopping.Load() {
		q.park(r)
		return
	}
	if q.qid == 0 {
		c.handleAdmin(q, r)
		return
	}
	q.handleIO(c, r)
}

// DataReady continues a command whose data was fetched (rdma.Handler).
func (q *queue) DataReady(r *rdma.Request, err error) {
	if err != nil {
		// The RDMA Read failed: the connection is failing as well.
		if ns, ok := r.Ctx.(*namespace); ok {
			ns.put()
		}
		q.finish(r, nvmeof.StatusDataTransferError)
		return
	}
	switch ctx := r.Ctx.(type) {
	case *namespace:
		ctx.submit(q.s, r)
	case *queue:
		q.connectData(r)
	default:
		q.finish(r, nvmeof.StatusInternalError|nvmeof.StatusDNR)
	}
}

// QueueClosed is called once the connection has ended (rdma.Handler).
func (q *queue) QueueClosed(cq *rdma.ControllerQueue, err error) {
	q.cq.CompareAndSwap(nil, cq)
	q.mu.Lock()
	q.closed = true
	parked := q.parked
	q.parked = nil
	q.mu.Unlock()
	for _, r := range parked {
		r.Complete(nvmeof.StatusCommandInterrupted) // only releases: the queue is gone
	}
	c := q.ctrl.Load()
	lf := q.fields()
	if c != nil {
		lf = append(lf, zap.Uint16("cntlid", c.cntlid), zap.String("subsystem", c.sub.nqn), zap.String("host_nqn", c.hostNQN))
	}
	if err != nil && !errors.Is(err, iwarp.ErrPeerClosed) {
		q.s.adm.Log(zap.InfoLevel, endReason(err), "queue disconnected", append(lf, zap.Error(err))...)
	} else {
		q.s.log.Debug("queue disconnected", lf...)
	}
	if c != nil {
		c.queueClosed(q)
	}
	if q.host != "" {
		q.s.hostUse.give(q.host, 0, 1)
	}
	q.port.removeQueue(q)
}

// finish completes a command: counters, the error log (with the More bit,
// as nvmet), then the response capsule. Nothing of r may be used after.
func (q *queue) finish(r *rdma.Request, st nvmeof.Status) {
	sqe := r.SQE()
	if st != nvmeof.StatusSuccess {
		q.errs.Add(1)
		if c := q.ctrl.Load(); c != nil {
			st = c.logError(q.qid, sqe, st)
			if ce := c.log.Check(zap.DebugLevel, "command failed"); ce != nil {
				ce.Write(zap.Uint16("qid", q.qid), zap.String("command", nvmeof.OpcodeName(q.qid, sqe)),
					zap.Uint16("cid", sqe.CID()), zap.Uint32("nsid", sqe.NSID()), zap.Stringer("status", st))
			}
		}
	} else if q.qid != 0 && !sqe.IsFabrics() {
		switch sqe.Opcode() {
		case nvmeof.NVMRead:
			q.reads.Add(1)
			q.rbytes.Add(uint64(len(r.Data())))
		case nvmeof.NVMWrite:
			q.writes.Add(1)
			q.wbytes.Add(uint64(len(r.Data())))
		default:
			q.others.Add(1)
		}
	} else {
		q.others.Add(1)
	}
	r.Complete(st)
	q.inflight.Add(-1)
}

// hold takes a command out of the in-flight count (an AER waiting for an
// event).
func (q *queue) hold(*rdma.Request) { q.inflight.Add(-1) }

// completeHeld completes a held command.
func (q *queue) completeHeld(r *rdma.Request, st nvmeof.Status) {
	if st == nvmeof.StatusSuccess {
		q.others.Add(1)
	}
	r.Complete(st)
}

// isClosed reports whether QueueClosed has run.
func (q *queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// park keeps a command unanswered during shutdown.
func (q *queue) park(r *rdma.Request) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		r.Complete(nvmeof.StatusCommandInterrupted)
	} else {
		q.parked = append(q.parked, r)
		q.mu.Unlock()
	}
	q.inflight.Add(-1)
}

// handleUnconnected serves a queue no Connect has succeeded on yet: only
// Connect is valid (nvmet_parse_connect_cmd answers anything else with
// Invalid Opcode).
func (q *queue) handleUnconnected(r *rdma.Request) {
	sqe := r.SQE()
	if !sqe.IsFabrics() || sqe.FCType() != nvmeof.FCTypeConnect {
		q.finish(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
		return
	}
	if q.s.stopping.Load() {
		q.park(r)
		return
	}
	q.mu.Lock()
	if q.connecting {
		// Another Connect is being processed on this queue.
		q.mu.Unlock()
		q.finish(r, nvmeof.StatusConnectControllerBusy|nvmeof.StatusDNR)
		return
	}
	q.connecting = true
	q.mu.Unlock()
	// nvmet_check_transfer_len: the data is exactly the 1024 bytes of
	// Connect data.
	if len(r.Data()) != nvmeof.ConnectDataSize {
		q.connectDone(r, nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR, 0)
		return
	}
	r.Ctx = q
	r.FetchData()
}

// connectDone completes a Connect; a failed one lets the host try again on
// the same queue.
func (q *queue) connectDone(r *rdma.Request, st nvmeof.Status, result uint32) {
	if st == nvmeof.StatusSuccess {
		// The host is in: the queue gets its full resources and leaves
		// the listener's pending set (connect_timeout no longer runs).
		if err := r.Queue().Admit(); err != nil {
			q.s.log.Warn("queue resources unavailable", append(q.fields(), zap.Error(err))...)
			st = nvmeof.StatusInternalError
		}
	}
	if st != nvmeof.StatusSuccess {
		q.mu.Lock()
		q.connecting = false
		q.mu.Unlock()
	}
	r.SetResult(result)
	q.finish(r, st)
}

// endReason names why a connection ended, for the rate-limited log's
// summary.
func endReason(err error) string {
	var te *iwarp.TerminateError
	var wte *wire.TermError
	switch {
	case errors.As(err, &te):
		return "terminate_received"
	case errors.As(err, &wte):
		return "terminate_sent"
	case errors.Is(err, iwarp.ErrStalled):
		return "stalled"
	case errors.Is(err, iwarp.ErrWriteStalled):
		return "not_reading"
	case errors.Is(err, iwarp.ErrEvicted):
		return "evicted"
	case errors.Is(err, iwarp.ErrNotAdmitted):
		return "not_logged_in"
	}
	return "connection_error"
}
