package target

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// This file is the target's configuration schema: plain structs with
// mapstructure tags (snake_case keys, the vocabulary of nvmetcli's
// config.json where one exists) and their accessors and conversions.
// Defaults are in config_defaults.go, validation (errors that name the
// field path) in config_validate.go and Diff for reloads in config_diff.go.
// Loading (YAML, environment) lives in target/daemon; this package never
// imports viper.
//
// Mapping from nvmetcli's config.json: ports[].portid → ports[].id,
// addr.traddr → address, addr.trsvcid → service_id, addr.adrfam → derived
// from the address, addr.trtype is always rdma, param.inline_data_size →
// inline_data_size; subsystems[].attr.{serial,model,firmware,allow_any_host,
// cntlid_min,cntlid_max} → serial, model, firmware_revision, allow_any_host,
// cntlid_min, cntlid_max; namespaces[].device.{path,nguid,uuid} →
// backend.path, nguid, uuid; namespaces[].enable → enabled; ana_grpid →
// ana_group.

// The memory page size the MDTS is expressed in (CAP.MPSMIN, 4 KiB).
const pageSize = 4096

// maxTransferLimit is the largest MDTS accepted: 8 MiB, since one keyed SGL
// data block describes less than 16 MiB (nvmeof.MaxKeyedSGLLength).
const maxTransferLimit = 8 << 20

// Config is the whole target configuration: the ports it listens on, the
// subsystems it serves and their namespaces, known hosts, the transport and
// tuning. The zero value with ApplyDefaults applied is a valid target that
// serves nothing.
type Config struct {
	// Ports are the NVMe/RDMA listeners (nvmet ports).
	Ports []PortConfig `mapstructure:"ports"`
	// Subsystems are the NVM subsystems.
	Subsystems []SubsystemConfig `mapstructure:"subsystems"`
	// Hosts names known hosts, for descriptions in status and logs. A
	// subsystem's allowed_hosts may name any host NQN, listed here or not.
	Hosts []HostConfig `mapstructure:"hosts"`
	// Transport configures the iWARP engine (MPA, DDP, RDMAP over TCP).
	Transport TransportConfig `mapstructure:"transport"`
	// Tuning holds limits and resource settings of the target.
	Tuning TuningConfig `mapstructure:"tuning"`
	// Limits caps what hosts (and anything that reaches a port) can make
	// the target hold.
	Limits LimitsConfig `mapstructure:"limits"`
	// Metrics is the Prometheus endpoint (off unless configured).
	Metrics MetricsConfig `mapstructure:"metrics"`
}

