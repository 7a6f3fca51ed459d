package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

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
	// Engine holds the iWARP settings (MPA CRC, FPDU size, timeouts).
	Engine iwarp.Config
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
	// queue (defaults DefaultIOPoolSize, DefaultAdminPoolSize).
	IOPoolSize, AdminPoolSize int
	// Logger receives queue events.
	Logger *zap.Logger
}

func (c *ControllerConfig) withDefaults() ControllerConfig {
	d := *c
	if d.InlineDataSize == 0 {
		d.InlineDataSize = DefaultInlineDataSize
	}
	if d.MaxQueueSize == 0 {
		d.MaxQueueSize = DefaultMaxQueueSize
	}
	if d.MaxTransferSize == 0 {
		d.MaxTransferSize = DefaultMaxTransferSize
	}
	if d.IOPoolSize == 0 {
		d.IOPoolSize = DefaultIOPoolSize
	}
	if d.AdminPoolSize == 0 {
		d.AdminPoolSize = DefaultAdminPoolSize
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
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
	return d.Engine.Validate()
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
	ecfg := c.Engine
	if ecfg.Logger == nil {
		ecfg.Logger = c.Logger
	}
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
// posts HSQSIZE+1 command receive buffers, sets up the registered data
// buffer pool and answers the host.
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
	}
	q, err := newControllerQueue(r, h)
	if err != nil {
		_ = r.Reject(CMRejectNoResources)
		return nil, err
	}
	acc := CMAccept{CRQSize: uint16(size)}
	if err := r.cr.Accept(q.qp, acc.Append(nil)); err != nil {
		return nil, err
	}
	go q.watch()
	return q, nil
}

// ControllerQueue is the controller side of one NVMe queue.
type ControllerQueue struct {
	qid       uint16
	size      int
	hrqSize   int
	inline    int
	maxXfer   int
	h         Handler
	log       *zap.Logger
	pd        *iwarp.PD
	qp        *iwarp.QP
	pool      *bufferPool
	poolMR    *iwarp.MR
	recvBufs  [][]byte
	recvWRs   []iwarp.RecvWR
	remote    net.Addr
	local     net.Addr
	sqHead    atomic.Uint32 // SQ head pointer reported in completions
	closeOnce sync.Once
	ended     chan struct{} // closed after the handler's QueueClosed returned

	mu      sync.Mutex
	reqs    []*Request // every request context, by index
	free    []int32
	waiting []*Request // commands waiting for a data buffer, in order, from wHead
	wHead   int
	grown   int

	// Ctx is for the controller logic: the queue's controller, etc.
	Ctx any
}

func newControllerQueue(r *QueueRequest, h Handler) (*ControllerQueue, error) {
	cfg := r.cfg
	size := r.Size()
	q := &ControllerQueue{
		qid:     r.CM.QID,
		size:    size,
		hrqSize: int(r.CM.HRQSize),
		inline:  cfg.InlineDataSize,
		maxXfer: cfg.MaxTransferSize,
		h:       h,
		remote:  r.RemoteAddr,
		local:   r.LocalAddr,
		ended:   make(chan struct{}),
		pd:      iwarp.NewPD(),
	}
	q.log = cfg.Logger.With(zap.Stringer("remote", r.RemoteAddr), zap.Uint16("qid", q.qid))
	poolSize := cfg.IOPoolSize
	if q.qid == 0 {
		poolSize = cfg.AdminPoolSize
	}
	var err error
	if q.pool, err = newBufferPool(poolSize, min(cfg.MaxTransferSize, poolSize)); err != nil {
		return nil, err
	}
	if q.poolMR, err = q.pd.RegisterMemory(q.pool.arena, iwarp.AccessLocalWrite); err != nil {
		return nil, err
	}
	cq := iwarp.NewCQHandler(q.onWC)
	// Per command at most: RDMA Read, or RDMA Write + Send; sends of
	// completed commands may still be queued when new ones arrive.
	q.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: q.pd, SendCQ: cq, RecvCQ: cq, SendDepth: 4 * size, RecvDepth: size, IRD: 1, ORD: controllerORD})
	if err != nil {
		return nil, err
	}
	q.qp.SetLogger(q.log)
	// Receive buffers: one SQE plus in-capsule data each, from one slab.
	rb := q.inline + nvmeof.SQESize
	slab := make([]byte, size*rb)
	q.recvBufs = make([][]byte, size)
	q.recvWRs = make([]iwarp.RecvWR, size)
	for i := range q.recvBufs {
		q.recvBufs[i] = slab[i*rb : (i+1)*rb : (i+1)*rb]
		q.recvWRs[i] = iwarp.RecvWR{ID: uint64(i), Buf: q.recvBufs[i]}
		if err := q.qp.PostRecv(&q.recvWRs[i]); err != nil {
			return nil, err
		}
	}
	// Request contexts: a command's context lives until its response Send
	// has gone out, which can be after the host already sent the next
	// command; twice the queue size covers that, and more are made if not.
	n := 2 * size
	q.reqs = make([]*Request, n)
	q.free = make([]int32, 0, n)
	for i := n - 1; i >= 0; i-- {
		q.reqs[i] = &Request{q: q, index: int32(i)}
		q.free = append(q.free, int32(i))
	}
	q.waiting = make([]*Request, 0, size)
	return q, nil
}

