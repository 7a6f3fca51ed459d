package initiator

import (
	"fmt"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// Defaults of the Linux host (drivers/nvme/host/fabrics.h, core.c) and of
// nvme-cli.
const (
	// DefaultKeepAliveTimeout is NVME_DEFAULT_KATO: the admin Connect carries
	// 5000 ms and a Keep Alive goes out every 2.5 s.
	DefaultKeepAliveTimeout = nvmeof.DefaultKATO * time.Second
	// DefaultReconnectDelay is NVMF_DEF_RECONNECT_DELAY.
	DefaultReconnectDelay = 10 * time.Second
	// DefaultCtrlLossTimeout is NVMF_DEF_CTRL_LOSS_TMO.
	DefaultCtrlLossTimeout = 600 * time.Second
	// DefaultShutdownTimeout is the nvme_core shutdown_timeout parameter:
	// how long CSTS.SHST may take to report shutdown complete.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultAdminTimeout is the nvme_core admin_timeout parameter (60 s).
	DefaultAdminTimeout = 60 * time.Second
	// DefaultIOTimeout is the nvme_core io_timeout parameter (30 s): a
	// command outstanding longer starts error recovery.
	DefaultIOTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds one attempt to open the association
	// (every queue's CM exchange and Connect, enable, Identify).
	DefaultConnectTimeout = 30 * time.Second
	// DefaultMaxTransferSize is the host's own cap on one command's data
	// (Linux nvme-rdma: max_fr_pages pages; 1 MiB here, nvmet's MDTS).
	DefaultMaxTransferSize = 1 << 20
	// DefaultDiscoveryRetries is nvme-cli's MAX_DISC_RETRIES: reads of a
	// discovery log whose GENCTR keeps changing.
	DefaultDiscoveryRetries = 10
	// MaxRetries is nvme_max_retries: how often a command completed with
	// a retryable status (DNR clear) is sent again.
	MaxRetries = 5
)

// Config is the configuration of a host controller: the options of
// nvme connect (and /dev/nvme-fabrics). The zero value of every field
// means its default; the durations that Linux lets one disable take a
// negative value for that.
type Config struct {
	// Network is "tcp" (default), "tcp4" or "tcp6".
	Network string
	// Address is the controller's transport address, host:port
	// (traddr:trsvcid).
	Address string
	// SubNQN is the subsystem NQN (nqn=); nvmeof.DiscoveryNQN connects to
	// a discovery controller.
	SubNQN string
	// HostNQN and HostID identify the host (hostnqn=, hostid=); when
	// empty they come from HostIdentity, as with nvme-cli.
	HostNQN string
	HostID  [16]byte
	// NrIOQueues is the number of I/O queues to ask for (nr_io_queues,
	// default the number of CPUs). Discovery controllers have none.
	NrIOQueues int
	// QueueSize is the I/O queue size (queue_size, default 128, range
	// 16..1024), clamped to CAP.MQES+1, MAXCMD and 256 as nvme-rdma does.
	QueueSize int
	// KeepAliveTimeout is the keep-alive timeout (keep_alive_tmo, default
	// 5 s; 0 for discovery controllers as nvme discover). A Keep Alive is
	// sent every half of it. Negative: no keep alive (KATO 0).
	KeepAliveTimeout time.Duration
	// ReconnectDelay is the wait before each reconnect attempt
	// (reconnect_delay, default 10 s).
	ReconnectDelay time.Duration
	// CtrlLossTimeout is how long reconnect attempts go on (ctrl_loss_tmo,
	// default 600 s): DIV_ROUND_UP(CtrlLossTimeout, ReconnectDelay)
	// attempts. Negative: forever.
	CtrlLossTimeout time.Duration
	// NoReconnect gives the controller up at the first lost connection
	// (ctrl_loss_tmo=0).
	NoReconnect bool
	// ShutdownTimeout bounds the wait for CSTS.SHST after CC.SHN (default
	// 5 s); on expiry Close goes on, as Linux does.
	ShutdownTimeout time.Duration
	// AdminTimeout bounds admin commands (default 60 s); IOTimeout I/O
	// commands (default 30 s). An expired command starts error recovery.
	AdminTimeout, IOTimeout time.Duration
	// ConnectTimeout bounds one attempt to open the association (default
	// 30 s).
	ConnectTimeout time.Duration
	// MaxTransferSize caps one command's data (default 1 MiB); the
	// controller's MDTS may lower it.
	MaxTransferSize int
	// DHCHAPSecret is the host's DH-HMAC-CHAP secret (nvme connect
	// --dhchap-secret): the host authenticates every queue when the
	// controller asks (Connect ATR). Nil: no authentication; a controller
	// that requires it is then refused (ErrNoSecret).
	DHCHAPSecret *auth.Secret
	// DHCHAPCtrlSecret is the controller's secret (--dhchap-ctrl-secret):
	// with it the host authenticates the controller too (bidirectional),
	// even when the controller does not ask. Needs DHCHAPSecret.
	DHCHAPCtrlSecret *auth.Secret
	// TrType is the transport: nvmeof.TrTypeRDMA (the default; 0 too) or
	// nvmeof.TrTypeTCP.
	TrType uint8
	// Transport holds the NVMe/RDMA connection settings (MPA CRC policy,
	// FPDU size, timeouts, busy polling).
	Transport rdma.TransportConfig
	// TCPTransport holds the NVMe/TCP settings: the digests asked for,
	// the PDU and write timeouts (QID, sizes and logger are the
	// controller's).
	TCPTransport tcp.HostConfig
	// Logger receives controller events (default: none).
	Logger *zap.Logger
	// OnEvent, if set, is called for controller events (reconnects,
	// namespace changes, discovery log changes), one at a time, from a
	// goroutine of the controller. It should not block for long.
	OnEvent func(Event)
}

// Discovery reports whether the configuration names the discovery NQN.
func (c *Config) Discovery() bool { return nvmeof.IsDiscoveryNQN(c.SubNQN) }

// withDefaults returns a copy of c with the defaults applied and the host
// identity filled in.
func (c *Config) withDefaults() (Config, error) {
	d := *c
	defaults.Set(&d.Network, "tcp")
	if d.SubNQN == "" {
		return d, fmt.Errorf("initiator: no subsystem NQN")
	}
	if d.Address == "" {
		return d, fmt.Errorf("initiator: no controller address")
	}
	if d.HostNQN == "" || d.HostID == ([16]byte{}) {
		id, err := HostIdentity()
		if err != nil {
			return d, fmt.Errorf("initiator: host identity: %w", err)
		}
		defaults.Set(&d.HostNQN, id.NQN)
		if d.HostID == ([16]byte{}) {
			d.HostID = id.ID
		}
	}
	if err := nvmeof.ValidateNQN(d.SubNQN); err != nil {
		return d, fmt.Errorf("initiator: subsystem NQN: %w", err)
	}
	if err := nvmeof.ValidateNQN(d.HostNQN); err != nil {
		return d, fmt.Errorf("initiator: host NQN: %w", err)
	}
	defaults.Set(&d.NrIOQueues, runtime.NumCPU())
	if d.Discovery() {
		d.NrIOQueues = 0 // nvmf_parse_options: discovery has no I/O queues
	}
	if d.NrIOQueues < 0 || d.NrIOQueues > 0xFFFE {
		return d, fmt.Errorf("initiator: nr_io_queues %d out of range", d.NrIOQueues)
	}
	defaults.Set(&d.QueueSize, nvmeof.DefaultIOQueueSize)
	if d.QueueSize < nvmeof.MinIOQueueSize || d.QueueSize > nvmeof.MaxIOQueueSize {
		return d, fmt.Errorf("initiator: queue_size %d: want %d..%d", d.QueueSize, nvmeof.MinIOQueueSize, nvmeof.MaxIOQueueSize)
	}
	if d.KeepAliveTimeout == 0 && !d.Discovery() {
		d.KeepAliveTimeout = DefaultKeepAliveTimeout
	}
	if d.KeepAliveTimeout < 0 {
		d.KeepAliveTimeout = 0
	}
	if d.KeepAliveTimeout%time.Second != 0 {
		// KATO travels in ms but nvmet rounds it up to seconds; Linux
		// takes whole seconds. Keep what the user gave, in ms.
		d.KeepAliveTimeout = d.KeepAliveTimeout.Round(time.Millisecond)
	}
	defaults.Set(&d.ReconnectDelay, DefaultReconnectDelay)
	if d.ReconnectDelay < 0 {
		return d, fmt.Errorf("initiator: reconnect_delay %v is negative", d.ReconnectDelay)
	}
	defaults.Set(&d.CtrlLossTimeout, DefaultCtrlLossTimeout)
	if d.ShutdownTimeout <= 0 {
		d.ShutdownTimeout = DefaultShutdownTimeout
	}
	if d.AdminTimeout <= 0 {
		d.AdminTimeout = DefaultAdminTimeout
	}
	if d.IOTimeout <= 0 {
		d.IOTimeout = DefaultIOTimeout
	}
	if d.ConnectTimeout <= 0 {
		d.ConnectTimeout = DefaultConnectTimeout
	}
	defaults.Set(&d.MaxTransferSize, DefaultMaxTransferSize)
	if d.MaxTransferSize < 4096 || d.MaxTransferSize > nvmeof.MaxKeyedSGLLength {
		return d, fmt.Errorf("initiator: max transfer size %d: want 4 KiB..16 MiB", d.MaxTransferSize)
	}
	if err := d.checkTransport(); err != nil {
		return d, err
	}
	if err := d.Transport.Validate(); err != nil {
		return d, err
	}
	if d.DHCHAPCtrlSecret != nil && d.DHCHAPSecret == nil {
		return d, fmt.Errorf("initiator: a DH-HMAC-CHAP controller secret needs a host secret")
	}
	for _, s := range []*auth.Secret{d.DHCHAPSecret, d.DHCHAPCtrlSecret} {
		if s != nil {
			if err := s.Validate(); err != nil {
				return d, fmt.Errorf("initiator: %w", err)
			}
		}
	}
	defaults.Set(&d.Logger, zap.NewNop())
	return d, nil
}

// maxReconnects is nvmf's max_reconnects: DIV_ROUND_UP(ctrl_loss_tmo,
// reconnect_delay), or -1 for no limit.
func (c *Config) maxReconnects() int {
	switch {
	case c.NoReconnect:
		return 0
	case c.CtrlLossTimeout < 0:
		return -1
	}
	return int((c.CtrlLossTimeout + c.ReconnectDelay - 1) / c.ReconnectDelay)
}

// EventKind says what happened to a controller.
type EventKind uint8

// Controller events.
const (
	// EventReconnecting: the connection was lost (Err says why); error
	// recovery has torn the queues down and reconnect attempts follow.
	EventReconnecting EventKind = iota + 1
	// EventReconnectFailed: one reconnect attempt failed (Err).
	EventReconnectFailed
	// EventReconnected: the association is open again and kept commands
	// have been sent again.
	EventReconnected
	// EventLost: the controller was given up (ctrl_loss_tmo).
	EventLost
	// EventNamespacesChanged: a rescan found namespaces added, removed or
	// resized (NSIDs lists them).
	EventNamespacesChanged
	// EventDiscoveryChanged: a discovery controller reported that its log
	// changed.
	EventDiscoveryChanged
	// EventAsync: another asynchronous event (AEN has it).
	EventAsync
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventReconnecting:
		return "reconnecting"
	case EventReconnectFailed:
		return "reconnect-failed"
	case EventReconnected:
		return "reconnected"
	case EventLost:
		return "lost"
	case EventNamespacesChanged:
		return "namespaces-changed"
	case EventDiscoveryChanged:
		return "discovery-changed"
	case EventAsync:
		return "async-event"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is something that happened to a controller.
type Event struct {
	Kind EventKind
	// Err is the cause (reconnecting, failed attempts, lost).
	Err error
	// Attempt counts reconnect attempts (1-based).
	Attempt int
	// NSIDs are the namespaces that changed.
	NSIDs []uint32
	// AEN is the asynchronous event's completion DW0.
	AEN nvmeof.AEN
}