// PortConfig is a listener: one TCP address serving a set of subsystems and
// the discovery subsystem (nvmetcli's ports[] entry with trtype rdma).
type PortConfig struct {
	// ID is the port ID reported in discovery log entries (nvmetcli
	// portid). 0 means unset: ApplyDefaults assigns the smallest unused
	// ID from 1. Set it explicitly when there is more than one port, so a
	// reload matches ports by ID.
	ID uint16 `mapstructure:"id"`
	// Address is the IPv4 or IPv6 literal to listen on (traddr); the
	// address family (adrfam) follows from it. "0.0.0.0" and "::" listen on
	// every address of their family.
	//
	// Note for the target: on a wildcard port the discovery log must not
	// report the wildcard as TRADDR; like nvmet, it reports the local
	// address of the connection the host sent Get Log Page on. Listen with
	// Network() so that "::" is IPv6-only and does not collide with
	// "0.0.0.0" on the same service ID.
	Address string `mapstructure:"address"`
	// ServiceID is the TCP port (trsvcid); default 4420.
	ServiceID int `mapstructure:"service_id"`
	// Transport is the port's transport (trtype): "rdma" (NVMe/RDMA over
	// iWARP, the default) or "tcp" (NVMe/TCP). A subsystem may be served
	// on ports of both.
	Transport string `mapstructure:"transport"`
	// InlineDataSize is the in-capsule data size of I/O queues in bytes
	// (IOCCSZ = (64 + this) / 16): default 4096, at most 16384, a multiple
	// of 16. In-capsule data cannot be turned off.
	InlineDataSize int `mapstructure:"inline_data_size"`
	// MaxQueueSize is the largest I/O queue (entries) a host may create:
	// default 128, 16..1024.
	MaxQueueSize int `mapstructure:"max_queue_size"`
	// Subsystems are the NQNs of the subsystems served on this port. A port
	// with none serves only discovery.
	Subsystems []string `mapstructure:"subsystems"`
	// Referrals are other discovery services listed in this port's
	// discovery log.
	Referrals []ReferralConfig `mapstructure:"referrals"`
	// AuthRequired makes every host connecting through this port to an
	// NVM subsystem authenticate (DH-HMAC-CHAP), whether or not the
	// subsystem requires it; a host without a dhchap_key cannot connect
	// here. Discovery is never authenticated.
	AuthRequired bool `mapstructure:"auth_required"`
	// ANAGroups sets the ANA state of groups as seen through this port
	// (nvmetcli ports[].ana_groups); a group not listed is optimized.
	// Several ports (or several nvmetd processes) serving one subsystem
	// are the paths a multipath host chooses between by these states.
	ANAGroups []ANAGroupConfig `mapstructure:"ana_groups"`
	// TCPCongestion overrides transport.tcp_congestion for the connections
	// of this port (iWARP ports): e.g. bbr on a port that faces a WAN,
	// the kernel's default on the one that faces the rack.
	TCPCongestion string `mapstructure:"tcp_congestion"`
}

// ANAGroupConfig is the state of one ANA group on a port.
type ANAGroupConfig struct {
	// ID is the ANAGRPID, 1..128.
	ID uint32 `mapstructure:"id"`
	// State is optimized (default), non-optimized, inaccessible,
	// persistent-loss or change.
	State string `mapstructure:"state"`
}

// ReferralConfig is a discovery log referral entry (subtype 1) pointing the
// host to another NVMe/RDMA discovery service.
type ReferralConfig struct {
	// Address is the IPv4 or IPv6 literal of the other discovery service;
	// not a wildcard.
	Address string `mapstructure:"address"`
	// ServiceID is its TCP port; default 4420.
	ServiceID int `mapstructure:"service_id"`
	// PortID is its port ID (PORTID of the entry).
	PortID uint16 `mapstructure:"port_id"`
}

// SubsystemConfig is an NVM subsystem: identity, access control and
// namespaces.
type SubsystemConfig struct {
	// NQN is the subsystem NQN (NVMe Base 2.0 §4.5). Required; not the
	// discovery NQN.
	NQN string `mapstructure:"nqn"`
	// Serial is the serial number in Identify Controller: at most 20
	// printable ASCII characters. Default: 16 hex digits derived from the
	// NQN (stable across restarts).
	Serial string `mapstructure:"serial"`
	// Model is the model number: at most 40 printable ASCII characters;
	// default "nvmetd".
	Model string `mapstructure:"model"`
	// FirmwareRevision is the firmware revision: at most 8 printable ASCII
	// characters; default DefaultFirmwareRevision (the program version).
	FirmwareRevision string `mapstructure:"firmware_revision"`
	// AllowAnyHost lets every host connect. When false only AllowedHosts
	// may; the two are exclusive.
	AllowAnyHost bool `mapstructure:"allow_any_host"`
	// AllowedHosts are the host NQNs allowed to connect.
	AllowedHosts []string `mapstructure:"allowed_hosts"`
	// MaxNamespaces is Identify Controller NN, the largest NSID the
	// subsystem may use: default 1024.
	MaxNamespaces uint32 `mapstructure:"max_namespaces"`
	// CNTLIDMin and CNTLIDMax bound the controller IDs handed out: default
	// 1 and 0xFFEF.
	CNTLIDMin uint16 `mapstructure:"cntlid_min"`
	CNTLIDMax uint16 `mapstructure:"cntlid_max"`
	// AuthRequired makes every host authenticate (DH-HMAC-CHAP) before
	// it may use the subsystem; a host without a dhchap_key (hosts[]) then
	// cannot connect. A host with a dhchap_key always authenticates, as
	// with nvmet.
	AuthRequired bool `mapstructure:"auth_required"`
	// Namespaces are the subsystem's namespaces.
	Namespaces []NamespaceConfig `mapstructure:"namespaces"`
}

