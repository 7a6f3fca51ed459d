package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"unsafe"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Host side limits.
const (
	// hostIRD is what the Linux host advertises (siw's max_qp_rd_atom): the
	// controller's RDMA Reads of our data may be this many at once. It must
	// be ≥ 1 or a Linux target can never fetch write data (protocol.md §12.2).
	hostIRD = 128
	// cidSlotBits leaves the upper 4 bits of a command identifier for a
	// generation counter, as Linux does, so a stale completion is caught.
	cidSlotBits = 12
	cidSlotMask = 1<<cidSlotBits - 1
)

// Errors of the host side (nvmeof's, shared with the other bindings).
var (
	// ErrQueueFull means every command slot (or the SQ, by its head
	// pointer) is taken.
	ErrQueueFull = nvmeof.ErrQueueFull
	// ErrQueueClosed means the queue's connection has ended; the command
	// may not have reached the controller.
	ErrQueueClosed = nvmeof.ErrQueueClosed
)

// HostConfig configures one host queue.
type HostConfig struct {
	// Transport holds the connection settings (MPA CRC, FPDU size,
	// timeouts).
	Transport TransportConfig
	// QID is the queue to open (0 = admin).
	QID uint16
	// QueueSize is the number of entries (admin: AdminQueueSize; I/O:
	// default DefaultMaxQueueSize); QueueSize-1 commands may be outstanding.
	QueueSize int
	// InlineDataSize is the in-capsule data the controller accepts (from
	// Identify Controller: IOCCSZ×16−64); 0 disables in-capsule data.
	// The admin queue never uses it (as Linux).
	InlineDataSize int
	// PD is the protection domain of the queue (shared by a controller's
	// queues); nil makes one.
	PD *PD
	// Logger receives queue events.
	Logger *zap.Logger
}

// HostRequest is a command submitted on a host queue (nvmeof.HostRequest,
// shared by the bindings). The controller writes read data straight into
// its Data and RDMA-Reads write data straight from it.
type HostRequest = nvmeof.HostRequest

type hostSlot struct {
	req    *HostRequest
	gen    uint8
	mr     *iwarp.MR
	key    uint8
	usedMR bool
	stag   uint32 // the STag mr was registered with for the command (usedMR)
	wr     iwarp.SendWR
	sge    [2][]byte
}

// HostQueue is the host side of one NVMe queue.
type HostQueue struct {
	qid     uint16
	size    int
	inline  int
	pd      *iwarp.PD
	qp      *iwarp.QP
	log     *zap.Logger
	recv    []iwarp.RecvWR
	accept  CMAccept
	doneCh  chan struct{}
	failErr error

	mu     perfcount.Mutex
	stats  HostStats
	slots  []hostSlot
	free   []int
	sqTail uint16 // commands submitted, mod size
	sqHead uint16 // from the last completion's SQHD
	// sqFlowOff: the controller reports SQHD 0xFFFF, i.e. SQ flow control
	// disabled (NVMe-oF 1.1 §2.4.3, nvmet with CATTR bit 2): only the slots
	// bound the commands outstanding.
	sqFlowOff bool
	closed    bool
}

