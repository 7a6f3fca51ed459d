package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/internal/tcpopt"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// Host side limits and defaults.
const (
	// hostCIDSlotBits leaves the upper 4 bits of a command identifier for
	// a generation counter, so a stale or forged completion is caught.
	hostCIDSlotBits = 12
	hostCIDSlotMask = 1<<hostCIDSlotBits - 1
	// DefaultHostQueueSize is the I/O queue size of a host queue when
	// HostConfig.QueueSize is 0 (nvme-tcp's default queue size).
	DefaultHostQueueSize = 128
	// hostReadBufferSize is the read-ahead buffer of a host queue: data
	// PDUs larger than it are read straight into the command's buffer.
	hostReadBufferSize = 32 << 10
	// sglTransportData is the SGL identifier of a transport data block
	// (type 5, subtype 0xA: data moved by C2HData or R2T/H2CData, TCP 1.0
	// §3.3.3; Linux nvme_tcp_set_sg_host_data).
	sglTransportData = uint8(nvmeof.SGLTypeTransportDataBlock)<<4 | 0xA
)

// TermReqError is a C2HTermReq the controller sent: it ended the queue
// for a fatal error it found in one of our PDUs (TCP 1.0 §3.6.2.10).
type TermReqError struct {
	FES wire.FES
	FEI uint32
}

func (e *TermReqError) Error() string {
	return fmt.Sprintf("nvme-tcp: the controller terminated the connection (C2HTermReq): %s (fei %d)", e.FES, e.FEI)
}

// HostConfig configures one host queue.
type HostConfig struct {
	// QID is the queue to open (0 = admin).
	QID uint16
	// QueueSize is the number of entries; QueueSize-1 commands may be
	// outstanding. Default: 32 for the admin queue, DefaultHostQueueSize.
	QueueSize int
	// InlineDataSize is the in-capsule data the controller accepts on the
	// queue (I/O queues: IOCCSZ×16−64 from Identify Controller). Default
	// for the admin queue: AdminInlineDataSize, as the Linux host (the
	// Fabrics Connect data travels in the capsule).
	InlineDataSize int
	// Digests are the header and data digests the ICReq asks for; the
	// controller may grant fewer.
	Digests wire.Digests
	// PDUTimeout bounds a PDU from the controller once its first byte has
	// arrived, and the ICResp (default DefaultTimeout). The wait for the
	// first byte of a PDU is bounded by the caller's command timeouts
	// (the host's keep-alive and I/O timeouts abort the queue).
	PDUTimeout time.Duration
	// WriteTimeout bounds each write to the controller (default
	// DefaultTimeout).
	WriteTimeout time.Duration
	// BusyPoll makes the queue's receive goroutine spin on non-blocking
	// reads for up to this long before it parks on the poller, as the
	// target's queues and the iWARP engine do (0: it sleeps at once).
	BusyPoll time.Duration
	// DirectMin is the smallest C2HData data read straight from the
	// socket into the command's buffer instead of through the read-ahead
	// buffer: 0 the default (DefaultDirectMin, or off with
	// NVMETD_RX_PLACEMENT=copy in the environment), negative off.
	DirectMin int
	// TCP are the socket options of the queue's connection (congestion
	// control, TCP_NOTSENT_LOWAT: internal/tcpopt, as the target's ports
	// and the iWARP engine take them), set before the ICReq. The zero
	// value keeps the kernel's defaults.
	TCP tcpopt.Options
	// Logger receives queue events.
	Logger *zap.Logger
}

// HostStats are counters of a host queue.
type HostStats struct {
	Completed        uint64 // commands completed (CapsuleResp or C2HData with SUCCESS)
	InCapsule        uint64 // commands sent with in-capsule data
	R2T              uint64 // R2Ts answered
	H2CData          uint64 // H2CData PDUs sent
	C2HData          uint64 // C2HData PDUs received
	Success          uint64 // commands completed by a C2HData with SUCCESS (no CapsuleResp)
	DataDigestErrors uint64 // C2HData whose data digest was wrong
	// DataCopied and DataDirect count the bytes of C2HData data copied out
	// of the read-ahead buffer and read straight from the socket into the
	// command's buffer (HostConfig.DirectMin).
	DataCopied, DataDirect uint64
	// WriteParks counts the writes that found the socket full and waited
	// for room; SpinYields the busy-poll spins the receive goroutine gave
	// up because a writer was waiting (HostConfig.BusyPoll: see pollConn).
	WriteParks, SpinYields uint64
}