// NamespaceConfig is one namespace of a subsystem and its backend.
type NamespaceConfig struct {
	// NSID is the namespace ID: 1..MaxNamespaces of the subsystem.
	NSID uint32 `mapstructure:"nsid"`
	// Enabled makes the namespace visible to hosts; default true. A
	// disabled namespace keeps its NSID but its backend is not opened.
	Enabled *bool `mapstructure:"enabled"`
	// Backend is the storage behind the namespace.
	Backend BackendConfig `mapstructure:"backend"`
	// NGUID is the namespace globally unique identifier: 32 hex digits,
	// optionally in the 8-4-4-4-12 form nvmetcli writes. Empty: the target
	// derives one, stable, from the subsystem NQN, the NSID and the backend
	// identity.
	NGUID string `mapstructure:"nguid"`
	// UUID is the namespace UUID in 8-4-4-4-12 form. Empty: derived as NGUID.
	UUID string `mapstructure:"uuid"`
	// EUI64 is the IEEE extended unique identifier: 16 hex digits,
	// optionally separated by ':' or '-' between bytes. Empty: derived as
	// NGUID.
	EUI64 string `mapstructure:"eui64"`
	// ANAGroup is the ANA group ID (ANAGRPID): default 1, 1..128.
	ANAGroup uint32 `mapstructure:"ana_group"`
	// IOWorkers, when positive, gives the namespace a dedicated pool of that
	// many backend workers instead of the shared Tuning.IOWorkers pool.
	IOWorkers int `mapstructure:"io_workers"`
	// Hosts, when not empty, limits the namespace to these host NQNs
	// (SPDK nvmf_ns_add_host): other hosts of the subsystem neither see it
	// in the active namespace lists nor can address it (Invalid
	// Namespace). Empty: every host of the subsystem sees it.
	Hosts []string `mapstructure:"hosts"`
}

// BackendConfig is the configuration file form of backend.Config: the size
// is a string with an optional unit ("1GiB", "10GB", "4096"), parsed by
// backend.ParseSize.
type BackendConfig struct {
	// Kind is "file", "block", "null", "memory" or "rbd" (a Ceph RBD
	// image; needs a build with the rbd tag).
	Kind string `mapstructure:"kind"`
	// Path is the file or block device node (kinds file and block).
	Path string `mapstructure:"path"`
	// Size is the capacity: required for null and memory; for file, the
	// size a missing file is created at (sparse) or a smaller one grown to;
	// for block, the exported prefix of the device (empty: all of it).
	Size string `mapstructure:"size"`
	// BlockSize is the logical block size: 512 or 4096 (0: 512, or the
	// device's for block).
	BlockSize uint32 `mapstructure:"block_size"`
	// ReadOnly exports the namespace write-protected.
	ReadOnly bool `mapstructure:"read_only"`
	// Direct bypasses the page cache (kind file; block is always direct).
	Direct bool `mapstructure:"direct"`
	// CreateDirs creates missing parent directories of a new file.
	CreateDirs bool `mapstructure:"create_dirs"`
	// MustExist refuses to create a missing file.
	MustExist bool `mapstructure:"must_exist"`
	// NoLock skips the advisory lock that keeps two openers off one file.
	NoLock bool `mapstructure:"no_lock"`
	// Exclusive opens the block device O_EXCL (fails if it is mounted).
	Exclusive bool `mapstructure:"exclusive"`
	// DriveDB is a smartmontools drivedb.yaml naming ATA SMART attributes
	// in health reports (kind block).
	DriveDB string `mapstructure:"drive_db"`
	// The Ceph RBD image (kind rbd; see backend.RBDOptions): pool and image
	// are required; rados_namespace, ceph_conf (default
	// /etc/ceph/ceph.conf), client_id (default admin), keyring (default:
	// as ceph.conf says), op_timeout and connect_timeout (default 10s) are
	// optional.
	Pool           string        `mapstructure:"pool"`
	Image          string        `mapstructure:"image"`
	RADOSNamespace string        `mapstructure:"rados_namespace"`
	CephConf       string        `mapstructure:"ceph_conf"`
	ClientID       string        `mapstructure:"client_id"`
	Keyring        string        `mapstructure:"keyring"`
	OpTimeout      time.Duration `mapstructure:"op_timeout"`
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// NoFill leaves read buffers as they are instead of zeroing them (kind
	// null; for benchmarks of the transport, as SPDK's null bdev).
	NoFill bool `mapstructure:"no_fill"`
}

