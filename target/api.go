package target

// This file is the target's public API as the daemon (target/daemon) uses it:
// the types and signatures are the contract. The implementation is the
// server type (server.go) and the files around it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// Target is an NVMe-oF target: it listens on the configured ports, serves
// the discovery subsystem and the configured NVM subsystems over NVMe/RDMA
// (iWARP), and runs the controllers hosts create.
//
// Its methods are safe for concurrent use. Every log line about a
// connection or controller carries the fields host_nqn, remote (address),
// cntlid and, for queue events, qid.
type Target struct {
	s *server
}

// New validates cfg (after ApplyDefaults on a copy; cfg is not modified or
// retained) and prepares a target. It opens nothing: no backend, no socket.
// log must not be nil; zap.NewNop() silences the target.
func New(cfg *Config, log *zap.Logger) (*Target, error) {
	if cfg == nil {
		return nil, errors.New("target: nil config")
	}
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("target: invalid configuration:\n%w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Target{s: newServer(c, log)}, nil
}

// Start opens the backends of the enabled namespaces and listens on every
// port. It returns once every port is listening (hosts may connect from
// then on), or with an error after closing whatever it had opened. A
// namespace whose backend fails to open does not fail Start: it is reported
// in Status with state "failed" and is not visible to hosts; a port that
// cannot listen does fail Start. ctx bounds the start-up only, not the
// target's lifetime. Start may be called once.
func (t *Target) Start(ctx context.Context) error {
	return t.s.start(ctx)
}

// Reload applies a new configuration, validated like New's, without
// dropping connections that the change does not touch. It works from
// Diff(current, cfg): new ports listen, removed ports close with their
// connections, ports whose address changed re-listen; subsystems and
// namespaces are added, removed and changed in place (hosts get Namespace
// Attribute Changed notices and discovery log change notices as nvmet
// sends them); hosts that are no longer allowed lose their controllers.
// Transport and tuning changes apply to new connections and controllers.
// Reload plans, then applies: the whole configuration is validated, and
// every new or changed namespace's storage checked and opened and every new
// listen address probed, before anything live changes. If any of that
// fails, nothing changes and the error (a *ValidationError inside) names
// each field. Namespaces that had failed to open are retried; one that
// still fails stays failed without refusing the reload. A replaced or
// removed namespace's commands in flight drain for at most DrainTimeout
// (or until Shutdown begins, which never waits for a Reload's drains).
// What fails after the swap (a port that cannot listen after all, a
// namespace that does not drain in time) is returned as an error, and
// the configuration of record is then cfg.
func (t *Target) Reload(cfg *Config) error {
	if cfg == nil {
		return errors.New("target: nil config")
	}
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("target: invalid configuration:\n%w", err)
	}
	return t.s.reload(c)
}

// Shutdown stops the target gracefully: it stops accepting connections,
// stops taking new commands, waits for commands in flight to complete,
// flushes every backend (NVMe Flush semantics), disconnects the hosts and
// closes the backends. If ctx ends first it abandons the wait, closes
// connections and backends (still flushing them) and returns ctx.Err()
// joined with any other error. Shutdown of a target that was never started
// returns nil. It may be called more than once.
func (t *Target) Shutdown(ctx context.Context) error {
	return t.s.shutdown(ctx)
}

// Healthy returns nil while the target is serving: every port's accept
// loop is alive and the I/O workers are responding. The daemon pings the
// systemd watchdog only while Healthy returns nil, so it must be cheap (no
// I/O) and must not block on a slow backend.
func (t *Target) Healthy() error {
	return t.s.healthy()
}

// HealthReport returns the human-readable device health report of a block
// namespace's backend (backend.HealthReporter), or an error saying why
// there is none (unknown subsystem or NSID, not a block device, or the
// device does not report health). It may issue SMART commands to the
// device and take milliseconds.
func (t *Target) HealthReport(nqn string, nsid uint32) (string, error) {
	return t.s.healthReport(nqn, nsid)
}

