package target

import (
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// request is a command in execution as the target sees it, whatever the
// transport binding (*rdma.Request, *tcp.Request): an interface of pointers,
// so that handing one on allocates nothing.
type request interface {
	SQE() *nvmeof.SQE
	// Index is the request's context number on its queue: the index of its
	// entry in queue.cmds.
	Index() int
	Data() []byte
	SetResult(dw0 uint32)
	SetResult64(v uint64)
	// FetchData gets host-to-controller data; DataReady follows.
	FetchData()
	// Complete sends the response (and controller-to-host data); once.
	Complete(st nvmeof.Status)
	// Answer sends an error response now, instead of Complete, and keeps
	// the context and data buffer until Release (the backend may still
	// use them); false: it cannot (nothing was sent), Complete later.
	Answer(st nvmeof.Status) bool
	// Release frees what Answer kept.
	Release()
}

// link is the binding's side of a queue (its connection), whatever the
// transport.
type link interface {
	Live() bool
	Admit() error
	AdmitConnection()
	Close()
	Done() <-chan struct{}
	MaxTransferSize() int
	// DisableSQFlowControl makes every later completion of the queue
	// report SQHD FFFFh (the host disabled SQ flow control in its
	// Connect).
	DisableSQFlowControl()
}

// queue is the target's side of one NVMe queue: the rdma.Handler of a
// ControllerQueue, or (as tcpQueue) the tcp.Handler of a TCP one. Until a Connect succeeds on it, it belongs to no
// controller and accepts only Connect.
type queue struct {
	s      *server
	port   *port
	qid    uint16 // from the CM private data; Connect must name the same
	size   int    // HSQSIZE+1
	remote net.Addr
	local  net.Addr
	log    *zap.Logger

	// conn is the binding's side of the queue (its connection), set by
	// the accept or by the first command, whichever comes first.
	conn atomic.Pointer[rdma.ControllerQueue]
	// tconn is the same for an NVMe/TCP queue.
	tconn atomic.Pointer[tcp.ControllerQueue]
	ctrl  atomic.Pointer[controller]
	// auth is the queue's DH-HMAC-CHAP state (auth.go); nil when the
	// queue need not and did not authenticate.
	auth atomic.Pointer[queueAuth]
	// sqFlowOff: the host disabled SQ flow control in its Connect.
	sqFlowOff atomic.Bool

	// cmds holds the state of the commands in execution, one entry per
	// request context of the binding (rdma.Request.Index).
	cmds []command
	// rings are the queue's commands waiting for a worker, one ring per
	// worker pool the queue has used (workers.go); copied on write.
	rings atomic.Pointer[[]*ioRing]
	// nsRefs are the queue's reference counts on the namespaces it has
	// used (nsRef), copied on write.
	nsRefs atomic.Pointer[[]*nsRef]

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
	parked []request

	// met counts commands for the metrics (metrics.go) and the status
	// (counters); folded is set, under metricsState.mu, once they were
	// added to the metrics' totals.
	met    cmdStats
	folded bool
}

// command is the target's state of one command from its arrival to its
// completion, kept in the queue's table at the index of the binding's
// request context: typed, so that the I/O path never switches on the
// dynamic type of a context.
type command struct {
	q    *queue
	r    request
	kind cmdKind
	// ns is the namespace an NVM command runs on (cmdIO), with a
	// reference held until it is executed or dropped: on ref, the queue's
	// count, or on the namespace's own when ref is nil (putNS).
	ns  *namespace
	ref *nsRef
	// start is when the capsule arrived (the command's latency runs from
	// here to its response); zero when commands are not timed
	// (server.timed).
	start time.Time
	// ctrl and issued: a command started on a backend's asynchronous
	// path (tryAsync), for its completion (IODone).
	ctrl   *controller
	issued time.Time
	// io is the command's place in its backend call, for an early answer
	// (early_answer.go): ANA group << ioGroupShift | phase.
	io atomic.Uint32
	// doneSt and doneAt are the backend's result of a command that
	// returned while it was being answered early (ioDone).
	doneSt nvmeof.Status
	doneAt time.Time
}

// cmdKind says what a command in execution is, for the continuations
// (DataReady after its data arrived, execIO on a worker).
type cmdKind uint8

const (
	cmdOther    cmdKind = iota // answered on the engine goroutine
	cmdConnect                 // a Connect whose data is being fetched
	cmdIO                      // an NVM command on ns
	cmdFlushAll                // a Flush of every namespace of the subsystem
	cmdAuth                    // an Authentication Send whose data is being fetched
)

// newQueue makes the target's side of a queue the host asks for.
func newQueue(s *server, p *port, req *rdma.QueueRequest) *queue {
	q := &queue{s: s, port: p, qid: req.CM.QID, size: req.Size(), remote: req.RemoteAddr, local: req.LocalAddr}
	q.cmds = make([]command, req.Contexts())
	for i := range q.cmds {
		q.cmds[i].q = q
	}
	return q
}

// newQueueTCP makes the target's side of an NVMe/TCP queue: its QID and
// size are those of the Connect that opened it (tcp.QueueRequest), which
// plays the part of the RDMA CM private data.
func newQueueTCP(s *server, p *port, req *tcp.QueueRequest) *queue {
	q := &queue{s: s, port: p, qid: req.QID, size: req.Size(), remote: req.RemoteAddr, local: req.LocalAddr}
	q.cmds = make([]command, req.Contexts())
	for i := range q.cmds {
		q.cmds[i].q = q
	}
	return q
}

// tcpQueue is a queue as the tcp.Handler of its tcp.ControllerQueue.
type tcpQueue queue

// HandleCommand is the entry of every command capsule (tcp.Handler).
func (t *tcpQueue) HandleCommand(r *tcp.Request) {
	q := (*queue)(t)
	if q.tconn.Load() == nil {
		q.tconn.CompareAndSwap(nil, r.Queue())
	}
	q.handleCommand(r)
}

// DataReady continues a command whose data arrived (tcp.Handler).
func (t *tcpQueue) DataReady(r *tcp.Request, err error) { (*queue)(t).dataReady(r, err) }

// QueueClosed is called once the connection has ended (tcp.Handler).
func (t *tcpQueue) QueueClosed(conn *tcp.ControllerQueue, err error) {
	q := (*queue)(t)
	q.tconn.CompareAndSwap(nil, conn)
	q.s.met.queueClosed(q, nil, conn, q.ctrl.Load())
	q.closedWith(err)
}

// cmd returns r's entry in the command table.
func (q *queue) cmd(r request) *command { return &q.cmds[r.Index()] }

// link returns the binding's side of the queue (nil before the accept or
// the first command).
// transport names the queue's binding.
func (q *queue) transport() string {
	if q.tconn.Load() != nil {
		return "tcp"
	}
	return "rdma"
}

func (q *queue) link() link {
	if c := q.conn.Load(); c != nil {
		return c
	}
	if c := q.tconn.Load(); c != nil {
		return c
	}
	return nil
}

// counters are the queue's status counters, derived from its metrics'
// counts (one set of atomics per command).
func (q *queue) counters() IOCounters {
	m := &q.met
	c := IOCounters{
		ReadCommands: m.cmds[opRead][stSuccess].Load(), WriteCommands: m.cmds[opWrite][stSuccess].Load(),
		ReadBytes: m.rbytes.Load(), WriteBytes: m.wbytes.Load(),
	}
	for op := range m.cmds {
		if o := opClass(op); o != opRead && o != opWrite {
			c.OtherCommands += m.cmds[op][stSuccess].Load()
		}
		for st := range m.cmds[op] {
			if statusClass(st) != stSuccess {
				c.Errors += m.cmds[op][st].Load()
			}
		}
	}
	return c
}

// close disconnects the queue gracefully.
func (q *queue) close() {
	if conn := q.link(); conn != nil {
		conn.Close()
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
	if q.conn.Load() == nil {
		// The host may send its Connect before Accept has returned.
		q.conn.CompareAndSwap(nil, r.Queue())
	}
	q.handleCommand(r)
}

// handleCommand is HandleCommand for either binding.
func (q *queue) handleCommand(r request) {
	q.inflight.Add(1)
	c := q.cmd(r)
	c.r, c.kind, c.ns, c.ref, c.start = r, cmdOther, nil, nil, time.Time{}
	if q.s.timed.Load() {
		c.start = time.Now()
	}
	if h := q.s.hooks; h != nil && !q.hookCommand(h, r) {
		return
	}
	sqe := r.SQE()
	// nvmet_req_init: no fused commands; on fabrics PSDT must select SGLs
	// with a contiguous metadata buffer (01b).
	if sqe.FUSE() != 0 || sqe.PSDT() != 1 {
		q.respond(r, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
		return
	}
	ctrl := q.ctrl.Load()
	if ctrl == nil {
		q.handleUnconnected(r)
		return
	}
	if q.authorized() {
		// A command refused for want of authentication (a peer that
		// forged the host's NQN, on its admin queue or on an I/O queue
		// it attached to the real host's controller) is no sign of the
		// host: it must not keep the controller alive.
		ctrl.ka.touch()
	}
	if q.s.stopping.Load() {
		q.park(r)
		return
	}
	if q.qid == 0 {
		ctrl.handleAdmin(q, r)
		return
	}
	q.handleIO(ctrl, c)
}

// DataReady continues a command whose data was fetched (rdma.Handler).
func (q *queue) DataReady(r *rdma.Request, err error) { q.dataReady(r, err) }

// dataReady is DataReady for either binding.
func (q *queue) dataReady(r request, err error) {
	c := q.cmd(r)
	if err != nil {
		// The RDMA Read failed (the connection is failing as well), or
		// the host's data arrived damaged.
		if c.kind == cmdIO {
			c.putNS()
		}
		// A binding that names the status (NVMe/TCP: a data digest error
		// is a transient transport error) gets it.
		st := nvmeof.StatusDataTransferError
		if bs := nvmeof.StatusFromError(err); bs != nvmeof.StatusInternalError {
			st = bs
		}
		q.respond(r, st)
		return
	}
	switch c.kind {
	case cmdIO:
		c.ns.submit(q.s, c)
	case cmdConnect:
		q.connectData(r)
	case cmdAuth:
		q.authSend(r)
	default:
		q.respond(r, nvmeof.StatusInternalError|nvmeof.StatusDNR)
	}
}

// QueueClosed is called once the connection has ended (rdma.Handler).
func (q *queue) QueueClosed(conn *rdma.ControllerQueue, err error) {
	q.conn.CompareAndSwap(nil, conn)
	q.s.met.queueClosed(q, conn, nil, q.ctrl.Load())
	q.closedWith(err)
}

// closedWith is the end of QueueClosed for either binding.
func (q *queue) closedWith(err error) {
	q.mu.Lock()
	q.closed = true
	if l := q.nsRefs.Load(); l != nil { // under mu: nsRef adds none after
		for _, r := range *l {
			r.dead.Store(true)
		}
	}
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
	if cause := rdma.CauseOf(err); err != nil && cause != rdma.EndPeerClosed {
		q.s.adm.Log(zap.InfoLevel, cause.String(), "queue disconnected", append(lf, zap.Error(err))...)
	} else {
		q.s.log.Debug("queue disconnected", lf...)
	}
	if a := q.auth.Load(); a != nil {
		a.closed()
	}
	if c != nil {
		c.queueClosed(q)
	}
	if q.host != "" {
		q.s.hostUse.give(q.host, 0, 1)
	}
	q.port.removeQueue(q)
}

// respond completes a command: counters, the error log (with the More
// bit, as nvmet), then the response capsule. Nothing of r may be used
// after.
func (q *queue) respond(r request, st nvmeof.Status) { q.respondAt(r, st, time.Time{}) }

// respondAt is respond with the time the command ended (zero: now), for
// its latency: a caller that has just read the clock passes it. A command
// that was not timed (command.start zero) reads no clock.
func (q *queue) respondAt(r request, st nvmeof.Status, now time.Time) {
	if h := q.s.hooks; h != nil {
		st = q.hookResponse(h, r, st)
	}
	sqe := r.SQE()
	if st != nvmeof.StatusSuccess {
		if c := q.ctrl.Load(); c != nil {
			st = c.logError(q.qid, sqe, st)
			if ce := c.log.Check(zap.DebugLevel, "command failed"); ce != nil {
				ce.Write(zap.Uint16("qid", q.qid), zap.String("command", nvmeof.OpcodeName(q.qid, sqe)),
					zap.Uint16("cid", sqe.CID()), zap.Uint32("nsid", sqe.NSID()), zap.Stringer("status", st))
			}
		}
	}
	c := q.cmd(r)
	c.ns = nil // the reference was put by whoever ran the command
	var d time.Duration
	timed := !c.start.IsZero()
	if timed {
		if now.IsZero() {
			now = time.Now()
		}
		d = now.Sub(c.start)
	}
	q.met.record(classifyOp(q.qid, sqe), classifyStatus(st), len(r.Data()), d, timed)
	r.Complete(st)
	q.inflight.Add(-1)
}

// hold takes a command out of the in-flight count (an AER waiting for an
// event).
func (q *queue) hold(request) { q.inflight.Add(-1) }

// completeHeld completes a held command.
func (q *queue) completeHeld(r request, st nvmeof.Status) {
	if h := q.s.hooks; h != nil {
		st = q.hookResponse(h, r, st)
	}
	q.met.record(classifyOp(q.qid, r.SQE()), classifyStatus(st), 0, 0, false)
	r.Complete(st)
}

// isClosed reports whether QueueClosed has run.
func (q *queue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// park keeps a command unanswered during shutdown.
func (q *queue) park(r request) {
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
func (q *queue) handleUnconnected(r request) {
	sqe := r.SQE()
	if !sqe.IsFabrics() || sqe.FCType() != nvmeof.FCTypeConnect {
		q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
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
		q.respond(r, nvmeof.StatusConnectControllerBusy|nvmeof.StatusDNR)
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
	q.cmd(r).kind = cmdConnect
	r.FetchData()
}

// connectDone completes a Connect; a failed one lets the host try again on
// the same queue.
func (q *queue) connectDone(r request, st nvmeof.Status, result uint32) {
	if st == nvmeof.StatusSuccess && r.SQE().ConnectCmd().SQFlowControlDisable() {
		// Fabrics 1.1 §3.3: the host asked to disable SQ flow control;
		// the Connect's own response already reports SQHD FFFFh
		// (nvmet_install_queue sets sqhd_disabled before it answers).
		q.link().DisableSQFlowControl()
		q.sqFlowOff.Store(true)
	}
	if st == nvmeof.StatusSuccess && !q.authorized() {
		// The host must authenticate first: the queue leaves the
		// listener's pending set (the authentication deadline bounds it
		// now) with what authentication needs; it gets its full resources
		// once authenticated (queueAuth.finish).
		q.link().AdmitConnection()
		q.s.traceQueue(q)
	} else if st == nvmeof.StatusSuccess {
		// The host is in: the queue gets its full resources and leaves
		// the listener's pending set (connect_timeout no longer runs).
		if err := q.link().Admit(); err != nil {
			q.s.log.Warn("queue resources unavailable", append(q.fields(), zap.Error(err))...)
			st = nvmeof.StatusInternalError
		} else {
			q.s.traceQueue(q)
		}
	}
	if st != nvmeof.StatusSuccess {
		q.mu.Lock()
		q.connecting = false
		q.mu.Unlock()
	}
	r.SetResult(result)
	q.respond(r, st)
}

// putNS drops the namespace reference of an NVM command.
func (c *command) putNS() {
	if c.ref != nil {
		c.ref.put()
	} else {
		c.ns.put()
	}
	c.ref = nil
}

// nsRef returns the queue's reference count on ns, made on first use
// (once per queue and namespace); the list is copied on write so that the
// lookup takes no lock, and forgets the counts of retired namespaces that
// hold nothing.
func (q *queue) nsRef(ns *namespace) *nsRef {
	if l := q.nsRefs.Load(); l != nil {
		for _, r := range *l {
			if r.ns == ns {
				return r
			}
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var list []*nsRef
	if l := q.nsRefs.Load(); l != nil {
		for _, r := range *l {
			if r.ns == ns {
				return r
			}
		}
		for _, r := range *l {
			if r.ns.ref.Load()&refClosing == 0 || r.n.Load() != 0 {
				list = append(list, r)
			}
		}
	}
	r := ns.newQueueRef()
	if q.closed {
		r.dead.Store(true)
	}
	list = append(list, r)
	q.nsRefs.Store(&list)
	return r
}

// lookupNS is controller.lookupNS for an I/O command: the reference is
// taken on the queue's count of the namespace.
func (q *queue) lookupNS(ctrl *controller, tab *nsTable, nsid uint32) (*namespace, *nsRef, nvmeof.Status) {
	ns := tab.byID[nsid]
	switch {
	case ns == nil || !ns.visibleTo(ctrl.hostNQN):
		return nil, nil, nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
	case !ns.online():
		return nil, nil, nvmeof.StatusInternalPathError
	}
	if r := q.nsRef(ns); r.get() {
		return ns, r, nvmeof.StatusSuccess
	}
	if ns.tryGet() { // the queue is closing: the namespace's own count
		return ns, nil, nvmeof.StatusSuccess
	}
	return nil, nil, nvmeof.StatusInternalPathError
}
