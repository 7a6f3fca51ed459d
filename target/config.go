package target

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/iwarp"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// This file is the target's configuration model: plain structs with
// mapstructure tags (snake_case keys, the vocabulary of nvmetcli's
// config.json where one exists), defaults, validation with errors that name
// the field path, and Diff for reloads. Loading (YAML, environment) lives in
// cmd/nvmetd; this package never imports viper.
//
// Mapping from nvmetcli's config.json: ports[].portid → ports[].id,
// addr.traddr → address, addr.trsvcid → service_id, addr.adrfam → derived
// from the address, addr.trtype is always rdma, param.inline_data_size →
// inline_data_size; subsystems[].attr.{serial,model,firmware,allow_any_host,
// cntlid_min,cntlid_max} → serial, model, firmware_revision, allow_any_host,
// cntlid_min, cntlid_max; namespaces[].device.{path,nguid,uuid} →
// backend.path, nguid, uuid; namespaces[].enable → enabled; ana_grpid →
// ana_group.

// Defaults and limits of the configuration.
const (
	// DefaultServiceID is the TCP port a port listens on: the IANA NVMe/RDMA
	// port (trsvcid 4420).
	DefaultServiceID = nvmeof.DefaultPort

	// DefaultInlineDataSize is the in-capsule data size of I/O queues,
	// nvmet-rdma's default (one page).
	DefaultInlineDataSize = nvmeof.NvmetDefaultInlineDataSize
	// MaxInlineDataSize is the largest in-capsule data size accepted,
	// nvmet-rdma's limit. Every I/O queue posts queue-size receive buffers of
	// 64 bytes plus this size, so 16 KiB already costs 2 MiB per 128-deep
	// queue; the Linux host does not send more than it can describe in its
	// few send SGEs anyway.
	MaxInlineDataSize = nvmeof.NvmetMaxInlineDataSize

	// DefaultQueueSize is the default maximum I/O queue size (entries) a
	// port grants; the Linux host asks for 128 by default.
	DefaultQueueSize = 128
	// MinQueueSize and MaxQueueSizeLimit bound PortConfig.MaxQueueSize
	// (nvmet's NVMET_MIN_QUEUE_SIZE and NVMET_MAX_QUEUE_SIZE).
	MinQueueSize      = 16
	MaxQueueSizeLimit = 1024

	// DefaultModel is the Identify Controller model number.
	DefaultModel = "nvmetd"
	// DefaultMaxNamespaces is the default Identify Controller NN (and the
	// largest NSID), nvmet's NVMET_MAX_NAMESPACES.
	DefaultMaxNamespaces = 1024
	// DefaultCNTLIDMin and DefaultCNTLIDMax bound the controller IDs a
	// subsystem hands out (0xFFF0..0xFFFF are reserved, NVMe Base 2.0 §3.1.3).
	DefaultCNTLIDMin = 1
	DefaultCNTLIDMax = 0xFFEF

	// MaxNSID is the largest NSID: 0 is reserved and 0xFFFFFFFF is the
	// broadcast NSID.
	MaxNSID = 0xFFFFFFFE

	// DefaultANAGroup is the ANA group of a namespace; MaxANAGroup is the
	// largest ANAGRPID accepted (nvmet's NVMET_MAX_ANAGRPS).
	DefaultANAGroup = 1
	MaxANAGroup     = 128

	// Serial, model and firmware revision lengths in Identify Controller
	// (ASCII, space padded).
	MaxSerialLen   = 20
	MaxModelLen    = 40
	MaxFirmwareLen = 8

	// DefaultCRC is the MPA CRC policy: "off" answers a peer that asks for
	// CRC with CRC and otherwise runs without, as stock siw does.
	DefaultCRC = "off"
	// DefaultConnectTimeout bounds the MPA exchange of a new connection.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultStallTimeout closes a connection whose peer stops in the middle
	// of an FPDU.
	DefaultStallTimeout = 30 * time.Second

	// DefaultMaxTransferSize is the MDTS: 1 MiB as nvmet-rdma (2^8 pages).
	DefaultMaxTransferSize = "1MiB"
	// DefaultBufferPoolSize is the registered data buffer memory per I/O
	// queue: four maximum-size transfers, or 256 4 KiB ones, in flight.
	DefaultBufferPoolSize = "4MiB"
	// DefaultKeepAlive is the keep-alive timeout applied when a host
	// connects with KATO 0 (nvmet applies 120 s to discovery controllers).
	DefaultKeepAlive = 120 * time.Second
	// DefaultKeepAliveMin and DefaultKeepAliveMax clamp the KATO hosts ask
	// for.
	DefaultKeepAliveMin = 1 * time.Second
	DefaultKeepAliveMax = 1 * time.Hour
	// DefaultHealthInterval is how often backend health is sampled.
	DefaultHealthInterval = time.Minute
)

// The memory page size the MDTS is expressed in (CAP.MPSMIN, 4 KiB).
const pageSize = 4096

// maxTransferLimit is the largest MDTS accepted: 8 MiB, since one keyed SGL
// data block describes less than 16 MiB (nvmeof.MaxKeyedSGLLength).
const maxTransferLimit = 8 << 20

// DefaultFirmwareRevision is the Identify Controller firmware revision given
// to subsystems that do not set one. The daemon sets it to its version
// (at most MaxFirmwareLen printable ASCII characters) before it loads a
// configuration.
var DefaultFirmwareRevision = "dev"

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
}

