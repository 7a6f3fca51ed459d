package connd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/internal/dhchapkey"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// FabricsOptions are nvme-cli's fabrics options (nvme connect/discover), with
// nvme-cli's names, short letters and defaults, and ours (--crc).
type FabricsOptions struct {
	Transport      string
	Traddr         string
	Trsvcid        string
	NQN            string
	HostNQN        string
	HostID         string
	NrIOQueues     int
	QueueSize      int
	KeepAliveTmo   int
	ReconnectDelay int
	CtrlLossTmo    int
	CRC            string
	MaxFPDU        int
	Verbose        bool
	ConnectTimeout time.Duration
	IOTimeout      time.Duration
	BusyPoll       time.Duration
	HdrDigest      bool // NVMe/TCP header digest (-g)
	DataDigest     bool // NVMe/TCP data digest (-G)
	MaxTransfer    int
	SocketBuffer   string
	// TCPCongestion and TCPNotSentLowat are each queue's TCP_CONGESTION and
	// TCP_NOTSENT_LOWAT (docs/wan.md).
	TCPCongestion, TCPNotSentLowat string
	// DHCHAPSecret and DHCHAPCtrlSecret are the DH-HMAC-CHAP secrets
	// (literal DHHC-1 or file:PATH).
	DHCHAPSecret, DHCHAPCtrlSecret string
}

// Address returns traddr:trsvcid.
func (o *FabricsOptions) Address() (string, error) {
	if _, err := o.TrType(); err != nil {
		return "", err
	}
	if o.Traddr == "" {
		return "", fmt.Errorf("need a transport address (-a)")
	}
	port := o.Trsvcid
	if port == "" {
		port = strconv.Itoa(nvmeof.DefaultPort)
	}
	return net.JoinHostPort(strings.Trim(o.Traddr, "[]"), port), nil
}

// TrType is the transport's TRTYPE (-t rdma or tcp, as nvme-cli).
func (o *FabricsOptions) TrType() (uint8, error) {
	switch o.Transport {
	case "", "rdma":
		return nvmeof.TrTypeRDMA, nil
	case "tcp":
		return nvmeof.TrTypeTCP, nil
	}
	return 0, fmt.Errorf("transport %q is not supported (rdma or tcp)", o.Transport)
}

// TransportName is nvme-cli's name of a discovery log entry's TRTYPE
// that nvmeof connects ("" for the others).
func TransportName(trtype uint8) string {
	switch trtype {
	case nvmeof.TrTypeRDMA:
		return "rdma"
	case nvmeof.TrTypeTCP:
		return "tcp"
	}
	return ""
}

