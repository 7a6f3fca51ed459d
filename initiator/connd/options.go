package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// fabricsOpts are nvme-cli's fabrics options (nvme connect/discover), with
// nvme-cli's names, short letters and defaults, and ours (--crc).
type fabricsOpts struct {
	transport    string
	traddr       string
	trsvcid      string
	nqn          string
	hostnqn      string
	hostid       string
	nrIOQueues   int
	queueSize    int
	keepAliveTmo int
	reconnDelay  int
	ctrlLossTmo  int
	crc          string
	maxFPDU      int
	verbose      bool
	connTimeout  time.Duration
	ioTimeout    time.Duration
	busyPoll     time.Duration
	hdrDigest    bool // NVMe/TCP header digest (-g)
	dataDigest   bool // NVMe/TCP data digest (-G)
	maxTransfer  int
	socketBuffer string
	// tcpCongestion and tcpNotSentLowat are each queue's TCP_CONGESTION and
	// TCP_NOTSENT_LOWAT (docs/wan.md).
	tcpCongestion, tcpNotSentLowat string
	// dhchapSecret and dhchapCtrlSecret are the DH-HMAC-CHAP secrets
	// (literal DHHC-1 or file:PATH).
	dhchapSecret, dhchapCtrlSecret string
	discoverOnly                   bool // the flags of discover (no queue options)
}

// addFabricsFlags defines the flags on fs.
func (o *fabricsOpts) addFlags(fs *pflag.FlagSet, connect bool) {
	fs.StringVarP(&o.transport, "transport", "t", "rdma", "transport type: rdma (NVMe/RDMA over iWARP) or tcp (NVMe/TCP)")
	fs.StringVarP(&o.traddr, "traddr", "a", "", "transport address (IPv4 or IPv6 address, or host name)")
	fs.StringVarP(&o.trsvcid, "trsvcid", "s", "", "transport service id (port; default 4420)")
	if connect {
		fs.StringVarP(&o.nqn, "nqn", "n", "", "subsystem NQN")
	}
	fs.StringVarP(&o.hostnqn, "hostnqn", "q", "", "user-defined host NQN (default /etc/nvme/hostnqn, else derived from the machine)")
	fs.StringVarP(&o.hostid, "hostid", "I", "", "user-defined host identifier (default /etc/nvme/hostid)")
	if connect {
		fs.IntVarP(&o.nrIOQueues, "nr-io-queues", "i", 0, "number of I/O queues to use (default number of CPUs)")
		fs.IntVarP(&o.queueSize, "queue-size", "Q", 0, "number of entries per I/O queue (default 128)")
		fs.StringVarP(&o.dhchapSecret, "dhchap-secret", "S", "", "DH-HMAC-CHAP host secret (DHHC-1:..., or file:PATH of a file only its owner may read)")
		fs.StringVarP(&o.dhchapCtrlSecret, "dhchap-ctrl-secret", "C", "", "DH-HMAC-CHAP controller secret: authenticate the controller too (needs --dhchap-secret)")
	}
	fs.IntVarP(&o.keepAliveTmo, "keep-alive-tmo", "k", 0, "keep alive timeout period in seconds (default 5; discovery 0)")
	fs.IntVarP(&o.reconnDelay, "reconnect-delay", "c", 0, "reconnect delay in seconds (default 10)")
	fs.IntVarP(&o.ctrlLossTmo, "ctrl-loss-tmo", "l", 600, "controller loss timeout period in seconds (-1: reconnect forever, 0: never)")
	fs.BoolVarP(&o.hdrDigest, "hdr-digest", "g", false, "NVMe/TCP: ask for the PDU header digest (CRC32C; ignored on rdma)")
	fs.BoolVarP(&o.dataDigest, "data-digest", "G", false, "NVMe/TCP: ask for the PDU data digest (CRC32C; ignored on rdma)")
	fs.StringVar(&o.crc, "crc", "off", "MPA CRC policy: off, offered or required (nvmetd's iWARP engine)")
	fs.IntVar(&o.maxFPDU, "max-fpdu", 0, "largest FPDU sent, in bytes (default: the TCP MSS, as siw)")
	fs.DurationVar(&o.connTimeout, "connect-timeout", initiator.DefaultConnectTimeout, "bound on one attempt to open the association")
	fs.DurationVar(&o.ioTimeout, "io-timeout", 0, "I/O command timeout before error recovery (default 30s)")
	fs.DurationVar(&o.busyPoll, "busy-poll", 0, "spin this long on each queue's socket before sleeping (lower latency for a busy core; 0: off; at most 1s)")
	fs.StringVar(&o.socketBuffer, "socket-buffer", "", "SO_SNDBUF and SO_RCVBUF of each queue's socket (bytes, k/m; SPDK sets 2m; default: the kernel's, auto-tuned)")
	fs.StringVar(&o.tcpCongestion, "tcp-congestion", "", "congestion control of each queue's TCP connection (cubic, bbr where the kernel has it; default: the kernel's, net.ipv4.tcp_congestion_control)")
	fs.StringVar(&o.tcpNotSentLowat, "tcp-notsent-lowat", "", "TCP_NOTSENT_LOWAT of each queue's socket (bytes, k/m; default: none, the kernel's)")
	fs.IntVar(&o.maxTransfer, "max-transfer", 0, "largest data transfer of one command in bytes (default 1 MiB, lowered by MDTS)")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "log protocol events to stderr")
}