type hostSlot struct {
	req   *nvmeof.HostRequest
	index int
	gen   uint8
	// Transfer state (the receive goroutine's once the capsule is out).
	c2hRecv  uint32 // C2HData bytes placed so far
	h2cSent  uint32 // data sent: in the capsule or for R2Ts
	ddgstErr bool   // a C2HData data digest was wrong

	// Write buffers, used under the queue's write lock only.
	cap  [wire.CapsuleCmdHLen + wire.DigestSize]byte
	h2c  [wire.DataHLen + wire.DigestSize]byte
	cdg  [wire.DigestSize]byte // capsule data digest
	hdg  [wire.DigestSize]byte // H2CData data digest
	iov  [4][]byte
	bufs net.Buffers
}

// HostQueue is the host side of one NVMe/TCP queue.
//
// Bounds: one goroutine reads the controller's PDUs. A PDU whose first
// byte has arrived must be complete within PDUTimeout; each write within
// WriteTimeout; the wait for a completion is the caller's (the host's
// command and keep-alive timeouts Abort the queue). Every PDU is checked
// against the command it names before a byte of its data is placed: a
// C2HData outside the command's buffer, an R2T beyond the command's data,
// an unknown CID, lengths that lie or a wrong header digest end the queue
// with an H2CTermReq (TCP 1.0 §3.6.2.9), never a write outside a buffer.
type HostQueue struct {
	qid    uint16
	size   int
	inline int
	cpda   int // the controller's data alignment (bytes), for data we send
	maxH2C uint32
	d      wire.Digests
	cfg    HostConfig
	log    *zap.Logger
	conn   net.Conn
	br     *rxReader
	doneCh chan struct{}

	wmu  perfcount.Mutex // one writer at a time; guards the slots' write buffers
	poll *pollConn       // the socket under br, read (busy polling for HostConfig.BusyPoll) and written through it, or nil

	mu        perfcount.Mutex
	stats     HostStats
	slots     []hostSlot
	free      []int
	sqTail    uint16
	sqHead    uint16
	sqFlowOff bool
	closed    bool
	failErr   error

	// Receive state (the receive goroutine's).
	hb      [wire.MaxTermReqPLen + wire.DigestSize]byte
	dl      bool
	scratch [256]byte
}

// zeroPad is the padding of PDU data to the controller's CPDA.
var zeroPad [(wire.MaxPDA + 1) * 4]byte

// Dial opens a queue to a controller: the TCP connection and the
// connection initialization (ICReq, ICResp; TCP 1.0 §3.3). The Fabrics
// Connect command is the caller's first command on it. ctx bounds the
// TCP connect and the ICResp (as does PDUTimeout).
func Dial(ctx context.Context, network, address string, cfg HostConfig) (*HostQueue, error) {
	if cfg.QueueSize == 0 {
		cfg.QueueSize = DefaultHostQueueSize
		if cfg.QID == 0 {
			cfg.QueueSize = nvmeof.AdminQueueDepth
		}
	}
	if cfg.QueueSize < 2 || cfg.QueueSize > MaxQueueSizeLimit {
		return nil, fmt.Errorf("nvme-tcp: queue size %d: want 2..%d", cfg.QueueSize, MaxQueueSizeLimit)
	}
	if cfg.QID == 0 && cfg.InlineDataSize == 0 {
		cfg.InlineDataSize = AdminInlineDataSize
	}
	if cfg.InlineDataSize < 0 || cfg.InlineDataSize > MaxInlineDataSize {
		return nil, fmt.Errorf("nvme-tcp: in-capsule data size %d: want 0..%d", cfg.InlineDataSize, MaxInlineDataSize)
	}
	defaults.Set(&cfg.PDUTimeout, DefaultTimeout)
	defaults.Set(&cfg.WriteTimeout, DefaultTimeout)
	defaults.Set(&cfg.Logger, zap.NewNop())
	if cfg.PDUTimeout < 0 || cfg.WriteTimeout < 0 || cfg.BusyPoll < 0 {
		return nil, errors.New("nvme-tcp: negative timeout or busy-poll time")
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("nvme-tcp: dial %s: %w", address, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if err := cfg.TCP.Apply(tc); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("nvme-tcp: %s: %w", address, err)
		}
	}
	var src io.Reader = conn
	var poll *pollConn
	if sc, ok := conn.(syscall.Conn); ok {
		if poll = newPollConn(sc, cfg.BusyPoll); poll != nil {
			src = poll
		}
	}
	q := &HostQueue{
		qid: cfg.QID, size: cfg.QueueSize, inline: cfg.InlineDataSize, cfg: cfg, conn: conn,
		br: newRxReader(src, poll, hostReadBufferSize, directMin(cfg.DirectMin)), poll: poll, doneCh: make(chan struct{}),
	}
	q.log = cfg.Logger.With(zap.String("traddr", address), zap.Uint16("qid", cfg.QID))
	if err := q.initialize(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("nvme-tcp: %s qid %d: %w", address, cfg.QID, err)
	}
	n := q.size - 1
	q.slots = make([]hostSlot, n)
	q.free = make([]int, 0, n)
	for i := n - 1; i >= 0; i-- {
		q.slots[i].index = i
		q.free = append(q.free, i)
	}
	go q.run()
	return q, nil
}

