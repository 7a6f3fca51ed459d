// Package tcp is the NVMe/TCP transport binding (NVM Express TCP Transport
// Specification 1.0): the controller side of a queue over a TCP connection.
// The PDU codecs are in nvmeof/tcp/wire; this package does the I/O.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/admission"
	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/internal/tcpopt"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// Sizes and defaults of the controller side.
const (
	// DefaultInlineDataSize is nvmet-tcp's default in-capsule data size of
	// I/O queues (NVMET_TCP_DEF_INLINE_DATA_SIZE: 4 pages).
	DefaultInlineDataSize = 16 << 10
	// MaxInlineDataSize bounds in-capsule data.
	MaxInlineDataSize = 128 << 10
	// AdminInlineDataSize is the in-capsule data the Linux host sends on an
	// admin queue (NVME_TCP_ADMIN_CCSZ: 8 KiB), whatever IOCCSZ says.
	AdminInlineDataSize = 8 << 10
	// DefaultMaxQueueSize is nvmet's default I/O queue size limit.
	DefaultMaxQueueSize = 128
	// MaxQueueSizeLimit is the largest queue size we accept at all.
	MaxQueueSizeLimit = 1024
	// DefaultMaxTransferSize is nvmet's MDTS with 4 KiB pages: 1 MiB.
	DefaultMaxTransferSize = 1 << 20
	// DefaultMaxH2CData is the MAXH2CDATA we report: the most data of one
	// H2CData PDU.
	DefaultMaxH2CData = 128 << 10
	// DefaultTimeout is the default of the connect, PDU and write timeouts.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxPending is the default number of connections between the
	// TCP accept and their first command.
	DefaultMaxPending = 128
	// readBufferSize is the read-ahead buffer of a queue's socket.
	readBufferSize = 32 << 10
)

// Config configures the controller side of an NVMe/TCP port.
type Config struct {
	// InlineDataSize is the in-capsule data accepted on an I/O queue's
	// command (report IOCCSZ from it); default DefaultInlineDataSize.
	InlineDataSize int
	// MaxQueueSize is the largest I/O queue (SQSIZE+1) accepted.
	MaxQueueSize int
	// MaxTransferSize is the largest data transfer of one command, a power
	// of two ≥ 4 KiB (report it as MDTS).
	MaxTransferSize int
	// MaxH2CData is the MAXH2CDATA of ICResp (≥ 4096).
	MaxH2CData int
	// NoHeaderDigest and NoDataDigest refuse the digests a host asks for
	// (by default we grant what it asks, as nvmet does).
	NoHeaderDigest, NoDataDigest bool
	// ConnectTimeout bounds the time from the TCP accept to the queue's
	// admission (ICReq, ICResp, Connect and, with authentication, until
	// the controller admits the connection).
	ConnectTimeout time.Duration
	// PDUTimeout bounds a PDU once its first bytes arrived.
	PDUTimeout time.Duration
	// WriteTimeout bounds each write to the host.
	WriteTimeout time.Duration
	// Admission caps the connections of the listener as it caps those of
	// the iWARP listeners (internal/admission): pending ones (from the TCP
	// accept until the controller admits the queue) in all and per remote
	// address, with the oldest closed to make room, and all connections
	// together; one Admission may serve a daemon's ports of both
	// transports. Nil: a private one with MaxPending (in all and per
	// address) and ConnectTimeout.
	Admission *admission.Admission
	// MaxPending bounds the connections not yet admitted when Admission
	// is nil.
	MaxPending int
	// BusyPoll makes a queue's receive loop spin on non-blocking reads for
	// up to this long before it parks, as transport.busy_poll does for the
	// iWARP engine (default 0: off).
	BusyPoll time.Duration
	// DirectMin is the smallest PDU data (H2CData, in-capsule) read
	// straight from the socket into the command's buffer instead of
	// through the read-ahead buffer: 0 the default (DefaultDirectMin, or
	// off with NVMETD_RX_PLACEMENT=copy in the environment), negative off.
	DirectMin int
	// TCP are the socket options of each accepted connection (congestion
	// control, TCP_NOTSENT_LOWAT), the same as the iWARP ports'
	// (iwarp.Config.TCP, one type: internal/tcpopt); set before the ICReq
	// is read. The zero value keeps the kernel's defaults.
	TCP tcpopt.Options
	// Logger receives queue events.
	Logger *zap.Logger
}

func (c *Config) withDefaults() Config {
	d := *c
	defaults.Set(&d.InlineDataSize, DefaultInlineDataSize)
	defaults.Set(&d.MaxQueueSize, DefaultMaxQueueSize)
	defaults.Set(&d.MaxTransferSize, DefaultMaxTransferSize)
	defaults.Set(&d.MaxH2CData, DefaultMaxH2CData)
	defaults.Set(&d.ConnectTimeout, DefaultTimeout)
	defaults.Set(&d.PDUTimeout, DefaultTimeout)
	defaults.Set(&d.WriteTimeout, DefaultTimeout)
	defaults.Set(&d.MaxPending, DefaultMaxPending)
	defaults.Set(&d.Logger, zap.NewNop())
	return d
}

