package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Sizes of the controller side. Where they come from:
const (
	// AdminQueueSize is the admin queue depth the Linux host uses
	// (NVME_AQ_DEPTH, include/linux/nvme.h); nvmet-rdma rejects an admin
	// HSQSIZE+1 beyond it with "invalid HSQSIZE".
	AdminQueueSize = nvmeof.AdminQueueDepth
	// DefaultMaxQueueSize is nvmet's default I/O queue size limit
	// (NVMET_QUEUE_SIZE, drivers/nvme/target/nvmet.h); CAP.MQES = it − 1.
	DefaultMaxQueueSize = 128
	// MaxQueueSizeLimit is the largest queue size we accept at all (the
	// Linux host's queue_size option range ends at 1024).
	MaxQueueSizeLimit = 1024
	// DefaultInlineDataSize is nvmet's default in-capsule data size
	// (nvmet_rdma inline_data_size = PAGE_SIZE); IOCCSZ = (64+4096)/16.
	DefaultInlineDataSize = nvmeof.NvmetDefaultInlineDataSize
	// MaxInlineDataSize bounds in-capsule data (nvmet allows up to 16 KiB
	// over RDMA, NVMET_RDMA_MAX_INLINE_DATA_SIZE).
	MaxInlineDataSize = 16 << 10
	// DefaultMaxTransferSize is nvmet's MDTS 8 with 4 KiB pages: 1 MiB.
	DefaultMaxTransferSize = 1 << 20
	// DefaultIOPoolSize is the registered data buffer arena of an I/O
	// queue; DefaultAdminPoolSize that of an admin queue (Identify and log
	// pages of 4 KiB to 1 MiB, a few at a time).
	DefaultIOPoolSize    = 16 << 20
	DefaultAdminPoolSize = 2 << 20
	// ORD toward a host: Linux hosts offer IRD 128 (siw's max_qp_rd_atom);
	// outstanding RDMA Reads never exceed the negotiated value.
	controllerORD = 128
)

// ControllerConfig configures the controller side of a port.
type ControllerConfig struct {
	// Transport holds the connection settings (MPA CRC, FPDU size,
	// timeouts, admission limits).
	Transport TransportConfig
	// InlineDataSize is the in-capsule data accepted on a command (default
	// DefaultInlineDataSize; at most MaxInlineDataSize).
	InlineDataSize int
	// MaxQueueSize is the largest I/O queue (HSQSIZE+1) accepted (default
	// DefaultMaxQueueSize).
	MaxQueueSize int
	// MaxTransferSize is the largest data transfer of one command, a power
	// of two ≥ 4 KiB (default DefaultMaxTransferSize; report it as MDTS).
	MaxTransferSize int
	// IOPoolSize and AdminPoolSize are the registered buffer arenas per
	// queue (defaults DefaultIOPoolSize, DefaultAdminPoolSize), allocated
	// when the queue is admitted.
	IOPoolSize, AdminPoolSize int
	// AdmitOnAccept admits every queue as it is accepted: for controller
	// logic without a login (tests of the binding); a real controller
	// admits after a successful Fabrics Connect (ControllerQueue.Admit).
	AdmitOnAccept bool
	// Logger receives queue events.
	Logger *zap.Logger
}

func (c *ControllerConfig) withDefaults() ControllerConfig {
	d := *c
	defaults.Set(&d.InlineDataSize, DefaultInlineDataSize)
	defaults.Set(&d.MaxQueueSize, DefaultMaxQueueSize)
	defaults.Set(&d.MaxTransferSize, DefaultMaxTransferSize)
	defaults.Set(&d.IOPoolSize, DefaultIOPoolSize)
	defaults.Set(&d.AdminPoolSize, DefaultAdminPoolSize)
	defaults.Set(&d.Logger, zap.NewNop())
	return d
}

// Validate reports the first setting out of range, naming it.
func (c *ControllerConfig) Validate() error {
	d := c.withDefaults()
	switch {
	case d.InlineDataSize < 0 || d.InlineDataSize > MaxInlineDataSize:
		return fmt.Errorf("nvme-rdma: inline data size %d: want 0..%d", d.InlineDataSize, MaxInlineDataSize)
	case d.MaxQueueSize < 2 || d.MaxQueueSize > MaxQueueSizeLimit:
		return fmt.Errorf("nvme-rdma: max queue size %d: want 2..%d", d.MaxQueueSize, MaxQueueSizeLimit)
	case d.MaxTransferSize < poolPage || d.MaxTransferSize&(d.MaxTransferSize-1) != 0 || d.MaxTransferSize > nvmeof.MaxKeyedSGLLength+1:
		return fmt.Errorf("nvme-rdma: max transfer size %d: want a power of two from 4 KiB to 16 MiB", d.MaxTransferSize)
	case d.IOPoolSize < d.MaxTransferSize || d.AdminPoolSize < 64<<10:
		return fmt.Errorf("nvme-rdma: buffer pools (I/O %d, admin %d bytes) must hold at least one largest transfer", d.IOPoolSize, d.AdminPoolSize)
	}
	return d.Transport.Validate()
}