// initialize sends the ICReq and checks the ICResp (TCP 1.0 §3.6.2.2,
// §3.6.2.3), bounded by ctx and PDUTimeout.
func (q *HostQueue) initialize(ctx context.Context) error {
	dl := time.Now().Add(q.cfg.PDUTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	_ = q.conn.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = q.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	// HPDA 0: we take data at any offset; MAXR2T 0: one R2T outstanding
	// per command (0's based), as Linux.
	icreq := wire.NewICReq(0, q.cfg.Digests, 0)
	raceRelease()
	if _, err := q.conn.Write(icreq[:]); err != nil {
		return fmt.Errorf("ICReq: %w", err)
	}
	b := q.hb[:wire.ICSize]
	if err := q.br.ReadFull(b[:wire.CommonHeaderSize]); err != nil {
		return fmt.Errorf("ICResp: %w", err)
	}
	h, _ := wire.ParseHeader(b)
	if h.Type == wire.TypeC2HTermReq {
		return q.readTermReq(h)
	}
	if h.Type != wire.TypeICResp || h.PLen != wire.ICSize {
		fe := &wire.FatalError{Type: h.Type, FES: wire.FESInvalidHeaderField, Reason: fmt.Sprintf("%s (PLEN %d) where an ICResp is due", h.Type, h.PLen)}
		q.terminate(fe)
		return fe
	}
	if err := q.br.ReadFull(b[wire.CommonHeaderSize:]); err != nil {
		return fmt.Errorf("ICResp: %w", err)
	}
	resp, err := wire.ParseICResp(b, q.cfg.Digests)
	if err != nil {
		var fe *wire.FatalError
		if errors.As(err, &fe) {
			q.terminate(fe)
		}
		return err
	}
	q.d = resp.Digests()
	q.cpda = wire.PDA(resp.CPDA())
	q.maxH2C = resp.MaxH2CData()
	_ = q.conn.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// readTermReq reads the rest of a C2HTermReq whose common header is in
// q.hb and returns it as an error.
func (q *HostQueue) readTermReq(h wire.Header) error {
	if _, err := wire.Check(h, false, wire.Digests{}, 0); err != nil {
		return err
	}
	if err := q.read(q.hb[wire.CommonHeaderSize:h.PLen]); err != nil {
		return fmt.Errorf("C2HTermReq: %w", err)
	}
	t := (*wire.TermReq)(q.hb[:wire.TermReqHLen])
	return &TermReqError{FES: t.FES(), FEI: t.FEI()}
}

// QID is the queue identifier.
func (q *HostQueue) QID() uint16 { return q.qid }

// Size is the queue size.
func (q *HostQueue) Size() int { return q.size }

// Digests are the digests the controller granted.
func (q *HostQueue) Digests() wire.Digests { return q.d }

// MaxH2CData is the controller's MAXH2CDATA.
func (q *HostQueue) MaxH2CData() uint32 { return q.maxH2C }

// InlineDataSize is the in-capsule data size the queue uses.
func (q *HostQueue) InlineDataSize() int { return q.inline }

// LocalAddr is our address.
func (q *HostQueue) LocalAddr() net.Addr { return q.conn.LocalAddr() }

// Done is closed when the queue has failed or been closed and every
// outstanding command has been completed with an error.
func (q *HostQueue) Done() <-chan struct{} { return q.doneCh }

// Err is why the queue ended.
func (q *HostQueue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failErr
}

// Stats returns the queue's counters.
func (q *HostQueue) Stats() HostStats {
	q.mu.Lock()
	st := q.stats
	q.mu.Unlock()
	st.DataCopied, st.DataDirect = q.br.dataCopied.Load(), q.br.dataDirect.Load()
	if q.poll != nil {
		st.WriteParks, st.SpinYields = q.poll.writeParks.Load(), q.poll.spinYields.Load()
	}
	return st
}

// Close disconnects the queue and waits until its commands have ended.
func (q *HostQueue) Close() {
	q.Abort(errors.New("closed"))
	<-q.doneCh
}

// Abort closes the connection at once (as a lost connection would): the
// receive goroutine ends and completes every outstanding command with an
// error wrapping ErrQueueClosed and err.
func (q *HostQueue) Abort(err error) {
	q.mu.Lock()
	if q.failErr == nil {
		q.failErr = err
	}
	q.mu.Unlock()
	_ = q.conn.Close()
}

// Submit sends a command: a CapsuleCmd with the data in the capsule for a
// write of at most the in-capsule size, else a transport SGL, the data
// following by R2T/H2CData (writes) or C2HData (reads) straight from and
// into r.Data. The capsule and its data leave in one writev.
//
// A Submit that returns nil is followed by exactly one call of r.Done (with
// the completion, or with ErrQueueClosed when the connection ends first),
// possibly before Submit returns; a Submit that returns an error never
// calls r.Done, so the caller may send r again at once.
func (q *HostQueue) Submit(r *nvmeof.HostRequest) error {
	if r.Done == nil {
		return errors.New("nvme-tcp: submit: request without Done")
	}
	if uint64(len(r.Data)) > 1<<32-1 {
		return fmt.Errorf("nvme-tcp: %d bytes in one command", len(r.Data))
	}
	r.Err = nil
	r.CQE = nvmeof.CQE{}
	q.mu.Lock()
	if q.closed || q.failErr != nil {
		q.mu.Unlock()
		return nvmeof.ErrQueueClosed
	}
	next := q.sqTail + 1
	if int(next) == q.size {
		next = 0
	}
	if len(q.free) == 0 || !q.sqFlowOff && next == q.sqHead {
		q.mu.Unlock()
		return nvmeof.ErrQueueFull
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.sqTail = next
	s := &q.slots[i]
	s.gen++
	s.c2hRecv, s.h2cSent, s.ddgstErr = 0, 0, false
	inCap := r.Write && len(r.Data) > 0 && len(r.Data) <= q.inline
	if inCap {
		q.stats.InCapsule++
	}
	cid := uint16(s.gen&0xF)<<hostCIDSlotBits | uint16(i)
	q.mu.Unlock()

	r.SQE.SetCID(cid)
	sgl := r.SQE.SGL1()
	if inCap {
		sgl.SetInCapsule(0, uint32(len(r.Data)))
	} else {
		// A transport data block, also for no data (nvme_tcp_set_sg_null).
		*sgl = nvmeof.SGL{}
		sgl.SetIdentifier(sglTransportData)
		sgl.SetLength(uint32(len(r.Data)))
	}
	q.wmu.Lock()
	k := 0
	var dataLen uint32
	if inCap {
		dataLen = uint32(len(r.Data))
	}
	h := wire.NewHeader(wire.TypeCapsuleCmd, 0, q.d, dataLen, q.cpda)
	h.Put(s.cap[:])
	copy(s.cap[wire.CommonHeaderSize:], r.SQE[:])
	hl := wire.CapsuleCmdHLen
	if q.d.Header {
		wire.PutDigest(s.cap[hl:], wire.HeaderDigest(s.cap[:hl]))
		hl += wire.DigestSize
	}
	s.iov[k] = s.cap[:hl]
	k++
	if inCap {
		if pad := int(h.PDO) - hl; pad > 0 {
			s.iov[k] = zeroPad[:pad]
			k++
		}
		s.iov[k] = r.Data
		k++
		if q.d.Data {
			wire.PutDigest(s.cdg[:], wire.DataDigest(0, r.Data))
			s.iov[k] = s.cdg[:]
			k++
		}
		s.h2cSent = dataLen
	}
	// r is published only now, once Submit is done with it: from here
	// the receive goroutine may complete it (a response, or the end of
	// the connection) and the caller reuse it, even fail it over to
	// another queue, while this writev is still running. Submit reads or
	// writes no field of r after this.
	q.mu.Lock()
	if q.closed || q.failErr != nil {
		q.unclaim(s)
		q.mu.Unlock()
		q.wmu.Unlock()
		return nvmeof.ErrQueueClosed
	}
	s.req = r
	q.mu.Unlock()
	err := q.writeLocked(s, k)
	q.wmu.Unlock()
	if err != nil {
		q.mu.Lock()
		if q.closed || s.req != r {
			// The receive goroutine has ended and completes r (or has).
			q.mu.Unlock()
			return nil
		}
		s.req = nil
		q.unclaim(s)
		if q.failErr == nil {
			q.failErr = err
		}
		q.mu.Unlock()
		_ = q.conn.Close()
		return fmt.Errorf("%w: %w", nvmeof.ErrQueueClosed, err)
	}
	return nil
}

// unclaim gives back slot s, taken by a Submit that did not send it,
// under q.mu.
func (q *HostQueue) unclaim(s *hostSlot) {
	q.free = append(q.free, s.index)
	if q.sqTail == 0 {
		q.sqTail = uint16(q.size - 1)
	} else {
		q.sqTail--
	}
}

// writeLocked writes s.iov[:k] (writev: writeBuffers, which lets the
// busy-polling receive goroutine give way while the socket is full), under
// wmu, within the write timeout. A failed write is why the queue ends
// (Err) and closes the connection.
func (q *HostQueue) writeLocked(s *hostSlot, k int) error {
	s.bufs = s.iov[:k]
	err := writeBuffers(q.conn, q.poll, &s.bufs, q.cfg.WriteTimeout)
	s.iov = [4][]byte{}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("nvme-tcp: a write to the controller did not finish within %v: %w", q.cfg.WriteTimeout, err)
		}
		// Why the queue ends, before the receive goroutine sees the
		// connection closed under it.
		q.mu.Lock()
		if q.failErr == nil {
			q.failErr = err
		}
		q.mu.Unlock()
		_ = q.conn.Close()
	}
	return err
}

// Do submits r and waits for its completion (or ctx). It returns the NVMe
// status as an error (nvmeof.Status) or a transport error. Do is for
// occasional commands (admin); it allocates.
func (q *HostQueue) Do(ctx context.Context, r *nvmeof.HostRequest) error {
	done := make(chan struct{})
	prev := r.Done
	r.Done = func(*nvmeof.HostRequest) { close(done) }
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
		q.Abort(fmt.Errorf("nvme-tcp: command %s timed out: %w", nvmeof.OpcodeName(q.qid, &r.SQE), ctx.Err()))
		<-done
		return fmt.Errorf("nvme-tcp: %s: %w", nvmeof.OpcodeName(q.qid, &r.SQE), ctx.Err())
	}
}