// Dial opens a queue to a controller: RDMA CM with the NVMe/RDMA private
// data, then the receive buffers for responses. The Fabrics Connect command
// is the caller's first command on it.
func Dial(ctx context.Context, network, address string, cfg HostConfig) (*HostQueue, error) {
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultMaxQueueSize
		if cfg.QID == 0 {
			cfg.QueueSize = AdminQueueSize
		}
	}
	if cfg.QueueSize < 2 || cfg.QueueSize > MaxQueueSizeLimit {
		return nil, fmt.Errorf("nvme-rdma: queue size %d: want 2..%d", cfg.QueueSize, MaxQueueSizeLimit)
	}
	if err := cfg.Transport.Validate(); err != nil {
		return nil, err
	}
	if cfg.InlineDataSize < 0 || cfg.QID == 0 {
		cfg.InlineDataSize = 0
	}
	if cfg.PD == nil {
		cfg.PD = NewPD()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	q := &HostQueue{qid: cfg.QID, size: cfg.QueueSize, inline: cfg.InlineDataSize, pd: cfg.PD.pd, doneCh: make(chan struct{})}
	q.log = cfg.Logger.With(zap.String("traddr", address), zap.Uint16("qid", cfg.QID))
	cq := iwarp.NewCQHandler(q.onWC)
	var err error
	q.qp, err = iwarp.NewQP(iwarp.QPAttr{PD: q.pd, SendCQ: cq, RecvCQ: cq, SendDepth: 2 * q.size, RecvDepth: q.size, IRD: hostIRD, ORD: 1})
	if err != nil {
		return nil, err
	}
	q.qp.SetLogger(q.log)
	// One 16-byte receive per queue entry: responses are exactly one CQE.
	slab := make([]byte, q.size*nvmeof.CQESize)
	q.recv = make([]iwarp.RecvWR, q.size)
	for i := range q.recv {
		q.recv[i] = iwarp.RecvWR{ID: uint64(i), Buf: slab[i*nvmeof.CQESize : (i+1)*nvmeof.CQESize]}
		if err := q.qp.PostRecv(&q.recv[i]); err != nil {
			return nil, err
		}
	}
	n := q.size - 1
	q.slots = make([]hostSlot, n)
	q.free = make([]int, 0, n)
	for i := n - 1; i >= 0; i-- {
		mr, err := q.pd.RegisterMemoryAt(nil, 0, 0)
		if err != nil {
			return nil, err
		}
		mr.Invalidate()
		q.slots[i].mr = mr
		q.slots[i].key = uint8(mr.STag())
		q.free = append(q.free, i)
	}
	cm := CMRequest{QID: cfg.QID, HRQSize: uint16(q.size), HSQSize: uint16(q.size - 1)}
	ecfg := cfg.Transport.engine(cfg.Logger)
	q.qp.OnDone(q.watch)
	if err := iwarp.Dial(ctx, network, address, q.qp, cm.Append(nil), &ecfg); err != nil {
		var rej *iwarp.RejectError
		if errors.As(err, &rej) {
			if st, perr := ParseCMReject(rej.PrivateData); perr == nil {
				return nil, &CMRejectError{Status: st, Msg: "by " + address}
			}
		}
		return nil, err
	}
	if a, err := ParseCMAccept(q.qp.PeerPrivateData()); err == nil {
		q.accept = a
	}
	return q, nil
}

// QID is the queue identifier.
func (q *HostQueue) QID() uint16 { return q.qid }

// Size is the queue size.
func (q *HostQueue) Size() int { return q.size }

// Accept is the controller's CM accept data.
func (q *HostQueue) Accept() CMAccept { return q.accept }

// LocalAddr is our address.
func (q *HostQueue) LocalAddr() net.Addr { return q.qp.LocalAddr() }

// CRC reports whether MPA CRCs are in use.
func (q *HostQueue) CRC() bool { return q.qp.CRC() }

// Done is closed when the queue has failed or been closed and every
// outstanding command has been completed with an error.
func (q *HostQueue) Done() <-chan struct{} { return q.doneCh }

// Err is why the queue ended.
func (q *HostQueue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failErr
}

// Close disconnects the queue gracefully.
func (q *HostQueue) Close() {
	q.qp.Disconnect()
	<-q.doneCh
}

// Nudge posts a zero-length RDMA Write (STag 0, TO 0), which carries no
// data and which a peer accepts without checking the STag (RFC 5040 §4.3;
// siw_proc_write "zero length WRITE"; the RFC 6581 Write RTR is one). Its
// use is to make the peer look at its socket again: Linux siw (6.1,
// siw_cm.c siw_accept) sends the MPA reply before siw_qp_socket_assoc()
// installs the QP's sk_data_ready, so an FPDU that the host sends at once
// and that arrives in between lies unread until more bytes arrive — the
// queue's Fabrics Connect then never completes. A host that nudges while
// its first command is outstanding gets past that lost wake-up.
func (q *HostQueue) Nudge() error {
	return q.qp.PostSend(&iwarp.SendWR{Opcode: iwarp.WRWrite})
}

// Abort closes the connection at once (as a lost connection would).
func (q *HostQueue) Abort(err error) {
	q.mu.Lock()
	if q.failErr == nil {
		q.failErr = err
	}
	q.mu.Unlock()
	q.qp.Disconnect()
}