// Listener accepts NVMe/RDMA queue connections on one address.
type Listener struct {
	ln  *iwarp.Listener
	cfg ControllerConfig
}

// Listen listens for queue connections ("tcp", "tcp4" or "tcp6").
func Listen(network, address string, cfg ControllerConfig) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	ecfg := c.Transport.engine(c.Logger)
	ln, err := iwarp.Listen(network, address, &ecfg)
	if err != nil {
		return nil, err
	}
	return &Listener{ln: ln, cfg: c}, nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening; queues already accepted go on.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for the next queue connection request. Requests whose CM
// private data is malformed are rejected here, as nvmet-rdma does, and not
// returned.
func (l *Listener) Accept(ctx context.Context) (*QueueRequest, error) {
	for {
		cr, err := l.ln.Accept(ctx)
		if err != nil {
			return nil, err
		}
		cm, err := ParseCMRequest(cr.PrivateData)
		if err != nil {
			var rej *CMRejectError
			if errors.As(err, &rej) {
				_ = cr.Reject(AppendCMReject(nil, rej.Status))
			} else {
				_ = cr.Reject(nil)
			}
			l.cfg.Logger.Info("nvme-rdma: queue connection rejected", zap.Stringer("remote", cr.RemoteAddr), zap.Error(err))
			continue
		}
		return &QueueRequest{CM: cm, RemoteAddr: cr.RemoteAddr, LocalAddr: cr.LocalAddr, PeerIRD: cr.PeerIRD, cr: cr, cfg: &l.cfg}, nil
	}
}

// QueueRequest is a host's request to open one queue.
type QueueRequest struct {
	CM                    CMRequest
	RemoteAddr, LocalAddr net.Addr
	// PeerIRD is the host's IRD: how many RDMA Reads we may have
	// outstanding toward it.
	PeerIRD int
	cr      *iwarp.ConnRequest
	cfg     *ControllerConfig
}

// Size is the queue size the host asks for (HSQSIZE+1).
func (r *QueueRequest) Size() int { return int(r.CM.HSQSize) + 1 }

// Contexts is the number of request contexts the queue will have at most:
// the range of Request.Index. The controller logic keeps its per-command
// state in a table of that many entries.
func (r *QueueRequest) Contexts() int { return 2 * r.Size() }

// Reject refuses the queue with a CM reject status.
func (r *QueueRequest) Reject(st CMRejectStatus) error {
	return r.cr.Reject(AppendCMReject(nil, st))
}

// Handler is the controller logic behind a queue. Its methods run on the
// queue's engine goroutines and must not block: hand slow work (backend I/O)
// to other goroutines and Complete from there.
type Handler interface {
	// HandleCommand is called for each command capsule, with the data
	// buffer (if the command has data) already allocated: in-capsule data
	// is in it; keyed host-to-controller data must be fetched with
	// FetchData; controller-to-host data is written into it before
	// Complete.
	HandleCommand(r *Request)
	// DataReady is called when FetchData finished; err is non-nil if the
	// RDMA Read failed (the queue is then failing too).
	DataReady(r *Request, err error)
	// QueueClosed is called once when the queue's connection has ended.
	// Requests still held must be completed (Complete then just releases
	// them).
	QueueClosed(q *ControllerQueue, err error)
}