// HostConfig is a known host.
type HostConfig struct {
	// NQN is the host NQN.
	NQN string `mapstructure:"nqn"`
	// Description is free text shown in status and logs.
	Description string `mapstructure:"description"`
	// DHCHAPKey is the host's DH-HMAC-CHAP secret (nvmet dhchap_key):
	// "DHHC-1:<hh>:<base64>:" as nvme gen-dhchap-key prints it, or
	// "file:/path" of a file holding it that only its owner may read
	// (like ssh, a group- or world-readable file is refused). A host with
	// a key must authenticate on every queue. The file is read again on
	// every reload; keys rotated by a reload apply from the host's next
	// authentication, authenticated hosts stay connected.
	DHCHAPKey string `mapstructure:"dhchap_key"`
	// DHCHAPCtrlKey is the controller's secret for this host (nvmet
	// dhchap_ctrl_key), literal or file: as DHCHAPKey: with it the target
	// can answer a host that authenticates the controller too
	// (bidirectional authentication). Needs DHCHAPKey.
	DHCHAPCtrlKey string `mapstructure:"dhchap_ctrl_key"`
	// DHCHAPHash is the preferred hash: "hmac(sha256)" (default),
	// "hmac(sha384)" or "hmac(sha512)" (also "sha256" and the like).
	DHCHAPHash string `mapstructure:"dhchap_hash"`
	// DHCHAPDHGroup is the DH group: "null" (default, no key exchange),
	// "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144" or "ffdhe8192".
	DHCHAPDHGroup string `mapstructure:"dhchap_dhgroup"`
}

// TransportConfig configures the iWARP engine under every port.
type TransportConfig struct {
	// CRC is the MPA CRC policy: "off" (use CRC only if the host asks),
	// "offered" (ask, accept a peer that declines) or "required" (reject a
	// peer without CRC). Default "off".
	CRC string `mapstructure:"crc"`
	// MaxFPDU is the largest FPDU sent in bytes, 32..65528; 0 (default)
	// uses the TCP MSS as siw does.
	MaxFPDU int `mapstructure:"max_fpdu"`
	// ConnectTimeout bounds the MPA exchange of a new connection; default
	// 10s.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// StallTimeout closes a connection whose peer stops in the middle of an
	// FPDU; default 30s.
	StallTimeout time.Duration `mapstructure:"stall_timeout"`
	// WriteTimeout closes a connection whose host takes no bytes for this
	// long while the target has something to send it (a host that stopped
	// reading its socket); default 30s.
	WriteTimeout time.Duration `mapstructure:"write_timeout"`
	// BusyPoll makes receive loops spin for up to this long before parking:
	// lower latency for a busy core; default 0 (off).
	BusyPoll time.Duration `mapstructure:"busy_poll"`
	// SocketSendBuffer and SocketReceiveBuffer set each connection's
	// SO_SNDBUF and SO_RCVBUF ("2MiB", as SPDK); empty or 0 keeps the
	// kernel's default with its automatic tuning.
	SocketSendBuffer    string `mapstructure:"socket_send_buffer"`
	SocketReceiveBuffer string `mapstructure:"socket_receive_buffer"`
	// TCPCongestion is each connection's congestion control
	// (TCP_CONGESTION: "cubic", "bbr" where the kernel has it); empty
	// keeps the kernel's net.ipv4.tcp_congestion_control. A port's
	// tcp_congestion overrides it. docs/wan.md has the measurements.
	TCPCongestion string `mapstructure:"tcp_congestion"`
	// TCPNotSentLowat is each connection's TCP_NOTSENT_LOWAT ("128KiB"):
	// at most this much unsent data queued in the socket; empty or 0
	// keeps the kernel's (no watermark).
	TCPNotSentLowat string `mapstructure:"tcp_notsent_lowat"`
}

