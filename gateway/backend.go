package gateway

import (
	"fmt"
	"time"
)

// BackendHealth is the cumulative outcome of the I/O of one ANA group's
// namespaces on this gateway (target.BackendHealth), sampled by the driver
// at every tick and given to [Machine.BackendObserved]: only its changes
// between two samples count.
type BackendHealth struct {
	// Transferred moves while any read or write of the group completes.
	Transferred uint64
	// PathErrors counts the commands that failed because the storage
	// could not be reached (an operation timed out, the cluster
	// connection failed, a client was blocklisted).
	PathErrors uint64
	// Blocklisted counts those that failed with EBLOCKLISTED (ESHUTDOWN):
	// a RADOS client of the group's backends was fenced (by an operator,
	// or by a gateway that fenced this one's clients of the group).
	Blocklisted uint64
	// LastError is the last such failure.
	LastError string
}

// BackendObserver is implemented by an [Applier] that can report the
// health of each group's backends (the daemon's: target.BackendHealth).
type BackendObserver interface {
	BackendHealth(group uint32) BackendHealth
}

// backendWatch is a group's backend health as the machine follows it.
type backendWatch struct {
	seen    BackendHealth // the last sample
	sampled bool
	// failing: the first path error since the last completed I/O (zero:
	// none, or I/O completed since).
	failing time.Time
	// downs counts the backend step-downs since the group last served
	// I/O here: each doubles the backoff.
	downs int
	// reopen: the group's backend clients must be replaced before this
	// gateway serves the group again (ActAcquire Reopen).
	reopen bool
}

// Defaults of the backend health rules (Config.BackendWindow,
// Config.BackendBackoff).
const (
	// maxBackendBackoffShift caps the backoff at 32 × BackendBackoff.
	maxBackendBackoffShift = 5
)

func (m *Machine) backendWindow() time.Duration {
	if m.cfg.BackendWindow > 0 {
		return m.cfg.BackendWindow
	}
	return m.cfg.Lease
}

func (m *Machine) backendBackoff() time.Duration {
	if m.cfg.BackendBackoff > 0 {
		return m.cfg.BackendBackoff
	}
	return 2 * m.cfg.Lease
}

// BackendObserved reports a sample of the group's backend health at time
// now. An owner steps the group down when the sample shows that its
// backends cannot serve it:
//
//   - a command failed with EBLOCKLISTED since the last sample: a client
//     of the group's backends is fenced and will never serve again (an
//     operator blocklisted it, or it was fenced for the group); at once;
//   - commands failed with path errors (timeouts, connection errors) and
//     none completed for BackendWindow (default: one lease) since the
//     first of them: the gateway is cut from the image's OSDs, though
//     perhaps not from the group object's (its renewals go on).
//
// The step-down is a release to nobody: inaccessible here first, then
// (once applied) the group's namespaces are flushed and the record is
// marked released, so that a survivor fences this gateway's clients of
// the group and takes it. The group is not taken again here for a
// backoff (BackendBackoff, doubled by each backend step-down until the
// group serves I/O here again, at most 32 times), and only after its
// clients were replaced (ActAcquire Reopen). Its handover is not
// requested (failback) meanwhile either.
func (m *Machine) BackendObserved(id uint32, now time.Time, h BackendHealth) []Action {
	g := m.group(id)
	if g == nil || m.exited {
		return nil
	}
	b := &g.be
	prev, had := b.seen, b.sampled
	b.seen, b.sampled = h, true
	if g.role != Owner || g.releasing || !had {
		b.failing = time.Time{}
		return nil
	}
	switch {
	case h.Blocklisted != prev.Blocklisted:
		return m.backendDown(g, now, "a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): "+h.LastError)
	case h.Transferred != prev.Transferred:
		b.failing, b.downs = time.Time{}, 0
	case h.PathErrors != prev.PathErrors && b.failing.IsZero():
		b.failing = now
	}
	if !b.failing.IsZero() && !now.Before(b.failing.Add(m.backendWindow())) {
		return m.backendDown(g, now, fmt.Sprintf("the group's I/O failed with path errors for %s and none completed (window %s): %s",
			now.Sub(b.failing), m.backendWindow(), h.LastError))
	}
	return nil
}

// backendDown steps an owner down because its backends cannot serve the
// group (BackendObserved).
func (m *Machine) backendDown(g *group, now time.Time, reason string) []Action {
	b := &g.be
	backoff := m.backendBackoff() << min(b.downs, maxBackendBackoffShift)
	b.downs++
	b.failing, b.reopen = time.Time{}, true
	if until := now.Add(backoff); until.After(g.serveAfter) {
		g.serveAfter = until
	}
	g.releasing, g.releaseTo = true, ""
	g.lastErr = "backend: " + reason // nvmetd status: last_error
	acts := m.setANA(nil, g, false)
	return append(acts, Action{Kind: ActStepDown, Group: g.id,
		Reason: fmt.Sprintf("backend: %s; released to a survivor, not taken again here for %s, and only on new RADOS clients", reason, backoff)})
}

// backendAcquireFailed: an acquisition that was to replace the clients of
// a group stepped down for its backends failed (the new clients could not
// open the images: the gateway is still cut from them). The group is not
// taken or asked for again here for the next backoff, so that a survivor
// keeps it meanwhile instead of a hand-over to a gateway that cannot serve.
func (m *Machine) backendAcquireFailed(g *group) {
	b := &g.be
	if !b.reopen {
		return
	}
	backoff := m.backendBackoff() << min(b.downs, maxBackendBackoffShift)
	b.downs++
	if until := g.issued.Add(backoff); until.After(g.serveAfter) {
		g.serveAfter = until
	}
}
