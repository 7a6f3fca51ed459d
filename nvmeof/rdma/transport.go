package rdma

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/admission"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// This file is the transport's configuration and errors as the layers above
// (target, initiator, cmd) see them: they speak NVMe/RDMA, and the iWARP
// engine underneath is this package's business alone.

// CRCPolicy says whether MPA CRCs (RFC 5044 §4.4) are asked for. CRC is
// used in both directions when either side asks for it (RFC 5044 §7.1;
// Linux siw honours the peer's choice).
type CRCPolicy uint8

// CRC policies.
const (
	// CRCOff: do not ask for CRC; use it if the peer asks (siw's defaults).
	CRCOff CRCPolicy = iota
	// CRCOffered: ask for CRC; a host accepts a controller that does not
	// confirm it.
	CRCOffered
	// CRCRequired: ask for CRC; a host fails a connection whose controller
	// does not confirm it.
	CRCRequired
)

// String names the policy as ParseCRCPolicy reads it.
func (p CRCPolicy) String() string { return p.engine().String() }

// engine is the engine's policy: the same values in the same order
// (TestCRCPolicyValues).
func (p CRCPolicy) engine() iwarp.CRCPolicy { return iwarp.CRCPolicy(p) }

// ParseCRCPolicy parses "off" (or ""), "offered" (or "on") or "required".
func ParseCRCPolicy(s string) (CRCPolicy, error) {
	p, err := iwarp.ParseCRCPolicy(s)
	if err != nil {
		return 0, fmt.Errorf("nvme-rdma: CRC policy %q: want off, offered or required", s)
	}
	return CRCPolicy(p), nil
}

// TransportConfig holds the settings of the connections under the queues:
// the MPA/DDP/RDMAP engine's knobs that an operator sets. The zero value is
// usable: each zero field takes the default named in its comment.
type TransportConfig struct {
	// CRC is the MPA CRC policy (default CRCOff).
	CRC CRCPolicy
	// MaxFPDU is the largest FPDU sent, headers and CRC included (default:
	// the TCP MSS of the connection; 32..65528).
	MaxFPDU int
	// ConnectTimeout bounds the connection setup (the MPA exchange;
	// default 10 s). A controller's Admission also closes a connection
	// that does not log in within its own pending timeout.
	ConnectTimeout time.Duration
	// StallTimeout closes a connection whose peer stops in the middle of
	// a frame for this long (default 30 s).
	StallTimeout time.Duration
	// WriteTimeout closes a connection whose peer takes no bytes for this
	// long while there is something to send to it (default 30 s).
	WriteTimeout time.Duration
	// BusyPoll makes the receive loop spin on non-blocking reads for up to
	// this long before it parks: lower latency for a busy core (default 0:
	// off).
	BusyPoll time.Duration
	// SocketSendBuffer and SocketReceiveBuffer set each connection's TCP
	// socket buffers (SO_SNDBUF, SO_RCVBUF; 0: the kernel's autotuning).
	SocketSendBuffer, SocketReceiveBuffer int
	// TCP is each connection's congestion control and TCP_NOTSENT_LOWAT
	// (iwarp.TCPOptions; zero: the kernel's defaults).
	TCP TCPOptions
	// Admission, on a controller's listener, caps the connections it holds
	// and closes those not admitted in time; one Admission may serve
	// several listeners. Nil: no caps. Hosts ignore it.
	Admission *Admission
}

// TCPOptions are a connection's congestion control and TCP_NOTSENT_LOWAT
// (iwarp.TCPOptions).
type TCPOptions = iwarp.TCPOptions

// engine is the iWARP configuration for c, with log as its logger.
func (c *TransportConfig) engine(log *zap.Logger) iwarp.Config {
	e := iwarp.Config{
		CRC:            c.CRC.engine(),
		MaxFPDU:        c.MaxFPDU,
		ConnectTimeout: c.ConnectTimeout,
		StallTimeout:   c.StallTimeout,
		WriteTimeout:   c.WriteTimeout,
		BusyPoll:       c.BusyPoll,
		Logger:         log,

		SocketSendBuffer:    c.SocketSendBuffer,
		SocketReceiveBuffer: c.SocketReceiveBuffer,
		TCP:                 c.TCP,
	}
	if c.Admission != nil {
		e.Admission = c.Admission.a
	}
	return e
}

// Validate reports the first setting that is out of range, naming it.
func (c *TransportConfig) Validate() error {
	if c.CRC > CRCRequired {
		return fmt.Errorf("nvme-rdma: config CRC: %d is not a policy", c.CRC)
	}
	e := c.engine(nil)
	if err := e.Validate(); err != nil {
		return fmt.Errorf("nvme-rdma: transport: %w", err)
	}
	return nil
}

// Admission bounds the connections that hosts can make a controller hold:
// connections not yet admitted (no successful Fabrics Connect, see
// ControllerQueue.Admit) are capped in number, in all and per remote
// address, and in time; all connections together are capped. When the
// pending cap is reached the oldest pending connection is closed to make
// room, so a flood of connections that never log in cannot keep a
// legitimate host out. Refusals and evictions are logged rate-limited.
type Admission struct {
	a *iwarp.Admission
}

