package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/admission"
	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// Handler is the controller logic behind a queue. Its methods run on the
// queue's receive goroutine and must not block: hand slow work (backend
// I/O) to other goroutines and Complete from there.
type Handler interface {
	// HandleCommand is called for each command capsule with the data
	// buffer (if the command has data) ready: in-capsule data is in it;
	// host-to-controller data beyond it must be fetched with FetchData;
	// controller-to-host data is written into it before Complete.
	HandleCommand(r *Request)
	// DataReady is called when FetchData finished; err is non-nil when
	// the data could not be received intact (a data digest error: the
	// command completes with a transient transport error).
	DataReady(r *Request, err error)
	// QueueClosed is called once when the queue's connection has ended.
	// Requests still held must be completed (Complete then just releases
	// them).
	QueueClosed(q *ControllerQueue, err error)
}

// ErrDataDigest is the error DataReady gets for host data whose data
// digest was wrong (TCP 1.0 §3.6.2.1: the command completes with a
// Transient Transport Error).
var ErrDataDigest error = &digestError{}

type digestError struct{}

func (*digestError) Error() string {
	return "nvme-tcp: H2CData data digest error"
}

// Unwrap gives the status the command completes with.
func (*digestError) Unwrap() error { return nvmeof.StatusTransientTransportError }

// ControllerQueue is the controller side of one NVMe/TCP queue.
//
// Bounds: one goroutine reads the host's PDUs; a command takes a request
// context (Size of them: the host may have at most that many outstanding)
// and its data buffer, which the context keeps for the next command (so a
// queue holds at most Size × MaxTransferSize of data buffers, as many as
// nvmet-tcp would). A host that sends more commands than there are free
// contexts is not read from until one is free. Until the controller admits
// the queue, the connect timeout bounds everything; after, a PDU whose
// first bytes arrived must be complete within the PDU timeout, and every
// write within the write timeout; an idle host is the keep-alive's.
type ControllerQueue struct {
	qid      uint16
	size     int
	inline   int
	maxXfer  int
	maxH2C   uint32
	d        wire.Digests
	cfg      *Config
	h        Handler
	log      *zap.Logger
	conn     net.Conn
	br       *rxReader
	ticket   *admission.Ticket
	killed   atomic.Pointer[error] // why the Admission ended the queue
	admitted atomic.Bool
	live     atomic.Bool
	// sq: the SQ head the completions report; flow control off (the
	// host's Connect): SQHD FFFFh and a successful read's response is
	// folded into its C2HData (SUCCESS).
	sq       nvmeof.SQHead
	closedCh chan struct{}
	closing  chan struct{}
	stop     sync.Once

	wmu perfcount.Mutex // one writer at a time

	// Batched responses (under wmu). While the receive goroutine works
	// through PDUs that have already arrived (batching), responses are
	// gathered in pending and written in one writev when it is about to
	// wait for the host again (flush), when every context is in use, or
	// when maxPending requests wait: the answers to a burst of commands
	// share one system call, as the iWARP engine's batches do. At other
	// times a response is written at once by whoever completes it.
	batching    bool
	pending     [][]byte // iovecs of the responses not yet written
	pendingReqs []int32  // their contexts, freed once written
	wbufs       net.Buffers
	batchOn     bool // the receive goroutine's view of batching (no lock)

	reqs []Request
	free chan int32

	// Counters (Stats).
	pdusSent, pdusRecv       atomic.Uint64
	writes                   atomic.Uint64
	hdgstErrors, ddgstErrors atomic.Uint64
	termSentFES, termRecvFES atomic.Uint32 // FES+1 once sent/received
	// Receive state (the receive goroutine's).
	hb      [wire.MaxTermReqPLen + wire.DigestSize]byte
	dl      bool // a PDU deadline is set
	connDL  bool // the connect deadline still runs
	scratch [256]byte
}