// Accept opens the queue: checks the sizes against what nvmet accepts,
// and answers the host. Until the controller logic admits the queue (Admit,
// after a successful Fabrics Connect) it holds the resources of one command
// only, so that a connection that never logs in costs little; Admit posts
// the other receive buffers and sets up the registered data buffer pool.
func (r *QueueRequest) Accept(h Handler) (*ControllerQueue, error) {
	cfg := r.cfg
	size := r.Size()
	switch {
	case r.CM.QID == 0 && size > AdminQueueSize:
		_ = r.Reject(CMRejectInvalidHSQSize)
		return nil, &CMRejectError{Status: CMRejectInvalidHSQSize, Msg: fmt.Sprintf("admin queue of %d entries, limit %d", size, AdminQueueSize)}
	case r.CM.QID > 0 && (size < 2 || size > cfg.MaxQueueSize):
		_ = r.Reject(CMRejectInvalidHSQSize)
		return nil, &CMRejectError{Status: CMRejectInvalidHSQSize, Msg: fmt.Sprintf("I/O queue of %d entries, want 2..%d", size, cfg.MaxQueueSize)}
	case r.CM.HRQSize == 0:
		_ = r.Reject(CMRejectInvalidHRQSize)
		return nil, &CMRejectError{Status: CMRejectInvalidHRQSize, Msg: "HRQSIZE 0"}
	case r.cr.Enhanced && r.PeerIRD == 0:
		// The host's IRD bounds our RDMA Reads of its write data: with 0,
		// no keyed write could ever complete (protocol.md §12.2).
		_ = r.Reject(CMRejectInvalidIRD)
		return nil, &CMRejectError{Status: CMRejectInvalidIRD, Msg: "host IRD 0: its write data could never be fetched"}
	}
	q, err := newControllerQueue(r, h)
	if err != nil {
		_ = r.Reject(CMRejectNoResources)
		return nil, err
	}
	if cfg.AdmitOnAccept {
		// Resources first: the host may send at once.
		if err := q.grow(); err != nil {
			_ = r.Reject(CMRejectNoResources)
			return nil, err
		}
	}
	q.qp.OnDone(q.ended)
	acc := CMAccept{CRQSize: uint16(size)}
	if err := r.cr.Accept(q.qp, acc.Append(nil)); err != nil {
		return nil, err
	}
	if cfg.AdmitOnAccept {
		q.qp.Admit()
	}
	return q, nil
}

// ControllerQueue is the controller side of one NVMe queue.
//
// Bounds: a host has at most size commands outstanding (the receive
// buffers); a command holds a request context and a reservation of send
// queue room for its whole response (RDMA Read, RDMA Write and Send, as
// nvmet-rdma's sq_wr_avail) from its arrival until its response Send has
// gone out. Commands that find no context or room wait, in order, holding
// their receive buffer; so contexts never exceed 2×size and the posts of a
// response never fail for lack of room, whatever the host does (a host that
// stops reading fills the room and then the queue's write timeout ends it).
type ControllerQueue struct {
	qid      uint16
	size     int
	hrqSize  int
	inline   int
	maxXfer  int
	poolSize int
	h        Handler
	log      *zap.Logger
	pd       *iwarp.PD
	qp       *iwarp.QP
	sq       nvmeof.SQHead // the SQ head the completions report (FFFFh: flow control off)
	closedCh chan struct{} // closed after the handler's QueueClosed returned
	admitted atomic.Bool

	mu       perfcount.Mutex
	pool     *bufferPool // data buffers (a small one until Admit)
	poolMR   *iwarp.MR
	recvBufs [][]byte
	recvWRs  []iwarp.RecvWR
	// spareRecv are receive buffers that early answers of in-capsule
	// commands kept and gave back (Request.Answer), under mu.
	spareRecv [][]byte
	reqs      []*Request // every request context, by index
	free      []int32
	sqAvail   int       // send queue entries not reserved
	backlog   []capsule // commands waiting for a context and send queue room, from bHead
	bHead     int
	waiting   []*Request // commands waiting for a data buffer, in order, from wHead
	wHead     int
	closed    bool
	stats     Stats
}

// capsule is a received command waiting for resources.
type capsule struct{ slot, n int }

// Resources per command and of a queue before it is admitted.
const (
	// sqPerCommand is the send queue room a command's response may need:
	// an RDMA Read of its data, an RDMA Write of read data, the Send.
	sqPerCommand = 3
	// preAdmitRecvs receive buffers are posted before Admit: the Fabrics
	// Connect, and one more for a host that sends a second command at
	// once (it is answered, not dropped).
	preAdmitRecvs = 2
	// preAdmitPool is the data buffer pool before Admit: Connect data.
	preAdmitPool = 4096
)

func newControllerQueue(r *QueueRequest, h Handler) (*ControllerQueue, error) {
	cfg := r.cfg
	size := r.Size()
	q := &ControllerQueue{
		qid:      r.CM.QID,
		size:     size,
		hrqSize:  int(r.CM.HRQSize),
		inline:   cfg.InlineDataSize,
		maxXfer:  cfg.MaxTransferSize,
		h:        h,
		closedCh: make(chan struct{}),
		pd:       iwarp.NewPD(),
	}
	q.log = cfg.Logger.With(zap.Stringer("remote", r.RemoteAddr), zap.Uint16("qid", q.qid))
	q.poolSize = cfg.IOPoolSize
	if q.qid == 0 {
		q.poolSize = cfg.AdminPoolSize
	}
	var err error
	if q.pool, err = newBufferPool(preAdmitPool, preAdmitPool); err != nil {
		return nil, err
	}
	if q.poolMR, err = q.pd.RegisterMemory(q.pool.arena, iwarp.AccessLocalWrite); err != nil {
		return nil, err
	}
	cq := iwarp.NewCQHandler(q.onWC)
	// Request contexts: a command's context lives until its response Send
	// has gone out, which can be after the host already sent the next
	// command; twice the queue size covers that.
	nctx := r.Contexts()
	q.sqAvail = sqPerCommand * nctx
	q.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: q.pd, SendCQ: cq, RecvCQ: cq, SendDepth: q.sqAvail, RecvDepth: size, IRD: 1, ORD: controllerORD})
	if err != nil {
		return nil, err
	}
	q.qp.SetLogger(q.log)
	q.recvBufs = make([][]byte, size)
	q.recvWRs = make([]iwarp.RecvWR, size)
	if err := q.postRecvs(0, min(preAdmitRecvs, size)); err != nil {
		return nil, err
	}
	q.reqs = make([]*Request, 0, nctx)
	q.free = make([]int32, 0, nctx)
	q.addContexts(preAdmitRecvs)
	return q, nil
}