// HostConfig is a known host.
type HostConfig struct {
	// NQN is the host NQN.
	NQN string `mapstructure:"nqn"`
	// Description is free text shown in status and logs.
	Description string `mapstructure:"description"`
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
	// BusyPoll makes receive loops spin for up to this long before parking:
	// lower latency for a busy core; default 0 (off).
	BusyPoll time.Duration `mapstructure:"busy_poll"`
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

// Defaults returns a configuration with no ports, subsystems or hosts and
// every transport and tuning setting at its default.
func Defaults() *Config {
	c := &Config{}
	c.ApplyDefaults()
	return c
}

// ApplyDefaults fills every unset (zero) field with its default, in place:
// port IDs, service IDs, queue and inline sizes, serial numbers, model,
// firmware revision, namespace limits, CNTLID ranges, Enabled, ANA groups,
// transport and tuning. It does not invent ports, subsystems or namespaces
// and leaves values it cannot default (NQNs, addresses, backends) alone.
func (c *Config) ApplyDefaults() {
	used := map[uint16]bool{}
	for _, p := range c.Ports {
		used[p.ID] = true
	}
	next := uint16(1)
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.ID == 0 {
			for used[next] && next < math.MaxUint16 {
				next++
			}
			p.ID = next
			used[next] = true
		}
		if p.ServiceID == 0 {
			p.ServiceID = DefaultServiceID
		}
		if p.InlineDataSize == 0 {
			p.InlineDataSize = DefaultInlineDataSize
		}
		if p.MaxQueueSize == 0 {
			p.MaxQueueSize = DefaultQueueSize
		}
		for j := range p.Referrals {
			if p.Referrals[j].ServiceID == 0 {
				p.Referrals[j].ServiceID = DefaultServiceID
			}
		}
	}
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		if s.Serial == "" && s.NQN != "" {
			s.Serial = DerivedSerial(s.NQN)
		}
		if s.Model == "" {
			s.Model = DefaultModel
		}
		if s.FirmwareRevision == "" {
			s.FirmwareRevision = DefaultFirmwareRevision
		}
		if s.MaxNamespaces == 0 {
			s.MaxNamespaces = DefaultMaxNamespaces
		}
		if s.CNTLIDMin == 0 {
			s.CNTLIDMin = DefaultCNTLIDMin
		}
		if s.CNTLIDMax == 0 {
			s.CNTLIDMax = DefaultCNTLIDMax
		}
		for j := range s.Namespaces {
			n := &s.Namespaces[j]
			if n.Enabled == nil {
				t := true
				n.Enabled = &t
			}
			if n.ANAGroup == 0 {
				n.ANAGroup = DefaultANAGroup
			}
		}
	}
	t := &c.Transport
	if t.CRC == "" {
		t.CRC = DefaultCRC
	}
	if t.ConnectTimeout == 0 {
		t.ConnectTimeout = DefaultConnectTimeout
	}
	if t.StallTimeout == 0 {
		t.StallTimeout = DefaultStallTimeout
	}
	u := &c.Tuning
	if u.IOWorkers == 0 {
		u.IOWorkers = max(32, 8*runtime.NumCPU())
	}
	if u.BufferPoolSize == "" {
		u.BufferPoolSize = DefaultBufferPoolSize
	}
	if u.MaxTransferSize == "" {
		u.MaxTransferSize = DefaultMaxTransferSize
	}
	if u.MaxIOQueues == 0 {
		u.MaxIOQueues = min(max(8, runtime.NumCPU()), 128)
	}
	if u.KeepAlive == 0 {
		u.KeepAlive = DefaultKeepAlive
	}
	if u.KeepAliveMin == 0 {
		u.KeepAliveMin = DefaultKeepAliveMin
	}
	if u.KeepAliveMax == 0 {
		u.KeepAliveMax = DefaultKeepAliveMax
	}
	if u.HealthInterval == 0 {
		u.HealthInterval = DefaultHealthInterval
	}
}