// run is the receive goroutine: it reads PDUs until the connection ends,
// then completes every outstanding command with an error.
func (q *HostQueue) run() {
	err := q.receive()
	var fe *wire.FatalError
	if errors.As(err, &fe) {
		q.log.Info("nvme-tcp: controller protocol error, closing queue", zap.Error(fe))
		q.terminate(fe)
	}
	_ = q.conn.Close()
	q.mu.Lock()
	q.closed = true
	if q.failErr == nil {
		if err == nil {
			err = errors.New("the controller closed the connection")
		}
		q.failErr = err
	}
	cause := q.failErr
	var pending []*nvmeof.HostRequest
	for i := range q.slots {
		if r := q.slots[i].req; r != nil {
			q.slots[i].req = nil
			pending = append(pending, r)
		}
	}
	q.mu.Unlock()
	for _, r := range pending {
		r.Err = fmt.Errorf("%w: %w", nvmeof.ErrQueueClosed, cause)
		r.Done(r)
	}
	close(q.doneCh)
}

// terminate sends an H2CTermReq for a fatal error in the controller's PDU
// (with the header in error, as far as it was read) and closes.
func (q *HostQueue) terminate(fe *wire.FatalError) {
	hl := min(max(int(q.hb[2]), wire.CommonHeaderSize), wire.MaxTermReqPLen-wire.TermReqHLen)
	pdu := wire.AppendTermReq(nil, wire.TypeH2CTermReq, fe.FES, fe.FEI, q.hb[:hl])
	q.wmu.Lock()
	bufs := net.Buffers{pdu}
	_ = writeBuffers(q.conn, q.poll, &bufs, q.cfg.WriteTimeout)
	_ = q.conn.Close()
	q.wmu.Unlock()
}