// Status returns a snapshot of the target for administrators. It does no
// I/O and does not block on backends: backend health is the last sample,
// taken when the backend is opened (so Status after Start shows it) and then
// every Tuning.HealthInterval.
func (t *Target) Status() Status {
	return t.s.status()
}

func familyName(adrfam uint8) string {
	switch adrfam {
	case nvmeof.AdrFamIPv4:
		return "ipv4"
	case nvmeof.AdrFamIPv6:
		return "ipv6"
	}
	return ""
}

// Status is a snapshot of the target. Lists are in configuration order
// (controllers by subsystem, then CNTLID).
type Status struct {
	// StartedAt is when Start returned; zero before.
	StartedAt   time.Time          `json:"started_at"`
	Ports       []PortStatus       `json:"ports"`
	Subsystems  []SubsystemStatus  `json:"subsystems"`
	Controllers []ControllerStatus `json:"controllers"`
}

// PortStatus is the state of one port.
type PortStatus struct {
	ID uint16 `json:"id"`
	// Address is the listen address, "host:port" ("[::]:4420").
	Address string `json:"address"`
	// Family is "ipv4" or "ipv6".
	Family string `json:"family"`
	// Transport is "rdma" or "tcp".
	Transport string `json:"transport"`
	// Listening is true while the accept loop runs.
	Listening bool `json:"listening"`
	// Error says why the port is not listening (bind failure, accept loop
	// ended, "not started").
	Error string `json:"error,omitempty"`
	// Subsystems are the NQNs served on the port.
	Subsystems []string `json:"subsystems"`
	// Referrals are the referral addresses ("host:port") in its discovery
	// log.
	Referrals []string `json:"referrals,omitempty"`
	// Connections is the number of connected queue pairs (admin and I/O
	// queues of every controller, and discovery controllers).
	Connections    int `json:"connections"`
	InlineDataSize int `json:"inline_data_size"`
	MaxQueueSize   int `json:"max_queue_size"`
}

// SubsystemStatus is the state of one NVM subsystem.
type SubsystemStatus struct {
	NQN              string            `json:"nqn"`
	Serial           string            `json:"serial"`
	Model            string            `json:"model"`
	FirmwareRevision string            `json:"firmware_revision"`
	AllowAnyHost     bool              `json:"allow_any_host"`
	AllowedHosts     []string          `json:"allowed_hosts,omitempty"`
	Namespaces       []NamespaceStatus `json:"namespaces"`
	// Controllers is the number of live controllers.
	Controllers int `json:"controllers"`
}

// Namespace states of NamespaceStatus.State.
const (
	NamespaceOnline   = "online"   // visible to hosts, backend open
	NamespaceDisabled = "disabled" // enabled: false in the configuration
	NamespaceFailed   = "failed"   // the backend failed to open or failed fatally; Error says why
	NamespaceStopped  = "stopped"  // the target is not running
)

// NamespaceStatus is the state of one namespace.
type NamespaceStatus struct {
	NSID    uint32 `json:"nsid"`
	Enabled bool   `json:"enabled"`
	// State is one of the Namespace* constants.
	State string `json:"state"`
	// Error says why the namespace failed, and Field which configuration
	// field that is about ("subsystems[0].namespaces[1].backend.path").
	// A failed namespace is retried on every reload.
	Error   string        `json:"error,omitempty"`
	Field   string        `json:"field,omitempty"`
	Backend BackendStatus `json:"backend"`
	// NGUID, UUID and EUI64 are the identifiers in effect (configured or
	// derived), in the configuration's textual forms.
	NGUID    string     `json:"nguid,omitempty"`
	UUID     string     `json:"uuid,omitempty"`
	EUI64    string     `json:"eui64,omitempty"`
	ANAGroup uint32     `json:"ana_group"`
	IO       IOCounters `json:"io"`
}