// postRecvs posts receive buffers [from, to), one SQE plus in-capsule data
// each, from one slab.
func (q *ControllerQueue) postRecvs(from, to int) error {
	rb := q.inline + nvmeof.SQESize
	slab := make([]byte, (to-from)*rb)
	for i := from; i < to; i++ {
		k := i - from
		q.recvBufs[i] = slab[k*rb : (k+1)*rb : (k+1)*rb]
		q.recvWRs[i] = iwarp.RecvWR{ID: uint64(i), Buf: q.recvBufs[i]}
		if err := q.qp.PostRecv(&q.recvWRs[i]); err != nil {
			return err
		}
	}
	return nil
}

// addContexts grows the request contexts to n. The caller holds mu (or
// owns q).
func (q *ControllerQueue) addContexts(n int) {
	for i := len(q.reqs); i < n; i++ {
		q.reqs = append(q.reqs, &Request{q: q, index: int32(i)})
		q.free = append(q.free, int32(i))
	}
}

// DisableSQFlowControl makes every later completion report SQHD FFFFh
// (Fabrics 1.1 §3.3: the host disabled SQ flow control in its Connect).
func (q *ControllerQueue) DisableSQFlowControl() { q.sq.DisableFlowControl() }

// Admit gives the queue its full resources once the controller logic has
// accepted the host (a successful Fabrics Connect; call it before the
// Connect's response is completed): the rest of the receive buffers, the
// data buffer pool and the request contexts. The connection then no longer
// counts as pending for the listener's connection limits.
func (q *ControllerQueue) Admit() error {
	if err := q.grow(); err != nil {
		return err
	}
	q.qp.Admit()
	q.drain()
	return nil
}

// AdmitConnection admits the connection (it no longer counts as pending
// for the listener's connection limits, and the connect timeout stops) but
// leaves the queue the resources it had before Admit: a few receive
// buffers and request contexts and a data buffer pool the size of one
// page, which carry a Connect or an in-band authentication (messages of at
// most 4 KiB, one command at a time). For a queue whose host must still
// authenticate: Admit, once it has, gives it the rest, so that a peer that
// never authenticates costs a few KiB, not the queue's whole pool.
func (q *ControllerQueue) AdmitConnection() { q.qp.Admit() }

// grow gives the queue its full resources (once).
func (q *ControllerQueue) grow() error {
	if q.admitted.Swap(true) {
		return nil
	}
	pool, err := newBufferPool(q.poolSize, min(q.maxXfer, q.poolSize))
	if err != nil {
		return err
	}
	mr, err := q.pd.RegisterMemory(pool.arena, iwarp.AccessLocalWrite)
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.pool, q.poolMR = pool, mr
	q.addContexts(cap(q.reqs)) // all: reqs has room for QueueRequest.Contexts()
	q.mu.Unlock()
	if n := min(preAdmitRecvs, q.size); n < q.size {
		if err := q.postRecvs(n, q.size); err != nil {
			return err
		}
	}
	return nil
}

// QID is the queue identifier (0 = admin).
func (q *ControllerQueue) QID() uint16 { return q.qid }

// MaxTransferSize is the largest data transfer of one command.
func (q *ControllerQueue) MaxTransferSize() int { return q.maxXfer }

// Done is closed when the connection has ended and the handler's
// QueueClosed has returned, so that whoever waits for it (a shutdown) also
// waits for the handler's last word on the queue. QueueClosed must not wait
// for Done.
func (q *ControllerQueue) Done() <-chan struct{} { return q.closedCh }

// Close disconnects the queue gracefully: responses already posted go out
// first.
func (q *ControllerQueue) Close() { q.qp.Disconnect() }