// AdmissionLimits are the caps of an Admission. Zero fields take the
// defaults named.
type AdmissionLimits struct {
	// MaxPending caps connections not yet admitted (default 128).
	MaxPending int
	// MaxPendingPerAddr caps pending connections of one remote address
	// (default 16).
	MaxPendingPerAddr int
	// MaxConns caps all connections (default DefaultMaxConnections).
	MaxConns int
	// PendingTimeout closes a connection not admitted within this long of
	// its TCP accept (default 10 s).
	PendingTimeout time.Duration
}

func (l AdmissionLimits) engine() iwarp.AdmissionConfig {
	return iwarp.AdmissionConfig{MaxPending: l.MaxPending, MaxPendingPerAddr: l.MaxPendingPerAddr, MaxConns: l.MaxConns, PendingTimeout: l.PendingTimeout}
}

// NewAdmission returns an Admission with the given caps; log receives its
// rate-limited events.
func NewAdmission(l AdmissionLimits, log *zap.Logger) *Admission {
	return &Admission{a: iwarp.NewAdmission(l.engine(), log)}
}

// Shared is the transport-neutral admission behind a: a daemon's NVMe/TCP
// listeners take their connections through it too, so that one set of
// caps bounds the connections of all its ports.
func (a *Admission) Shared() *admission.Admission { return a.a }

// SetLimits changes the caps for connections accepted from now on.
func (a *Admission) SetLimits(l AdmissionLimits) { a.a.SetConfig(l.engine()) }

// Log logs an event that peers can cause in bulk (a refused login, a
// connection ended by a protocol error) through the Admission's rate limit:
// in each interval the first few are logged one by one, the rest counted by
// reason into one summary line.
func (a *Admission) Log(level zapcore.Level, reason, msg string, fields ...zap.Field) {
	a.a.Log(level, reason, msg, fields...)
}

// Close stops the pending timer and flushes the log summary.
func (a *Admission) Close() { a.a.Close() }

// DefaultMaxConnections is the default cap on a controller's connections:
// the process's open file limit less a reserve for files and listeners.
func DefaultMaxConnections() int { return iwarp.DefaultMaxConns() }

// PD is a protection domain: the memory registrations (STags) that the
// queues sharing it may use. A host controller's queues share one.
type PD struct {
	pd *iwarp.PD
}

// NewPD returns an empty protection domain.
func NewPD() *PD { return &PD{pd: iwarp.NewPD()} }

// EndCause classifies why a queue's connection ended, for logs and for
// callers that act on it.
type EndCause uint8

// Causes of a connection's end.
const (
	// EndError: any other failure (a socket error, a protocol violation
	// found below the RDMAP layer, a local close).
	EndError EndCause = iota
	// EndPeerClosed: the peer closed the connection (FIN) cleanly.
	EndPeerClosed
	// EndTerminateReceived: the peer sent an RDMAP Terminate.
	EndTerminateReceived
	// EndTerminateSent: we found the peer violating the protocol and sent
	// a Terminate.
	EndTerminateSent
	// EndStalled: the peer stopped in the middle of a frame
	// (TransportConfig.StallTimeout).
	EndStalled
	// EndNotReading: the peer stopped reading its socket
	// (TransportConfig.WriteTimeout).
	EndNotReading
	// EndEvicted: closed before login to make room (Admission).
	EndEvicted
	// EndNotLoggedIn: not admitted within the pending timeout (Admission).
	EndNotLoggedIn
)

var endCauseNames = [...]string{"connection_error", "peer_closed", "terminate_received", "terminate_sent", "stalled", "not_reading", "evicted", "not_logged_in"}

// String is the cause's name in logs ("terminate_received", ...).
func (c EndCause) String() string {
	if int(c) < len(endCauseNames) {
		return endCauseNames[c]
	}
	return fmt.Sprintf("EndCause(%d)", uint8(c))
}

// CauseOf classifies the error a queue ended with (ControllerQueue.Err,
// HostQueue.Err, a host request's transport error, Dial's error).
func CauseOf(err error) EndCause {
	var te *iwarp.TerminateError
	var wte *wire.TermError
	switch {
	case errors.As(err, &te):
		if te.Remote {
			return EndTerminateReceived
		}
		return EndTerminateSent
	case errors.As(err, &wte):
		return EndTerminateSent
	case errors.Is(err, iwarp.ErrPeerClosed):
		return EndPeerClosed
	case errors.Is(err, iwarp.ErrStalled):
		return EndStalled
	case errors.Is(err, iwarp.ErrWriteStalled):
		return EndNotReading
	case errors.Is(err, iwarp.ErrEvicted):
		return EndEvicted
	case errors.Is(err, iwarp.ErrNotAdmitted):
		return EndNotLoggedIn
	}
	return EndError
}