// BackendStatus describes a namespace's backend.
type BackendStatus struct {
	Kind string `json:"kind"`
	Path string `json:"path,omitempty"`
	// Size is the capacity in bytes (the configured size until opened).
	Size      int64  `json:"size"`
	BlockSize uint32 `json:"block_size,omitempty"`
	ReadOnly  bool   `json:"read_only,omitempty"`
	Direct    bool   `json:"direct,omitempty"`
	// Bus, Model and Serial identify a block device (backend.Info).
	Bus    string `json:"bus,omitempty"`
	Model  string `json:"model,omitempty"`
	Serial string `json:"serial,omitempty"`
	// Health is the last health sample; zero before the first.
	Health HealthStatus `json:"health"`
	// Stats counts the backend's paths since it was opened (file, block
	// and memory backends; nowait counts only for a file on the page
	// cache); nil for the others.
	Stats *BackendStats `json:"stats,omitempty"`
}

// BackendStats counts which paths a backend's calls took (backend.Stats).
type BackendStats struct {
	// NowaitDone counts reads and writes done at once on the queue's
	// goroutine (the page cache had the data, RWF_NOWAIT); NowaitMissed
	// those that would have had to wait and went to a backend worker.
	NowaitDone   uint64 `json:"nowait_done"`
	NowaitMissed uint64 `json:"nowait_missed"`
	// BounceReads and BounceWrites count transfers copied through an
	// aligned buffer (O_DIRECT with a misaligned buffer); ZeroFallbacks
	// Write Zeroes written as zeroes because the file system or device
	// offers no zeroing.
	BounceReads   uint64 `json:"bounce_reads"`
	BounceWrites  uint64 `json:"bounce_writes"`
	ZeroFallbacks uint64 `json:"zero_fallbacks"`
	// AllocatedBytes is the memory a memory backend holds.
	AllocatedBytes int64 `json:"allocated_bytes,omitempty"`
}

// HealthStatus is a sample of backend.Backend.Health.
type HealthStatus struct {
	// CheckedAt is when the sample was taken; zero if never.
	CheckedAt time.Time `json:"checked_at"`
	// Available is true when the device reported health.
	Available bool `json:"available"`
	// Reason says where health came from, or why there is none.
	Reason string `json:"reason,omitempty"`
	// Error is set when reading health failed.
	Error string `json:"error,omitempty"`
	// CriticalWarning is the NVMe critical warning bit set
	// (backend.CriticalWarning*).
	CriticalWarning         uint8  `json:"critical_warning"`
	TemperatureCelsius      int    `json:"temperature_celsius,omitempty"`
	AvailableSpare          uint8  `json:"available_spare,omitempty"`
	AvailableSpareThreshold uint8  `json:"available_spare_threshold,omitempty"`
	PercentageUsed          uint8  `json:"percentage_used,omitempty"`
	MediaErrors             uint64 `json:"media_errors,omitempty"`
	PowerOnHours            uint64 `json:"power_on_hours,omitempty"`
	UnsafeShutdowns         uint64 `json:"unsafe_shutdowns,omitempty"`
}

