package iwarp

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// CRCPolicy says whether MPA CRCs (RFC 5044 §4.4) are asked for.
type CRCPolicy uint8

// CRC policies. CRC is used in both directions when either MPA frame has
// C=1 (RFC 5044 §7.1; siw honours the peer's choice).
const (
	// CRCOff: do not ask for CRC; use it if the peer asks (like siw's
	// defaults mpa_crc_required=false, mpa_crc_strict=false).
	CRCOff CRCPolicy = iota
	// CRCOffered: ask for CRC (C=1); as initiator accept a reply without it.
	CRCOffered
	// CRCRequired: ask for CRC; as initiator fail a connection whose reply
	// does not confirm it.
	CRCRequired
)

// String names the policy.
func (p CRCPolicy) String() string {
	switch p {
	case CRCOff:
		return "off"
	case CRCOffered:
		return "offered"
	case CRCRequired:
		return "required"
	}
	return fmt.Sprintf("CRCPolicy(%d)", uint8(p))
}

// ParseCRCPolicy parses "off", "offered" or "required".
func ParseCRCPolicy(s string) (CRCPolicy, error) {
	switch s {
	case "off", "":
		return CRCOff, nil
	case "offered", "on":
		return CRCOffered, nil
	case "required":
		return CRCRequired, nil
	}
	return 0, fmt.Errorf("iwarp: CRC policy %q: want off, offered or required", s)
}

// Config holds the engine settings of a connection. The zero value is
// usable: each zero field takes the default named in its comment.
type Config struct {
	// CRC is the MPA CRC policy (default CRCOff).
	CRC CRCPolicy
	// MPARevision is the revision the initiator sends: 2 (default,
	// enhanced RFC 6581 with IRD/ORD) or 1.
	MPARevision uint8
	// PeerToPeer makes the initiator request RFC 6581 peer-to-peer mode
	// and send a ready-to-receive message (offering RDMA Write and Read
	// RTRs). A responder always honours the peer's request.
	PeerToPeer bool
	// MaxPrivateData bounds the private data accepted in MPA frames, the
	// 4-byte enhanced header included (default 256, what siw accepts; the
	// RFC allows 512).
	MaxPrivateData int
	// MaxFPDU is the largest FPDU sent, headers and CRC included, rounded
	// down to a multiple of 8 (default: the TCP MSS of the connection,
	// as siw does; at most 65528).
	MaxFPDU int
	// MaxIRDORD caps the negotiated IRD and ORD (default 128, siw's limit).
	MaxIRDORD int
	// ConnectTimeout bounds the MPA exchange: the responder's wait for the
	// request and the initiator's wait for the reply (default 10 s).
	ConnectTimeout time.Duration
	// StallTimeout closes a connection whose peer stops in the middle of
	// an FPDU for this long (default 30 s).
	StallTimeout time.Duration
	// WriteTimeout closes a connection whose peer takes no bytes for this
	// long while there is something to send to it: a peer that stops
	// reading its socket (default 30 s).
	WriteTimeout time.Duration
	// LingerTimeout bounds a graceful disconnect's wait for the peer to
	// close its side (default 2 s).
	LingerTimeout time.Duration
	// Nudge is how long an initiator waits for the responder's first FPDU,
	// after its own first one, before it sends a zero-length RDMA Write to
	// make the responder read its socket again; it repeats, doubling the
	// wait, up to five times until the responder speaks. Linux siw sends
	// its MPA reply before it hooks the QP to the socket, so an FPDU that
	// arrives in between lies unread until more bytes come (siw_cm.c
	// siw_accept). Zero-length Writes are not checked against any STag
	// (RFC 6581's Write RTR is one). Default 100 ms; negative: never.
	Nudge time.Duration
	// BusyPoll makes the receive loop spin on non-blocking reads for up to
	// this long before parking in the network poller: lower latency at the
	// price of a busy core (default 0: off).
	BusyPoll time.Duration
	// ReadBuffer is the size of the receive read-ahead buffer that small
	// FPDUs are parsed from (default 256 KiB).
	ReadBuffer int
	// SocketSendBuffer and SocketReceiveBuffer set the TCP socket's
	// SO_SNDBUF and SO_RCVBUF (SPDK sets 2 MiB); 0 keeps the kernel's
	// default and its automatic tuning.
	SocketSendBuffer, SocketReceiveBuffer int
	// TCP sets the connection's congestion control and TCP_NOTSENT_LOWAT
	// (sockopt.go); the zero value keeps the kernel's defaults.
	TCP TCPOptions
	// Admission, when set, caps the connections a Listener holds and closes
	// those that the ULP does not admit (QP.Admit) in time; one Admission
	// may serve several listeners. Nil: no caps (Dial ignores it).
	Admission *Admission
	// Logger receives connection events (default: none).
	Logger *zap.Logger
}