// Config builds the initiator configuration of subsystem subnqn; log (nil:
// none) receives the identity and key notes.
func (o *FabricsOptions) Config(subnqn string, log *zap.Logger) (initiator.Config, error) {
	addr, err := o.Address()
	if err != nil {
		return initiator.Config{}, err
	}
	crc, err := rdma.ParseCRCPolicy(o.CRC)
	if err != nil {
		return initiator.Config{}, err
	}
	if o.BusyPoll < 0 || o.BusyPoll > time.Second {
		return initiator.Config{}, fmt.Errorf("--busy-poll %v: want 0..1s", o.BusyPoll)
	}
	var sockBuf int64
	if o.SocketBuffer != "" {
		if sockBuf, err = bench.ParseSize(o.SocketBuffer); err != nil || sockBuf < 0 || sockBuf > 1<<30 {
			return initiator.Config{}, fmt.Errorf("--socket-buffer %q: want a size up to 1g", o.SocketBuffer)
		}
	}
	tcpOpts := rdma.TCPOptions{Congestion: o.TCPCongestion}
	if o.TCPNotSentLowat != "" {
		n, err := bench.ParseSize(o.TCPNotSentLowat)
		if err != nil || n < 0 || n > 1<<30 {
			return initiator.Config{}, fmt.Errorf("--tcp-notsent-lowat %q: want a size up to 1g", o.TCPNotSentLowat)
		}
		tcpOpts.NotSentLowat = int(n)
	}
	if err := tcpOpts.Probe(); err != nil {
		return initiator.Config{}, fmt.Errorf("--tcp-congestion/--tcp-notsent-lowat: %w", err)
	}
	cfg := initiator.Config{
		Address:         addr,
		SubNQN:          subnqn,
		NrIOQueues:      o.NrIOQueues,
		QueueSize:       o.QueueSize,
		Transport:       rdma.TransportConfig{CRC: crc, MaxFPDU: o.MaxFPDU, BusyPoll: o.BusyPoll, SocketSendBuffer: int(sockBuf), SocketReceiveBuffer: int(sockBuf), TCP: tcpOpts},
		Logger:          log,
		ConnectTimeout:  o.ConnectTimeout,
		IOTimeout:       o.IOTimeout,
		MaxTransferSize: o.MaxTransfer,
	}
	cfg.TrType, _ = o.TrType()
	// The digests are NVMe/TCP's; on rdma they are ignored, as nvme-cli does.
	cfg.TCPTransport.Digests.Header, cfg.TCPTransport.Digests.Data = o.HdrDigest, o.DataDigest
	if o.DHCHAPSecret != "" {
		if cfg.DHCHAPSecret, err = dhchapkey.Load(o.DHCHAPSecret); err != nil {
			return cfg, fmt.Errorf("--dhchap-secret: %w", err)
		}
	}
	if o.DHCHAPSecret == "" && subnqn != nvmeof.DiscoveryNQN {
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
	if o.DHCHAPCtrlSecret != "" {
		if o.DHCHAPSecret == "" {
			return cfg, fmt.Errorf("--dhchap-ctrl-secret needs --dhchap-secret")
		}
		if cfg.DHCHAPCtrlSecret, err = dhchapkey.Load(o.DHCHAPCtrlSecret); err != nil {
			return cfg, fmt.Errorf("--dhchap-ctrl-secret: %w", err)
		}
	}
	id, err := hostIdentity(o.HostNQN, o.HostID, log)
	if err != nil {
		return cfg, err
	}
	cfg.HostNQN, cfg.HostID = id.NQN, id.ID
	switch {
	case o.KeepAliveTmo > 0:
		cfg.KeepAliveTimeout = time.Duration(o.KeepAliveTmo) * time.Second
	case o.KeepAliveTmo < 0:
		return cfg, fmt.Errorf("keep-alive-tmo %d is negative", o.KeepAliveTmo)
	}
	if o.ReconnectDelay < 0 {
		return cfg, fmt.Errorf("reconnect-delay %d is negative", o.ReconnectDelay)
	}
	cfg.ReconnectDelay = time.Duration(o.ReconnectDelay) * time.Second
	switch {
	case o.CtrlLossTmo < 0:
		cfg.CtrlLossTimeout = -1
	case o.CtrlLossTmo == 0:
		cfg.NoReconnect = true
	default:
		cfg.CtrlLossTimeout = time.Duration(o.CtrlLossTmo) * time.Second
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

// Options are connect's options: nvme-cli's, and ours for the local
// block device and the mount.
type Options struct {
	Fabrics FabricsOptions
	// Mount, if set, is where the namespace's filesystem is mounted
	// (through a loop device on the FUSE file).
	Mount     string
	Loop      bool // attach a loop device without mounting
	MountNSID uint32
	FSType    string
	MKFS      bool
	// Force lets --mkfs write over an existing filesystem or
	// partition table.
	Force     bool
	MountOpts string
	// LoopDirectIO is losetup's --direct-io for the loop device.
	LoopDirectIO bool
	// FUSEDirectIO opens the FUSE device files with FOPEN_DIRECT_IO (no
	// page cache of the FUSE file).
	FUSEDirectIO bool
	// MetricsListen serves the controller's metrics (IP:port or
	// unix:/path; "" off).
	MetricsListen string
	// IOPolicy and FastIOFailTmo are the subsystem's multipath settings
	// (nvme-cli: the iopolicy sysfs attribute, --fast_io_fail_tmo).
	IOPolicy      string
	FastIOFailTmo int
}

// optionsJSON carries Options to the daemon: its --config argument and
// the add-path request (the control socket protocol).
type optionsJSON struct {
	Transport, Traddr, Trsvcid, NQN, HostNQN, HostID string
	NrIOQueues, QueueSize, KeepAliveTmo              int
	ReconnectDelay, CtrlLossTmo                      int
	CRC                                              string
	MaxFPDU                                          int
	ConnectTimeout, IOTimeout, BusyPoll              time.Duration
	MaxTransfer                                      int
	SocketBuffer                                     string
	Mount                                            string
	Loop                                             bool
	MountNSID                                        uint32
	FSType                                           string
	MKFS                                             bool
	Force                                            bool `json:",omitempty"`
	MountOpts                                        string
	LoopDirectIO, FUSEDirectIO                       bool
	// The secrets go to the daemon on its standard input, never on its
	// command line (which every user can read).
	DHCHAPSecret, DHCHAPCtrlSecret string `json:",omitempty"`
	MetricsListen                  string
	IOPolicy                       string
	FastIOFailTmo                  int
	HdrDigest, DataDigest          bool   `json:",omitempty"`
	TCPCongestion, TCPNotSentLowat string `json:",omitempty"`
}

func (o *Options) toJSON() optionsJSON {
	f := &o.Fabrics
	return optionsJSON{f.Transport, f.Traddr, f.Trsvcid, f.NQN, f.HostNQN, f.HostID, f.NrIOQueues, f.QueueSize,
		f.KeepAliveTmo, f.ReconnectDelay, f.CtrlLossTmo, f.CRC, f.MaxFPDU, f.ConnectTimeout, f.IOTimeout, f.BusyPoll, f.MaxTransfer, f.SocketBuffer,
		o.Mount, o.Loop, o.MountNSID, o.FSType, o.MKFS, o.Force, o.MountOpts, o.LoopDirectIO, o.FUSEDirectIO, f.DHCHAPSecret, f.DHCHAPCtrlSecret, o.MetricsListen, o.IOPolicy, o.FastIOFailTmo, f.HdrDigest, f.DataDigest, f.TCPCongestion, f.TCPNotSentLowat}
}

func (j optionsJSON) opts() Options {
	return Options{
		Fabrics: FabricsOptions{Transport: j.Transport, Traddr: j.Traddr, Trsvcid: j.Trsvcid, NQN: j.NQN, HostNQN: j.HostNQN,
			HostID: j.HostID, NrIOQueues: j.NrIOQueues, QueueSize: j.QueueSize, KeepAliveTmo: j.KeepAliveTmo,
			ReconnectDelay: j.ReconnectDelay, CtrlLossTmo: j.CtrlLossTmo, CRC: j.CRC, MaxFPDU: j.MaxFPDU, ConnectTimeout: j.ConnectTimeout,
			IOTimeout: j.IOTimeout, BusyPoll: j.BusyPoll, MaxTransfer: j.MaxTransfer, SocketBuffer: j.SocketBuffer,
			DHCHAPSecret: j.DHCHAPSecret, DHCHAPCtrlSecret: j.DHCHAPCtrlSecret, HdrDigest: j.HdrDigest, DataDigest: j.DataDigest,
			TCPCongestion: j.TCPCongestion, TCPNotSentLowat: j.TCPNotSentLowat},
		Mount: j.Mount, Loop: j.Loop, MountNSID: j.MountNSID, FSType: j.FSType, MKFS: j.MKFS, Force: j.Force, MountOpts: j.MountOpts,
		LoopDirectIO: j.LoopDirectIO, FUSEDirectIO: j.FUSEDirectIO, MetricsListen: j.MetricsListen, IOPolicy: j.IOPolicy, FastIOFailTmo: j.FastIOFailTmo,
	}
}

// MarshalJSON writes o as the daemon reads it (--config, add-path).
func (o Options) MarshalJSON() ([]byte, error) { return json.Marshal(o.toJSON()) }

// UnmarshalJSON reads what MarshalJSON wrote.
func (o *Options) UnmarshalJSON(b []byte) error {
	var j optionsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*o = j.opts()
	return nil
}

// ForEntry returns the options that connect the subsystem of discovery
// log entry e (connect-all): o's, with the entry's transport, address and
// NQN, the digests kept only for NVMe/TCP, and no mount (one mount point
// cannot serve several subsystems). It returns false for an entry that
// is not an NVMe subsystem or whose transport nvmeof does not connect.
func (o Options) ForEntry(e nvmeof.DiscoveryEntry) (Options, bool) {
	tr := TransportName(e.TrType)
	if e.SubType != nvmeof.SubTypeNVMe || tr == "" {
		return Options{}, false
	}
	// Each entry with its own transport (TRTYPE 1 rdma, 3 tcp);
	// digests asked for apply to the NVMe/TCP ones.
	o.Fabrics.Transport = tr
	if tr != "tcp" {
		o.Fabrics.HdrDigest, o.Fabrics.DataDigest = false, false
	}
	o.Fabrics.Traddr, o.Fabrics.Trsvcid, o.Fabrics.NQN = e.TrAddr, e.TrSvcID, e.SubNQN
	o.Mount = ""
	return o, true
}