// Validate reports the first setting out of range, naming it.
func (c *Config) Validate() error {
	d := c.withDefaults()
	switch {
	case d.InlineDataSize < 0 || d.InlineDataSize > MaxInlineDataSize:
		return fmt.Errorf("nvme-tcp: inline data size %d: want 0..%d", d.InlineDataSize, MaxInlineDataSize)
	case d.MaxQueueSize < 2 || d.MaxQueueSize > MaxQueueSizeLimit:
		return fmt.Errorf("nvme-tcp: max queue size %d: want 2..%d", d.MaxQueueSize, MaxQueueSizeLimit)
	case d.MaxTransferSize < 4096 || d.MaxTransferSize&(d.MaxTransferSize-1) != 0 || d.MaxTransferSize > 16<<20:
		return fmt.Errorf("nvme-tcp: max transfer size %d: want a power of two from 4 KiB to 16 MiB", d.MaxTransferSize)
	case d.MaxH2CData < wire.MinMaxH2CData:
		return fmt.Errorf("nvme-tcp: MAXH2CDATA %d: want at least %d", d.MaxH2CData, wire.MinMaxH2CData)
	case d.ConnectTimeout < 0 || d.PDUTimeout < 0 || d.WriteTimeout < 0 || d.MaxPending < 0 || d.BusyPoll < 0:
		return errors.New("nvme-tcp: negative timeout or limit")
	}
	if err := d.TCP.Validate(); err != nil {
		return fmt.Errorf("nvme-tcp: %w", err)
	}
	return nil
}

// Listener accepts NVMe/TCP queue connections on one address. Each
// connection enters the Admission, is initialized (ICReq, ICResp) and its
// first command capsule awaited on a goroutine of its own, within
// ConnectTimeout; Accept returns the connections that got that far.
type Listener struct {
	ln     *net.TCPListener
	cfg    Config
	adm    *admission.Admission
	ownAdm bool
	acc    *admission.Acceptor
	reqs   chan *QueueRequest
	closed chan struct{}
	once   sync.Once
	errMu  sync.Mutex
	err    error
	wg     sync.WaitGroup
	// initializing are the connections not yet handed to Accept: Close
	// closes them.
	initializing map[net.Conn]struct{}
}

// Listen listens for queue connections ("tcp", "tcp4" or "tcp6").
func Listen(network, address string, cfg Config) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("nvme-tcp: listen: %w", err)
	}
	c := cfg.withDefaults()
	l := &Listener{ln: ln.(*net.TCPListener), cfg: c, adm: c.Admission, reqs: make(chan *QueueRequest), closed: make(chan struct{}),
		initializing: map[net.Conn]struct{}{}}
	if l.adm == nil {
		l.adm = admission.New(admission.Config{MaxPending: c.MaxPending, MaxPendingPerAddr: c.MaxPending, PendingTimeout: c.ConnectTimeout}, c.Logger)
		l.ownAdm = true
	}
	l.acc = admission.NewAcceptor(l.ln, l.adm, l.closed, c.Logger, "nvme-tcp")
	l.wg.Add(1)
	go l.loop()
	return l, nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening; queues already accepted go on, connections still
// initializing are closed.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.ln.Close()
	})
	l.errMu.Lock()
	for c := range l.initializing {
		_ = c.Close()
	}
	l.errMu.Unlock()
	l.wg.Wait()
	l.acc.Close()
	if l.ownAdm {
		l.adm.Close()
	}
	return err
}

func (l *Listener) loop() {
	defer l.wg.Done()
	for {
		c, t, err := l.acc.Accept()
		if errors.Is(err, admission.ErrClosed) {
			return
		}
		if err != nil {
			l.errMu.Lock()
			l.err = err
			l.errMu.Unlock()
			l.once.Do(func() { close(l.closed); _ = l.ln.Close() })
			return
		}
		l.errMu.Lock()
		l.initializing[c] = struct{}{}
		l.errMu.Unlock()
		select {
		case <-l.closed: // Close may have missed it
			_ = c.Close()
		default:
		}
		l.wg.Add(1)
		go l.initialize(c, t)
	}
}