const (
	defaultMaxIRDORD      = 128
	defaultConnectTimeout = 10 * time.Second
	defaultStallTimeout   = 30 * time.Second
	defaultWriteTimeout   = 30 * time.Second
	defaultLinger         = 2 * time.Second
	defaultReadBuffer     = 256 << 10
	defaultNudge          = 100 * time.Millisecond
	maxNudges             = 5
	// maxFPDU keeps ULPDU_Length within 16 bits: 2 + 65535 rounded down.
	maxFPDU = 65528
	// minFPDU leaves room for a header, 4 bytes of payload and the CRC.
	minFPDU = 32
	// maxSocketBuffer bounds SocketSendBuffer and SocketReceiveBuffer.
	maxSocketBuffer = 1 << 30
)

// withDefaults returns a copy with zero fields set to defaults.
func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	defaults.Set(&d.MPARevision, 2)
	defaults.Set(&d.MaxPrivateData, wire.SIWMaxPrivateData)
	defaults.Set(&d.MaxIRDORD, defaultMaxIRDORD)
	defaults.Set(&d.ConnectTimeout, defaultConnectTimeout)
	defaults.Set(&d.StallTimeout, defaultStallTimeout)
	defaults.Set(&d.WriteTimeout, defaultWriteTimeout)
	defaults.Set(&d.LingerTimeout, defaultLinger)
	defaults.Set(&d.Nudge, defaultNudge)
	defaults.Set(&d.ReadBuffer, defaultReadBuffer)
	defaults.Set(&d.Logger, zap.NewNop())
	return d
}

// Validate reports the first setting that is out of range, naming it.
func (c *Config) Validate() error {
	d := c.withDefaults()
	switch {
	case d.CRC > CRCRequired:
		return fmt.Errorf("iwarp: config CRC: %d is not a policy", d.CRC)
	case d.MPARevision != 1 && d.MPARevision != 2:
		return fmt.Errorf("iwarp: config MPARevision: %d, want 1 or 2", d.MPARevision)
	case d.MaxPrivateData < wire.EnhancedHeaderLen || d.MaxPrivateData > wire.MPAMaxPrivateData:
		return fmt.Errorf("iwarp: config MaxPrivateData: %d, want %d..%d", d.MaxPrivateData, wire.EnhancedHeaderLen, wire.MPAMaxPrivateData)
	case d.MaxFPDU != 0 && (d.MaxFPDU < minFPDU || d.MaxFPDU > maxFPDU):
		return fmt.Errorf("iwarp: config MaxFPDU: %d, want %d..%d", d.MaxFPDU, minFPDU, maxFPDU)
	case d.MaxIRDORD < 1 || d.MaxIRDORD > wire.MaxIRDORD:
		return fmt.Errorf("iwarp: config MaxIRDORD: %d, want 1..%d", d.MaxIRDORD, wire.MaxIRDORD)
	case d.ConnectTimeout < 0 || d.StallTimeout < 0 || d.WriteTimeout < 0 || d.LingerTimeout < 0 || d.BusyPoll < 0:
		return fmt.Errorf("iwarp: config timeouts must not be negative")
	case d.ReadBuffer < 4096:
		return fmt.Errorf("iwarp: config ReadBuffer: %d, want at least 4096", d.ReadBuffer)
	case d.SocketSendBuffer < 0 || d.SocketSendBuffer > maxSocketBuffer || d.SocketReceiveBuffer < 0 || d.SocketReceiveBuffer > maxSocketBuffer:
		return fmt.Errorf("iwarp: config socket buffers %d/%d: want 0..%d", d.SocketSendBuffer, d.SocketReceiveBuffer, maxSocketBuffer)
	}
	return d.TCP.Validate()
}