// Live reports whether the connection is up and answers can still be
// sent (one atomic load).
func (q *ControllerQueue) Live() bool { return q.qp.State() == iwarp.QPStateRTS }

// ended runs when the QP is done, on the goroutine that ended it.
func (q *ControllerQueue) ended() {
	defer close(q.closedCh)
	q.mu.Lock()
	q.closed = true
	// Commands that never started are dropped: the host gets no answer
	// for them anyway, and none was acknowledged.
	clear(q.backlog)
	q.backlog, q.bHead = q.backlog[:0], 0
	q.mu.Unlock()
	q.h.QueueClosed(q, q.qp.Err())
}

// protocolError ends the queue after a transport protocol error of the
// host.
func (q *ControllerQueue) protocolError(err error) {
	q.log.Debug("nvme-rdma: host protocol error, closing queue", zap.Error(err))
	q.qp.Disconnect()
}

// Request is one command being executed on a controller queue. It is valid
// from HandleCommand until Complete returns; the controller logic must
// complete every request exactly once.
type Request struct {
	q        *ControllerQueue
	index    int32
	gen      uint32 // bumped at every reuse: completions carry it
	recvSlot int
	sqe      *nvmeof.SQE
	capsule  []byte
	data     []byte
	dataOff  int
	pool     *bufferPool // where data came from (nil: not pooled)
	mr       *iwarp.MR
	inCap    bool
	key      uint32
	addr     uint64
	inval    bool
	result   uint64
	cqe      nvmeof.CQE
	wrs      [2]iwarp.SendWR
	sge      [1][]byte
	csge     [1][]byte
	active   bool
	answered bool // Complete or Answer ran
	want     int  // data buffer size while waiting for one
	// Answer's state: held (the owner keeps the context and its buffer
	// until Release), sent (the answer's Send completed: its send queue
	// room is back), released (Release ran before that Send completed).
	held, sent, released bool
	sqeCopy              nvmeof.SQE // the SQE after Answer (its receive buffer is the host's again)
	heldRecv             []byte     // the receive buffer Answer kept (in-capsule data): a spare after Release
}

// token is the work request ID of the request's current use: its index and
// generation, so that a completion for an earlier use is recognised.
func (r *Request) token() uint64 { return uint64(r.gen)<<32 | uint64(uint32(r.index)) }

// SQE is the command.
func (r *Request) SQE() *nvmeof.SQE { return r.sqe }

// Index is the request's context number on its queue, in
// [0, QueueRequest.Contexts()): the controller logic indexes its own,
// typed, per-command state with it. A context is reused only after the
// request it carried was completed and its response has gone out.
func (r *Request) Index() int { return int(r.index) }

// Queue is the queue the command arrived on.
func (r *Request) Queue() *ControllerQueue { return r.q }

// Data is the command's data buffer, as long as its SGL says (nil when the
// command carries no data): in-capsule data, or a registered buffer that
// FetchData fills or that the controller fills before Complete.
func (r *Request) Data() []byte { return r.data }

// SetResult sets completion DW0.
func (r *Request) SetResult(dw0 uint32) { r.result = r.result&^0xFFFFFFFF | uint64(dw0) }

// SetResult64 sets completion DW0 and DW1 (Property Get of 8 bytes).
func (r *Request) SetResult64(v uint64) { r.result = v }

// FetchData gets a write-direction command's data from the host: an RDMA
// Read into Data() for a keyed SGL (Handler.DataReady follows on the engine
// goroutine), or nothing for in-capsule data (DataReady is called at once).
func (r *Request) FetchData() {
	if r.inCap || len(r.data) == 0 {
		r.q.h.DataReady(r, nil)
		return
	}
	r.wrs[0] = iwarp.SendWR{ID: r.token(), Opcode: iwarp.WRRead, Signaled: true, RemoteSTag: r.key, RemoteTO: r.addr, SinkMR: r.mr, SinkOffset: uint64(r.dataOff), Length: uint32(len(r.data))}
	if err := r.q.qp.PostSend(&r.wrs[0]); err != nil {
		r.q.h.DataReady(r, fmt.Errorf("nvme-rdma: RDMA Read of %d bytes: %w", len(r.data), err))
	}
}