// Accept opens the queue: the handler gets the commands, starting with the
// one that has arrived.
func (r *QueueRequest) Accept(h Handler) (*ControllerQueue, error) {
	cfg := r.cfg
	q := &ControllerQueue{
		qid: r.QID, size: r.size, inline: cfg.InlineDataSize, maxXfer: cfg.MaxTransferSize,
		maxH2C: uint32(cfg.MaxH2CData), d: r.Digests, cfg: cfg, h: h, conn: r.conn, br: r.br,
		closedCh: make(chan struct{}), closing: make(chan struct{}), connDL: true,
	}
	if q.qid == 0 {
		q.inline = max(q.inline, AdminInlineDataSize)
	}
	q.log = cfg.Logger.With(zap.Stringer("remote", r.RemoteAddr), zap.Uint16("qid", q.qid))
	q.reqs = make([]Request, r.size)
	q.free = make(chan int32, r.size)
	q.pending = make([][]byte, 0, 3*r.size)
	q.pendingReqs = make([]int32, 0, r.size)
	for i := range q.reqs {
		q.reqs[i] = Request{q: q, index: int32(i)}
		q.free <- int32(i)
	}
	q.live.Store(true)
	q.ticket = r.ticket
	go q.run()
	// From here an eviction or the connect timeout of the Admission
	// closes the queue (QueueClosed gets why).
	q.ticket.Attach(q.kill)
	return q, nil
}

// QID is the queue identifier (0 = admin).
func (q *ControllerQueue) QID() uint16 { return q.qid }

// Digests are the digests in use on the queue.
func (q *ControllerQueue) Digests() wire.Digests { return q.d }

// MaxTransferSize is the largest data transfer of one command.
func (q *ControllerQueue) MaxTransferSize() int { return q.maxXfer }

// Done is closed when the connection has ended and the handler's
// QueueClosed has returned.
func (q *ControllerQueue) Done() <-chan struct{} { return q.closedCh }

// Live reports whether the connection is up.
func (q *ControllerQueue) Live() bool { return q.live.Load() }

// Admit ends the connect timeout once the controller has accepted the host
// (a successful Connect, or its authentication). Buffers are per command,
// so there is nothing to grow.
func (q *ControllerQueue) Admit() error { q.AdmitConnection(); return nil }

// AdmitConnection is Admit for a queue whose host must still authenticate
// (the authentication deadline bounds it now).
func (q *ControllerQueue) AdmitConnection() {
	q.admitted.Store(true)
	q.ticket.Admit()
}

// QueueStats are a queue's PDU counters, for the metrics.
type QueueStats struct {
	PDUsSent, PDUsReceived uint64
	// Writes is the number of writes to the socket (one writev each, or
	// more for a batch beyond IOV_MAX): fewer than PDUsSent where the
	// responses to a burst of commands went out together.
	Writes uint64
	// HeaderDigestErrors (fatal: the queue ended with a C2HTermReq) and
	// DataDigestErrors (the command failed, the queue went on).
	HeaderDigestErrors, DataDigestErrors uint64
	// DataCopied and DataDirect count the bytes of PDU data received
	// (H2CData, in-capsule) copied out of the read-ahead buffer and read
	// straight from the socket into the command's buffer (Config.DirectMin).
	DataCopied, DataDirect uint64
	// WriteParks counts the writes that found the socket full and waited
	// for room; SpinYields the busy-poll spins the receive goroutine gave
	// up because a writer was waiting (Config.BusyPoll: see pollConn).
	WriteParks, SpinYields uint64
	// TermReqSent/Received: the queue ended by a C2HTermReq we sent or an
	// H2CTermReq the host sent, with its FES.
	TermReqSent, TermReqReceived       bool
	TermReqSentFES, TermReqReceivedFES wire.FES
}

// Stats returns the queue's counters (atomic loads: cheap, any goroutine).
func (q *ControllerQueue) Stats() QueueStats {
	st := QueueStats{PDUsSent: q.pdusSent.Load(), PDUsReceived: q.pdusRecv.Load(), Writes: q.writes.Load(),
		HeaderDigestErrors: q.hdgstErrors.Load(), DataDigestErrors: q.ddgstErrors.Load(),
		DataCopied: q.br.dataCopied.Load(), DataDirect: q.br.dataDirect.Load()}
	if c := q.br.sock; c != nil {
		st.WriteParks, st.SpinYields = c.writeParks.Load(), c.spinYields.Load()
	}
	if v := q.termSentFES.Load(); v != 0 {
		st.TermReqSent, st.TermReqSentFES = true, wire.FES(v-1)
	}
	if v := q.termRecvFES.Load(); v != 0 {
		st.TermReqReceived, st.TermReqReceivedFES = true, wire.FES(v-1)
	}
	return st
}