// Submit sends a command. Read data lands in r.Data, write data is taken
// from it: through a keyed SGL naming exactly that buffer with a fresh STag
// (as the Linux host's per-command fast registration), or as in-capsule data
// for small writes on I/O queues. r.Done runs when the completion arrives.
// Submit never blocks; it returns ErrQueueFull when no slot is free.
//
// A Submit that returns nil is followed by exactly one call of r.Done (with
// the completion, or with ErrQueueClosed when the connection ends first),
// possibly before Submit returns; a Submit that returns an error never calls
// r.Done, so the caller may send r again at once.
func (q *HostQueue) Submit(r *HostRequest) error {
	if r.Done == nil {
		return errors.New("nvme-rdma: submit: request without Done")
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrQueueClosed
	}
	next := q.sqTail + 1
	if int(next) == q.size {
		next = 0
	}
	if len(q.free) == 0 || !q.sqFlowOff && next == q.sqHead {
		q.mu.Unlock()
		return ErrQueueFull
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.sqTail = next
	s := &q.slots[i]
	s.gen++
	inline := q.inline
	q.mu.Unlock()

	// The slot is taken but holds no request yet: until s.req is set below,
	// neither a completion nor watch can reach r, so r and the slot are
	// this goroutine's alone.
	r.Err = nil
	r.CQE = nvmeof.CQE{}
	r.SQE.SetCID(uint16(s.gen&0xF)<<cidSlotBits | uint16(i))
	sgl := r.SQE.SGL1()
	s.sge[0] = r.SQE[:]
	s.wr = iwarp.SendWR{Opcode: iwarp.WRSend, Local: s.sge[:1]}
	s.usedMR = false
	var kind *uint64 // the counter of the SGL used, bumped with s.req below
	switch {
	case len(r.Data) == 0:
		sgl.SetKeyed(0, 0, 0, false)
	case r.Write && len(r.Data) <= inline:
		kind = &q.stats.InCapsule
		sgl.SetInCapsule(0, uint32(len(r.Data)))
		s.sge[1] = r.Data
		s.wr.Local = s.sge[:2]
	default:
		if len(r.Data) > nvmeof.MaxKeyedSGLLength {
			q.releaseSlot(i, nil)
			return fmt.Errorf("nvme-rdma: %d bytes in one command, keyed SGL limit %d", len(r.Data), nvmeof.MaxKeyedSGLLength)
		}
		acc := iwarp.AccessLocalWrite | iwarp.AccessRemoteWrite
		if r.Write {
			acc = iwarp.AccessRemoteRead
		}
		s.key++
		iova := uint64(uintptr(unsafe.Pointer(&r.Data[0])))
		stag, err := s.mr.Reregister(r.Data, iova, acc, s.key)
		if err != nil {
			q.releaseSlot(i, nil)
			if errors.Is(err, iwarp.ErrClosed) {
				// watch deregistered the slot MRs: the queue has ended.
				return fmt.Errorf("%w: %w", ErrQueueClosed, err)
			}
			return err
		}
		s.usedMR, s.stag = true, stag
		kind = &q.stats.Keyed
		sgl.SetKeyed(iova, uint32(len(r.Data)), stag, true)
	}
	q.mu.Lock()
	s.req = r
	if kind != nil {
		*kind++
	}
	q.mu.Unlock()
	if err := q.qp.PostSend(&s.wr); err != nil {
		// The connection is ending. If watch has already taken the slot,
		// it has completed r with ErrQueueClosed (or is about to): that
		// Done is r's one completion, and Submit must not report a
		// failure as well (the caller would send r a second time).
		if !q.releaseSlot(i, r) {
			return nil
		}
		return fmt.Errorf("%w: %w", ErrQueueClosed, err)
	}
	return nil
}

// HostStats are counters of a host queue.
type HostStats struct {
	Completed           uint64 // commands completed by the controller
	InCapsule           uint64 // commands sent with in-capsule data
	Keyed               uint64 // commands sent with a keyed SGL
	RemoteInvalidations uint64 // responses that invalidated the command's STag (Send with Invalidate)
	LocalInvalidations  uint64 // keyed commands answered by a plain Send (STag invalidated here)
}

// Stats returns the queue's counters.
func (q *HostQueue) Stats() HostStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// ring is the distance from a to b going forward around the queue.
func (q *HostQueue) ring(a, b uint16) int {
	d := int(b) - int(a)
	if d < 0 {
		d += q.size
	}
	return d
}

// releaseSlot gives back slot i, which never reached the wire, if it still
// holds req (nil: a slot taken before its request was set). It reports
// false, and leaves the slot alone, when watch has taken req from it: the
// queue has ended and watch completes req.
func (q *HostQueue) releaseSlot(i int, req *HostRequest) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := &q.slots[i]
	if s.req != req {
		return false
	}
	if s.usedMR {
		s.mr.Invalidate()
	}
	s.req = nil
	q.free = append(q.free, i)
	if q.sqTail == 0 {
		q.sqTail = uint16(q.size - 1)
	} else {
		q.sqTail--
	}
	return true
}