// DerivedSerial is the default serial number of the subsystem nqn: the
// first 16 hex digits of its SHA-256, stable across restarts and hosts.
func DerivedSerial(nqn string) string {
	sum := sha256.Sum256([]byte(nqn))
	return hex.EncodeToString(sum[:8])
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	d := *c
	d.Ports = cloneSlice(c.Ports)
	for i := range d.Ports {
		d.Ports[i].Subsystems = cloneSlice(d.Ports[i].Subsystems)
		d.Ports[i].Referrals = cloneSlice(d.Ports[i].Referrals)
	}
	d.Subsystems = cloneSlice(c.Subsystems)
	for i := range d.Subsystems {
		s := &d.Subsystems[i]
		s.AllowedHosts = cloneSlice(s.AllowedHosts)
		s.Namespaces = cloneSlice(s.Namespaces)
		for j := range s.Namespaces {
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

// IWARP returns the iwarp.Config for the transport settings (the caller
// sets Logger).
func (t *TransportConfig) IWARP() (iwarp.Config, error) {
	var cfg iwarp.Config
	crc := t.CRC
	if crc == "" {
		crc = DefaultCRC
	}
	p, err := iwarp.ParseCRCPolicy(crc)
	if err != nil {
		return cfg, &FieldError{Field: "crc", Reason: fmt.Sprintf("%q is not one of off, offered, required", t.CRC), Err: err}
	}
	cfg.CRC = p
	cfg.MaxFPDU = t.MaxFPDU
	cfg.ConnectTimeout = t.ConnectTimeout
	cfg.StallTimeout = t.StallTimeout
	cfg.BusyPoll = t.BusyPoll
	return cfg, nil
}

// FieldError is one invalid configuration value.
type FieldError struct {
	// Field is the path of the value, e.g. "subsystems[0].namespaces[1].nsid".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, if any (a *backend.ConfigError, an
	// nvmeof.ValidateNQN error, ...).
	Err error
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// ValidationError is every problem Validate found, in configuration order.
type ValidationError struct {
	Problems []*FieldError
}

// Error lists the problems, one per line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, so errors.As finds a *FieldError.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// validator collects problems.
type validator struct {
	problems []*FieldError
}

func (v *validator) add(field, format string, args ...any) {
	v.problems = append(v.problems, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) addErr(field, reason string, err error) {
	v.problems = append(v.problems, &FieldError{Field: field, Reason: reason, Err: err})
}

// Validate checks the configuration as ApplyDefaults would complete it (c
// itself is not modified) and returns nil or a *ValidationError listing
// every problem, each naming the field path. It does not touch the file
// system or the network.
func (c *Config) Validate() error {
	d := c.Clone()
	d.ApplyDefaults()
	var v validator
	d.validateSubsystems(&v)
	d.validatePorts(&v)
	d.validateHosts(&v)
	d.Transport.validate(&v, "transport")
	d.Tuning.validate(&v, "tuning")
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

// nqnReason turns an nvmeof.ValidateNQN error into a reason.
func nqnReason(s string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "nvmeof: ")
	msg = strings.TrimSuffix(msg, ": "+nvmeof.ErrMalformed.Error())
	msg = strings.TrimPrefix(msg, "NQN ")
	msg = strings.TrimPrefix(msg, strconv.Quote(s))
	msg = strings.TrimPrefix(msg, ":")
	return fmt.Sprintf("%q is not a valid NQN: %s", s, strings.TrimSpace(msg))
}

// sizeReason turns a backend.ParseSize error into a reason.
func sizeReason(err error) string {
	return strings.TrimPrefix(err.Error(), "backend: size ")
}

// checkASCII checks an Identify string field.
func checkASCII(v *validator, field, s string, maxLen int) {
	if len(s) > maxLen {
		v.add(field, "%q is %d bytes long (at most %d)", s, len(s), maxLen)
		return
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			v.add(field, "%q has a byte that is not printable ASCII at offset %d", s, i)
			return
		}
	}
	if strings.TrimSpace(s) != s {
		v.add(field, "%q has leading or trailing spaces (Identify pads with spaces, so they would be lost)", s)
	}
}

func (c *Config) validateSubsystems(v *validator) {
	nqns := map[string]int{}
	ids := map[string]string{} // "nguid:..." → field that set it
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		sp := fmt.Sprintf("subsystems[%d]", i)
		switch {
		case s.NQN == "":
			v.add(sp+".nqn", "missing (every subsystem needs an NQN)")
		case nvmeof.IsDiscoveryNQN(s.NQN):
			v.add(sp+".nqn", "%q is the discovery NQN, which the target serves itself", s.NQN)
		default:
			if err := nvmeof.ValidateNQN(s.NQN); err != nil {
				v.addErr(sp+".nqn", nqnReason(s.NQN, err), err)
			} else if j, dup := nqns[s.NQN]; dup {
				v.add(sp+".nqn", "%q is also subsystems[%d].nqn", s.NQN, j)
			} else {
				nqns[s.NQN] = i
			}
		}
		checkASCII(v, sp+".serial", s.Serial, MaxSerialLen)
		checkASCII(v, sp+".model", s.Model, MaxModelLen)
		checkASCII(v, sp+".firmware_revision", s.FirmwareRevision, MaxFirmwareLen)
		if s.AllowAnyHost && len(s.AllowedHosts) > 0 {
			v.add(sp+".allowed_hosts", "has no effect when allow_any_host is true (remove one of them)")
		}
		hosts := map[string]int{}
		for j, h := range s.AllowedHosts {
			hp := fmt.Sprintf("%s.allowed_hosts[%d]", sp, j)
			if err := nvmeof.ValidateNQN(h); err != nil {
				v.addErr(hp, nqnReason(h, err), err)
				continue
			}
			if nvmeof.IsDiscoveryNQN(h) {
				v.add(hp, "%q is the discovery NQN, not a host NQN", h)
				continue
			}
			if k, dup := hosts[h]; dup {
				v.add(hp, "%q is also allowed_hosts[%d]", h, k)
				continue
			}
			hosts[h] = j
		}
		if s.MaxNamespaces > MaxNSID {
			v.add(sp+".max_namespaces", "%d is above the largest NSID %d", s.MaxNamespaces, uint32(MaxNSID))
		}
		if s.CNTLIDMin > DefaultCNTLIDMax {
			v.add(sp+".cntlid_min", "%d is above %d (0xFFF0..0xFFFF are reserved)", s.CNTLIDMin, DefaultCNTLIDMax)
		}
		if s.CNTLIDMax > DefaultCNTLIDMax {
			v.add(sp+".cntlid_max", "%d is above %d (0xFFF0..0xFFFF are reserved)", s.CNTLIDMax, DefaultCNTLIDMax)
		} else if s.CNTLIDMax < s.CNTLIDMin && s.CNTLIDMin <= DefaultCNTLIDMax {
			v.add(sp+".cntlid_max", "%d is below cntlid_min %d", s.CNTLIDMax, s.CNTLIDMin)
		}
		// Unique NSIDs up to max_namespaces also bound the namespace count.
		nsids := map[uint32]int{}
		for j := range s.Namespaces {
			n := &s.Namespaces[j]
			np := fmt.Sprintf("%s.namespaces[%d]", sp, j)
			switch {
			case n.NSID == 0 || n.NSID > MaxNSID:
				v.add(np+".nsid", "%d is reserved (must be 1..%d)", n.NSID, uint32(MaxNSID))
			case n.NSID > s.MaxNamespaces:
				v.add(np+".nsid", "%d is above the subsystem's max_namespaces %d (the largest NSID hosts accept; raise max_namespaces)", n.NSID, s.MaxNamespaces)
			default:
				if k, dup := nsids[n.NSID]; dup {
					v.add(np+".nsid", "%d is also %s.namespaces[%d].nsid", n.NSID, sp, k)
				} else {
					nsids[n.NSID] = j
				}
			}
			n.validate(v, np, ids)
		}
	}
}

// validate checks a namespace; ids maps identifiers already seen to the
// field that set them, for uniqueness across the whole configuration.
func (n *NamespaceConfig) validate(v *validator, np string, ids map[string]string) {
	bp := np + ".backend"
	bc, err := n.Backend.Config()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(bp+"."+fe.Field, fe.Reason, fe.Err)
		}
	} else if err := bc.Validate(); err != nil {
		var ce *backend.ConfigError
		if errors.As(err, &ce) {
			reason := ce.Reason
			if ce.Field == "kind" && bc.Kind == "" {
				// A bare `kind: null` in YAML is the null value, not "null".
				reason += `; write "null" in quotes for the null backend`
			}
			v.addErr(bp+"."+ce.Field, reason, err)
		} else {
			v.addErr(bp, err.Error(), err)
		}
	}
	ident, err := n.Identifiers()
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(np+"."+fe.Field, fe.Reason, fe.Err)
		}
	} else {
		check := func(field, kind string, has bool, b []byte) {
			if !has {
				return
			}
			key := kind + ":" + hex.EncodeToString(b)
			if other, dup := ids[key]; dup {
				v.add(np+"."+field, "%s is also %s (namespace identifiers must be unique)", kind, other)
				return
			}
			ids[key] = np + "." + field
		}
		check("nguid", "nguid", ident.HasNGUID, ident.NGUID[:])
		check("uuid", "uuid", ident.HasUUID, ident.UUID[:])
		check("eui64", "eui64", ident.HasEUI64, ident.EUI64[:])
	}
	if n.ANAGroup > MaxANAGroup {
		v.add(np+".ana_group", "%d is out of range (must be 1..%d)", n.ANAGroup, MaxANAGroup)
	}
	if n.IOWorkers < 0 || n.IOWorkers > 4096 {
		v.add(np+".io_workers", "%d is out of range (0 for the shared pool, or 1..4096)", n.IOWorkers)
	}
}