// DisableSQFlowControl: the host disabled SQ flow control (Connect CATTR
// bit 2, Fabrics 1.1 §3.3). Every later completion reports SQHD FFFFh, and
// a read that succeeds with DW0 and DW1 zero is answered by its C2HData
// alone, with the SUCCESS flag (TCP 1.0 §3.6.2.7: allowed only when SQ flow
// control is disabled), as nvmet-tcp does (nvmet_setup_c2h_data_pdu sets
// NVME_TCP_F_DATA_SUCCESS when sqhd_disabled and sends no response).
func (q *ControllerQueue) DisableSQFlowControl() { q.sq.DisableFlowControl() }

// kill ends the queue for the Admission (evicted to make room, or not
// admitted within the connect timeout).
func (q *ControllerQueue) kill(why error) {
	q.killed.CompareAndSwap(nil, &why)
	q.log.Info("nvme-tcp: closing queue", zap.Error(why))
	q.Close()
}

// Close disconnects the queue: responses already written go out first.
func (q *ControllerQueue) Close() {
	q.wmu.Lock()
	q.live.Store(false)
	_ = q.conn.Close()
	q.wmu.Unlock()
	q.stop.Do(func() { close(q.closing) }) // a receive goroutine waiting for a context
}

// run is the receive goroutine.
func (q *ControllerQueue) run() {
	err := q.receive()
	q.flush() // responses gathered before the end go out (or fail) and free their contexts
	if k := q.killed.Load(); k != nil && err == nil {
		err = *k
	}
	q.live.Store(false)
	q.wmu.Lock()
	_ = q.conn.Close()
	q.wmu.Unlock()
	q.ticket.Release()
	q.stop.Do(func() { close(q.closing) })
	defer close(q.closedCh)
	// Commands still waiting for the host's data (an R2T unanswered) can
	// get it no more: they end here, with the error, so that the
	// controller logic completes them and releases what they hold (their
	// namespace among it); the PDU timeout's timer would only close the
	// queue again.
	why := err
	if why == nil {
		why = net.ErrClosed
	}
	for i := range q.reqs {
		r := &q.reqs[i]
		if r.r2t.CompareAndSwap(true, false) {
			if r.r2tTimer != nil {
				r.r2tTimer.Stop()
			}
			q.h.DataReady(r, fmt.Errorf("nvme-tcp: the queue ended before the host sent the data of its R2T: %w", why))
		}
	}
	q.h.QueueClosed(q, err)
}

// errHostTerminated: the host sent an H2CTermReq.
var errHostTerminated = errors.New("nvme-tcp: the host terminated the connection (H2CTermReq)")

// read fills b from the socket. Waiting for the first byte of a PDU
// (first) is bounded by the connect deadline until the queue is admitted,
// and not at all after (the keep-alive is); the rest of a PDU by the PDU
// timeout.
func (q *ControllerQueue) read(b []byte, first bool) error {
	return q.readAs(b, first, false)
}

// readAs is read; data: b is PDU data, read straight from the socket when
// large (rxReader.ReadData).
func (q *ControllerQueue) readAs(b []byte, first, data bool) error {
	n := 0
	if q.br.Buffered() < len(b) {
		// The read may wait for the host: the responses gathered so far
		// go out first.
		q.flush()
	}
	if !first && !q.connDL && !q.dl && q.br.Buffered() < len(b) {
		_ = q.conn.SetReadDeadline(time.Now().Add(q.cfg.PDUTimeout))
		q.dl = true
	}
	if data {
		return q.br.ReadData(b)
	}
	for n < len(b) {
		m, err := q.br.Read(b[n:])
		n += m
		if err == nil {
			continue
		}
		if first && n == 0 && q.connDL && q.admitted.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			// Admitted while we waited: the connect deadline is over.
			q.connDL = false
			_ = q.conn.SetReadDeadline(time.Time{})
			continue
		}
		return err
	}
	return nil
}

// pduDone clears the PDU deadline.
func (q *ControllerQueue) pduDone() {
	if q.connDL && q.admitted.Load() {
		// The read side only: writers set their own write deadline.
		q.connDL = false
		_ = q.conn.SetReadDeadline(time.Time{})
		q.dl = false
		return
	}
	if q.dl {
		_ = q.conn.SetReadDeadline(time.Time{})
		q.dl = false
	}
}

