package iwarp

import (
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/internal/admission"
)

// Admission bounds the connections a peer can make a server hold (see
// internal/admission): a connection is pending from its TCP accept until
// the ULP admits it (QP.Admit: for NVMe/RDMA, a successful Fabrics
// Connect). One Admission may serve several listeners, of this engine and
// of other transports (a daemon's NVMe/TCP ports).
type Admission = admission.Admission

// AdmissionConfig sets the caps of an Admission.
type AdmissionConfig = admission.Config

// AdmissionStats are counters of an Admission.
type AdmissionStats = admission.Stats

// ErrEvicted is why a pending connection was closed to make room for a new
// one; ErrNotAdmitted why one was closed for not logging in in time.
var (
	ErrEvicted     = admission.ErrEvicted
	ErrNotAdmitted = admission.ErrNotAdmitted
)

// DefaultMaxConns is the default cap on connections: the process's open
// file limit less a reserve.
func DefaultMaxConns() int { return admission.DefaultMaxConns() }

// NewAdmission returns an Admission with the given caps.
func NewAdmission(cfg AdmissionConfig, log *zap.Logger) *Admission {
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = defaultConnectTimeout
	}
	return admission.New(cfg, log)
}