// parseIP parses a configured address, explaining what is wrong.
func parseIP(s string) (netip.Addr, string) {
	if s == "" {
		return netip.Addr{}, "missing (an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::)"
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
			return a, fmt.Sprintf("%q is not an IP address (give the port in service_id, and no brackets)", s)
		}
		if strings.Trim(s, "0123456789.") == "" {
			return a, fmt.Sprintf("%q is not an IP address", s)
		}
		return a, fmt.Sprintf("%q is not an IP address (host names are not resolved)", s)
	}
	if a.Is4In6() {
		return a, fmt.Sprintf("%q is an IPv4-mapped IPv6 address; write it as %s", s, a.Unmap())
	}
	return a, ""
}

func (c *Config) validatePorts(v *validator) {
	ids := map[uint16]int{}
	type listen struct {
		fam  uint8
		addr netip.Addr
		svc  int
	}
	var listens []struct {
		l listen
		i int
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		pp := fmt.Sprintf("ports[%d]", i)
		if j, dup := ids[p.ID]; dup {
			v.add(pp+".id", "%d is also ports[%d].id", p.ID, j)
		} else {
			ids[p.ID] = i
		}
		addr, reason := parseIP(p.Address)
		if reason != "" {
			v.add(pp+".address", "%s", reason)
		}
		if p.ServiceID < 1 || p.ServiceID > 65535 {
			v.add(pp+".service_id", "%d is not a TCP port (1..65535)", p.ServiceID)
		}
		if reason == "" && p.ServiceID >= 1 && p.ServiceID <= 65535 {
			l := listen{fam: p.AdrFam(), addr: addr, svc: p.ServiceID}
			for _, o := range listens {
				if o.l.fam != l.fam || o.l.svc != l.svc {
					continue
				}
				if o.l.addr == l.addr {
					v.add(pp+".address", "%s is also the listen address of ports[%d]", p.ListenAddress(), o.i)
				} else if o.l.addr.IsUnspecified() || l.addr.IsUnspecified() {
					v.add(pp+".address", "%s overlaps ports[%d] at %s (a wildcard address takes the service ID on every address of its family)",
						p.ListenAddress(), o.i, c.Ports[o.i].ListenAddress())
				} else {
					continue
				}
				break
			}
			listens = append(listens, struct {
				l listen
				i int
			}{l, i})
		}
		switch {
		case p.InlineDataSize < 0 || p.InlineDataSize > MaxInlineDataSize:
			v.add(pp+".inline_data_size", "%d is out of range (1..%d; 0 for the default %d)", p.InlineDataSize, MaxInlineDataSize, DefaultInlineDataSize)
		case p.InlineDataSize%16 != 0:
			v.add(pp+".inline_data_size", "%d is not a multiple of 16 (IOCCSZ counts 16-byte units)", p.InlineDataSize)
		}
		if p.MaxQueueSize < MinQueueSize || p.MaxQueueSize > MaxQueueSizeLimit {
			v.add(pp+".max_queue_size", "%d is out of range (%d..%d)", p.MaxQueueSize, MinQueueSize, MaxQueueSizeLimit)
		}
		served := map[string]int{}
		for j, nqn := range p.Subsystems {
			sp := fmt.Sprintf("%s.subsystems[%d]", pp, j)
			if k, dup := served[nqn]; dup {
				v.add(sp, "%q is also %s.subsystems[%d]", nqn, pp, k)
				continue
			}
			served[nqn] = j
			if c.Subsystem(nqn) == nil {
				if nvmeof.IsDiscoveryNQN(nqn) {
					v.add(sp, "%q is the discovery NQN, which every port serves; list only NVM subsystems", nqn)
				} else {
					v.add(sp, "%q is not the NQN of a configured subsystem", nqn)
				}
			}
		}
		refs := map[string]int{}
		for j := range p.Referrals {
			r := &p.Referrals[j]
			rp := fmt.Sprintf("%s.referrals[%d]", pp, j)
			a, reason := parseIP(r.Address)
			switch {
			case reason != "":
				v.add(rp+".address", "%s", reason)
			case a.IsUnspecified():
				v.add(rp+".address", "%q is a wildcard; a referral needs an address hosts can connect to", r.Address)
			}
			if r.ServiceID < 1 || r.ServiceID > 65535 {
				v.add(rp+".service_id", "%d is not a TCP port (1..65535)", r.ServiceID)
			}
			key := r.ListenAddress()
			if k, dup := refs[key]; dup {
				v.add(rp, "%s is also %s.referrals[%d]", key, pp, k)
			} else {
				refs[key] = j
			}
		}
	}
}