// receive reads PDUs until the connection ends or the host breaks the
// protocol (answered with a C2HTermReq).
func (q *ControllerQueue) receive() error {
	for {
		hb := q.hb[:]
		// The first byte waits as long as the host may be idle; the rest
		// of the PDU is bounded by the PDU timeout.
		if err := q.read(hb[:1], true); err != nil {
			if errors.Is(err, io.EOF) || (errors.Is(err, net.ErrClosed) && !q.live.Load()) {
				// The host closed between PDUs, or we closed the queue
				// (Close): a clean end.
				return nil
			}
			return err
		}
		q.startBatch()
		if err := q.read(hb[1:wire.CommonHeaderSize], false); err != nil {
			return err
		}
		q.pdusRecv.Add(1)
		err := q.pdu(hb)
		if err == nil {
			q.pduDone()
			continue
		}
		var fe *wire.FatalError
		if errors.As(err, &fe) {
			q.terminate(fe)
		}
		return err
	}
}

// pdu handles one PDU whose common header is in hb.
func (q *ControllerQueue) pdu(hb []byte) error {
	h, _ := wire.ParseHeader(hb)
	if h.Type == wire.TypeH2CTermReq {
		if _, err := wire.Check(h, true, wire.Digests{}, 0); err != nil {
			return err
		}
		if err := q.read(hb[wire.CommonHeaderSize:h.PLen], false); err != nil {
			return err
		}
		t := (*wire.TermReq)(hb[:wire.TermReqHLen])
		q.termRecvFES.Store(uint32(t.FES()) + 1)
		return fmt.Errorf("%w: %s (fei %d)", errHostTerminated, t.FES(), t.FEI())
	}
	l, err := wire.Check(h, true, q.d, 0)
	if err != nil {
		return err
	}
	hl := l.HeaderLen(h)
	if err := q.read(hb[wire.CommonHeaderSize:hl], false); err != nil {
		return err
	}
	if l.HDGST {
		if err := wire.CheckHeaderDigest(hb[:hl], h); err != nil {
			q.hdgstErrors.Add(1)
			return err
		}
	}
	if l.DataLen > 0 && int(l.DataOff) > hl {
		// Padding up to PDO (a host that aligns its data).
		if err := q.read(q.scratch[:int(l.DataOff)-hl], false); err != nil {
			return err
		}
	}
	switch h.Type {
	case wire.TypeCapsuleCmd:
		return q.onCapsule(hb[:hl], l)
	case wire.TypeH2CData:
		return q.onH2CData(hb[:hl], h, l)
	}
	// An ICReq after initialization.
	return &wire.FatalError{Type: h.Type, FES: wire.FESSequenceError, Reason: h.Type.String() + " after connection initialization"}
}

// readData reads n bytes of PDU data into b[:n] and its data digest, if
// the PDU carries one, and reports whether the digest was right.
func (q *ControllerQueue) readData(b []byte, l wire.Layout) (bool, error) {
	if err := q.readAs(b, false, true); err != nil {
		return false, err
	}
	if !l.DDGST {
		return true, nil
	}
	dg := q.scratch[:wire.DigestSize]
	if err := q.read(dg, false); err != nil {
		return false, err
	}
	ok := wire.GetDigest(dg) == wire.DataDigest(0, b)
	if !ok {
		q.ddgstErrors.Add(1)
	}
	return ok, nil
}

// takeContext waits for a free request context.
func (q *ControllerQueue) takeContext() (*Request, bool) {
	select {
	case i := <-q.free:
		return &q.reqs[i], true
	default:
	}
	// Every context is in use: the host has more commands outstanding
	// than its queue holds, or responses are being written. Stop reading
	// until one is free (the responses gathered go out first: their
	// contexts are freed once written).
	q.flush()
	select {
	case i := <-q.free:
		return &q.reqs[i], true
	case <-q.closing:
		return nil, false
	}
}