// QID is the queue identifier (0 = admin).
func (q *ControllerQueue) QID() uint16 { return q.qid }

// Size is the queue size (HSQSIZE+1): commands the host may have outstanding.
func (q *ControllerQueue) Size() int { return q.size }

// InlineDataSize is the in-capsule data the queue accepts.
func (q *ControllerQueue) InlineDataSize() int { return q.inline }

// MaxTransferSize is the largest data transfer of one command.
func (q *ControllerQueue) MaxTransferSize() int { return q.maxXfer }

// RemoteAddr is the host's address; LocalAddr the address it connected to.
func (q *ControllerQueue) RemoteAddr() net.Addr { return q.remote }

// LocalAddr is the local address of the connection.
func (q *ControllerQueue) LocalAddr() net.Addr { return q.local }

// Done is closed when the connection has ended and the handler's
// QueueClosed has returned, so that whoever waits for it (a shutdown) also
// waits for the handler's last word on the queue. QueueClosed must not wait
// for Done.
func (q *ControllerQueue) Done() <-chan struct{} { return q.ended }

// Err is why the connection ended (nil while it runs or after a clean close).
func (q *ControllerQueue) Err() error { return q.qp.Err() }

// Close disconnects the queue gracefully: responses already posted go out
// first.
func (q *ControllerQueue) Close() { q.qp.Disconnect() }

// CRC reports whether MPA CRCs are in use on the connection.
func (q *ControllerQueue) CRC() bool { return q.qp.CRC() }

func (q *ControllerQueue) watch() {
	defer close(q.ended)
	<-q.qp.Done()
	q.h.QueueClosed(q, q.qp.Err())
}

// fail ends the queue after a transport protocol error of the host.
func (q *ControllerQueue) fail(err error) {
	q.log.Warn("nvme-rdma: host protocol error, closing queue", zap.Error(err))
	q.qp.Disconnect()
}

// Request is one command being executed on a controller queue. It is valid
// from HandleCommand until Complete returns; the controller logic must
// complete every request exactly once.
type Request struct {
	q        *ControllerQueue
	index    int32
	recvSlot int
	sqe      *nvmeof.SQE
	capsule  []byte
	data     []byte
	dataOff  int
	pooled   bool
	inCap    bool
	key      uint32
	addr     uint64
	inval    bool
	result   uint64
	cqe      nvmeof.CQE
	wr       iwarp.SendWR
	sge      [1][]byte
	active   bool
	want     int // data buffer size while waiting for one

	// Ctx is for the controller logic (for example the namespace a command
	// targets); it is cleared when the request is released.
	Ctx any
}

// SQE is the command.
func (r *Request) SQE() *nvmeof.SQE { return r.sqe }

// Queue is the queue the command arrived on.
func (r *Request) Queue() *ControllerQueue { return r.q }

// Data is the command's data buffer, as long as its SGL says (nil when the
// command carries no data): in-capsule data, or a registered buffer that
// FetchData fills or that the controller fills before Complete.
func (r *Request) Data() []byte { return r.data }

// InCapsule reports that the data came in the command capsule.
func (r *Request) InCapsule() bool { return r.inCap }

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
	r.wr = iwarp.SendWR{ID: uint64(r.index), Opcode: iwarp.WRRead, Signaled: true, RemoteSTag: r.key, RemoteTO: r.addr, SinkMR: r.q.poolMR, SinkOffset: uint64(r.dataOff), Length: uint32(len(r.data))}
	if err := r.q.qp.PostSend(&r.wr); err != nil {
		r.q.h.DataReady(r, fmt.Errorf("nvme-rdma: RDMA Read of %d bytes: %w", len(r.data), err))
	}
}