func (c *Config) validateHosts(v *validator) {
	seen := map[string]int{}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		hp := fmt.Sprintf("hosts[%d].nqn", i)
		if h.NQN == "" {
			v.add(hp, "missing")
			continue
		}
		if err := nvmeof.ValidateNQN(h.NQN); err != nil {
			v.addErr(hp, nqnReason(h.NQN, err), err)
			continue
		}
		if nvmeof.IsDiscoveryNQN(h.NQN) {
			v.add(hp, "%q is the discovery NQN, not a host NQN", h.NQN)
			continue
		}
		if j, dup := seen[h.NQN]; dup {
			v.add(hp, "%q is also hosts[%d].nqn", h.NQN, j)
			continue
		}
		seen[h.NQN] = i
	}
}

func (t *TransportConfig) validate(v *validator, tp string) {
	if _, err := t.IWARP(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			v.addErr(tp+"."+fe.Field, fe.Reason, fe.Err)
		}
	}
	if t.MaxFPDU != 0 && (t.MaxFPDU < 32 || t.MaxFPDU > 65528) {
		v.add(tp+".max_fpdu", "%d is out of range (32..65528, or 0 for the TCP MSS)", t.MaxFPDU)
	}
	for _, d := range []struct {
		name string
		val  time.Duration
	}{{"connect_timeout", t.ConnectTimeout}, {"stall_timeout", t.StallTimeout}, {"busy_poll", t.BusyPoll}} {
		if d.val < 0 {
			v.add(tp+"."+d.name, "%s is negative", d.val)
		}
	}
	if t.BusyPoll > time.Second {
		v.add(tp+".busy_poll", "%s is longer than 1s (it is how long a receive loop spins before sleeping)", t.BusyPoll)
	}
}

func (u *TuningConfig) validate(v *validator, tp string) {
	if u.IOWorkers < 1 || u.IOWorkers > 65536 {
		v.add(tp+".io_workers", "%d is out of range (1..65536, or 0 for 8 per CPU)", u.IOWorkers)
	}
	mts, err := backend.ParseSize(u.MaxTransferSize)
	switch {
	case err != nil:
		v.addErr(tp+".max_transfer_size", sizeReason(err), err)
	case mts < pageSize || mts > maxTransferLimit || mts&(mts-1) != 0:
		mts = 0 // do not compare the buffer pool with it
		v.add(tp+".max_transfer_size", "%s is not a power of two from 4KiB to 8MiB (MDTS counts powers of two of 4 KiB pages)", u.MaxTransferSize)
	}
	bps, err := backend.ParseSize(u.BufferPoolSize)
	switch {
	case err != nil:
		v.addErr(tp+".buffer_pool_size", sizeReason(err), err)
	case bps%pageSize != 0 || bps <= 0:
		v.add(tp+".buffer_pool_size", "%s is not a positive multiple of 4KiB", u.BufferPoolSize)
	case mts > 0 && bps < mts:
		v.add(tp+".buffer_pool_size", "%s is smaller than max_transfer_size %s (a maximum-size command could never get a buffer)", u.BufferPoolSize, u.MaxTransferSize)
	case bps > 1<<30:
		v.add(tp+".buffer_pool_size", "%s is above 1GiB per queue", u.BufferPoolSize)
	}
	if u.MaxIOQueues < 1 || u.MaxIOQueues > 1024 {
		v.add(tp+".max_io_queues", "%d is out of range (1..1024, or 0 for the number of CPUs)", u.MaxIOQueues)
	}
	// KATO is a 32-bit count of milliseconds.
	const maxKATO = time.Duration(math.MaxUint32) * time.Millisecond
	for _, d := range []struct {
		name string
		val  time.Duration
	}{{"keep_alive", u.KeepAlive}, {"keep_alive_min", u.KeepAliveMin}, {"keep_alive_max", u.KeepAliveMax}} {
		switch {
		case d.val < time.Second:
			v.add(tp+"."+d.name, "%s is below 1s (nvmet rounds keep-alive timeouts up to whole seconds)", d.val)
		case d.val > maxKATO:
			v.add(tp+"."+d.name, "%s is above %s (KATO is 32-bit milliseconds)", d.val, maxKATO)
		}
	}
	if u.KeepAliveMin > u.KeepAliveMax {
		v.add(tp+".keep_alive_min", "%s is above keep_alive_max %s", u.KeepAliveMin, u.KeepAliveMax)
	} else if u.KeepAlive < u.KeepAliveMin || u.KeepAlive > u.KeepAliveMax {
		v.add(tp+".keep_alive", "%s is outside keep_alive_min..keep_alive_max (%s..%s)", u.KeepAlive, u.KeepAliveMin, u.KeepAliveMax)
	}
	if u.HealthInterval < time.Second {
		v.add(tp+".health_interval", "%s is below 1s (health reads may issue SMART commands to the device)", u.HealthInterval)
	}
}