// onCapsule takes a CapsuleCmd (TCP 1.0 §3.6.2.4).
func (q *ControllerQueue) onCapsule(hdr []byte, l wire.Layout) error {
	if int(l.DataLen) > q.inline {
		// The PDU carries more in-capsule data than IOCCSZ allows.
		return &wire.FatalError{Type: wire.TypeCapsuleCmd, FES: wire.FESDataLimitExceeded, FEI: 4,
			Reason: fmt.Sprintf("%d bytes of in-capsule data, IOCCSZ allows %d", l.DataLen, q.inline)}
	}
	r, ok := q.takeContext()
	if !ok {
		return net.ErrClosed
	}
	r.reset()
	r.sqe = *wire.CapsuleSQE(hdr)
	r.active.Store(true)
	n := int(l.DataLen)
	digestOK := true
	if n > 0 {
		buf := r.buffer(n)
		var err error
		if digestOK, err = q.readData(buf, l); err != nil {
			return err
		}
	}
	if !digestOK {
		// TCP 1.0 §3.6.2.1: data digest error: the command fails with a
		// Transient Transport Error, the queue goes on.
		r.Complete(nvmeof.StatusTransientTransportError)
		return nil
	}
	sgl := r.sqe.SGL1()
	length := sgl.Length()
	switch {
	case length == 0:
		q.h.HandleCommand(r)
	case sgl.Type() == nvmeof.SGLTypeDataBlock && sgl.Subtype() == nvmeof.SGLSubtypeOffset:
		// In-capsule data (nvmet_tcp_map_data): write direction only,
		// inside the capsule.
		desc, err := r.sqe.DecodeSGL1()
		if err == nil {
			err = desc.CheckInCapsule(n)
		}
		if err != nil {
			r.Complete(nvmeof.StatusFromError(err))
			return nil
		}
		r.data = r.buf[desc.Addr : desc.Addr+uint64(desc.Length)]
		r.inCap = true
		q.h.HandleCommand(r)
	case sgl.Type() == nvmeof.SGLTypeTransportDataBlock:
		// Data moved by R2T/H2CData or C2HData.
		if n > 0 {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return nil
		}
		if int(length) > q.maxXfer {
			r.Complete(nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR)
			return nil
		}
		r.data = r.buffer(int(length))
		q.h.HandleCommand(r)
	default:
		r.Complete(nvmeof.StatusSGLInvalidType | nvmeof.StatusDNR)
	}
	return nil
}

// onH2CData takes data the host sends for an R2T (TCP 1.0 §3.6.2.6): it
// must name a command waiting for it by CID and TTAG and continue its
// transfer where it stopped, within MAXH2CDATA.
func (q *ControllerQueue) onH2CData(hdr []byte, h wire.Header, l wire.Layout) error {
	dh, _, err := wire.ParseDataHeader(hdr, true, q.d, 0)
	if err != nil {
		return err
	}
	tt := int(dh.TTag())
	if tt >= len(q.reqs) || !q.reqs[tt].r2t.Load() {
		return &wire.FatalError{Type: h.Type, FES: wire.FESInvalidHeaderField, FEI: 10, Reason: fmt.Sprintf("TTAG %d names no R2T", tt)}
	}
	r := &q.reqs[tt]
	if dh.CID() != r.sqe.CID() {
		return &wire.FatalError{Type: h.Type, FES: wire.FESInvalidHeaderField, FEI: 8, Reason: fmt.Sprintf("CID %#x, the R2T's is %#x", dh.CID(), r.sqe.CID())}
	}
	off, n := dh.Offset(), dh.Length()
	if n > q.maxH2C {
		return &wire.FatalError{Type: h.Type, FES: wire.FESDataLimitExceeded, Reason: fmt.Sprintf("DATAL %d > MAXH2CDATA %d", n, q.maxH2C)}
	}
	if off != r.rcvd || uint64(off)+uint64(n) > uint64(len(r.data)) {
		return &wire.FatalError{Type: h.Type, FES: wire.FESDataOutOfRange, Reason: fmt.Sprintf("DATAO %d DATAL %d: the R2T expects offset %d of %d bytes", off, n, r.rcvd, len(r.data))}
	}
	ok, err := q.readData(r.data[off:off+n], l)
	if err != nil {
		return err
	}
	r.rcvd += n
	if !ok {
		r.digestErr = true
	}
	if int(r.rcvd) < len(r.data) {
		return nil
	}
	r.r2t.Store(false)
	r.r2tTimer.Stop()
	if r.digestErr {
		q.h.DataReady(r, ErrDataDigest)
	} else {
		q.h.DataReady(r, nil)
	}
	return nil
}