// address returns traddr:trsvcid.
func (o *fabricsOpts) address() (string, error) {
	if _, err := o.trtype(); err != nil {
		return "", err
	}
	if o.traddr == "" {
		return "", fmt.Errorf("need a transport address (-a)")
	}
	port := o.trsvcid
	if port == "" {
		port = strconv.Itoa(nvmeof.DefaultPort)
	}
	return net.JoinHostPort(strings.Trim(o.traddr, "[]"), port), nil
}

// trtype is the transport's TRTYPE (-t rdma or tcp, as nvme-cli).
func (o *fabricsOpts) trtype() (uint8, error) {
	switch o.transport {
	case "", "rdma":
		return nvmeof.TrTypeRDMA, nil
	case "tcp":
		return nvmeof.TrTypeTCP, nil
	}
	return 0, fmt.Errorf("transport %q is not supported (rdma or tcp)", o.transport)
}

// transportName is nvme-cli's name of a discovery log entry's TRTYPE
// that nvmeof connects ("" for the others).
func transportName(trtype uint8) string {
	switch trtype {
	case nvmeof.TrTypeRDMA:
		return "rdma"
	case nvmeof.TrTypeTCP:
		return "tcp"
	}
	return ""
}

// config builds the initiator configuration.
func (o *fabricsOpts) config(subnqn string, log *zap.Logger) (initiator.Config, error) {
	addr, err := o.address()
	if err != nil {
		return initiator.Config{}, err
	}
	crc, err := rdma.ParseCRCPolicy(o.crc)
	if err != nil {
		return initiator.Config{}, err
	}
	if o.busyPoll < 0 || o.busyPoll > time.Second {
		return initiator.Config{}, fmt.Errorf("--busy-poll %v: want 0..1s", o.busyPoll)
	}
	var sockBuf int64
	if o.socketBuffer != "" {
		if sockBuf, err = parseSize(o.socketBuffer); err != nil || sockBuf < 0 || sockBuf > 1<<30 {
			return initiator.Config{}, fmt.Errorf("--socket-buffer %q: want a size up to 1g", o.socketBuffer)
		}
	}
	tcpOpts := rdma.TCPOptions{Congestion: o.tcpCongestion}
	if o.tcpNotSentLowat != "" {
		n, err := parseSize(o.tcpNotSentLowat)
		if err != nil || n < 0 || n > 1<<30 {
			return initiator.Config{}, fmt.Errorf("--tcp-notsent-lowat %q: want a size up to 1g", o.tcpNotSentLowat)
		}
		tcpOpts.NotSentLowat = int(n)
	}
	if err := tcpOpts.Probe(); err != nil {
		return initiator.Config{}, fmt.Errorf("--tcp-congestion/--tcp-notsent-lowat: %w", err)
	}
	cfg := initiator.Config{
		Address:         addr,
		SubNQN:          subnqn,
		NrIOQueues:      o.nrIOQueues,
		QueueSize:       o.queueSize,
		Transport:       rdma.TransportConfig{CRC: crc, MaxFPDU: o.maxFPDU, BusyPoll: o.busyPoll, SocketSendBuffer: int(sockBuf), SocketReceiveBuffer: int(sockBuf), TCP: tcpOpts},
		Logger:          log,
		ConnectTimeout:  o.connTimeout,
		IOTimeout:       o.ioTimeout,
		MaxTransferSize: o.maxTransfer,
	}
	cfg.TrType, _ = o.trtype()
	// The digests are NVMe/TCP's; on rdma they are ignored, as nvme-cli does.
	cfg.TCPTransport.Digests.Header, cfg.TCPTransport.Digests.Data = o.hdrDigest, o.dataDigest
	if o.dhchapSecret != "" {
		if cfg.DHCHAPSecret, err = dhchapkey.Load(o.dhchapSecret); err != nil {
			return cfg, fmt.Errorf("--dhchap-secret: %w", err)
		}
	}
	if o.dhchapSecret == "" && subnqn != nvmeof.DiscoveryNQN {
		// nvmetd's built-in default subsystem on this machine: its
		// generated host key (defaultkey.go).
		sec, path, err := defaultHostKey(subnqn, nvmetdDataDirs(), os.Geteuid())
		switch {
		case err == nil:
			if cfg.DHCHAPSecret, err = auth.ParseSecret(sec); err != nil {
				return cfg, fmt.Errorf("%s: %w", path, err)
			}
			if log != nil {
				log.Info("DH-HMAC-CHAP host secret of nvmetd's default subsystem", zap.String("file", path))
			}
		case errors.Is(err, errNoDefaultKey):
			if path != "" && log != nil {
				log.Info("nvmetd's default subsystem: its host key is not readable here; connecting without a DH-HMAC-CHAP secret", zap.Error(err))
			}
		default:
			return cfg, err
		}
	}
	if o.dhchapCtrlSecret != "" {
		if o.dhchapSecret == "" {
			return cfg, fmt.Errorf("--dhchap-ctrl-secret needs --dhchap-secret")
		}
		if cfg.DHCHAPCtrlSecret, err = dhchapkey.Load(o.dhchapCtrlSecret); err != nil {
			return cfg, fmt.Errorf("--dhchap-ctrl-secret: %w", err)
		}
	}
	id, err := hostIdentity(o.hostnqn, o.hostid, log)
	if err != nil {
		return cfg, err
	}
	cfg.HostNQN, cfg.HostID = id.NQN, id.ID
	switch {
	case o.keepAliveTmo > 0:
		cfg.KeepAliveTimeout = time.Duration(o.keepAliveTmo) * time.Second
	case o.keepAliveTmo < 0:
		return cfg, fmt.Errorf("keep-alive-tmo %d is negative", o.keepAliveTmo)
	}
	if o.reconnDelay < 0 {
		return cfg, fmt.Errorf("reconnect-delay %d is negative", o.reconnDelay)
	}
	cfg.ReconnectDelay = time.Duration(o.reconnDelay) * time.Second
	switch {
	case o.ctrlLossTmo < 0:
		cfg.CtrlLossTimeout = -1
	case o.ctrlLossTmo == 0:
		cfg.NoReconnect = true
	default:
		cfg.CtrlLossTimeout = time.Duration(o.ctrlLossTmo) * time.Second
	}
	return cfg, nil
}