// Warnings returns problems that do not make the configuration invalid but
// are probably mistakes: subsystems served on no port, ports that serve no
// subsystem, subsystems no host may connect to, and allow_any_host on a
// port reachable beyond the loopback interface. Call it on a valid
// configuration.
func (c *Config) Warnings() []string {
	var w []string
	served := map[string]bool{}
	for i := range c.Ports {
		p := &c.Ports[i]
		for _, nqn := range p.Subsystems {
			served[nqn] = true
		}
		if len(p.Subsystems) == 0 {
			w = append(w, fmt.Sprintf("ports[%d] (%s) serves no subsystem, only discovery", i, p.ListenAddress()))
		}
	}
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		if !served[s.NQN] {
			w = append(w, fmt.Sprintf("subsystems[%d] (%s) is served on no port", i, s.NQN))
		}
		if !s.AllowAnyHost && len(s.AllowedHosts) == 0 {
			w = append(w, fmt.Sprintf("subsystems[%d] (%s) allows no host (set allow_any_host or allowed_hosts)", i, s.NQN))
		}
		if s.AllowAnyHost {
			for j := range c.Ports {
				p := &c.Ports[j]
				a, err := netip.ParseAddr(p.Address)
				if err != nil || a.IsLoopback() {
					continue
				}
				for _, nqn := range p.Subsystems {
					if nqn == s.NQN {
						w = append(w, fmt.Sprintf("subsystems[%d] (%s) allows any host and is served on %s: every host that reaches it can read and write its namespaces", i, s.NQN, p.ListenAddress()))
					}
				}
			}
		}
	}
	return w
}

// ConfigDiff is what changed between two configurations, for a reload.
// Ports are matched by ID, subsystems by NQN, namespaces by NSID and hosts
// by NQN; both sides are compared with defaults applied, so spelling out a
// default is not a change. Every list is sorted by that key.
type ConfigDiff struct {
	// PortsAdded and PortsRemoved are ports whose ID is only in the new
	// or only in the old configuration; PortsChanged are in both.
	PortsAdded   []PortConfig
	PortsRemoved []PortConfig
	PortsChanged []PortChange

	// SubsystemsAdded and SubsystemsRemoved are subsystems whose NQN is
	// only in the new or only in the old configuration; SubsystemsChanged
	// are in both, with different settings or namespaces.
	SubsystemsAdded   []SubsystemConfig
	SubsystemsRemoved []SubsystemConfig
	SubsystemsChanged []SubsystemChange

	// HostsAdded and HostsRemoved are known hosts (Config.Hosts) only in
	// the new or only in the old configuration.
	HostsAdded   []HostConfig
	HostsRemoved []HostConfig
	// HostsChanged are the NQNs of known hosts whose description changed.
	HostsChanged []string

	// TransportChanged and TuningChanged name the settings that changed,
	// e.g. "transport.crc", "tuning.max_io_queues". They apply to new
	// connections and controllers; existing ones keep what they negotiated.
	TransportChanged []string
	TuningChanged    []string
}

// PortChange is a port present in both configurations with different
// settings.
type PortChange struct {
	// Old and New are the port's two configurations, defaults applied.
	Old, New PortConfig
	// Fields are the changed keys: "address", "service_id",
	// "inline_data_size", "max_queue_size", "subsystems", "referrals".
	Fields []string
	// Relisten is set when the address or service ID changed: the listener
	// must be replaced and its connections dropped.
	Relisten bool
	// SubsystemsAdded and SubsystemsRemoved are the NQNs that the port
	// starts or stops serving; hosts connected through this port to a
	// removed subsystem lose their controllers.
	SubsystemsAdded, SubsystemsRemoved []string
	// ReferralsAdded and ReferralsRemoved change the port's discovery log
	// (a changed referral is a removal and an addition).
	ReferralsAdded, ReferralsRemoved []ReferralConfig
}

// SubsystemChange is a subsystem present in both configurations with
// different settings or namespaces.
type SubsystemChange struct {
	// NQN names the subsystem.
	NQN string
	// Old and New are its two configurations, defaults applied.
	Old, New SubsystemConfig
	// Fields are the changed subsystem-level keys ("serial", "model",
	// "firmware_revision", "allow_any_host", "allowed_hosts",
	// "max_namespaces", "cntlid_min", "cntlid_max"); namespace changes are
	// below. A host sees a changed serial, model or firmware revision only
	// when it reconnects.
	Fields []string
	// HostsAllowed and HostsDisallowed are the host NQNs added to and
	// removed from allowed_hosts. When access shrinks (a host disallowed,
	// or allow_any_host turned off) the target disconnects the controllers
	// of hosts no longer allowed.
	HostsAllowed, HostsDisallowed []string
	// NamespacesAdded and NamespacesRemoved are namespaces whose NSID is
	// only in the new or only in the old configuration; NamespacesChanged
	// are in both with different settings.
	NamespacesAdded   []NamespaceConfig
	NamespacesRemoved []NamespaceConfig
	NamespacesChanged []NamespaceChange
}