// Complete finishes the command with a status: for a successful
// controller-to-host command with data, an RDMA Write of Data() to the
// host's buffer, then the response capsule (a Send, or a Send with
// Invalidate of the host's key when it asked for one), posted together so
// that they leave in one write and never in half. It may be called from any
// goroutine, once.
func (r *Request) Complete(st nvmeof.Status) {
	q := r.q
	if r.answered {
		q.countStale()
		return
	}
	r.answered = true
	sqhd := q.sq.Advance(q.size) // as nvmet_update_sq_head
	r.cqe.Complete(r.sqe, q.qid, sqhd, uint32(r.result), st)
	r.cqe.SetDW1(uint32(r.result >> 32))
	dir := r.sqe.DataDirection()
	// The SQE and any in-capsule data are used up: give the buffer back to
	// the host before answering (as nvmet does).
	if err := q.qp.PostRecv(&q.recvWRs[r.recvSlot]); err != nil {
		q.unsent(r)
		return
	}
	n := 0
	if st == nvmeof.StatusSuccess && dir == nvmeof.DirControllerToHost && len(r.data) > 0 && !r.inCap && !r.held {
		r.sge[0] = r.data
		r.wrs[0] = iwarp.SendWR{ID: r.token(), Opcode: iwarp.WRWrite, Local: r.sge[:], RemoteSTag: r.key, RemoteTO: r.addr}
		n++
	}
	r.csge[0] = r.cqe[:]
	r.wrs[n] = iwarp.SendWR{ID: r.token(), Opcode: iwarp.WRSend, Signaled: true, Local: r.csge[:]}
	if r.inval && r.key != 0 {
		r.wrs[n].Opcode, r.wrs[n].InvalidateSTag = iwarp.WRSendInv, r.key
	}
	n++
	// The room was reserved when the command arrived: this fails only on
	// a queue that is ending, and then nothing of the response was posted.
	if err := q.qp.PostSendChain(r.wrs[:n]); err != nil {
		q.unsent(r)
	}
}

// unsent releases a request whose response could not be posted (the queue
// is ending); one that Answer answered stays its owner's until Release.
func (q *ControllerQueue) unsent(r *Request) {
	q.mu.Lock()
	if r.held && !r.released {
		r.sent = true
		q.sqAvail += sqPerCommand
		q.mu.Unlock()
		return
	}
	q.releaseLocked(r)
}

// Answer answers the command now with st, as Complete does for an error
// status (no data goes to the host), but keeps the context and its data
// buffer for the caller: whoever still reads or fills Data() (a backend
// that has not returned) may go on until Release, which frees them. The
// host may reuse the command's CID at once; the context matches no later
// completion (no RDMA Read or Write of it is left, and it is not reused
// before Release). It may be called from any goroutine, instead of
// Complete, once; Release must follow exactly once.
//
// A command whose data came in its capsule keeps its receive buffer (the
// data is there): the slot gets a spare buffer for the host's next command
// (one made on the first such answer, reused after Release), so the host
// has as many receives as before. A command answered already (Complete or
// Answer) is refused (false, nothing done).
func (r *Request) Answer(st nvmeof.Status) bool {
	q := r.q
	if r.answered {
		return false
	}
	// The SQE is in the receive buffer, given back below (or kept, with
	// in-capsule data): a copy for whoever reads SQE() until Release.
	r.sqeCopy = *r.sqe
	r.sqe = &r.sqeCopy
	q.mu.Lock()
	r.held = true
	if r.inCap {
		old := q.recvBufs[r.recvSlot]
		var spare []byte
		if n := len(q.spareRecv); n > 0 {
			spare, q.spareRecv = q.spareRecv[n-1], q.spareRecv[:n-1]
		}
		if spare == nil {
			// Only on an early answer, never on the I/O path: at most
			// one per context held at a time.
			spare = make([]byte, len(old))
		}
		// The slot's receive is not posted while its command runs:
		// Complete below posts it with the spare.
		r.heldRecv = old
		q.recvBufs[r.recvSlot] = spare
		q.recvWRs[r.recvSlot].Buf = spare
	}
	q.mu.Unlock()
	r.Complete(st)
	return true
}

// Release frees the context and data buffer of a request that Answer
// answered, once its owner no longer uses them (the backend returned). It
// is safe after the queue ended.
func (r *Request) Release() {
	q := r.q
	q.mu.Lock()
	if !r.active || !r.held || r.released {
		q.mu.Unlock()
		return
	}
	if !r.sent {
		// The answer's Send has not completed: its completion frees.
		r.released = true
		q.mu.Unlock()
		return
	}
	q.releaseLocked(r)
}

// onWC handles completions on the engine goroutines. A completion names
// its request by index and generation; one for a request that is no longer
// in that use is dropped and counted, never acted on.
func (q *ControllerQueue) onWC(wc *iwarp.WC) {
	switch wc.Opcode {
	case iwarp.WCRecv:
		if wc.Status != iwarp.WCSuccess {
			return // flushed: the connection is gone
		}
		q.onCapsule(int(wc.ID), wc.ByteLen)
	case iwarp.WCRead:
		r := q.live(wc.ID)
		if r == nil {
			return
		}
		var err error
		if wc.Status != iwarp.WCSuccess {
			err = fmt.Errorf("nvme-rdma: RDMA Read: %v", wc.Status)
		}
		q.h.DataReady(r, err)
	case iwarp.WCSend:
		q.releaseID(wc.ID)
	}
	// RDMA Writes are unsignaled: a WCWrite is only ever a flush, and the
	// Send behind it flushes too.
}