// LimitsConfig caps the resources a peer can make the target hold. A
// connection is pending from its TCP accept until a successful Fabrics
// Connect, which must come within transport.connect_timeout; pending
// connections are capped in all and per remote address, and when a cap is
// reached the oldest pending connection is closed to make room, so that a
// flood of connections that never log in cannot keep a legitimate host out.
type LimitsConfig struct {
	// MaxPending caps connections not yet past a successful Fabrics
	// Connect, over all ports; default 128.
	MaxPending int `mapstructure:"max_pending"`
	// MaxPendingPerAddress caps the pending connections of one remote IP
	// address; default 16.
	MaxPendingPerAddress int `mapstructure:"max_pending_per_address"`
	// MaxConnections caps all connections (queues) of the target; default
	// the open file limit (LimitNOFILE) less 64 kept for files and
	// listeners.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxControllersPerHost caps the controllers of one host NQN over all
	// subsystems, discovery included; default 64.
	MaxControllersPerHost int `mapstructure:"max_controllers_per_host"`
	// MaxQueuesPerHost caps the queues (admin and I/O) of one host NQN;
	// default 1024.
	MaxQueuesPerHost int `mapstructure:"max_queues_per_host"`
}

// TuningConfig holds limits and resources of the target.
type TuningConfig struct {
	// IOWorkers is the number of backend workers shared by all namespaces
	// (a slow disk never blocks a socket loop). 0: 8 per CPU, at least 32.
	IOWorkers int `mapstructure:"io_workers"`
	// BufferPoolSize is the registered data buffer memory of each I/O
	// queue (a size string); at least MaxTransferSize. Default 4MiB.
	BufferPoolSize string `mapstructure:"buffer_pool_size"`
	// MaxTransferSize is the largest data transfer of one command (MDTS): a
	// power of two from 4KiB to 8MiB; default 1MiB.
	MaxTransferSize string `mapstructure:"max_transfer_size"`
	// MaxIOQueues is the number of I/O queues a controller may create:
	// 1..1024; 0: the number of CPUs, at least 8 and at most 128.
	MaxIOQueues int `mapstructure:"max_io_queues"`
	// KeepAlive is the keep-alive timeout applied when a host connects
	// with KATO 0 (discovery controllers); default 120s.
	KeepAlive time.Duration `mapstructure:"keep_alive"`
	// KeepAliveMin and KeepAliveMax clamp the KATO a host asks for (the
	// target applies min(max(KATO, min), max)); defaults 1s and 1h.
	KeepAliveMin time.Duration `mapstructure:"keep_alive_min"`
	KeepAliveMax time.Duration `mapstructure:"keep_alive_max"`
	// HealthInterval is how often the target samples backend health (NVMe
	// or ATA SMART); default 1m.
	HealthInterval time.Duration `mapstructure:"health_interval"`
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	d := *c
	d.Ports = cloneSlice(c.Ports)
	for i := range d.Ports {
		d.Ports[i].Subsystems = cloneSlice(d.Ports[i].Subsystems)
		d.Ports[i].Referrals = cloneSlice(d.Ports[i].Referrals)
		d.Ports[i].ANAGroups = cloneSlice(d.Ports[i].ANAGroups)
	}
	d.Subsystems = cloneSlice(c.Subsystems)
	for i := range d.Subsystems {
		s := &d.Subsystems[i]
		s.AllowedHosts = cloneSlice(s.AllowedHosts)
		s.Namespaces = cloneSlice(s.Namespaces)
		for j := range s.Namespaces {
			s.Namespaces[j].Hosts = cloneSlice(s.Namespaces[j].Hosts)
			if e := s.Namespaces[j].Enabled; e != nil {
				v := *e
				s.Namespaces[j].Enabled = &v
			}
		}
	}
	d.Hosts = cloneSlice(c.Hosts)
	return &d
}

