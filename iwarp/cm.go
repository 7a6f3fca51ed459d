package iwarp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/internal/admission"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// Listener accepts iWARP connections: it takes TCP connections, reads and
// checks their MPA requests, and hands them out as connection requests (as
// RDMA_CM_EVENT_CONNECT_REQUEST). With Config.Admission it caps what
// peers can make it hold (see Admission).
type Listener struct {
	ln     *net.TCPListener
	cfg    Config
	adm    *Admission
	reqs   chan *ConnRequest
	closed chan struct{}
	failed chan struct{} // closed when the accept loop died
	ferr   error         // why (set before failed is closed)
	once   sync.Once
	wg     sync.WaitGroup
	// acc takes the connections (retrying the accept errors of a flood,
	// shedding the backlog when descriptors run out) into adm.
	acc *admission.Acceptor
}

// ErrListenerFailed means the listener's accept loop stopped on an
// unexpected error; the error wraps the cause.
var ErrListenerFailed = errors.New("iwarp: listener failed")

// Listen listens on a TCP address ("tcp", "tcp4" or "tcp6").
func Listen(network, address string, cfg *Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), network, address)
	if err != nil {
		return nil, fmt.Errorf("iwarp: listen %s: %w", address, err)
	}
	ln := &Listener{
		ln:     l.(*net.TCPListener),
		cfg:    cfg.withDefaults(),
		reqs:   make(chan *ConnRequest, 64),
		closed: make(chan struct{}),
		failed: make(chan struct{}),
	}
	ln.adm = ln.cfg.Admission
	ln.acc = admission.NewAcceptor(ln.ln, ln.adm, ln.closed, ln.cfg.Logger, "iwarp")
	ln.wg.Add(1)
	go ln.acceptLoop()
	return ln, nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening. Requests not yet accepted are dropped.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.ln.Close()
	})
	l.wg.Wait()
	l.acc.Close()
	for {
		select {
		case r := <-l.reqs:
			r.drop()
		default:
			return err
		}
	}
}

// Accept waits for the next connection request. It fails with ErrClosed
// after Close, and with an error wrapping ErrListenerFailed if the accept
// loop died (the caller may listen again).
func (l *Listener) Accept(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-l.failed:
		return nil, fmt.Errorf("%w: %w", ErrListenerFailed, l.ferr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, ent, err := l.acc.Accept()
		if errors.Is(err, admission.ErrClosed) {
			return
		}
		if err != nil {
			l.ferr = err
			close(l.failed)
			return
		}
		l.wg.Add(1)
		go l.handshake(c, ent)
	}
}

// handshake reads the MPA request of a new connection.
func (l *Listener) handshake(c *net.TCPConn, ent *admission.Ticket) {
	defer l.wg.Done()
	_ = c.SetNoDelay(true)
	deadline := time.Now().Add(l.cfg.ConnectTimeout)
	_ = c.SetDeadline(deadline)
	req, err := readMPAFrame(c, l.cfg.MaxPrivateData)
	if err == nil {
		err = checkRequest(&req)
	}
	if err == nil {
		err = noTrailingBytes(c)
	}
	if err != nil {
		var me *mpaError
		if errors.As(err, &me) && me.reject {
			rep := rejectReply(&req, nil)
			_, _ = c.Write(rep.Append(nil))
		}
		l.cfg.Logger.Debug("iwarp: MPA request refused", zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
		c.Close()
		ent.Release()
		return
	}
	r := &ConnRequest{
		PrivateData: req.PrivateData,
		PeerIRD:     int(req.IRD),
		PeerORD:     int(req.ORD),
		Revision:    req.Revision,
		Enhanced:    req.HasEnhancedHeader(),
		CRC:         req.CRC,
		PeerToPeer:  req.P2P,
		LocalAddr:   c.LocalAddr(),
		RemoteAddr:  c.RemoteAddr(),
		Deadline:    deadline,
		conn:        c,
		req:         req,
		cfg:         &l.cfg,
		adm:         ent,
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.reqs <- r:
	case <-l.closed:
		r.drop()
	case <-t.C:
		l.cfg.Logger.Debug("iwarp: connection request not taken in time", zap.Stringer("remote", c.RemoteAddr()))
		r.drop()
	}
}

// readMPAFrame reads exactly one MPA frame (RFC 5044 §7.1) and no byte
// more: siw's peer may not send anything behind it.
func readMPAFrame(c net.Conn, maxPD int) (wire.MPAFrame, error) {
	var hdr wire.MPAHeader
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return wire.MPAFrame{}, fmt.Errorf("mpa: reading frame header from %s: %w", c.RemoteAddr(), err)
	}
	if !hdr.IsRequest() && !hdr.IsReply() {
		return wire.MPAFrame{}, &mpaError{msg: fmt.Sprintf("bad key %q from %s", hdr[:16], c.RemoteAddr()), cause: wire.CauseLLPInvalidRequest, term: true}
	}
	n := hdr.PrivateDataLen()
	if n > maxPD {
		return wire.MPAFrame{}, &mpaError{msg: fmt.Sprintf("private data of %d bytes from %s, limit %d", n, c.RemoteAddr(), maxPD), cause: wire.CauseLLPInvalidRequest, term: true}
	}
	buf := make([]byte, wire.MPAHeaderLen+n)
	copy(buf, hdr[:])
	if _, err := io.ReadFull(c, buf[wire.MPAHeaderLen:]); err != nil {
		return wire.MPAFrame{}, fmt.Errorf("mpa: reading %d bytes of private data from %s: %w", n, c.RemoteAddr(), err)
	}
	f, _, err := wire.ParseMPAFrame(buf, maxPD)
	if err != nil {
		return f, &mpaError{msg: fmt.Sprintf("from %s: %v", c.RemoteAddr(), err), cause: wire.CauseLLPInvalidRequest, term: true}
	}
	return f, nil
}