// read fills b from the socket within the PDU deadline (set at the first
// byte of a PDU that is not all buffered).
func (q *HostQueue) read(b []byte) error {
	if !q.dl && q.br.Buffered() < len(b) {
		_ = q.conn.SetReadDeadline(time.Now().Add(q.cfg.PDUTimeout))
		q.dl = true
	}
	return q.stalled(q.br.ReadFull(b))
}

// readData fills b with PDU data as read does, large data straight from
// the socket (rxReader.ReadData).
func (q *HostQueue) readData(b []byte) error {
	if !q.dl && q.br.Buffered() < len(b) {
		_ = q.conn.SetReadDeadline(time.Now().Add(q.cfg.PDUTimeout))
		q.dl = true
	}
	return q.stalled(q.br.ReadData(b))
}

// stalled gives a read's deadline error its context.
func (q *HostQueue) stalled(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("nvme-tcp: a PDU from the controller stalled for %v: %w", q.cfg.PDUTimeout, err)
	}
	return err
}

// receive reads PDUs until the connection ends or the controller breaks
// the protocol (a *wire.FatalError: run answers it with an H2CTermReq).
func (q *HostQueue) receive() error {
	for {
		hb := q.hb[:]
		// The first byte waits as long as the controller may be quiet
		// (the host's command timeouts bound it); the rest of the PDU is
		// bounded by the PDU timeout.
		if err := q.br.WaitByte(); err != nil {
			if q.isClosed() {
				return nil // Abort: its error is the queue's
			}
			return err
		}
		if err := q.read(hb[:wire.CommonHeaderSize]); err != nil {
			return err
		}
		if err := q.pdu(); err != nil {
			return err
		}
		if q.dl {
			_ = q.conn.SetReadDeadline(time.Time{})
			q.dl = false
		}
	}
}