// cloneSlice copies s, keeping nil as nil.
func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// Subsystem returns the subsystem with the given NQN, or nil.
func (c *Config) Subsystem(nqn string) *SubsystemConfig {
	for i := range c.Subsystems {
		if c.Subsystems[i].NQN == nqn {
			return &c.Subsystems[i]
		}
	}
	return nil
}

// Host returns the known host with the given NQN, or nil.
func (c *Config) Host(nqn string) *HostConfig {
	for i := range c.Hosts {
		if c.Hosts[i].NQN == nqn {
			return &c.Hosts[i]
		}
	}
	return nil
}

// AdrFam returns the NVMe-oF address family of the port's address
// (nvmeof.AdrFamIPv4 or nvmeof.AdrFamIPv6), or 0 if it is not an IP address.
func (p *PortConfig) AdrFam() uint8 {
	a, err := netip.ParseAddr(p.Address)
	switch {
	case err != nil:
		return 0
	case a.Is4():
		return nvmeof.AdrFamIPv4
	default:
		return nvmeof.AdrFamIPv6
	}
}

// Network returns the Go network to listen on: "tcp4" or "tcp6", so that
// "::" is an IPv6-only wildcard.
func (p *PortConfig) Network() string {
	if p.AdrFam() == nvmeof.AdrFamIPv4 {
		return "tcp4"
	}
	return "tcp6"
}

// ListenAddress returns address:service_id ("[::1]:4420" for IPv6).
func (p *PortConfig) ListenAddress() string {
	return joinHostPort(p.Address, p.ServiceID)
}

// IsWildcard reports whether the port listens on every address of its
// family ("0.0.0.0" or "::").
func (p *PortConfig) IsWildcard() bool {
	a, err := netip.ParseAddr(p.Address)
	return err == nil && a.IsUnspecified()
}

// Port transports (ports[].transport).
const (
	TransportRDMA = "rdma"
	TransportTCP  = "tcp"
)

// IsTCP reports whether the port speaks NVMe/TCP.
func (p *PortConfig) IsTCP() bool { return p.Transport == TransportTCP }

// TrType is the port's TRTYPE in discovery log entries.
func (p *PortConfig) TrType() uint8 {
	if p.IsTCP() {
		return nvmeof.TrTypeTCP
	}
	return nvmeof.TrTypeRDMA
}

