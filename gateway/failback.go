package gateway

import (
	"fmt"
	"time"
)

// Failback: when the preferred owner of a group asks for it back.
//
// The preferred owner of a group that another gateway holds writes a
// handover request (ActRequestHandover) only when all of these hold:
//
//  1. the group configuration agrees with the cluster's (ConfigChecked);
//  2. it can serve the group ([Readiness].Unservable is ""): every enabled
//     namespace of the group is open in its target (an image that cannot
//     open, or that the gateway guard refused, is not), as the driver last
//     reported it with [Machine.SetReadiness];
//  3. a host can use it ([Readiness].Hosts > 0): a host controller with
//     I/O queues is connected to one of its ports in a subsystem where it
//     can see a namespace of the group. A host past its ctrl_loss_tmo has
//     deleted this path: handing the group over would leave it with no
//     optimized path at all;
//  4. its backoff has passed: now ≥ since + failbackWait(n), where since is
//     the later of this run's start and the moment this gateway last
//     stopped owning the group in this run (a step-down, a release, a
//     serve failure), and n is the group's strike count, Record.Failbacks,
//     as the holder's record says;
//  5. it has not asked already (the request on the object is its own).
//
// failbackWait(n) = FailbackDelay × 2^n, capped at FailbackMaxDelay.
//
// The strike count lives in the group's record (Record.Failbacks), which
// only the lock holder writes, asserting its lock (writeRecord), and which
// every acquisition carries on from the record it replaces, so that it
// survives the restart of any gateway:
//
//   - the preferred owner's acquisition of a group another gateway handed
//     over to it (a failback attempt) writes n+1;
//   - a serve failure after an acquisition that was not a failback (the
//     target refused to make the group optimized) writes n+1 in the
//     release that follows (a failback's own serve failure was counted
//     at its acquisition);
//   - once the preferred owner has served the group (optimized applied)
//     for FailbackStable without interruption, its next renewal writes 0;
//   - every other acquisition, renewal and release writes n unchanged.

// Defaults of [Config]'s failback backoff.
const (
	DefaultFailbackMaxDelay = time.Hour
	DefaultFailbackStable   = time.Minute
)

// Readiness is what the driver reports about serving a group on this
// gateway ([Machine.SetReadiness]); it gates failback (failback.go).
type Readiness struct {
	// Unservable says why this gateway could not serve the group now
	// ("" if it could): a namespace of the group that is not open in its
	// target (its image did not open, the gateway guard refused it).
	Unservable string
	// Hosts is the number of host controllers, with I/O queues, connected
	// to this gateway's ports in a subsystem where they can see a
	// namespace of the group.
	Hosts int
}

// SetReadiness reports the target's readiness to serve group id. Until
// the first report the group is taken as not servable here (no failback).
func (m *Machine) SetReadiness(id uint32, r Readiness) {
	if g := m.group(id); g != nil {
		g.ready, g.readySet = r, true
	}
}

func (m *Machine) failbackMax() time.Duration {
	if m.cfg.FailbackMaxDelay > 0 {
		return max(m.cfg.FailbackMaxDelay, m.cfg.FailbackDelay)
	}
	return max(DefaultFailbackMaxDelay, m.cfg.FailbackDelay)
}

// failbackWait is the failback delay after n strikes: FailbackDelay ×
// 2^n, at most FailbackMaxDelay.
func (m *Machine) failbackWait(n uint32) time.Duration {
	d, limit := m.cfg.FailbackDelay, m.failbackMax()
	for i := uint32(0); i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// failbackDue reports whether the preferred owner asks for group g, held
// by another gateway whose record is r, now; if not, g.waitWhy says why.
func (m *Machine) failbackDue(g *group, now time.Time, r Record) bool {
	g.failbacks = r.Failbacks
	since := m.start
	if g.lostAt.After(since) {
		since = g.lostAt
	}
	wait := m.failbackWait(r.Failbacks)
	switch {
	case !g.readySet:
		g.waitWhy = "the target has not reported whether it can serve the group"
	case g.ready.Unservable != "":
		g.waitWhy = "this gateway cannot serve the group: " + g.ready.Unservable
	case g.ready.Hosts == 0:
		g.waitWhy = "no host connected here can see the group's namespaces"
	case now.Before(since.Add(wait)):
		g.waitWhy = fmt.Sprintf("failback backoff: %s after %d strike(s), until %s", wait, r.Failbacks, since.Add(wait).Format(time.RFC3339))
	default:
		g.waitWhy = ""
		return true
	}
	return false
}

// failbackStable clears the strikes of a group that its preferred owner
// has served for FailbackStable (the next renewal writes them).
func (m *Machine) failbackStable(g *group, now time.Time) {
	stable := m.cfg.FailbackStable
	if stable <= 0 {
		stable = DefaultFailbackStable
	}
	if g.failbacks > 0 && g.preferred == m.cfg.Name && !g.servingAt.IsZero() && !now.Before(g.servingAt.Add(stable)) {
		g.failbacks, g.last.Failbacks = 0, 0
	}
}

// serveFailed counts a serve failure after an acquisition, unless the
// acquisition was a failback (counted already).
func (m *Machine) serveFailed(g *group, now time.Time) {
	if !g.byFailback {
		g.failbacks++
	}
	g.servingAt = time.Time{}
	g.lostAt = now
}

// lost notes that the group stopped being owned here at at: the
// preferred owner's next failback waits from then.
func (m *Machine) lost(g *group, at time.Time) {
	g.byFailback, g.servingAt = false, time.Time{}
	if at.After(g.lostAt) {
		g.lostAt = at
	}
}