// Complete finishes the command with a status: for a successful
// controller-to-host command with data, an RDMA Write of Data() to the
// host's buffer, then the response capsule (a Send, or a Send with
// Invalidate of the host's key when it asked for one). It may be called
// from any goroutine.
func (r *Request) Complete(st nvmeof.Status) {
	q := r.q
	// As nvmet_update_sq_head: the SQ head advances when a command
	// completes, so SQHD grows in completion order.
	var sqhd uint32
	for {
		old := q.sqHead.Load()
		sqhd = (old + 1) % uint32(q.size)
		if q.sqHead.CompareAndSwap(old, sqhd) {
			break
		}
	}
	r.cqe.Complete(r.sqe, q.qid, uint16(sqhd), uint32(r.result), st)
	r.cqe.SetDW1(uint32(r.result >> 32))
	dir := r.sqe.DataDirection()
	// The SQE and any in-capsule data are used up: give the buffer back to
	// the host before answering (as nvmet does).
	if err := q.qp.PostRecv(&q.recvWRs[r.recvSlot]); err != nil {
		q.release(r)
		return
	}
	if st == nvmeof.StatusSuccess && dir == nvmeof.DirControllerToHost && len(r.data) > 0 && !r.inCap {
		r.sge[0] = r.data
		w := iwarp.SendWR{Opcode: iwarp.WRWrite, Local: r.sge[:], RemoteSTag: r.key, RemoteTO: r.addr}
		if err := q.qp.PostSend(&w); err != nil {
			q.release(r)
			return
		}
	}
	r.sge[0] = r.cqe[:]
	r.wr = iwarp.SendWR{ID: uint64(r.index), Opcode: iwarp.WRSend, Signaled: true, Local: r.sge[:]}
	if r.inval && r.key != 0 {
		r.wr.Opcode, r.wr.InvalidateSTag = iwarp.WRSendInv, r.key
	}
	if err := q.qp.PostSend(&r.wr); err != nil {
		q.release(r)
	}
}

// onWC handles completions on the engine goroutines.
func (q *ControllerQueue) onWC(wc *iwarp.WC) {
	switch wc.Opcode {
	case iwarp.WCRecv:
		if wc.Status != iwarp.WCSuccess {
			return // flushed: the connection is gone
		}
		q.onCapsule(int(wc.ID), wc.ByteLen)
	case iwarp.WCRead:
		r := q.reqs[wc.ID]
		var err error
		if wc.Status != iwarp.WCSuccess {
			err = fmt.Errorf("nvme-rdma: RDMA Read: %v", wc.Status)
		}
		q.h.DataReady(r, err)
	case iwarp.WCSend:
		q.release(q.reqs[wc.ID])
	}
}

// onCapsule starts a command that arrived in receive buffer slot.
func (q *ControllerQueue) onCapsule(slot, n int) {
	if n < nvmeof.SQESize {
		q.fail(fmt.Errorf("command capsule of %d bytes", n))
		return
	}
	r := q.alloc()
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
		q.withBuffer(r, int(desc.Length))
	default:
		r.Complete(nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR)
	}
}

// withBuffer gives r a registered buffer of n bytes and hands it to the
// handler, or queues it until a buffer is free (in arrival order).
func (q *ControllerQueue) withBuffer(r *Request, n int) {
	q.mu.Lock()
	if q.wHead == len(q.waiting) {
		if buf, off, ok := q.pool.get(n); ok {
			q.mu.Unlock()
			r.data, r.dataOff, r.pooled = buf, off, true
			q.h.HandleCommand(r)
			return
		}
	}
	r.want = n
	q.waiting = append(q.waiting, r)
	q.mu.Unlock()
}

func (q *ControllerQueue) alloc() *Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	var r *Request
	if n := len(q.free); n > 0 {
		r = q.reqs[q.free[n-1]]
		q.free = q.free[:n-1]
	} else {
		r = &Request{q: q, index: int32(len(q.reqs))}
		q.reqs = append(q.reqs, r)
		q.grown++
	}
	r.active = true
	return r
}

// release frees a request's buffer and context after its response went
// out (or could not), and starts commands that waited for a buffer.
func (q *ControllerQueue) release(r *Request) {
	q.mu.Lock()
	if !r.active {
		q.mu.Unlock()
		return
	}
	if r.pooled {
		q.pool.put(r.dataOff, cap(r.data))
	}
	*r = Request{q: q, index: r.index}
	q.free = append(q.free, r.index)
	for {
		if q.wHead == len(q.waiting) {
			q.waiting, q.wHead = q.waiting[:0], 0
			q.mu.Unlock()
			return
		}
		w := q.waiting[q.wHead]
		buf, off, ok := q.pool.get(w.want)
		if !ok {
			q.mu.Unlock()
			return
		}
		w.data, w.dataOff, w.pooled = buf, off, true
		q.waiting[q.wHead] = nil
		q.wHead++
		q.mu.Unlock()
		q.h.HandleCommand(w)
		q.mu.Lock()
	}
}

// Stats are counters of a queue.
type Stats struct {
	PoolBytesInUse int // registered data buffer bytes held by commands
	Waiting        int // commands waiting for a data buffer
	ExtraContexts  int // request contexts made beyond the initial 2×size
}

// Stats returns the queue's counters.
func (q *ControllerQueue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return Stats{PoolBytesInUse: q.pool.used(), Waiting: len(q.waiting) - q.wHead, ExtraContexts: q.grown}
}