// Do submits r and waits for its completion (or ctx). It returns the NVMe
// status as an error (nvmeof.Status) or a transport error. Do is for
// occasional commands (admin); it allocates.
func (q *HostQueue) Do(ctx context.Context, r *HostRequest) error {
	done := make(chan struct{})
	prev := r.Done
	r.Done = func(*HostRequest) { close(done) }
	defer func() { r.Done = prev }()
	if err := q.Submit(r); err != nil {
		return err
	}
	select {
	case <-done:
		return r.Status()
	case <-ctx.Done():
		// The command is still outstanding: the queue cannot know whether
		// the controller will complete it, so it is torn down.
		q.Abort(fmt.Errorf("nvme-rdma: command %s timed out: %w", nvmeof.OpcodeName(q.qid, &r.SQE), ctx.Err()))
		<-done
		return fmt.Errorf("nvme-rdma: %s: %w", nvmeof.OpcodeName(q.qid, &r.SQE), ctx.Err())
	}
}

// onWC handles completions on the engine goroutine.
func (q *HostQueue) onWC(wc *iwarp.WC) {
	if wc.Opcode != iwarp.WCRecv || wc.Status != iwarp.WCSuccess {
		return // send completions are not signaled; flushes end in watch
	}
	buf := q.recv[wc.ID].Buf
	if wc.ByteLen != nvmeof.CQESize {
		q.Abort(fmt.Errorf("nvme-rdma: response capsule of %d bytes, want %d", wc.ByteLen, nvmeof.CQESize))
		return
	}
	cqe := (*nvmeof.CQE)(buf)
	cid := cqe.CID()
	i := int(cid & cidSlotMask)
	q.mu.Lock()
	if i >= len(q.slots) || q.slots[i].req == nil || uint16(q.slots[i].gen&0xF) != cid>>cidSlotBits {
		q.mu.Unlock()
		// nvme-rdma: "got bad command_id" → error recovery.
		q.Abort(fmt.Errorf("nvme-rdma: completion for unknown command id %#x", cid))
		return
	}
	s := &q.slots[i]
	r := s.req
	q.stats.Completed++
	if wc.Invalidated {
		q.stats.RemoteInvalidations++
		if !s.usedMR || wc.InvalidatedSTag != s.stag {
			q.mu.Unlock()
			// nvme-rdma: "Bogus remote invalidation" → error recovery.
			q.Abort(fmt.Errorf("nvme-rdma: remote invalidation of STag %#x for command %#x", wc.InvalidatedSTag, cid))
			return
		}
	} else if s.usedMR {
		q.stats.LocalInvalidations++
		s.mr.Invalidate() // local invalidation, as nvme-rdma's LOCAL_INV
	}
	r.CQE = *cqe
	// Move the head forward only: completions of one queue may be sent in
	// another order than their SQHD values were taken.
	switch h := cqe.SQHead(); {
	case h == 0xFFFF:
		q.sqFlowOff = true
	case int(h) < q.size && q.ring(q.sqHead, h) <= q.ring(q.sqHead, q.sqTail):
		q.sqHead = h
	}
	s.req = nil
	q.free = append(q.free, i)
	q.mu.Unlock()
	if err := q.qp.PostRecv(&q.recv[wc.ID]); err != nil {
		q.Abort(err)
	}
	r.Done(r)
}

// watch completes every outstanding command with an error once the
// connection has ended (QP.OnDone, on the goroutine that ended it).
func (q *HostQueue) watch() {
	q.mu.Lock()
	q.closed = true
	if q.failErr == nil {
		if err := q.qp.Err(); err != nil {
			q.failErr = err
		} else {
			q.failErr = errors.New("disconnected")
		}
	}
	cause := q.failErr
	var pending []*HostRequest
	for i := range q.slots {
		if r := q.slots[i].req; r != nil {
			q.slots[i].req = nil
			pending = append(pending, r)
		}
		// The queue is over: its STags leave the (possibly shared) PD.
		_ = q.slots[i].mr.Deregister()
	}
	q.mu.Unlock()
	for _, r := range pending {
		r.Err = fmt.Errorf("%w: %w", ErrQueueClosed, cause)
		r.Done(r)
	}
	close(q.doneCh)
}