// noTrailingBytes fails if the peer already sent bytes behind its MPA frame
// (RFC 5044 §7.1.2; siw peeks the same way and drops such connections).
func noTrailingBytes(c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var perr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, perr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true
	})
	if err != nil {
		return err
	}
	if perr == nil && n > 0 {
		return &mpaError{msg: fmt.Sprintf("%s sent data behind its MPA frame", c.RemoteAddr())}
	}
	return nil
}

// ConnRequest is an incoming connection whose MPA request has arrived; the
// ULP accepts it (with reply private data) or rejects it.
type ConnRequest struct {
	// PrivateData is the ULP private data of the request (after the MPA v2
	// header).
	PrivateData []byte
	// PeerIRD and PeerORD are the initiator's IRD/ORD (MPA v2; 0 for v1).
	PeerIRD, PeerORD int
	// Revision is the request's MPA revision; Enhanced reports the RFC
	// 6581 header.
	Revision uint8
	Enhanced bool
	// CRC reports that the initiator asked for CRC.
	CRC bool
	// PeerToPeer reports that the initiator asked for RFC 6581 P2P mode.
	PeerToPeer            bool
	LocalAddr, RemoteAddr net.Addr
	// Deadline is when the connection is dropped if neither Accept nor
	// Reject has been called.
	Deadline time.Time

	conn *net.TCPConn
	req  wire.MPAFrame
	cfg  *Config
	adm  *admission.Ticket
	mu   sync.Mutex
	done bool
}

// drop closes a request nobody answered.
func (r *ConnRequest) drop() {
	if r.take() == nil {
		r.conn.Close()
		r.adm.Release()
	}
}

func (r *ConnRequest) take() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return fmt.Errorf("%w: connection request already answered", ErrClosed)
	}
	r.done = true
	return nil
}

// Accept answers the request with an MPA reply carrying privateData and
// starts qp (idle, with its receives posted) on the connection.
func (r *ConnRequest) Accept(qp *QP, privateData []byte) error {
	if err := r.take(); err != nil {
		return err
	}
	fail := func(err error) error {
		r.conn.Close()
		r.adm.Release()
		return err
	}
	rep, neg := respond(r.cfg, &r.req, qp.wantIRD, qp.wantORD, r.cfg.MaxIRDORD, privateData)
	if err := rep.Validate(); err != nil {
		return fail(err)
	}
	if rep.PrivateDataLen() > r.cfg.MaxPrivateData {
		return fail(fmt.Errorf("iwarp: accept: %d bytes of private data, limit %d", rep.PrivateDataLen(), r.cfg.MaxPrivateData))
	}
	// The reply goes out with the connection's MPA deadline still set.
	if _, err := r.conn.Write(rep.Append(nil)); err != nil {
		return fail(fmt.Errorf("mpa: reply to %s: %w", r.RemoteAddr, err))
	}
	_ = r.conn.SetDeadline(time.Time{})
	// The QP owns the admission entry from here (it releases it when it
	// ends); an eviction now fails the QP.
	qp.mu.Lock()
	qp.adm = r.adm
	qp.mu.Unlock()
	r.adm.Attach(qp.fail)
	qp.mpaRequest, qp.mpaReply = r.req.Append(nil), rep.Append(nil)
	if err := qp.start(r.conn, r.cfg, neg, true, r.PrivateData); err != nil {
		return fail(err)
	}
	r.cfg.Logger.Debug("iwarp: accepted", zap.Stringer("remote", r.RemoteAddr), zap.Int("ird", neg.ird), zap.Int("ord", neg.ord), zap.Bool("crc", neg.crc), zap.Bool("p2p", neg.p2p))
	return nil
}