func (q *HostQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failErr != nil
}

// pdu handles one PDU whose common header is in q.hb.
func (q *HostQueue) pdu() error {
	hb := q.hb[:]
	h, _ := wire.ParseHeader(hb)
	if h.Type == wire.TypeC2HTermReq {
		return q.readTermReq(h)
	}
	l, err := wire.Check(h, false, q.d, 0)
	if err != nil {
		return err
	}
	hl := l.HeaderLen(h)
	if err := q.read(hb[wire.CommonHeaderSize:hl]); err != nil {
		return err
	}
	if l.HDGST {
		if err := wire.CheckHeaderDigest(hb[:hl], h); err != nil {
			return err
		}
	}
	if l.DataLen > 0 && int(l.DataOff) > hl {
		// Padding up to PDO.
		if err := q.read(q.scratch[:int(l.DataOff)-hl]); err != nil {
			return err
		}
	}
	switch h.Type {
	case wire.TypeCapsuleResp:
		return q.onResp(hb[:hl])
	case wire.TypeC2HData:
		return q.onC2HData(hb[:hl], h, l)
	case wire.TypeR2T:
		return q.onR2T(hb[:hl])
	}
	// An ICResp after initialization.
	return &wire.FatalError{Type: h.Type, FES: wire.FESSequenceError, Reason: h.Type.String() + " after connection initialization"}
}

// slotOf returns the slot of an outstanding command by CID, under q.mu.
func (q *HostQueue) slotOf(cid uint16) *hostSlot {
	i := int(cid & hostCIDSlotMask)
	if i >= len(q.slots) || q.slots[i].req == nil || uint16(q.slots[i].gen&0xF) != cid>>hostCIDSlotBits {
		return nil
	}
	return &q.slots[i]
}