// live returns the request a completion names if it is still in that use.
func (q *ControllerQueue) live(id uint64) *Request {
	idx, gen := int(uint32(id)), uint32(id>>32)
	q.mu.Lock()
	var r *Request
	if idx < len(q.reqs) {
		r = q.reqs[idx]
	}
	if r == nil || !r.active || r.gen != gen {
		q.stats.StaleCompletions++
		q.mu.Unlock()
		return nil
	}
	q.mu.Unlock()
	return r
}

func (q *ControllerQueue) countStale() {
	q.mu.Lock()
	q.stats.StaleCompletions++
	q.mu.Unlock()
}

// onCapsule takes a command that arrived in receive buffer slot: it starts
// at once if a context and send queue room are free, else it waits.
func (q *ControllerQueue) onCapsule(slot, n int) {
	if n < nvmeof.SQESize {
		q.protocolError(fmt.Errorf("command capsule of %d bytes", n))
		return
	}
	// A keyed SGL's buffer is taken with the context, under the same
	// acquisition of mu, when nothing waits for one (start decodes the
	// SGL again and checks it fully).
	want := 0
	if desc, err := (*nvmeof.SQE)(q.recvBufs[slot][:nvmeof.SQESize]).DecodeSGL1(); err == nil && desc.Kind == nvmeof.SGLKeyed && desc.Length > 0 && int(desc.Length) <= q.maxXfer {
		want = int(desc.Length)
	}
	q.mu.Lock()
	if q.bHead == len(q.backlog) {
		if r := q.allocLocked(); r != nil {
			if want > 0 && want <= q.pool.maxBuffer() && q.wHead == len(q.waiting) {
				if buf, off, ok := q.pool.get(want); ok {
					r.data, r.dataOff, r.pool, r.mr = buf, off, q.pool, q.poolMR
				}
			}
			q.mu.Unlock()
			q.start(r, slot, n)
			return
		}
	}
	q.backlog = append(q.backlog, capsule{slot, n})
	q.stats.Backlogged++
	q.mu.Unlock()
}

// allocLocked takes a free context and its send queue room, or returns nil.
func (q *ControllerQueue) allocLocked() *Request {
	if len(q.free) == 0 || q.sqAvail < sqPerCommand || q.closed {
		return nil
	}
	r := q.reqs[q.free[len(q.free)-1]]
	q.free = q.free[:len(q.free)-1]
	q.sqAvail -= sqPerCommand
	r.active, r.answered = true, false
	return r
}

// start decodes a command's SGL and hands it to the controller logic.
func (q *ControllerQueue) start(r *Request, slot, n int) {
	r.recvSlot = slot
	r.capsule = q.recvBufs[slot][:n]
	r.sqe = (*nvmeof.SQE)(r.capsule[:nvmeof.SQESize])
	desc, err := r.sqe.DecodeSGL1()
	if err != nil {
		r.Complete(nvmeof.StatusFromError(err))
		return
	}
	if desc.Null() {
		q.h.HandleCommand(r)
		return
	}
	switch desc.Kind {
	case nvmeof.SGLInCapsule:
		// nvmet_rdma_map_sgl_inline: only write-direction commands carry
		// in-capsule data, and it must lie inside the capsule.
		if r.sqe.DataDirection() != nvmeof.DirHostToController {
			r.Complete(nvmeof.StatusInvalidField | nvmeof.StatusDNR)
			return
		}
		if err := desc.CheckInCapsule(n - nvmeof.SQESize); err != nil {
			r.Complete(nvmeof.StatusFromError(err))
			return
		}
		off := nvmeof.SQESize + int(desc.Addr)
		r.data = r.capsule[off : off+int(desc.Length)]
		r.inCap = true
		q.h.HandleCommand(r)
	case nvmeof.SGLKeyed:
		if int(desc.Length) > q.maxXfer {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return
		}
		r.key, r.addr, r.inval = desc.Key, desc.Addr, desc.Invalidate
		if r.pool != nil && len(r.data) == int(desc.Length) {
			q.h.HandleCommand(r) // onCapsule took the buffer
			return
		}
		q.withBuffer(r, int(desc.Length))
	default:
		r.Complete(nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR)
	}
}