// NamespaceChange is a namespace present in both configurations with
// different settings.
type NamespaceChange struct {
	// NSID names the namespace.
	NSID uint32
	// Old and New are its two configurations, defaults applied.
	Old, New NamespaceConfig
	// Fields are the changed keys, with backend keys as "backend.path",
	// "backend.size" and so on. A changed backend.kind or backend.path, or
	// an identifier, replaces the namespace (the host sees it removed and
	// added); a grown backend.size is a capacity change (Namespace Attribute
	// Changed notice).
	Fields []string
}

// Diff compares old and new (neither is modified) and returns what
// changed. Either may be nil, meaning an empty configuration.
func Diff(old, new *Config) *ConfigDiff {
	if old == nil {
		old = &Config{}
	}
	if new == nil {
		new = &Config{}
	}
	a, b := old.Clone(), new.Clone()
	a.ApplyDefaults()
	b.ApplyDefaults()
	d := &ConfigDiff{}

	// Ports, by ID.
	oldPorts := indexBy(a.Ports, func(c *PortConfig) uint16 { return c.ID })
	newPorts := indexBy(b.Ports, func(c *PortConfig) uint16 { return c.ID })
	for _, id := range sortedKeys(oldPorts) {
		o := oldPorts[id]
		n, ok := newPorts[id]
		if !ok {
			d.PortsRemoved = append(d.PortsRemoved, *o)
			continue
		}
		fields := changedFields("", reflect.ValueOf(*o), reflect.ValueOf(*n))
		if len(fields) == 0 {
			continue
		}
		pc := PortChange{Old: *o, New: *n, Fields: fields}
		pc.Relisten = o.Address != n.Address || o.ServiceID != n.ServiceID
		pc.SubsystemsAdded, pc.SubsystemsRemoved = stringSetDiff(o.Subsystems, n.Subsystems)
		pc.ReferralsAdded, pc.ReferralsRemoved = setDiff(o.Referrals, n.Referrals)
		// Lists are sets: a reordering alone is no change.
		if len(pc.SubsystemsAdded)+len(pc.SubsystemsRemoved) == 0 {
			pc.Fields = slices.DeleteFunc(pc.Fields, func(f string) bool { return f == "subsystems" })
		}
		if len(pc.ReferralsAdded)+len(pc.ReferralsRemoved) == 0 {
			pc.Fields = slices.DeleteFunc(pc.Fields, func(f string) bool { return f == "referrals" })
		}
		if len(pc.Fields) == 0 {
			continue
		}
		d.PortsChanged = append(d.PortsChanged, pc)
	}
	for _, id := range sortedKeys(newPorts) {
		if _, ok := oldPorts[id]; !ok {
			d.PortsAdded = append(d.PortsAdded, *newPorts[id])
		}
	}

	// Subsystems, by NQN.
	oldSubs := indexBy(a.Subsystems, func(c *SubsystemConfig) string { return c.NQN })
	newSubs := indexBy(b.Subsystems, func(c *SubsystemConfig) string { return c.NQN })
	for _, nqn := range sortedKeys(oldSubs) {
		o := oldSubs[nqn]
		n, ok := newSubs[nqn]
		if !ok {
			d.SubsystemsRemoved = append(d.SubsystemsRemoved, *o)
			continue
		}
		if sc, changed := diffSubsystem(o, n); changed {
			d.SubsystemsChanged = append(d.SubsystemsChanged, sc)
		}
	}
	for _, nqn := range sortedKeys(newSubs) {
		if _, ok := oldSubs[nqn]; !ok {
			d.SubsystemsAdded = append(d.SubsystemsAdded, *newSubs[nqn])
		}
	}

	// Known hosts, by NQN.
	oldHosts := indexBy(a.Hosts, func(c *HostConfig) string { return c.NQN })
	newHosts := indexBy(b.Hosts, func(c *HostConfig) string { return c.NQN })
	for _, nqn := range sortedKeys(oldHosts) {
		n, ok := newHosts[nqn]
		switch {
		case !ok:
			d.HostsRemoved = append(d.HostsRemoved, *oldHosts[nqn])
		case *n != *oldHosts[nqn]:
			d.HostsChanged = append(d.HostsChanged, nqn)
		}
	}
	for _, nqn := range sortedKeys(newHosts) {
		if _, ok := oldHosts[nqn]; !ok {
			d.HostsAdded = append(d.HostsAdded, *newHosts[nqn])
		}
	}

	d.TransportChanged = changedFields("transport.", reflect.ValueOf(a.Transport), reflect.ValueOf(b.Transport))
	d.TuningChanged = changedFields("tuning.", reflect.ValueOf(a.Tuning), reflect.ValueOf(b.Tuning))
	return d
}