// finish completes slot s with cqe, under q.mu, and returns its request
// (for Done, which the caller runs without the lock).
func (q *HostQueue) finish(s *hostSlot, cqe *nvmeof.CQE) *nvmeof.HostRequest {
	r := s.req
	r.CQE = *cqe
	if s.ddgstErr && r.CQE.Status() == nvmeof.StatusSuccess {
		// nvme_tcp_recv_ddgst: the data is not what the controller sent.
		r.CQE.SetStatus(nvmeof.StatusDataTransferError)
	}
	q.stats.Completed++
	s.req = nil
	q.free = append(q.free, s.index)
	return r
}

// onResp completes a command (TCP 1.0 §3.6.2.5).
func (q *HostQueue) onResp(hdr []byte) error {
	cqe := wire.CapsuleCQE(hdr)
	cid := cqe.CID()
	q.mu.Lock()
	s := q.slotOf(cid)
	if s == nil {
		q.mu.Unlock()
		// nvme_tcp_process_nvme_cqe: "got bad cqe.command_id".
		return &wire.FatalError{Type: wire.TypeCapsuleResp, FES: wire.FESInvalidHeaderField, FEI: wire.CommonHeaderSize + 12,
			Reason: fmt.Sprintf("completion for unknown command id %#x", cid)}
	}
	// Move the head forward only: completions may arrive in another order
	// than their SQHD values were taken.
	switch h := cqe.SQHead(); {
	case h == 0xFFFF:
		q.sqFlowOff = true
	case int(h) < q.size && q.ring(q.sqHead, h) <= q.ring(q.sqHead, q.sqTail):
		q.sqHead = h
	}
	r := q.finish(s, cqe)
	q.mu.Unlock()
	r.Done(r)
	return nil
}

func (q *HostQueue) ring(a, b uint16) int {
	d := int(b) - int(a)
	if d < 0 {
		d += q.size
	}
	return d
}

// onC2HData places read data in the command's buffer (TCP 1.0 §3.6.2.7):
// the range is checked against the buffer before a byte is read.
func (q *HostQueue) onC2HData(hdr []byte, h wire.Header, l wire.Layout) error {
	dh, _, err := wire.ParseDataHeader(hdr, false, q.d, 0)
	if err != nil {
		return err
	}
	cid, off, n := dh.CID(), dh.Offset(), dh.Length()
	q.mu.Lock()
	s := q.slotOf(cid)
	if s == nil {
		q.mu.Unlock()
		return &wire.FatalError{Type: h.Type, FES: wire.FESInvalidHeaderField, FEI: 8, Reason: fmt.Sprintf("C2HData for unknown command id %#x", cid)}
	}
	r := s.req
	if r.Write || len(r.Data) == 0 {
		q.mu.Unlock()
		return &wire.FatalError{Type: h.Type, FES: wire.FESInvalidHeaderField, FEI: 8, Reason: fmt.Sprintf("C2HData for command %#x, which reads no data", cid)}
	}
	if uint64(off)+uint64(n) > uint64(len(r.Data)) {
		q.mu.Unlock()
		return &wire.FatalError{Type: h.Type, FES: wire.FESDataOutOfRange, FEI: 12,
			Reason: fmt.Sprintf("C2HData %d+%d outside command %#x's %d bytes", off, n, cid, len(r.Data))}
	}
	if off != s.c2hRecv {
		// nvmet and SPDK send a command's data in order, without overlap:
		// the count of bytes placed is then what SUCCESS may complete.
		q.mu.Unlock()
		return &wire.FatalError{Type: h.Type, FES: wire.FESDataOutOfRange, FEI: 12,
			Reason: fmt.Sprintf("C2HData at offset %d for command %#x, %d bytes received so far", off, cid, s.c2hRecv)}
	}
	q.stats.C2HData++
	q.mu.Unlock()
	// The slot stays this command's while we read: only this goroutine
	// completes commands, and run completes the rest after receive.
	dst := r.Data[off : off+n]
	if err := q.readData(dst); err != nil {
		return err
	}
	if l.DDGST {
		dg := q.scratch[:wire.DigestSize]
		if err := q.read(dg); err != nil {
			return err
		}
		if wire.GetDigest(dg) != wire.DataDigest(0, dst) {
			q.mu.Lock()
			s.ddgstErr = true
			q.stats.DataDigestErrors++
			q.mu.Unlock()
		}
	}
	s.c2hRecv = off + n
	if h.Flags&wire.FlagSuccess == 0 {
		return nil
	}
	// TCP 1.0 §3.6.2.7: SUCCESS (with LAST_PDU, checked by the codec):
	// the command completed successfully and no CapsuleResp follows.
	if s.c2hRecv != uint32(len(r.Data)) {
		return &wire.FatalError{Type: h.Type, FES: wire.FESSequenceError, FEI: 1,
			Reason: fmt.Sprintf("SUCCESS after %d of command %#x's %d bytes", s.c2hRecv, cid, len(r.Data))}
	}
	var cqe nvmeof.CQE
	cqe.SetCID(cid)
	cqe.SetSQID(q.qid)
	q.mu.Lock()
	q.stats.Success++
	r = q.finish(s, &cqe)
	q.mu.Unlock()
	r.Done(r)
	return nil
}