// withBuffer gives r a registered buffer of n bytes and hands it to the
// handler, or queues it until a buffer is free (in arrival order).
func (q *ControllerQueue) withBuffer(r *Request, n int) {
	q.mu.Lock()
	if n > q.pool.maxBuffer() {
		// Before Admit only Connect data fits: a bigger transfer is a
		// host that did not wait for its Connect's answer.
		q.mu.Unlock()
		r.Complete(nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR)
		return
	}
	if q.wHead == len(q.waiting) {
		if buf, off, ok := q.pool.get(n); ok {
			r.data, r.dataOff, r.pool, r.mr = buf, off, q.pool, q.poolMR
			q.mu.Unlock()
			q.h.HandleCommand(r)
			return
		}
	}
	r.want = n
	q.waiting = append(q.waiting, r)
	q.mu.Unlock()
}

// release frees a request's buffer, context and send queue room after its
// response went out (or could not), and starts commands that waited.
func (q *ControllerQueue) release(r *Request) {
	q.mu.Lock()
	q.releaseLocked(r)
}

// releaseID releases the request a Send completion names if it is still in
// that use (see live), under one acquisition of mu.
func (q *ControllerQueue) releaseID(id uint64) {
	idx, gen := int(uint32(id)), uint32(id>>32)
	q.mu.Lock()
	var r *Request
	if idx < len(q.reqs) {
		r = q.reqs[idx]
	}
	if r == nil || !r.active || r.gen != gen {
		q.stats.StaleCompletions++
		q.mu.Unlock()
		return
	}
	if r.held && !r.released {
		// An answer sent early: its send queue room is back, the
		// context and buffer stay with the owner until Release.
		r.sent = true
		q.sqAvail += sqPerCommand
		if q.wHead == len(q.waiting) && q.bHead == len(q.backlog) {
			q.mu.Unlock()
			return
		}
		q.drainLocked()
		return
	}
	q.releaseLocked(r)
}

// releaseLocked is release with mu held; it unlocks mu.
func (q *ControllerQueue) releaseLocked(r *Request) {
	if !r.active {
		q.mu.Unlock()
		return
	}
	if r.pool != nil {
		r.pool.put(r.dataOff, cap(r.data))
	}
	if r.heldRecv != nil {
		q.spareRecv = append(q.spareRecv, r.heldRecv)
	}
	if !r.held || !r.sent {
		q.sqAvail += sqPerCommand
	}
	*r = Request{q: q, index: r.index, gen: r.gen + 1}
	q.free = append(q.free, r.index)
	if q.wHead == len(q.waiting) && q.bHead == len(q.backlog) {
		q.mu.Unlock() // nothing waits: no drain
		return
	}
	q.drainLocked()
}

// drain starts the commands that waited for a data buffer, then those that
// waited for a context, as far as resources allow.
func (q *ControllerQueue) drain() {
	q.mu.Lock()
	q.drainLocked()
}

// drainLocked is drain with mu held; it unlocks mu.
func (q *ControllerQueue) drainLocked() {
	for {
		if q.wHead < len(q.waiting) {
			w := q.waiting[q.wHead]
			if w.want > q.pool.maxBuffer() {
				q.waiting[q.wHead] = nil
				q.wHead++
				q.mu.Unlock()
				w.Complete(nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR)
				q.mu.Lock()
				continue
			}
			if buf, off, ok := q.pool.get(w.want); ok {
				w.data, w.dataOff, w.pool, w.mr = buf, off, q.pool, q.poolMR
				q.waiting[q.wHead] = nil
				q.wHead++
				q.mu.Unlock()
				q.h.HandleCommand(w)
				q.mu.Lock()
				continue
			}
		} else if len(q.waiting) > 0 {
			q.waiting, q.wHead = q.waiting[:0], 0
		}
		if q.bHead < len(q.backlog) {
			if r := q.allocLocked(); r != nil {
				c := q.backlog[q.bHead]
				q.bHead++
				q.mu.Unlock()
				q.start(r, c.slot, c.n)
				q.mu.Lock()
				continue
			}
		} else if len(q.backlog) > 0 {
			q.backlog, q.bHead = q.backlog[:0], 0
		}
		q.mu.Unlock()
		return
	}
}

// Stats are counters of a queue.
type Stats struct {
	PoolBytesInUse int // registered data buffer bytes held by commands
	Waiting        int // commands waiting for a data buffer
	// Backlog is the number of commands waiting for a context and send
	// queue room now; Backlogged counts those that ever had to.
	Backlog    int
	Backlogged uint64
	// StaleCompletions counts completions (and double Completes) for a
	// request no longer in that use: dropped, never acted on.
	StaleCompletions uint64
}

// Stats returns the queue's counters.
func (q *ControllerQueue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.stats
	st.PoolBytesInUse, st.Waiting, st.Backlog = q.pool.used(), len(q.waiting)-q.wHead, len(q.backlog)-q.bHead
	return st
}