// Accept waits for the next queue connection whose first command arrived.
func (l *Listener) Accept(ctx context.Context) (*QueueRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		l.errMu.Lock()
		defer l.errMu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// initialize runs connection initialization (TCP 1.0 §3.3): ICReq within
// ConnectTimeout, ICResp, then waits for the first capsule, whose SQE (a
// Connect) says which queue the host opens.
func (l *Listener) initialize(c net.Conn, t *admission.Ticket) {
	defer l.wg.Done()
	handed := false
	defer func() {
		l.errMu.Lock()
		delete(l.initializing, c)
		l.errMu.Unlock()
		if !handed {
			// Every way out but Accept's closed the connection.
			t.Release()
		}
	}()
	cfg := &l.cfg
	log := cfg.Logger.With(zap.Stringer("remote", c.RemoteAddr()))
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		// Probed when the configuration was taken (target), so a refusal
		// here is the kernel's change of mind (a module unloaded): the
		// connection is not served without its options.
		if err := cfg.TCP.Apply(tc); err != nil {
			log.Warn("nvme-tcp: socket options refused; connection closed", zap.Error(err))
			_ = c.Close()
			return
		}
	}
	// The deadline runs until the controller admits the queue.
	_ = c.SetDeadline(time.Now().Add(cfg.ConnectTimeout))
	var src io.Reader = c
	var sock *pollConn
	if sc, ok := c.(syscall.Conn); ok {
		if sock = newPollConn(sc, cfg.BusyPoll); sock != nil {
			src = sock
		}
	}
	br := newRxReader(src, sock, readBufferSize, directMin(cfg.DirectMin))
	var b [wire.ICSize]byte
	if err := br.ReadFull(b[:wire.CommonHeaderSize]); err != nil {
		log.Debug("nvme-tcp: no ICReq", zap.Error(err))
		_ = c.Close()
		return
	}
	h, _ := wire.ParseHeader(b[:])
	if h.Type != wire.TypeICReq {
		terminate(c, &wire.FatalError{Type: h.Type, FES: wire.FESSequenceError, Reason: fmt.Sprintf("%s where an ICReq is due", h.Type)}, b[:wire.CommonHeaderSize], log)
		return
	}
	if _, err := wire.Check(h, true, wire.Digests{}, 0); err != nil {
		terminate(c, err, b[:wire.CommonHeaderSize], log)
		return
	}
	if err := br.ReadFull(b[wire.CommonHeaderSize:]); err != nil {
		log.Debug("nvme-tcp: ICReq cut short", zap.Error(err))
		_ = c.Close()
		return
	}
	icreq, err := wire.ParseICReq(b[:])
	if err != nil {
		terminate(c, err, b[:], log)
		return
	}
	d := icreq.Digests()
	d.Header = d.Header && !cfg.NoHeaderDigest
	d.Data = d.Data && !cfg.NoDataDigest
	// CPDA 0: no alignment asked of the host's data.
	resp := wire.NewICResp(0, d, uint32(cfg.MaxH2CData))
	if _, err := c.Write(resp[:]); err != nil {
		log.Debug("nvme-tcp: ICResp", zap.Error(err))
		_ = c.Close()
		return
	}
	// The first capsule: a Connect names the queue and its size (what the
	// RDMA CM private data carries on NVMe/RDMA). Anything else goes to
	// the controller as a command on an admin queue, which refuses it.
	qid, size := uint16(0), nvmeof.AdminQueueDepth
	first, err := br.Peek(wire.CapsuleCmdHLen)
	if err != nil {
		log.Debug("nvme-tcp: no command after ICResp", zap.Error(err))
		_ = c.Close()
		return
	}
	if wire.PDUType(first[0]) == wire.TypeCapsuleCmd {
		sqe := wire.CapsuleSQE(first)
		if sqe.IsFabrics() && sqe.FCType() == nvmeof.FCTypeConnect {
			cmd := sqe.ConnectCmd()
			qid = cmd.QID()
			if qid != 0 {
				size = min(int(cmd.SQSize())+1, cfg.MaxQueueSize)
			}
		}
	}
	r := &QueueRequest{QID: qid, size: size, RemoteAddr: c.RemoteAddr(), LocalAddr: c.LocalAddr(),
		Digests: d, MaxR2T: icreq.MaxR2T(), conn: c, br: br, src: src, cfg: cfg, ticket: t}
	select {
	case l.reqs <- r:
		handed = true
	case <-l.closed:
		_ = c.Close()
	}
}

// terminate answers a fatal error of a host's PDU with a C2HTermReq and
// closes the connection (TCP 1.0 §3.6.2.9).
func terminate(c net.Conn, err error, hdr []byte, log *zap.Logger) {
	var fe *wire.FatalError
	if errors.As(err, &fe) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(wire.AppendTermReq(nil, wire.TypeC2HTermReq, fe.FES, fe.FEI, hdr))
	}
	log.Info("nvme-tcp: host protocol error, closing queue", zap.Error(err))
	_ = c.Close()
}

// QueueRequest is a host's connection, initialized, whose first command
// capsule has arrived (not yet consumed).
type QueueRequest struct {
	// QID is the queue the first command (a Connect) names; 0 if it is no
	// Connect.
	QID                   uint16
	RemoteAddr, LocalAddr net.Addr
	// Digests are the digests in use on the queue.
	Digests wire.Digests
	// MaxR2T is the host's MAXR2T (0's based).
	MaxR2T uint32
	size   int
	conn   net.Conn
	br     *rxReader
	src    io.Reader // what br reads: the connection, or a pollConn of it
	cfg    *Config
	ticket *admission.Ticket // the connection's place in the Admission
}

// Size is the queue size: what the Connect asks for (SQSIZE+1), capped at
// MaxQueueSize for an I/O queue; the admin queue depth for an admin queue.
func (r *QueueRequest) Size() int { return r.size }

// Contexts is the number of request contexts of the queue: the range of
// Request.Index.
func (r *QueueRequest) Contexts() int { return r.size }

// Reject closes the connection.
func (r *QueueRequest) Reject() error {
	err := r.conn.Close()
	r.ticket.Release()
	return err
}