// terminate sends a C2HTermReq for a fatal error in the host's PDU (the
// header in error, as far as it was read, goes along) and closes.
func (q *ControllerQueue) terminate(fe *wire.FatalError) {
	q.log.Info("nvme-tcp: host protocol error, closing queue", zap.Error(fe))
	hl := min(int(q.hb[2]), wire.MaxTermReqPLen-wire.TermReqHLen)
	if hl < wire.CommonHeaderSize {
		hl = wire.CommonHeaderSize
	}
	pdu := wire.AppendTermReq(nil, wire.TypeC2HTermReq, fe.FES, fe.FEI, q.hb[:hl])
	q.termSentFES.Store(uint32(fe.FES) + 1)
	q.pdusSent.Add(1)
	q.flush() // the responses of the commands before the error go first
	q.wmu.Lock()
	bufs := net.Buffers{pdu}
	_ = writeBuffers(q.conn, q.br.sock, &bufs, q.cfg.WriteTimeout)
	q.live.Store(false)
	_ = q.conn.Close()
	q.wmu.Unlock()
}

// write writes bufs as one writev (writeBuffers) under the write lock.
func (q *ControllerQueue) write(bufs *net.Buffers) error {
	q.wmu.Lock()
	defer q.wmu.Unlock()
	return q.writeLocked(bufs)
}

// writeLocked is write for a caller that holds wmu.
func (q *ControllerQueue) writeLocked(bufs *net.Buffers) error {
	if !q.live.Load() {
		return net.ErrClosed
	}
	q.writes.Add(1)
	if err := writeBuffers(q.conn, q.br.sock, bufs, q.cfg.WriteTimeout); err != nil {
		q.live.Store(false)
		_ = q.conn.Close()
		return err
	}
	return nil
}

// Request is one command being executed on a controller queue. It is valid
// from HandleCommand until Complete returns; the controller logic must
// complete every request exactly once.
type Request struct {
	q         *ControllerQueue
	index     int32
	sqe       nvmeof.SQE
	buf       []byte // the context's data buffer, kept across commands
	data      []byte
	inCap     bool
	result    uint64
	rcvd      uint32
	digestErr bool
	answered  bool
	active    atomic.Bool
	r2t       atomic.Bool // waiting for H2CData
	r2tTimer  *time.Timer // bounds the wait for H2CData (made once)

	// The response: a C2HData header (with its digest), the data, then
	// the data digest and the CapsuleResp PDU (with its digest) in out.
	c2h  [wire.DataHLen + wire.DigestSize]byte
	out  [2*wire.DigestSize + wire.CapsuleRespHLen]byte
	iov  [3][]byte
	bufs net.Buffers
}

func (r *Request) reset() {
	r.data, r.inCap, r.result, r.rcvd, r.digestErr, r.answered = nil, false, 0, 0, false, false
}

// buffer returns the context's buffer sized n, grown if need be.
func (r *Request) buffer(n int) []byte {
	if cap(r.buf) < n {
		r.buf = make([]byte, max(n, 4096))
	}
	r.buf = r.buf[:cap(r.buf)]
	return r.buf[:n]
}

// SQE is the command.
func (r *Request) SQE() *nvmeof.SQE { return &r.sqe }

// Index is the request's context number on its queue, in
// [0, QueueRequest.Contexts()).
func (r *Request) Index() int { return int(r.index) }

// Queue is the queue the command arrived on.
func (r *Request) Queue() *ControllerQueue { return r.q }

// Data is the command's data buffer, as long as its SGL says (nil when the
// command carries no data).
func (r *Request) Data() []byte { return r.data }

// SetResult sets completion DW0.
func (r *Request) SetResult(dw0 uint32) { r.result = r.result&^0xFFFFFFFF | uint64(dw0) }

// SetResult64 sets completion DW0 and DW1.
func (r *Request) SetResult64(v uint64) { r.result = v }

