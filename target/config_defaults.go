package target

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"runtime"
	"time"

	"github.com/nvmetd/nvmetd/internal/defaults"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// This file holds the configuration's defaults and limits and
// ApplyDefaults, which fills unset fields with them.

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
	// DefaultWriteTimeout closes a connection whose host stops reading.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMaxPending, DefaultMaxPendingPerAddress,
	// DefaultMaxControllersPerHost and DefaultMaxQueuesPerHost are the
	// defaults of LimitsConfig.
	DefaultMaxPending            = 128
	DefaultMaxPendingPerAddress  = 16
	DefaultMaxControllersPerHost = 64
	DefaultMaxQueuesPerHost      = 1024

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

// DefaultFirmwareRevision is the Identify Controller firmware revision given
// to subsystems that do not set one. The daemon sets it to its version
// (at most MaxFirmwareLen printable ASCII characters) before it loads a
// configuration.
var DefaultFirmwareRevision = "dev"

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
	c.Metrics.applyDefaults()
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
		defaults.Set(&p.ServiceID, DefaultServiceID)
		defaults.Set(&p.Transport, TransportRDMA)
		defaults.Set(&p.InlineDataSize, DefaultInlineDataSize)
		defaults.Set(&p.MaxQueueSize, DefaultQueueSize)
		for j := range p.Referrals {
			defaults.Set(&p.Referrals[j].ServiceID, DefaultServiceID)
		}
	}
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		if s.Serial == "" && s.NQN != "" {
			s.Serial = DerivedSerial(s.NQN)
		}
		defaults.Set(&s.Model, DefaultModel)
		defaults.Set(&s.FirmwareRevision, DefaultFirmwareRevision)
		defaults.Set(&s.MaxNamespaces, DefaultMaxNamespaces)
		defaults.Set(&s.CNTLIDMin, DefaultCNTLIDMin)
		defaults.Set(&s.CNTLIDMax, DefaultCNTLIDMax)
		for j := range s.Namespaces {
			n := &s.Namespaces[j]
			if n.Enabled == nil {
				t := true
				n.Enabled = &t
			}
			defaults.Set(&n.ANAGroup, DefaultANAGroup)
		}
	}
	t := &c.Transport
	defaults.Set(&t.CRC, DefaultCRC)
	defaults.Set(&t.ConnectTimeout, DefaultConnectTimeout)
	defaults.Set(&t.StallTimeout, DefaultStallTimeout)
	defaults.Set(&t.WriteTimeout, DefaultWriteTimeout)
	l := &c.Limits
	defaults.Set(&l.MaxPending, DefaultMaxPending)
	defaults.Set(&l.MaxPendingPerAddress, DefaultMaxPendingPerAddress)
	defaults.Set(&l.MaxConnections, rdma.DefaultMaxConnections())
	defaults.Set(&l.MaxControllersPerHost, DefaultMaxControllersPerHost)
	defaults.Set(&l.MaxQueuesPerHost, DefaultMaxQueuesPerHost)
	u := &c.Tuning
	defaults.Set(&u.IOWorkers, max(32, 8*runtime.NumCPU()))
	defaults.Set(&u.BufferPoolSize, DefaultBufferPoolSize)
	defaults.Set(&u.MaxTransferSize, DefaultMaxTransferSize)
	defaults.Set(&u.MaxIOQueues, min(max(8, runtime.NumCPU()), 128))
	defaults.Set(&u.KeepAlive, DefaultKeepAlive)
	defaults.Set(&u.KeepAliveMin, DefaultKeepAliveMin)
	defaults.Set(&u.KeepAliveMax, DefaultKeepAliveMax)
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