// Reject answers the request with an MPA reject reply carrying privateData
// and closes the connection.
func (r *ConnRequest) Reject(privateData []byte) error {
	if err := r.take(); err != nil {
		return err
	}
	defer r.adm.Release()
	defer r.conn.Close()
	rep := rejectReply(&r.req, privateData)
	if rep.PrivateDataLen() > r.cfg.MaxPrivateData {
		return fmt.Errorf("iwarp: reject: %d bytes of private data, limit %d", rep.PrivateDataLen(), r.cfg.MaxPrivateData)
	}
	_, err := r.conn.Write(rep.Append(nil))
	return err
}

// Dial connects qp (idle, with its receives posted) to a listening peer,
// sending privateData in the MPA request. The reply's private data is
// available from qp.PeerPrivateData. A rejection returns a *RejectError.
func Dial(ctx context.Context, network, address string, qp *QP, privateData []byte, cfg *Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c := cfg.withDefaults()
	ird, ord := min(qp.wantIRD, c.MaxIRDORD), min(qp.wantORD, c.MaxIRDORD)
	req := buildRequest(&c, ird, ord, privateData)
	if err := req.Validate(); err != nil {
		return err
	}
	if req.PrivateDataLen() > c.MaxPrivateData {
		return fmt.Errorf("iwarp: dial: %d bytes of private data, limit %d", req.PrivateDataLen(), c.MaxPrivateData)
	}
	ctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return fmt.Errorf("iwarp: dial %s: %w", address, err)
	}
	conn := nc.(*net.TCPConn)
	_ = conn.SetNoDelay(true)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) error {
		var me *mpaError
		if errors.As(err, &me) && me.term {
			sendBareTerminate(conn, me.cause)
		}
		conn.Close()
		if ctx.Err() != nil && !errors.As(err, new(*RejectError)) {
			return fmt.Errorf("iwarp: dial %s: %w (%v)", address, ctx.Err(), err)
		}
		return fmt.Errorf("iwarp: dial %s: %w", address, err)
	}
	if _, err := conn.Write(req.Append(nil)); err != nil {
		return fail(fmt.Errorf("mpa: sending request: %w", err))
	}
	rep, err := readMPAFrame(conn, c.MaxPrivateData)
	if err != nil {
		return fail(err)
	}
	neg, err := checkReply(&c, &req, &rep, ird, ord, c.MaxIRDORD)
	if err != nil {
		return fail(err)
	}
	if err := noTrailingBytes(conn); err != nil {
		return fail(err)
	}
	if !stop() {
		return fail(ctx.Err())
	}
	_ = conn.SetDeadline(time.Time{})
	qp.mpaRequest, qp.mpaReply = req.Append(nil), rep.Append(nil)
	if err := qp.start(conn, &c, neg, false, rep.PrivateData); err != nil {
		conn.Close()
		return err
	}
	c.Logger.Debug("iwarp: connected", zap.String("remote", address), zap.Int("ird", neg.ird), zap.Int("ord", neg.ord), zap.Bool("crc", neg.crc), zap.Bool("p2p", neg.p2p))
	return nil
}

// sendBareTerminate sends a Terminate without header information right
// after the MPA exchange failed on the initiator's side (RFC 6581 §7 and
// siw's insufficient-IRD / no-matching-RTR cases).
func sendBareTerminate(c net.Conn, cause wire.Cause) {
	t := wire.Terminate{Cause: cause}
	p := t.AppendPayload(nil)
	fr := make([]byte, wire.UntaggedHeaderLen, 64)
	wire.PutUntaggedHeader(fr, wire.OpTerminate, true, 0, wire.QNTerminate, 1, 0, len(p))
	fr = append(fr, p...)
	fr = append(fr, make([]byte, wire.PadLen(len(fr)-wire.FPDULenFieldLen)+wire.CRCLen)...)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(fr)
}