// FetchData gets a write-direction command's data from the host: an R2T
// for the whole transfer (TCP 1.0 §3.6.2.8; the host splits it into
// H2CData PDUs of at most MAXH2CDATA), or nothing for in-capsule data
// (DataReady is called at once).
func (r *Request) FetchData() {
	q := r.q
	if r.inCap || len(r.data) == 0 {
		q.h.DataReady(r, nil)
		return
	}
	r.rcvd = 0
	r.r2t.Store(true)
	// A host that never answers the R2T would hold the command, its
	// context and buffer: the PDU timeout bounds the wait for its data
	// (nvmet has no such bound; the Linux host answers at once).
	if r.r2tTimer == nil {
		r.r2tTimer = time.AfterFunc(q.cfg.PDUTimeout, r.r2tExpired)
	} else {
		r.r2tTimer.Reset(q.cfg.PDUTimeout)
	}
	h := wire.NewHeader(wire.TypeR2T, 0, q.d, 0, 0)
	wire.PutDataHeader(r.c2h[:], h, r.sqe.CID(), uint16(r.index), 0, uint32(len(r.data)))
	n := wire.DataHLen
	if q.d.Header {
		wire.PutDigest(r.c2h[n:], wire.HeaderDigest(r.c2h[:n]))
		n += wire.DigestSize
	}
	r.iov[0] = r.c2h[:n]
	r.bufs = r.iov[:1]
	q.pdusSent.Add(1)
	if err := q.write(&r.bufs); err != nil {
		// The connection is gone: QueueClosed follows; the command is
		// completed (released) by the handler.
		r.r2t.Store(false)
		q.h.DataReady(r, fmt.Errorf("nvme-tcp: R2T: %w", err))
	}
}

// r2tExpired ends the queue of an R2T still unanswered.
func (r *Request) r2tExpired() {
	if r.r2t.Load() {
		r.q.log.Info("nvme-tcp: R2T unanswered within the PDU timeout, closing queue", zap.Uint16("cid", r.sqe.CID()))
		r.q.Close()
	}
}

// Complete finishes the command with a status: for a successful
// controller-to-host command with data, a C2HData PDU with the data, then
// the CapsuleResp, in one writev. It may be called from any goroutine,
// once.
func (r *Request) Complete(st nvmeof.Status) {
	q := r.q
	if r.answered || !r.active.Load() {
		return
	}
	r.answered = true
	r.r2t.Store(false)
	flowOff := q.sq.FlowControlOff()
	sqhd := q.sq.Advance(q.size)
	k := 0
	n := 0
	if st == nvmeof.StatusSuccess && r.sqe.DataDirection() == nvmeof.DirControllerToHost && len(r.data) > 0 {
		// TCP 1.0 §3.6.2.7: one C2HData with all the data, LAST_PDU; the
		// CapsuleResp follows, unless SQ flow control is disabled and the
		// completion says nothing but success (DW0, DW1 zero): then the
		// C2HData's SUCCESS flag stands for it.
		flags := wire.FlagLastPDU
		success := flowOff && r.result == 0
		if success {
			flags |= wire.FlagSuccess
		}
		h := wire.NewHeader(wire.TypeC2HData, flags, q.d, uint32(len(r.data)), 0)
		wire.PutDataHeader(r.c2h[:], h, r.sqe.CID(), 0, 0, uint32(len(r.data)))
		hl := wire.DataHLen
		if q.d.Header {
			wire.PutDigest(r.c2h[hl:], wire.HeaderDigest(r.c2h[:hl]))
			hl += wire.DigestSize
		}
		r.iov[k] = r.c2h[:hl]
		r.iov[k+1] = r.data
		k += 2
		if q.d.Data {
			wire.PutDigest(r.out[:], wire.DataDigest(0, r.data))
			n = wire.DigestSize
		}
		if success {
			if n > 0 {
				r.iov[k] = r.out[:n]
				k++
			}
			q.pdusSent.Add(1)
			r.finish(k)
			return
		}
		q.pdusSent.Add(1) // the C2HData; the CapsuleResp below
	}
	n += r.putCapsuleResp(r.out[n:], sqhd, st)
	r.iov[k] = r.out[:n]
	k++
	q.pdusSent.Add(1)
	r.finish(k)
}