// ListenAddress returns address:service_id of the referral.
func (r *ReferralConfig) ListenAddress() string {
	return joinHostPort(r.Address, r.ServiceID)
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// IsEnabled reports whether the namespace is enabled (Enabled unset means
// true).
func (n *NamespaceConfig) IsEnabled() bool {
	return n.Enabled == nil || *n.Enabled
}

// BackendConfig converts the namespace's backend section to a
// backend.Config for backend.Open, parsing the size.
func (n *NamespaceConfig) BackendConfig() (backend.Config, error) {
	return n.Backend.Config()
}

// Config converts b to a backend.Config, parsing the size.
func (b *BackendConfig) Config() (backend.Config, error) {
	cfg := backend.Config{
		Kind:       backend.Kind(b.Kind),
		Path:       b.Path,
		BlockSize:  b.BlockSize,
		ReadOnly:   b.ReadOnly,
		Direct:     b.Direct,
		CreateDirs: b.CreateDirs,
		MustExist:  b.MustExist,
		NoLock:     b.NoLock,
		Exclusive:  b.Exclusive,
		DriveDB:    b.DriveDB,

		Pool:           b.Pool,
		Image:          b.Image,
		RADOSNamespace: b.RADOSNamespace,
		CephConf:       b.CephConf,
		ClientID:       b.ClientID,
		Keyring:        b.Keyring,
		OpTimeout:      b.OpTimeout,
		ConnectTimeout: b.ConnectTimeout,
		NoFill:         b.NoFill,
	}
	if b.Size != "" {
		n, err := backend.ParseSize(b.Size)
		if err != nil {
			return cfg, &FieldError{Field: "size", Reason: sizeReason(err), Err: err}
		}
		cfg.Size = n
	}
	return cfg, nil
}

// Identifiers returns the namespace identifiers set in the configuration
// (the Has fields say which); the target derives the others.
func (n *NamespaceConfig) Identifiers() (nvmeof.NSIdentifiers, error) {
	var ids nvmeof.NSIdentifiers
	var err error
	if n.NGUID != "" {
		if ids.NGUID, err = ParseNGUID(n.NGUID); err != nil {
			return ids, &FieldError{Field: "nguid", Reason: err.Error(), Err: err}
		}
		ids.HasNGUID = true
	}
	if n.UUID != "" {
		if ids.UUID, err = parseUUID(n.UUID); err != nil {
			return ids, &FieldError{Field: "uuid", Reason: err.Error(), Err: err}
		}
		ids.HasUUID = true
	}
	if n.EUI64 != "" {
		if ids.EUI64, err = ParseEUI64(n.EUI64); err != nil {
			return ids, &FieldError{Field: "eui64", Reason: err.Error(), Err: err}
		}
		ids.HasEUI64 = true
	}
	return ids, nil
}

// ParseNGUID parses an NGUID: 32 hex digits, or the 8-4-4-4-12 form. The
// all-zero value is rejected (it means "not reported").
func ParseNGUID(s string) ([16]byte, error) {
	var id [16]byte
	h := s
	if len(s) == 36 {
		u, err := nvmeof.ParseUUID(s)
		if err != nil {
			return id, fmt.Errorf("%q is not 32 hex digits or the 8-4-4-4-12 form", s)
		}
		id = u
	} else {
		if len(h) != 32 {
			return id, fmt.Errorf("%q is not 32 hex digits or the 8-4-4-4-12 form", s)
		}
		if _, err := hex.Decode(id[:], []byte(h)); err != nil {
			return id, fmt.Errorf("%q is not 32 hex digits or the 8-4-4-4-12 form", s)
		}
	}
	if id == ([16]byte{}) {
		return id, errors.New("all zeroes is reserved (it means no NGUID)")
	}
	return id, nil
}

// ParseEUI64 parses an EUI-64: 16 hex digits, optionally with ':' or '-'
// between every byte. The all-zero value is rejected.
func ParseEUI64(s string) ([8]byte, error) {
	var id [8]byte
	h := s
	if len(s) == 23 {
		sep := s[2]
		if sep != ':' && sep != '-' {
			return id, fmt.Errorf("%q is not 16 hex digits (optionally separated by : or -)", s)
		}
		var b strings.Builder
		for i := 0; i < 8; i++ {
			if i > 0 && s[3*i-1] != sep {
				return id, fmt.Errorf("%q is not 16 hex digits (optionally separated by : or -)", s)
			}
			b.WriteString(s[3*i : 3*i+2])
		}
		h = b.String()
	}
	if len(h) != 16 {
		return id, fmt.Errorf("%q is not 16 hex digits (optionally separated by : or -)", s)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, fmt.Errorf("%q is not 16 hex digits (optionally separated by : or -)", s)
	}
	if id == ([8]byte{}) {
		return id, errors.New("all zeroes is reserved (it means no EUI-64)")
	}
	return id, nil
}

// parseUUID parses a namespace UUID, rejecting the nil UUID.
func parseUUID(s string) ([16]byte, error) {
	id, err := nvmeof.ParseUUID(s)
	if err != nil {
		return id, fmt.Errorf("%q is not a UUID in 8-4-4-4-12 hex form", s)
	}
	if id == ([16]byte{}) {
		return id, errors.New("the nil UUID is reserved (it means no UUID)")
	}
	return id, nil
}

// MaxTransferBytes returns MaxTransferSize in bytes, or 0 if it does not
// parse (Validate rejects that).
func (t *TuningConfig) MaxTransferBytes() int64 {
	n, _ := backend.ParseSize(t.MaxTransferSize)
	return n
}

// MDTS returns the Identify Controller MDTS for MaxTransferSize: the power
// of two of 4 KiB pages (1 MiB → 8), or 0 if the size is invalid.
func (t *TuningConfig) MDTS() uint8 {
	n := t.MaxTransferBytes()
	var mdts uint8
	for n > pageSize {
		n >>= 1
		mdts++
	}
	if n != pageSize {
		return 0
	}
	return mdts
}

// BufferPoolBytes returns BufferPoolSize in bytes, or 0 if it does not
// parse (Validate rejects that).
func (t *TuningConfig) BufferPoolBytes() int64 {
	n, _ := backend.ParseSize(t.BufferPoolSize)
	return n
}

// RDMA returns the NVMe/RDMA transport configuration of the transport
// settings (the caller sets Admission).
func (t *TransportConfig) RDMA() (rdma.TransportConfig, error) {
	var cfg rdma.TransportConfig
	crc := t.CRC
	if crc == "" {
		crc = DefaultCRC
	}
	p, err := rdma.ParseCRCPolicy(crc)
	if err != nil {
		return cfg, &FieldError{Field: "crc", Reason: fmt.Sprintf("%q is not one of off, offered, required", t.CRC), Err: err}
	}
	cfg.CRC = p
	cfg.MaxFPDU = t.MaxFPDU
	cfg.ConnectTimeout = t.ConnectTimeout
	cfg.StallTimeout = t.StallTimeout
	cfg.WriteTimeout = t.WriteTimeout
	cfg.BusyPoll = t.BusyPoll
	for _, b := range []struct {
		field string
		val   string
		dst   *int
	}{{"socket_send_buffer", t.SocketSendBuffer, &cfg.SocketSendBuffer}, {"socket_receive_buffer", t.SocketReceiveBuffer, &cfg.SocketReceiveBuffer}} {
		if b.val == "" {
			continue
		}
		n, err := backend.ParseSize(b.val)
		if err != nil || n < 0 || n > 1<<30 {
			return cfg, &FieldError{Field: b.field, Reason: fmt.Sprintf("%q is not a size from 0 to 1GiB", b.val), Err: err}
		}
		*b.dst = int(n)
	}
	cfg.TCP.Congestion = t.TCPCongestion
	if t.TCPNotSentLowat != "" {
		n, err := backend.ParseSize(t.TCPNotSentLowat)
		if err != nil || n < 0 || n > 1<<30 {
			return cfg, &FieldError{Field: "tcp_notsent_lowat", Reason: fmt.Sprintf("%q is not a size from 0 to 1GiB", t.TCPNotSentLowat), Err: err}
		}
		cfg.TCP.NotSentLowat = int(n)
	}
	if err := cfg.TCP.Probe(); err != nil {
		return cfg, &FieldError{Field: "tcp_congestion", Reason: err.Error(), Err: err}
	}
	return cfg, nil
}
