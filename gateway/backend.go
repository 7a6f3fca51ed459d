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
	// Completed moves while any command of the group succeeds in its
	// backend (a read or write, and also a flush, write zeroes or
	// deallocation); Ended while any ends, in success or failure.
	Completed, Ended uint64
	// InFlight is the number of the group's commands in the target at
	// the sample (received, their backend work not ended).
	InFlight int64
}

// BackendObserver is implemented by an [Applier] that can report the
// health of each group's backends (the daemon's: target.BackendHealth).
type BackendObserver interface {
	BackendHealth(group uint32) BackendHealth
}

// backendWatch is a group's backend health as the machine follows it.
type backendWatch struct {
	seen    BackendHealth // the last sample
	seenAt  time.Time     // its time
	sampled bool
	// failing: the first path error since the last completed I/O (zero:
	// none, or I/O completed since).
	failing time.Time
	// stuck: the window started at commands that stood still in the
	// backend rather than at a path error.
	stuck bool
	// downs counts the backend step-downs since the group last served
	// I/O here: each doubles the backoff.
	downs int
	// reopen: the group's backend clients must be replaced before this
	// gateway serves the group again (ActAcquire Reopen).
	reopen bool
	// backoff is the backoff of the last backend step-down: it runs
	// from the release that follows it (maybeRelease), not from the
	// decision, so that a step-down that took long to apply is not
	// followed by a return at once.
	backoff time.Duration
	// down: the group is being stepped down for its backends (until
	// its release is out); its release does not wait for the drain.
	down bool
	// loaded: downs was taken from the group's record (once per run:
	// from then on this machine counts them).
	loaded bool
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

// backendBackoffAfter is the backoff after n backend step-downs in a row
// (n ≥ 1): BackendBackoff × 2^(n-1), at most BackendMaxBackoff.
func (m *Machine) backendBackoffAfter(n int) time.Duration {
	limit := m.cfg.BackendMaxBackoff
	if limit <= 0 {
		limit = m.backendBackoff() << maxBackendBackoffShift
	}
	d := m.backendBackoff() << min(max(n-1, 0), maxBackendBackoffShift)
	return min(d, limit)
}

// recordDowns is the Record.BackendDowns to write for g: the entries of
// the last record seen, with this gateway's own count.
func (m *Machine) recordDowns(g *group) map[string]uint32 {
	out := map[string]uint32{}
	for k, v := range g.last.BackendDowns {
		if k != m.cfg.Name && v > 0 {
			out[k] = v
		}
	}
	if g.be.downs > 0 {
		out[m.cfg.Name] = uint32(g.be.downs)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// loadBackendDowns takes this gateway's backend step-down count from the
// group's record r, once per run (a restart): the backoff of the last of
// them runs from this run's start, so that a restart does not reset it.
func (m *Machine) loadBackendDowns(g *group, r Record) {
	b := &g.be
	if b.loaded {
		return
	}
	b.loaded = true
	n := int(r.BackendDowns[m.cfg.Name])
	if n <= b.downs {
		return
	}
	b.downs, b.reopen = n, true
	if until := m.start.Add(m.backendBackoffAfter(n)); until.After(g.serveAfter) {
		g.serveAfter = until
		g.waitWhy = fmt.Sprintf("backend backoff: %s after %d backend step-down(s) in a row (from the group's record), until %s",
			m.backendBackoffAfter(n), n, until.Format(time.RFC3339))
	}
}

// BackendObserved reports a sample of the group's backend health at time
// now. An owner steps the group down when the sample shows that its
// backends cannot serve it:
//
//   - a command failed with EBLOCKLISTED since the last sample: a client
//     of the group's backends is fenced and will never serve again (an
//     operator blocklisted it, or it was fenced for the group); at once;
//   - no command of the group succeeded for BackendWindow (default: one
//     lease) since the window started: at the first command that failed
//     with a path error (a timeout, a connection error), or, earlier, at
//     the first sample that found commands in flight that were still
//     there, with none ended, at the next sample (a command stuck in the
//     backend: librbd's operation waits for an OSD out of reach until its
//     op_timeout). The gateway is then cut from the image's OSDs, though
//     perhaps not from the group object's (its renewals go on). So the
//     step-down comes one window after the first command that got stuck
//     (plus at most two samples), however long op_timeout is.
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
	prev, prevAt, had := b.seen, b.seenAt, b.sampled
	b.seen, b.seenAt, b.sampled = h, now, true
	if g.role != Owner || g.releasing || !had {
		b.failing, b.stuck = time.Time{}, false
		return nil
	}
	switch {
	case h.Blocklisted != prev.Blocklisted:
		return m.backendDown(g, now, "a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): "+h.LastError, true)
	case h.Transferred != prev.Transferred || h.Completed != prev.Completed:
		b.failing, b.stuck, b.downs = time.Time{}, false, 0
	case h.PathErrors != prev.PathErrors && b.failing.IsZero():
		b.failing = now
	case h.InFlight > 0 && prev.InFlight > 0 && h.Ended == prev.Ended && b.failing.IsZero():
		// Nothing ended since the last sample: what was in flight then
		// still is.
		b.failing, b.stuck = prevAt, true
	}
	if !b.failing.IsZero() && !now.Before(b.failing.Add(m.backendWindow())) {
		why := "failed with path errors"
		if b.stuck {
			why = "stood still in the backend (commands in flight, none ended since " + b.failing.Format("15:04:05.000") + ")"
		}
		reason := fmt.Sprintf("the group's I/O %s for %s and none completed (window %s)", why, now.Sub(b.failing), m.backendWindow())
		if h.LastError != "" {
			reason += ": " + h.LastError
		}
		return m.backendDown(g, now, reason, false)
	}
	return nil
}

// backendDown steps an owner down because its backends cannot serve the
// group (BackendObserved).
func (m *Machine) backendDown(g *group, now time.Time, reason string, blocklisted bool) []Action {
	b := &g.be
	b.downs++
	backoff := m.backendBackoffAfter(b.downs)
	b.failing, b.stuck, b.reopen, b.backoff, b.down = time.Time{}, false, true, backoff, true
	if until := now.Add(backoff); until.After(g.serveAfter) {
		g.serveAfter = until
	}
	g.releasing, g.releaseTo = true, ""
	g.lastErr = "backend: " + reason // nvmetd status: last_error
	// The commands stuck in the backends are answered early once their
	// clients cannot land a write any more (ActAnswerInFlight).
	g.answer, g.answerFenced, g.answerEpoch = true, blocklisted, g.epoch
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
	b.downs++
	backoff := m.backendBackoffAfter(b.downs)
	if until := g.issued.Add(backoff); until.After(g.serveAfter) {
		g.serveAfter = until
	}
}