// NewHealthStatus builds a HealthStatus from what backend.Backend.Health
// returned at time at.
func NewHealthStatus(h backend.Health, err error, at time.Time) HealthStatus {
	hs := HealthStatus{CheckedAt: at}
	if err != nil {
		hs.Error = err.Error()
		return hs
	}
	hs.Available = h.Available
	hs.Reason = h.Reason
	if !h.Available {
		return hs
	}
	if h.Valid&backend.HealthCriticalWarning != 0 {
		hs.CriticalWarning = h.CriticalWarning
	}
	if h.Valid&backend.HealthTemperature != 0 {
		hs.TemperatureCelsius = h.TemperatureCelsius()
	}
	if h.Valid&backend.HealthAvailableSpare != 0 {
		hs.AvailableSpare = h.AvailableSpare
	}
	if h.Valid&backend.HealthAvailableSpareThreshold != 0 {
		hs.AvailableSpareThreshold = h.AvailableSpareThreshold
	}
	if h.Valid&backend.HealthPercentageUsed != 0 {
		hs.PercentageUsed = h.PercentageUsed
	}
	if h.Valid&backend.HealthMediaErrors != 0 {
		hs.MediaErrors = h.MediaErrors
	}
	if h.Valid&backend.HealthPowerOnHours != 0 {
		hs.PowerOnHours = h.PowerOnHours
	}
	if h.Valid&backend.HealthUnsafeShutdowns != 0 {
		hs.UnsafeShutdowns = h.UnsafeShutdowns
	}
	return hs
}

// CriticalWarningText names the bits of an NVMe critical warning, e.g.
// "spare below threshold, read-only"; "" for 0.
func CriticalWarningText(cw uint8) string {
	names := []struct {
		bit  uint8
		name string
	}{
		{backend.CriticalWarningSpare, "spare below threshold"},
		{backend.CriticalWarningTemperature, "temperature out of range"},
		{backend.CriticalWarningReliability, "reliability degraded"},
		{backend.CriticalWarningReadOnly, "read-only"},
		{backend.CriticalWarningVolatileBackup, "volatile backup failed"},
	}
	var parts []string
	for _, n := range names {
		if cw&n.bit != 0 {
			parts = append(parts, n.name)
			cw &^= n.bit
		}
	}
	if cw != 0 {
		parts = append(parts, fmt.Sprintf("bits %#x", cw))
	}
	return strings.Join(parts, ", ")
}

// Summary is a one-line health summary: "ok", "critical: <bits>",
// "error: ...", "n/a: <reason>" or "not checked".
func (h HealthStatus) Summary() string {
	switch {
	case h.Error != "":
		return "error: " + h.Error
	case h.CheckedAt.IsZero() && !h.Available:
		return "not checked"
	case !h.Available:
		if h.Reason == "" {
			return "n/a"
		}
		return "n/a: " + h.Reason
	case h.CriticalWarning != 0:
		return "critical: " + CriticalWarningText(h.CriticalWarning)
	}
	return "ok"
}

// ControllerStatus is one live controller (admin queue plus I/O queues of
// one host association).
type ControllerStatus struct {
	CNTLID uint16 `json:"cntlid"`
	// Subsystem is the subsystem NQN (the discovery NQN for discovery
	// controllers).
	Subsystem string `json:"subsystem"`
	Discovery bool   `json:"discovery,omitempty"`
	HostNQN   string `json:"host_nqn"`
	// HostID is the host identifier from Connect (8-4-4-4-12).
	HostID string `json:"host_id,omitempty"`
	PortID uint16 `json:"port_id"`
	// RemoteAddress and LocalAddress are the admin queue's TCP endpoints.
	RemoteAddress string `json:"remote_address"`
	LocalAddress  string `json:"local_address"`
	// IOQueues is the number of connected I/O queues; QueueSize their size.
	IOQueues  int `json:"io_queues"`
	QueueSize int `json:"queue_size,omitempty"`
	// KATOMillis is the keep-alive timeout in effect, in milliseconds.
	KATOMillis  uint32     `json:"kato_ms"`
	ConnectedAt time.Time  `json:"connected_at"`
	IO          IOCounters `json:"io"`
}

// IOCounters count completed commands.
type IOCounters struct {
	ReadCommands  uint64 `json:"read_commands"`
	WriteCommands uint64 `json:"write_commands"`
	OtherCommands uint64 `json:"other_commands"`
	ReadBytes     uint64 `json:"read_bytes"`
	WriteBytes    uint64 `json:"write_bytes"`
	// Errors counts commands completed with a non-zero status.
	Errors uint64 `json:"errors"`
}