// onR2T sends the data an R2T asks for (TCP 1.0 §3.6.2.8), in H2CData
// PDUs of at most MAXH2CDATA, the last with LAST_PDU (§3.6.2.6). The
// range must lie within the command's data and not go back over data
// already sent (nvme_tcp_handle_r2t).
func (q *HostQueue) onR2T(hdr []byte) error {
	dh, _, err := wire.ParseDataHeader(hdr, false, q.d, 0)
	if err != nil {
		return err
	}
	cid, ttag, off, n := dh.CID(), dh.TTag(), dh.Offset(), dh.Length()
	q.mu.Lock()
	s := q.slotOf(cid)
	if s == nil {
		q.mu.Unlock()
		return &wire.FatalError{Type: wire.TypeR2T, FES: wire.FESInvalidHeaderField, FEI: 8, Reason: fmt.Sprintf("R2T for unknown command id %#x", cid)}
	}
	r := s.req
	q.mu.Unlock()
	switch {
	case !r.Write || len(r.Data) == 0:
		return &wire.FatalError{Type: wire.TypeR2T, FES: wire.FESInvalidHeaderField, FEI: 8, Reason: fmt.Sprintf("R2T for command %#x, which writes no data", cid)}
	case uint64(off)+uint64(n) > uint64(len(r.Data)):
		return &wire.FatalError{Type: wire.TypeR2T, FES: wire.FESDataOutOfRange, FEI: 16,
			Reason: fmt.Sprintf("R2T %d+%d beyond command %#x's %d bytes", off, n, cid, len(r.Data))}
	}
	q.wmu.Lock()
	defer q.wmu.Unlock()
	if off < s.h2cSent {
		return &wire.FatalError{Type: wire.TypeR2T, FES: wire.FESDataOutOfRange, FEI: 12,
			Reason: fmt.Sprintf("R2T at offset %d for command %#x, %d bytes already sent", off, cid, s.h2cSent)}
	}
	end := off + n
	for off < end {
		c := min(end-off, q.maxH2C)
		var flags uint8
		if off+c == end {
			flags = wire.FlagLastPDU
		}
		h := wire.NewHeader(wire.TypeH2CData, flags, q.d, c, q.cpda)
		wire.PutDataHeader(s.h2c[:], h, cid, ttag, off, c)
		hl := wire.DataHLen
		if q.d.Header {
			wire.PutDigest(s.h2c[hl:], wire.HeaderDigest(s.h2c[:hl]))
			hl += wire.DigestSize
		}
		k := 0
		s.iov[k] = s.h2c[:hl]
		k++
		if pad := int(h.PDO) - hl; pad > 0 {
			s.iov[k] = zeroPad[:pad]
			k++
		}
		data := r.Data[off : off+c]
		s.iov[k] = data
		k++
		if q.d.Data {
			wire.PutDigest(s.hdg[:], wire.DataDigest(0, data))
			s.iov[k] = s.hdg[:]
			k++
		}
		if err := q.writeLocked(s, k); err != nil {
			return err
		}
		off += c
	}
	s.h2cSent = end
	q.mu.Lock()
	q.stats.R2T++
	q.stats.H2CData += uint64((n + q.maxH2C - 1) / q.maxH2C)
	q.mu.Unlock()
	return nil
}
