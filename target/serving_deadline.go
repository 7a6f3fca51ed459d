package target

import (
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// SetServingDeadline sets until when the target may serve reads and writes
// of ANA group group's namespaces (a gateway's lease: its earliest end
// less the step-down margin; gateway.ActServeUntil). Every command of the
// group checks it right before the backend (synchronous, asynchronous or
// nowait path), with a fresh clock read: past it the command is answered
// Asymmetric Access Inaccessible (a path error: the host retries it on
// another path) and never reaches the backend. So a gateway that was
// frozen (SIGSTOP, a paused VM) or stalled past its lease does not execute
// the commands that waited in its sockets or worker queues before its
// machine has noticed and stepped down (issue 21). The zero time removes
// the deadline (a group the gateway does not serve is inaccessible by its
// ANA state anyway). Groups outside 1..MaxANAGroup are ignored.
func (t *Target) SetServingDeadline(group uint32, until time.Time) {
	if group == 0 || group > MaxANAGroup {
		return
	}
	var ns int64
	if !until.IsZero() {
		ns = until.UnixNano()
	}
	t.s.serveUntil[group].Store(ns)
}

// pastServingDeadline reports whether the namespace's ANA group has a
// serving deadline that has passed. One atomic load for a namespace
// without one.
func (ns *namespace) pastServingDeadline(s *server) bool {
	g := ns.cfg.ANAGroup
	if g == 0 || g > MaxANAGroup {
		return false
	}
	d := s.serveUntil[g].Load()
	return d != 0 && time.Now().UnixNano() >= d
}

// statusPastDeadline is the status of a command refused by the serving
// deadline (nvmet_check_ana_state's for an inaccessible group).
const statusPastDeadline = nvmeof.StatusANAInaccessible