// diffSubsystem compares two subsystems with the same NQN.
func diffSubsystem(o, n *SubsystemConfig) (SubsystemChange, bool) {
	sc := SubsystemChange{NQN: o.NQN, Old: *o, New: *n}
	for _, f := range changedFields("", reflect.ValueOf(*o), reflect.ValueOf(*n)) {
		if f != "namespaces" {
			sc.Fields = append(sc.Fields, f)
		}
	}
	sc.HostsAllowed, sc.HostsDisallowed = stringSetDiff(o.AllowedHosts, n.AllowedHosts)
	if len(sc.HostsAllowed)+len(sc.HostsDisallowed) == 0 {
		// A set: a reordering alone is no change.
		sc.Fields = slices.DeleteFunc(sc.Fields, func(f string) bool { return f == "allowed_hosts" })
	}
	oldNS := indexBy(o.Namespaces, func(c *NamespaceConfig) uint32 { return c.NSID })
	newNS := indexBy(n.Namespaces, func(c *NamespaceConfig) uint32 { return c.NSID })
	for _, id := range sortedKeys(oldNS) {
		on := oldNS[id]
		nn, ok := newNS[id]
		if !ok {
			sc.NamespacesRemoved = append(sc.NamespacesRemoved, *on)
			continue
		}
		if fields := changedFields("", reflect.ValueOf(*on), reflect.ValueOf(*nn)); len(fields) > 0 {
			sc.NamespacesChanged = append(sc.NamespacesChanged, NamespaceChange{NSID: id, Old: *on, New: *nn, Fields: fields})
		}
	}
	for _, id := range sortedKeys(newNS) {
		if _, ok := oldNS[id]; !ok {
			sc.NamespacesAdded = append(sc.NamespacesAdded, *newNS[id])
		}
	}
	changed := len(sc.Fields) > 0 || len(sc.NamespacesAdded) > 0 || len(sc.NamespacesRemoved) > 0 || len(sc.NamespacesChanged) > 0
	return sc, changed
}

// changedFields compares two structs of the same type field by field and
// returns the mapstructure keys (prefixed) of those that differ. Nested
// structs are compared per field ("backend.size"); slices, maps and
// pointers as a whole (pointers by the value they point to).
func changedFields(prefix string, a, b reflect.Value) []string {
	var out []string
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fa, fb := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, changedFields(prefix+name+".", fa, fb)...)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			out = append(out, prefix+name)
		}
	}
	return out
}

// stringSetDiff returns the strings of b not in a, and of a not in b, sorted.
func stringSetDiff(a, b []string) (added, removed []string) {
	added, removed = setDiff(a, b)
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

// setDiff returns the elements of b not in a, and of a not in b, in order.
func setDiff[T comparable](a, b []T) (added, removed []T) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}

// sortedKeys returns the keys of m in ascending order.
// indexBy maps each element of list (by pointer) under its key.
func indexBy[K comparable, T any](list []T, key func(*T) K) map[K]*T {
	m := make(map[K]*T, len(list))
	for i := range list {
		m[key(&list[i])] = &list[i]
	}
	return m
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Empty reports whether nothing changed.
func (d *ConfigDiff) Empty() bool {
	return len(d.Summary()) == 0
}

// Summary describes the changes, one short line each, for logs.
func (d *ConfigDiff) Summary() []string {
	var s []string
	for _, p := range d.PortsAdded {
		s = append(s, fmt.Sprintf("port %d added (%s)", p.ID, p.ListenAddress()))
	}
	for _, p := range d.PortsRemoved {
		s = append(s, fmt.Sprintf("port %d removed (%s)", p.ID, p.ListenAddress()))
	}
	for _, p := range d.PortsChanged {
		line := fmt.Sprintf("port %d changed: %s", p.New.ID, strings.Join(p.Fields, ", "))
		if p.Relisten {
			line += fmt.Sprintf(" (listen %s -> %s)", p.Old.ListenAddress(), p.New.ListenAddress())
		}
		s = append(s, line)
	}
	for _, x := range d.SubsystemsAdded {
		s = append(s, fmt.Sprintf("subsystem %s added (%d namespaces)", x.NQN, len(x.Namespaces)))
	}
	for _, x := range d.SubsystemsRemoved {
		s = append(s, fmt.Sprintf("subsystem %s removed", x.NQN))
	}
	for _, x := range d.SubsystemsChanged {
		if len(x.Fields) > 0 {
			s = append(s, fmt.Sprintf("subsystem %s changed: %s", x.NQN, strings.Join(x.Fields, ", ")))
		}
		for _, h := range x.HostsAllowed {
			s = append(s, fmt.Sprintf("subsystem %s allows host %s", x.NQN, h))
		}
		for _, h := range x.HostsDisallowed {
			s = append(s, fmt.Sprintf("subsystem %s no longer allows host %s", x.NQN, h))
		}
		for _, n := range x.NamespacesAdded {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d added (%s %s)", x.NQN, n.NSID, n.Backend.Kind, n.Backend.Path))
		}
		for _, n := range x.NamespacesRemoved {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d removed", x.NQN, n.NSID))
		}
		for _, n := range x.NamespacesChanged {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d changed: %s", x.NQN, n.NSID, strings.Join(n.Fields, ", ")))
		}
	}
	for _, h := range d.HostsAdded {
		s = append(s, fmt.Sprintf("host %s added", h.NQN))
	}
	for _, h := range d.HostsRemoved {
		s = append(s, fmt.Sprintf("host %s removed", h.NQN))
	}
	for _, h := range d.HostsChanged {
		s = append(s, fmt.Sprintf("host %s changed: description", h))
	}
	if len(d.TransportChanged) > 0 {
		s = append(s, "transport changed: "+strings.Join(d.TransportChanged, ", "))
	}
	if len(d.TuningChanged) > 0 {
		s = append(s, "tuning changed: "+strings.Join(d.TuningChanged, ", "))
	}
	return s
}

// String joins Summary with "; ", or returns "no changes".
func (d *ConfigDiff) String() string {
	s := d.Summary()
	if len(s) == 0 {
		return "no changes"
	}
	return strings.Join(s, "; ")
}