// hostIdentity is nvme-cli's: the flags, else /etc/nvme/hostnqn and
// /etc/nvme/hostid, else one derived from the machine (libnvme), saved to
// those files on this first use when they can be written (root), so that
// the host NQN stays the same (issue 23.3).
func hostIdentity(nqn, id string, log *zap.Logger) (initiator.Identity, error) {
	var ident initiator.Identity
	var err error
	if nqn == "" && id == "" {
		ident, err = initiator.PersistentHostIdentity(initiator.DefaultHostPaths)
		if err == nil && log == nil && strings.HasPrefix(ident.Persisted, "saved") {
			// Once per machine: tell the admin where the identity is.
			fmt.Fprintf(os.Stderr, "nvmeof: host NQN %s (derived from %s) %s\n", ident.NQN, ident.Source, ident.Persisted)
		}
		if err == nil && log != nil && ident.Persisted != "" {
			lvl := zap.DebugLevel
			if strings.HasPrefix(ident.Persisted, "saved") {
				lvl = zap.InfoLevel
			}
			log.Log(lvl, "host identity derived from this machine", zap.String("hostnqn", ident.NQN),
				zap.String("source", ident.Source), zap.String("persisted", ident.Persisted))
		}
	} else {
		ident, err = initiator.HostIdentity()
	}
	if err != nil && (nqn == "" || id == "") {
		return ident, fmt.Errorf("host identity: %w", err)
	}
	if nqn != "" {
		if err := nvmeof.ValidateNQN(nqn); err != nil {
			return ident, fmt.Errorf("host NQN: %w", err)
		}
		ident.NQN = nqn
		if id == "" {
			if u, ok := nvmeof.UUIDFromNQN(nqn); ok {
				ident.ID = u
			}
		}
	}
	if id != "" {
		u, err := nvmeof.ParseUUID(id)
		if err != nil {
			return ident, fmt.Errorf("host ID: %w", err)
		}
		ident.ID = u
	}
	return ident, nil
}

// newLogger logs to stderr when verbose, else nowhere.
func newLogger(verbose bool) *zap.Logger {
	if !verbose {
		return zap.NewNop()
	}
	cfg := zap.NewDevelopmentConfig()
	cfg.OutputPaths = []string{"stderr"}
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}