// Answer answers the command now with st, as Complete does for an error
// status (a CapsuleResp, no data goes to the host), but keeps the context
// and its data buffer for the caller: whoever still reads or fills Data()
// (a backend that has not returned) may go on until Release, which frees
// them. The host may reuse the command's CID at once; the context matches
// no H2CData (only a context in R2T does) and is not given to a new
// command before Release. It may be called from any goroutine, instead of
// Complete, once; Release must follow exactly once. It reports false, and
// does nothing, for a command answered already or waiting for the host's
// data (an R2T outstanding).
func (r *Request) Answer(st nvmeof.Status) bool {
	q := r.q
	if r.answered || !r.active.Load() || r.r2t.Load() {
		return false
	}
	r.answered = true
	n := r.putCapsuleResp(r.out[:], q.sq.Advance(q.size), st)
	// Written now, not gathered in the receive goroutine's batch: the
	// batch frees the contexts it writes, and this one stays held.
	r.iov[0] = r.out[:n]
	r.bufs = r.iov[:1]
	q.pdusSent.Add(1)
	_ = q.write(&r.bufs)
	r.iov = [3][]byte{}
	return true
}

// putCapsuleResp puts the command's CapsuleResp PDU (its CQE with sqhd and
// st, and the header digest if negotiated) at the start of b and returns
// its length.
func (r *Request) putCapsuleResp(b []byte, sqhd uint16, st nvmeof.Status) int {
	q := r.q
	wire.NewHeader(wire.TypeCapsuleResp, 0, q.d, 0, 0).Put(b)
	cqe := wire.CapsuleCQE(b)
	cqe.Complete(&r.sqe, q.qid, sqhd, uint32(r.result), st)
	cqe.SetDW1(uint32(r.result >> 32))
	n := wire.CapsuleRespHLen
	if q.d.Header {
		wire.PutDigest(b[n:], wire.HeaderDigest(b[:n]))
		n += wire.DigestSize
	}
	return n
}

// Release frees the context and data buffer of a request that Answer
// answered, once its owner no longer uses them (the backend returned). It
// is safe after the queue ended.
func (r *Request) Release() {
	// active first: a second Release after the context went back to the
	// pool must not read fields a new command's reset writes.
	if !r.active.Load() || !r.answered {
		return
	}
	r.release()
}

// finish writes the first k of r.iov in one writev and frees the context,
// or, while the receive goroutine gathers responses, adds them to its
// batch (flush writes it and frees the context).
func (r *Request) finish(k int) {
	q := r.q
	q.wmu.Lock()
	if q.batching {
		q.pending = append(q.pending, r.iov[:k]...)
		q.pendingReqs = append(q.pendingReqs, r.index)
		full := len(q.pendingReqs) >= maxPending
		q.wmu.Unlock()
		r.iov = [3][]byte{}
		if full {
			q.wmu.Lock()
			q.writePending()
			q.wmu.Unlock()
		}
		return
	}
	r.bufs = r.iov[:k]
	_ = q.writeLocked(&r.bufs)
	q.wmu.Unlock()
	r.release()
}

// release frees a request's context once its response is written.
func (r *Request) release() {
	r.iov = [3][]byte{}
	r.data = nil
	r.active.Store(false)
	r.q.free <- r.index
}

// maxPending bounds the responses a batch gathers before it is written:
// the first of them waits no longer than the time to handle that many
// PDUs that had already arrived.
const maxPending = 32

// startBatch makes responses completed from here on wait for flush (the
// receive goroutine has a PDU's first byte: it works through what has
// arrived before it waits again).
func (q *ControllerQueue) startBatch() {
	if q.batchOn {
		return
	}
	q.wmu.Lock()
	q.batching = true
	q.wmu.Unlock()
	q.batchOn = true
}

// flush ends the batch and writes the responses gathered (the receive
// goroutine, before it may wait for the host).
func (q *ControllerQueue) flush() {
	q.wmu.Lock()
	q.batching = false
	q.batchOn = false
	q.writePending()
	q.wmu.Unlock()
}

// writePending writes the gathered responses in one writev and frees their
// contexts; the caller holds wmu.
func (q *ControllerQueue) writePending() {
	if len(q.pendingReqs) == 0 {
		return
	}
	q.wbufs = q.pending
	_ = q.writeLocked(&q.wbufs)
	clear(q.pending)
	q.pending = q.pending[:0]
	for _, i := range q.pendingReqs {
		r := &q.reqs[i]
		r.data = nil
		r.active.Store(false)
		q.free <- i
	}
	q.pendingReqs = q.pendingReqs[:0]
}
