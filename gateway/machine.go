package gateway

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Errors a [Cluster] returns that the machine acts on. A cluster error
// that matches none of them is transient: the operation is retried at a
// later tick.
var (
	// ErrFenced: this gateway's RADOS client is blocklisted (EBLOCKLISTED,
	// which is ESHUTDOWN). Another gateway fenced it: it must stop serving
	// and exit, so that its supervisor restarts it with fresh clients.
	ErrFenced = errors.New("gateway: this gateway was fenced (its RADOS client is blocklisted)")
	// ErrLockBusy: the group's lock is held by another gateway (EBUSY), or
	// (renewing) no longer held by this one (ENOENT: it expired).
	ErrLockBusy = errors.New("gateway: the group's lock is held by another gateway")
	// ErrStepDownFailed: a group could not be made inaccessible on this
	// gateway's ports for a whole lease (the target refused the change):
	// the gateway stops serving by exiting (ActExitStepDownFailed).
	ErrStepDownFailed = errors.New("gateway: a group could not be made inaccessible here")
	// ErrHolderSince: an acquisition found, under the lock, a record
	// of an epoch at least its own: a gateway held the group after the
	// read on which the acquisition was decided (during its fence), and
	// was not fenced by it. The acquisition is abandoned (the lock
	// given back) and the group read again.
	ErrHolderSince = errors.New("gateway: another gateway held the group since it was read")
)

// ActionKind is what an [Action] asks the driver to do.
type ActionKind int

// The actions. Cluster operations (Acquire, Renew, Read, Fence, Release,
// RequestHandover) are at most one at a time per group: the machine emits
// the next only after the driver reported the result of the previous.
const (
	// ActRead reads the group's lock holders and its record (Observed).
	ActRead ActionKind = iota + 1
	// ActAcquire takes the group's exclusive lock for one lease and writes
	// this gateway's record (name, session, Epoch, and the addresses of
	// the RADOS clients that carry the group's I/O) on the group object,
	// asserting that the lock is held (cls_lock assert_locked in the same
	// operation); success only if both were done. With Reopen the group's
	// clients are replaced first (before the record names them).
	ActAcquire
	// ActRenew renews the lock for one lease (must-renew: fails with
	// ErrLockBusy if the lock is no longer this session's) and reads the
	// handover request on the group object.
	ActRenew
	// ActFence blocklists every address in Addrs (the previous holder's
	// RADOS clients, and with Own this gateway's own clients of the
	// group); success only if all were blocklisted.
	ActFence
	// ActSetANA sets the group's ANA state on every port of this gateway:
	// optimized when Optimized, else inaccessible. Its result is reported
	// with [Machine.SetANADone]; at most one is out per group. Nothing
	// that relies on the group being inaccessible here (a release) is
	// emitted before an inaccessible change was reported applied.
	ActSetANA
	// ActRelease is the graceful end of ownership (failback): the group is
	// already inaccessible here (an ActSetANA inaccessible was reported
	// applied); the driver flushes the group's namespaces, marks the
	// record released with HandoverTo = To, and unlocks.
	ActRelease
	// ActRequestHandover writes this gateway's name as the group's
	// handover request (the preferred owner asks the holder to release).
	ActRequestHandover
	// ActStepDown reports that ownership ended without a release (renewals
	// failed or the lock was lost): Reason says why. Local; no result. It
	// follows an ActSetANA inaccessible.
	ActStepDown
	// ActExitFenced: this gateway was fenced; the driver stops serving and
	// exits non-zero. Nothing follows it.
	ActExitFenced
	// ActExitStepDownFailed: a group this gateway must not serve could
	// not be made inaccessible for a lease (Reason says which and why):
	// the driver stops serving by exiting non-zero (its leases then end
	// and a survivor fences it). Nothing follows it.
	ActExitStepDownFailed
	// ActServeUntil sets until when the target may serve the group's I/O
	// (Until: the moment this gateway would step down, the lease's earliest
	// end less the margin, as of the last acquisition or renewal). Local;
	// no result. It comes before the ActSetANA optimized of an
	// acquisition and after every renewal, so that a gateway that was
	// frozen or whose renewals stalled does no I/O past it, whatever its
	// loop has not yet noticed (Target.SetServingDeadline).
	ActServeUntil
	// ActAnswerInFlight answers the group's commands still in their
	// backend (stuck: storage out of reach) at once with an ANA path
	// error, so that the hosts retry them on another path
	// (Applier's optional AnswerInFlight: target.Target.AnswerGroupInFlight).
	// Local; no result. The machine emits it only when no write of those
	// commands can land after a newer one: the group is inaccessible
	// here, and this gateway's clients of the group are fenced (a
	// successor holds the group: every successor fences the previous
	// holder's clients before it serves) or blocklisted (EBLOCKLISTED
	// seen, or this gateway was fenced and exits). Never on a graceful
	// release: that one drains.
	ActAnswerInFlight
)

var actionNames = map[ActionKind]string{
	ActRead: "read", ActAcquire: "acquire", ActRenew: "renew", ActFence: "fence", ActSetANA: "set-ana",
	ActRelease: "release", ActRequestHandover: "request-handover", ActStepDown: "step-down", ActExitFenced: "exit-fenced",
	ActExitStepDownFailed: "exit-step-down-failed", ActServeUntil: "serve-until", ActAnswerInFlight: "answer-in-flight",
}

func (k ActionKind) String() string {
	if s, ok := actionNames[k]; ok {
		return s
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// Action is one step for the driver.
type Action struct {
	Kind      ActionKind
	Group     uint32   // ANAGRPID (0 for ActExitFenced)
	Addrs     []string // ActFence: the addresses to blocklist
	Optimized bool     // ActSetANA: optimized (true) or inaccessible
	To        string   // ActRelease: the gateway the group is handed to
	Reason    string   // ActStepDown, ActFence, ActExitFenced, ActAnswerInFlight: why
	// Epoch is the epoch of the record that ActAcquire, ActRenew and
	// ActRelease write.
	Epoch uint64
	// Reopen (ActAcquire): first replace the RADOS clients of the group's
	// namespaces (Applier.Reopen): a successor may have fenced them, or
	// this gateway did (Own).
	Reopen bool
	// Own (ActFence): the fence precedes an acquisition that replaces
	// this gateway's own clients of the group (Reopen): Addrs has those
	// its last record named, and the driver adds every client it has on
	// the group's images that its own fences have not blocklisted yet
	// (Applier.Addrs, taken at the fence: all of them are about to be
	// replaced), so that no write of theirs can land after one of the
	// new clients.
	Own bool
	// Until (ActServeUntil): the serving deadline.
	Until time.Time
	// Failbacks (ActAcquire, ActRenew, ActRelease): the failback strike
	// count the record carries (Record.Failbacks).
	Failbacks uint32
	// NoDrain (ActRelease): release without waiting for the group's
	// commands in flight (Applier.Flush): a backend step-down, whose
	// commands hang on storage out of reach; the successor fences them.
	NoDrain bool
	// BackendDowns (ActAcquire, ActRenew, ActRelease): the backend
	// step-down counts the record carries (Record.BackendDowns).
	BackendDowns map[string]uint32
}

func (a Action) String() string {
	switch a.Kind {
	case ActSetANA:
		st := "inaccessible"
		if a.Optimized {
			st = "optimized"
		}
		return fmt.Sprintf("group %d: set-ana %s", a.Group, st)
	case ActFence:
		if a.Own {
			return fmt.Sprintf("group %d: fence %v and own clients (%s)", a.Group, a.Addrs, a.Reason)
		}
		return fmt.Sprintf("group %d: fence %v (%s)", a.Group, a.Addrs, a.Reason)
	case ActRelease:
		if a.NoDrain {
			return fmt.Sprintf("group %d: release to %s (no drain)", a.Group, a.To)
		}
		return fmt.Sprintf("group %d: release to %s", a.Group, a.To)
	case ActStepDown:
		return fmt.Sprintf("group %d: step-down (%s)", a.Group, a.Reason)
	case ActAnswerInFlight:
		return fmt.Sprintf("group %d: answer-in-flight (%s)", a.Group, a.Reason)
	case ActExitFenced:
		return "exit-fenced (" + a.Reason + ")"
	case ActExitStepDownFailed:
		return "exit-step-down-failed (" + a.Reason + ")"
	case ActAcquire:
		if a.Reopen {
			return fmt.Sprintf("group %d: acquire (reopen)", a.Group)
		}
	}
	return fmt.Sprintf("group %d: %s", a.Group, a.Kind)
}

// Record is what a holder writes on its group's object when it takes the
// lock: who it is and the address of every RADOS client through which it
// can write to the group's images (the rbd backends of the group's
// namespaces, never the gateway's own client of the group objects, which
// serves its other groups too), so that a successor can fence all of them
// and only them.
type Record struct {
	Name    string   // the gateway's name
	Session string   // the lock cookie: unique to one run of the gateway
	Addrs   []string // RADOS client addresses to blocklist to fence it (for this group)
	// Released is set by a graceful release (failback): the holder
	// stopped serving and flushed before it unlocked; nobody fences it.
	Released bool
	// HandoverTo is the gateway a released group was handed to.
	HandoverTo string `json:",omitempty"`
	// Epoch numbers the holders of the group: each acquisition writes one
	// more than the highest it has seen. A record with a lower epoch than
	// one seen before (or none, after one was seen) means that the
	// object was removed or rewritten: its last known holder may still
	// write, and is fenced.
	Epoch uint64 `json:",omitempty"`
	// Failbacks counts the failback strikes of the group (see
	// [Machine.failbackWait]): failback attempts, and serve failures
	// after an acquisition that was not one, since the preferred owner
	// last held the group for Config.FailbackStable. Every holder writes
	// it on, so it survives restarts of any gateway.
	Failbacks uint32 `json:",omitempty"`
	// BackendDowns counts, per gateway name, its backend step-downs in a
	// row (Machine.BackendObserved): each doubles the backoff before it
	// serves the group again, until the group serves I/O there. Every
	// holder writes the entries on (its own as it counts it), so that a
	// gateway that restarts keeps its backoff.
	BackendDowns map[string]uint32 `json:",omitempty"`
}

// Observed is what ActRead found on the group object.
type Observed struct {
	// Locked: an unexpired lock is held (cls_lock drops expired lockers
	// by the OSD's clock).
	Locked bool
	// LockerSession is the holder's cookie when Locked.
	LockerSession string
	// Record is the last holder's record (zero if the group was never
	// held).
	Record Record
	// HandoverRequest is the gateway that asked for the group ("" none).
	HandoverRequest string
}

// Config configures a [Machine].
type Config struct {
	// Name is this gateway's name (unique in the group).
	Name string
	// Session is the lock cookie of this run (unique per process start).
	Session string
	// Lease is the lock's duration on the cluster.
	Lease time.Duration
	// RenewInterval is how often the owner renews (< Lease - Margin).
	RenewInterval time.Duration
	// Margin: the owner steps down (inaccessible) when Lease - Margin has
	// passed since it sent its last successful renewal, so that it stops
	// serving before the lease can end on the cluster's clock: the OSD
	// starts the lease when it handles the request, after it was sent.
	// Margin covers a clock rate difference and the time to apply the ANA
	// change.
	Margin time.Duration
	// FailbackDelay is how long the preferred owner of a group waits,
	// from its start (or from when it last lost the group in this run),
	// before asking the holder to hand the group back, when the group has
	// no failback strike; with n strikes (Record.Failbacks) it waits
	// FailbackDelay × 2^n, at most FailbackMaxDelay.
	FailbackDelay time.Duration
	// FailbackMaxDelay caps the failback backoff; 0:
	// DefaultFailbackMaxDelay.
	FailbackMaxDelay time.Duration
	// FailbackStable: once the preferred owner has served the group this
	// long without interruption, its strikes are cleared (its next
	// renewal writes Failbacks 0); 0: DefaultFailbackStable.
	FailbackStable time.Duration
	// Groups maps each ANA group to its preferred owner's name.
	Groups map[uint32]string
	// BackendWindow: an owner whose group's I/O fails with path errors,
	// or stands still in the backend, and none completes for this long
	// steps down ([Machine.BackendObserved]); 0: one lease.
	BackendWindow time.Duration
	// BackendBackoff: a group stepped down for its backends is not taken
	// again here for this long after its release, doubled by each such
	// step-down in a row (Record.BackendDowns); 0: two leases.
	BackendBackoff time.Duration
	// BackendMaxBackoff caps the doubled backoff; 0: 32 × BackendBackoff.
	BackendMaxBackoff time.Duration
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("gateway: name is empty")
	case c.Session == "":
		return errors.New("gateway: session is empty")
	case c.Lease <= 0:
		return errors.New("gateway: lease must be positive")
	case c.Margin <= 0 || c.Margin >= c.Lease:
		return fmt.Errorf("gateway: margin %s must be positive and below the lease %s", c.Margin, c.Lease)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.Lease-c.Margin:
		return fmt.Errorf("gateway: renew interval %s must be positive and below lease - margin (%s)", c.RenewInterval, c.Lease-c.Margin)
	case c.FailbackDelay < 0:
		return errors.New("gateway: failback delay is negative")
	case c.BackendWindow < 0 || c.BackendBackoff < 0 || c.BackendMaxBackoff < 0:
		return errors.New("gateway: backend window or backoff is negative")
	case c.BackendMaxBackoff > 0 && c.BackendBackoff > 0 && c.BackendMaxBackoff < c.BackendBackoff:
		return fmt.Errorf("gateway: backend max backoff %s must be at least the backend backoff %s", c.BackendMaxBackoff, c.BackendBackoff)
	case c.FailbackMaxDelay < 0 || (c.FailbackMaxDelay > 0 && c.FailbackMaxDelay < c.FailbackDelay):
		return fmt.Errorf("gateway: failback max delay %s must be at least the failback delay %s", c.FailbackMaxDelay, c.FailbackDelay)
	case c.FailbackStable < 0:
		return errors.New("gateway: failback stable period is negative")
	case len(c.Groups) == 0:
		return errors.New("gateway: no groups")
	}
	return nil
}

// Role is a group's state in a [Machine].
type Role int

// The roles.
const (
	// Standby: another gateway holds the group, or nobody does yet; the
	// group is inaccessible here.
	Standby Role = iota
	// Fencing: the previous holder's lease expired without a release; its
	// clients are being blocklisted.
	Fencing
	// Acquiring: the lock is being taken.
	Acquiring
	// Owner: this gateway holds the lock; the group is optimized here.
	Owner
	// Releasing: the release is out (inaccessible here already).
	Releasing
)

func (r Role) String() string {
	return [...]string{"standby", "fencing", "acquiring", "owner", "releasing"}[r]
}

// GroupStatus is a group's state, for status and metrics.
type GroupStatus struct {
	Group     uint32
	Role      Role
	Preferred string // the preferred owner
	Holder    string // the holder last seen ("" none)
	Fences    int    // fences this gateway performed for the group
	LastError string // the last cluster error on the group
	// Failbacks is the group's failback strike count as last read or
	// written here (Record.Failbacks).
	Failbacks uint32
	// FailbackWait says why this gateway, the group's preferred owner,
	// does not ask for it back now ("" when it is not waiting: it holds
	// the group, asked already, or is not the preferred owner).
	FailbackWait string
}

type group struct {
	id        uint32
	preferred string
	role      Role
	pending   bool      // a cluster operation is out
	issued    time.Time // when the pending operation was sent
	leaseEnd  time.Time // Owner: the lease ends (our clock) no earlier than this
	lastRenew time.Time // Owner: the last renewal sent
	freeSince time.Time // Standby: first seen unlocked (zero: locked)
	lastRead  time.Time // Standby: the last read sent
	poke      bool      // Standby: read at the next tick (notified)
	requested bool      // a handover request was written
	holder    string
	fences    int
	lastErr   string
	fenceSess string // Fencing/Acquiring: the session being fenced
	// fenceReopen (Fencing): the acquisition after the fence replaces
	// this gateway's clients of the group (ActAcquire Reopen).
	fenceReopen bool
	// own: the client addresses that the last record of this gateway's
	// session named for the group (read back from the group object):
	// fenced with the clients the driver has before an acquisition
	// replaces them (ActFence Own).
	own []string
	// serveAfter: the group could not be served here (the target refused
	// to make it optimized, [Machine.ServeFailed]); it is not acquired
	// again before this time, so that a survivor takes it meanwhile.
	serveAfter time.Time
	// last is the record of the highest epoch seen on the group object
	// or written here: kept so that a record that disappears (the object
	// removed) or goes back to a lower epoch does not hide a holder that
	// may still write.
	last Record
	// epoch is the epoch of this gateway's record while it holds the
	// group (Acquiring, Owner, Releasing).
	epoch uint64
	// everHeld: this gateway held the group in this run; a successor
	// has fenced its clients of the group since, so that it reopens
	// them before it takes the group again (ActAcquire Reopen).
	everHeld bool

	// The group's ANA state on this gateway's ports: anaWant is the state
	// wanted (optimized), anaPending that an ActSetANA is out, anaSafe
	// that the last change applied was inaccessible and no optimized one
	// was sent since (true at start: the target starts with every gateway
	// group inaccessible). anaFailed is when the inaccessible change still
	// wanted first failed (zero: none), anaRetry when it is sent again.
	anaWant    bool
	anaPending bool
	anaSafe    bool
	anaFailed  time.Time
	anaRetry   time.Time
	// Owner: a release is wanted (to releaseTo) once the group is
	// inaccessible here; renewals go on meanwhile.
	releasing bool
	releaseTo string
	// be: the health of the group's backends (BackendObserved).
	be backendWatch
	// answer: the group was stepped down for its backends with commands
	// that may still be stuck in them; they are answered early
	// (ActAnswerInFlight) once that is safe: answerFenced says the
	// clients are blocklisted already (then once the group is
	// inaccessible here), else once a successor holds the group
	// (ReadDone). answerEpoch is this gateway's record epoch at the
	// step-down: a holder of a later record fenced its clients.
	answer       bool
	answerFenced bool
	answerEpoch  uint64

	// Failback (failback.go).
	ready      Readiness // the target's last report (SetReadiness)
	readySet   bool      // ready was reported
	failbacks  uint32    // the strike count to write (Record.Failbacks)
	byFailback bool      // Acquiring/Owner: the acquisition is a failback (counted in failbacks)
	lostAt     time.Time // when this gateway last stopped owning the group in this run
	servingAt  time.Time // Owner: when the optimized change applied (zero: not serving)
	waitWhy    string    // Standby, preferred owner: why it does not ask now
}

// Machine is the group-ownership logic of one gateway: a pure state
// machine. The driver calls Tick with the time and the methods that report
// results, and carries out the actions they return, in order. It reads no
// clock and does no I/O.
type Machine struct {
	cfg      Config
	groups   []*group // by id
	start    time.Time
	started  bool
	configOK bool
	degraded string
	exited   bool
	shutdown bool // Shutdown was called
	fenceErr error
	drained  bool // SetDrained: release what is owned, take nothing (drain.go)
}

// NewMachine returns a machine for cfg (which must be valid). The groups
// start in Standby, and nothing is acquired until [Machine.ConfigChecked]
// reported that the group configuration agrees with the cluster's.
func NewMachine(cfg Config) *Machine {
	m := &Machine{cfg: cfg, degraded: "group configuration not checked yet"}
	ids := make([]uint32, 0, len(cfg.Groups))
	for id := range cfg.Groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m.groups = append(m.groups, &group{id: id, preferred: cfg.Groups[id], anaSafe: true})
	}
	return m
}

func (m *Machine) group(id uint32) *group {
	i := sort.Search(len(m.groups), func(i int) bool { return m.groups[i].id >= id })
	if i < len(m.groups) && m.groups[i].id == id {
		return m.groups[i]
	}
	return nil
}

// FenceErr returns the error that showed this gateway fenced (it matches
// ErrFenced), nil if none did.
func (m *Machine) FenceErr() error { return m.fenceErr }

// Exited reports that the machine emitted ActExitFenced.
func (m *Machine) Exited() bool { return m.exited }

// Degraded returns why this gateway does not take ownership ("" if it
// may).
func (m *Machine) Degraded() string { return m.degraded }

// Status returns the groups' states.
func (m *Machine) Status() []GroupStatus {
	out := make([]GroupStatus, 0, len(m.groups))
	for _, g := range m.groups {
		st := GroupStatus{Group: g.id, Role: g.role, Preferred: g.preferred, Holder: g.holder, Fences: g.fences, LastError: g.lastErr, Failbacks: g.failbacks}
		if g.role == Standby && g.preferred == m.cfg.Name && g.holder != "" && g.holder != m.cfg.Name {
			st.FailbackWait = g.waitWhy
			if m.drained {
				st.FailbackWait = "this gateway is drained (nvmetctl gateway undrain)"
			}
		}
		out = append(out, st)
	}
	return out
}

// ConfigChecked reports the comparison of this gateway's group
// configuration with the one stored in the cluster: ok, or diff names the
// difference. A gateway that disagrees never takes ownership.
func (m *Machine) ConfigChecked(ok bool, diff string) {
	m.configOK = ok
	if ok {
		m.degraded = ""
	} else {
		m.degraded = "group configuration differs from the cluster's: " + diff
	}
}

// Notified reports that a group object changed (a watch notification:
// another gateway acquired, released or asked for a group): standby groups
// are read at the next tick instead of waiting for their interval.
func (m *Machine) Notified() {
	for _, g := range m.groups {
		g.poke = true
	}
}

// Tick advances the machine to now.
func (m *Machine) Tick(now time.Time) []Action {
	if m.exited {
		return nil
	}
	if !m.started {
		m.started, m.start = true, now
	}
	var acts []Action
	for _, g := range m.groups {
		if !g.anaWant && !g.anaSafe && !g.anaFailed.IsZero() {
			// The group must not be served here and the target keeps
			// refusing to make it inaccessible: after a lease of that,
			// stop serving by exiting.
			if !now.Before(g.anaFailed.Add(m.cfg.Lease)) {
				return m.exit(acts, fmt.Sprintf("group %d could not be made inaccessible for %s: %s", g.id, now.Sub(g.anaFailed), g.lastErr))
			}
			if !g.anaPending && !now.Before(g.anaRetry) {
				acts = m.setANA(acts, g, false)
			}
		}
		switch g.role {
		case Owner:
			// §: stop serving before the cluster can end the lease.
			if !now.Before(g.leaseEnd.Add(-m.cfg.Margin)) {
				acts = m.stepDown(acts, g, now, fmt.Sprintf("no successful renewal for %s (lease %s, margin %s)",
					now.Sub(g.leaseEnd.Add(-m.cfg.Lease)), m.cfg.Lease, m.cfg.Margin))
				continue
			}
			m.failbackStable(g, now)
			acts = m.drain(acts, g)
			if !g.pending && !now.Before(g.lastRenew.Add(m.cfg.RenewInterval)) {
				g.pending, g.issued, g.lastRenew = true, now, now
				acts = append(acts, Action{Kind: ActRenew, Group: g.id, Epoch: g.epoch, Failbacks: g.failbacks, BackendDowns: m.recordDowns(g)})
			}
			acts = m.maybeRelease(acts, g, now)
		case Standby:
			// A standby gateway reads the group every RenewInterval, and
			// at once after a notification (Notified).
			if !g.pending && (g.poke || g.lastRead.IsZero() || !now.Before(g.lastRead.Add(m.cfg.RenewInterval))) {
				g.pending, g.issued, g.lastRead, g.poke = true, now, now, false
				acts = append(acts, Action{Kind: ActRead, Group: g.id})
			}
		}
	}
	return acts
}

// stepDown ends ownership without a release (none is written, so the
// next owner fences this gateway).
func (m *Machine) stepDown(acts []Action, g *group, at time.Time, reason string) []Action {
	m.lost(g, at)
	g.role, g.pending, g.freeSince, g.requested, g.poke = Standby, false, time.Time{}, false, true
	g.releasing = false
	if g.be.down {
		// A backend step-down overtaken (no release): its backoff runs
		// from now.
		g.be.down = false
		if until := at.Add(g.be.backoff); until.After(g.serveAfter) {
			g.serveAfter = until
		}
	}
	acts = m.setANA(acts, g, false)
	return append(acts, Action{Kind: ActStepDown, Group: g.id, Reason: reason})
}

// setANA wants the group optimized or inaccessible here and emits the
// change unless one is out (its result then sends this one).
func (m *Machine) setANA(acts []Action, g *group, optimized bool) []Action {
	if g.anaWant != optimized {
		g.anaFailed = time.Time{}
	}
	g.anaWant = optimized
	if g.anaPending {
		return acts
	}
	if optimized {
		g.anaSafe = false // from now on it may be optimized here
	}
	g.anaPending = true
	return append(acts, Action{Kind: ActSetANA, Group: g.id, Optimized: optimized})
}

// maybeRelease emits the release wanted once the group is inaccessible
// here and no cluster operation is out.
func (m *Machine) maybeRelease(acts []Action, g *group, now time.Time) []Action {
	if g.role != Owner || !g.releasing || g.pending || g.anaPending || !g.anaSafe {
		return acts
	}
	g.role, g.pending, g.issued, g.releasing = Releasing, true, now, false
	a := Action{Kind: ActRelease, Group: g.id, To: g.releaseTo, Epoch: g.epoch, Failbacks: g.failbacks, BackendDowns: m.recordDowns(g)}
	if g.be.down {
		// A backend step-down: the backoff runs from now (the ANA
		// change may have taken long), and the release does not wait
		// for the commands stuck in the backend: they stay counted
		// (GroupInFlight) and the survivor fences their clients
		// before it serves, as after every release.
		g.be.down, a.NoDrain = false, true
		if until := now.Add(g.be.backoff); until.After(g.serveAfter) {
			g.serveAfter = until
		}
	}
	return append(acts, a)
}

// exit ends the machine: it stops serving by exiting.
func (m *Machine) exit(acts []Action, reason string) []Action {
	m.exited = true
	for _, g := range m.groups {
		g.role, g.pending = Standby, false
	}
	return append(acts, Action{Kind: ActExitStepDownFailed, Reason: reason})
}

// SetANADone reports the result of ActSetANA (optimized or not) at time
// now. A failed optimized change of a group just acquired gives the group
// up (released to nobody, not taken again here for one lease: holding the
// lock without serving would keep the group down on every gateway). A
// failed inaccessible change is retried every RenewInterval, and no
// release is written meanwhile; after a lease of failures the machine
// exits (ActExitStepDownFailed).
func (m *Machine) SetANADone(id uint32, optimized bool, now time.Time, err error) []Action {
	g := m.group(id)
	if g == nil || !g.anaPending || (m.exited && !m.shutdown) {
		return nil
	}
	g.anaPending = false
	var acts []Action
	switch {
	case err == nil && !optimized:
		g.anaSafe, g.anaFailed = true, time.Time{}
		if g.answer && g.answerFenced && !g.anaWant {
			// The clients are blocklisted: nothing stuck in them can
			// land any more.
			g.answer = false
			acts = append(acts, Action{Kind: ActAnswerInFlight, Group: g.id,
				Reason: "stepped down for its backends: their RADOS client is blocklisted"})
		}
	case err == nil:
		g.anaFailed = time.Time{}
		if g.anaWant && g.role == Owner {
			g.servingAt = now
		}
	case optimized:
		g.noteErr(err)
		if g.anaWant && g.role == Owner && !m.exited {
			m.serveFailed(g, now)
			g.serveAfter, g.releasing, g.releaseTo = now.Add(m.cfg.Lease), true, ""
			// Whatever failed may be its clients (blocklisted, cut): the
			// next acquisition replaces them, also when the release below
			// fails and the record stays ours.
			g.be.reopen = true
			acts = m.setANA(acts, g, false)
			return append(acts, Action{Kind: ActStepDown, Group: g.id, Reason: "the target could not serve it: " + err.Error()})
		}
	default:
		g.noteErr(err)
		if g.anaFailed.IsZero() {
			g.anaFailed = now
		}
		g.anaRetry = now.Add(m.cfg.RenewInterval)
		return nil
	}
	if g.anaWant != optimized {
		acts = m.setANA(acts, g, g.anaWant)
	}
	return m.maybeRelease(acts, g, now)
}

// fenced handles err if it says this gateway was fenced.
func (m *Machine) fenced(err error) ([]Action, bool) {
	if !errors.Is(err, ErrFenced) {
		return nil, false
	}
	m.exited, m.fenceErr = true, err
	var acts []Action
	for _, g := range m.groups {
		if !g.anaSafe || g.anaWant {
			g.anaWant, g.anaPending = false, true
			acts = append(acts, Action{Kind: ActSetANA, Group: g.id, Optimized: false})
		}
		if g.everHeld || g.role != Standby || g.answer {
			// Its commands stuck in the backends are answered before
			// the exit (after the inaccessible change: the driver
			// carries these out in order). Safe: this gateway is
			// fenced and stops; every next holder fences the clients
			// its record names before serving.
			g.answer = false
			acts = append(acts, Action{Kind: ActAnswerInFlight, Group: g.id, Reason: "this gateway was fenced"})
		}
		g.role, g.pending = Standby, false
	}
	return append(acts, Action{Kind: ActExitFenced, Reason: err.Error()}), true
}

// result is common to every result: it finds the group and clears its
// pending operation; nil if the result is not expected.
func (m *Machine) result(id uint32, want Role) *group {
	g := m.group(id)
	if m.exited || g == nil || !g.pending || g.role != want {
		return nil
	}
	g.pending = false
	return g
}

func (g *group) noteErr(err error) {
	if err != nil {
		g.lastErr = err.Error()
	}
}

// ReadDone reports the result of ActRead at time now.
func (m *Machine) ReadDone(id uint32, now time.Time, o Observed, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Standby)
	if g == nil {
		return nil
	}
	g.noteErr(err)
	if err != nil {
		return nil
	}
	// The record seen may have replaced a lost one (lost: a lower epoch
	// than one seen before, or none): then both its holder and the last
	// known one may still write.
	lost := o.Record.Epoch < g.last.Epoch || (o.Record.Session == "" && g.last.Session != "")
	var suspects []string // lost: the addresses of both
	if lost {
		for _, r := range []Record{g.last, o.Record} {
			if r.Session != "" && r.Session != m.cfg.Session {
				suspects = append(suspects, r.Addrs...)
			}
		}
	} else if o.Record.Session != "" {
		g.last = o.Record
		m.loadBackendDowns(g, o.Record)
	}
	if o.Record.Session == m.cfg.Session {
		// This gateway's own record: the clients it names are fenced
		// before an acquisition replaces them (acquire). Its last record
		// only: a record names the clients that may still write (the
		// driver leaves out those it fenced itself), so that a fence
		// does not grow with the group's history.
		g.own = slices.Clone(o.Record.Addrs)
	}
	if o.Locked {
		g.freeSince = time.Time{}
		if o.LockerSession == m.cfg.Session {
			// Our own lock (we stepped down while the cluster still had
			// it): take it again; nobody else held it (its own clients
			// are fenced first only if they are replaced: acquire). Not
			// while the group cannot be served here (nor while drained):
			// the lock then runs out and a survivor fences this
			// gateway's clients and takes it.
			if now.Before(g.serveAfter) || m.drained {
				return nil
			}
			return m.acquire(g, now, false, prior{})
		}
		g.holder = o.Record.Name
		var acts []Action
		if g.answer && !lost && o.Record.Session != m.cfg.Session && o.Record.Epoch > g.answerEpoch && g.anaSafe && !g.anaWant {
			// A successor holds the group: it fenced this gateway's
			// clients of the group (the record names them) before it
			// took it, so nothing stuck in them can land after its
			// writes; the hosts retry there.
			g.answer = false
			acts = append(acts, Action{Kind: ActAnswerInFlight, Group: g.id,
				Reason: fmt.Sprintf("%s holds the group (epoch %d): it fenced this gateway's clients of the group", o.Record.Name, o.Record.Epoch)})
		}
		// Failback: the preferred owner asks for its group back once it
		// can serve it, a host is connected to it, and its backoff has
		// passed (failback.go).
		if g.preferred == m.cfg.Name && m.configOK && !m.drained && o.HandoverRequest != m.cfg.Name && m.failbackDue(g, now, o.Record) &&
			!now.Before(g.serveAfter) {
			g.pending, g.issued, g.requested = true, now, true
			return append(acts, Action{Kind: ActRequestHandover, Group: g.id})
		}
		return acts
	}
	if !m.configOK || now.Before(g.serveAfter) || m.drained {
		return nil
	}
	if g.freeSince.IsZero() {
		g.freeSince = now
	}
	r := o.Record
	// A group handed over to this gateway, its preferred owner, by
	// another: this acquisition is a failback attempt (one strike).
	g.byFailback = r.Released && r.HandoverTo == m.cfg.Name && r.Session != m.cfg.Session && g.preferred == m.cfg.Name
	switch {
	case lost && len(suspects) > 0:
		// The record was lost (the object removed) or rolled back: the
		// holder is unknown, so the last known one (and the one the
		// record now names) is fenced, whatever the record says.
		return m.acquire(g, now, g.everHeld, prior{addrs: suspects, sess: g.last.Session,
			reason: fmt.Sprintf("the group's record went from epoch %d (%s, session %s) to %d: the last known holder may still write",
				g.last.Epoch, g.last.Name, g.last.Session, o.Record.Epoch)})
	case lost:
		// Lost, but the last record known was this gateway's own.
		return m.acquire(g, now, false, prior{})
	case r.Session == m.cfg.Session && !r.Released:
		// Our own record: nobody held the group since.
		return m.acquire(g, now, false, prior{})
	case r.Session == "" || r.Released:
		// Never held, or released. A group released to nobody (its
		// holder stopped) goes to whoever is first; one handed over goes
		// to its recipient at once, and one never held to its preferred
		// owner at once; any other gateway waits one lease for them, so
		// that a handover or a cold start is not raced.
		if !(r.HandoverTo == m.cfg.Name || (r.Released && r.HandoverTo == "") ||
			(r.Session == "" && g.preferred == m.cfg.Name) || !now.Before(g.freeSince.Add(m.cfg.Lease))) {
			return nil
		}
		if r.Session == m.cfg.Session {
			// Released by us, nobody since: taken back on new clients.
			// The gateway it was handed to (or any that saw it
			// released) fences our clients of the group before it takes
			// it, and may be doing so now: the old clients could be
			// blocklisted under us (seen: TestFailbackBackoff, whose
			// recipient's fence outlasted a lease).
			return m.acquire(g, now, true, prior{})
		}
		if r.Session == "" || len(r.Addrs) == 0 {
			return m.acquire(g, now, g.everHeld, prior{})
		}
		// Released: its clients of the group are fenced all the same.
		// The release followed a drain that counts only the commands of
		// live connections: a write whose host connection closed, or
		// that was completed as a path error on its timeout, may still
		// be in librbd or on its way to an OSD, and would land after
		// this gateway's writes. The record names only the clients that
		// carry the group's I/O (Applier.Addrs), so the previous
		// holder's other groups go on.
		return m.acquire(g, now, g.everHeld, prior{addrs: r.Addrs, sess: r.Session,
			reason: fmt.Sprintf("hand-over from %s (session %s): its clients of the group are fenced before serving", r.Name, r.Session)})
	}
	// The holder's lease expired without a release: fence every client
	// through which it can write, then take the group.
	return m.acquire(g, now, g.everHeld, prior{addrs: r.Addrs, sess: r.Session,
		reason: fmt.Sprintf("lease of %s (session %s) expired without release", r.Name, r.Session)})
}

// prior is what an acquisition fences first: the clients of the group's
// previous holder(s) (addrs; sess is the session whose record named
// them), and why.
type prior struct {
	addrs  []string
	sess   string
	reason string
}

// acquire is the one path by which this gateway takes a group: every
// acquisition (a takeover, a hand-over, its own lock, record or release
// taken back) comes through it. reopen: this gateway's clients of the
// group are to be replaced before it serves the group (a successor may
// have fenced them since it last held it; a group stepped down for its
// backends is always taken back on new clients, BackendObserved).
//
// Before the group is served here, every client that may still write to
// its images and will not carry its writes from now on is fenced: those
// of the previous holders (p), and, when this gateway's own clients are
// replaced, those too (ActFence Own: the addresses its last record
// named, and the driver adds every client it has on the group's images
// that it has not fenced itself yet). A
// write of an old client of its own may still be in librbd or in an
// OSD's queue (after a backend step-down it is stuck there: that is why
// the group was stepped down) and would otherwise land after a newer
// write of the new clients. Then the acquisition (ActAcquire, after
// FenceDone) reopens, makes the new clients wait for the OSD map with
// the blocklist (Applier.WaitForLatestOSDMap: an OSD handles their
// operations only once it has it, and then drops the old clients'), takes
// the lock and writes the record: the same sequence whether the group
// comes from another gateway or from this one. Clients that are kept (no
// reopen) are not fenced: they are this gateway's writers still, and one
// RADOS client's operations on an object are applied in the order it sent
// them.
func (m *Machine) acquire(g *group, now time.Time, reopen bool, p prior) []Action {
	reopen = reopen || g.be.reopen
	if len(p.addrs) == 0 && !reopen {
		return m.take(g, now, false)
	}
	addrs := slices.Clone(p.addrs)
	reason := p.reason
	if reopen {
		for _, a := range g.own {
			if !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		}
		own := "taken on new clients: a write of this gateway's old ones may still be in flight"
		if reason == "" {
			reason = own
		} else {
			reason += "; " + own
		}
	}
	g.role, g.pending, g.issued, g.fenceSess, g.fenceReopen = Fencing, true, now, p.sess, reopen
	return []Action{{Kind: ActFence, Group: g.id, Addrs: addrs, Own: reopen, Reason: reason}}
}

// take emits the acquisition proper, once acquire's fence (if any) is
// done; reopen: this gateway's clients of the group are replaced first
// (they were fenced: acquire).
func (m *Machine) take(g *group, now time.Time, reopen bool) []Action {
	g.role, g.pending, g.issued, g.epoch = Acquiring, true, now, g.last.Epoch+1
	// Taken back before a successor, the stuck commands answered at
	// its own fence (FenceDone) or not: nothing more to answer.
	g.answer = false
	g.failbacks = g.last.Failbacks
	if g.byFailback {
		g.failbacks++
	}
	return []Action{{Kind: ActAcquire, Group: g.id, Epoch: g.epoch, Reopen: reopen, Failbacks: g.failbacks, BackendDowns: m.recordDowns(g)}}
}

// FenceDone reports the result of ActFence at time now. On failure the
// group is not taken: the next tick reads it again.
func (m *Machine) FenceDone(id uint32, now time.Time, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Fencing)
	if g == nil {
		return nil
	}
	if err != nil {
		g.noteErr(err)
		g.role = Standby
		return nil
	}
	g.fences++
	if m.drained {
		// Drained meanwhile: fenced, but not taken (a live member
		// takes it; fencing again is idempotent).
		g.role = Standby
		return nil
	}
	var acts []Action
	if g.fenceReopen && g.answer && g.anaSafe && !g.anaWant {
		// Its own clients of the group are blocklisted now: nothing
		// stuck in them can land any more; the hosts retry elsewhere or
		// here once the group is optimized again.
		acts = append(acts, Action{Kind: ActAnswerInFlight, Group: g.id,
			Reason: "this gateway fenced its own clients of the group before taking it back"})
	}
	return append(acts, m.take(g, now, g.fenceReopen)...)
}

// AcquireDone reports the result of ActAcquire, which was sent at the
// time of the call that emitted it.
func (m *Machine) AcquireDone(id uint32, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Acquiring)
	if g == nil {
		return nil
	}
	if err != nil {
		g.noteErr(err)
		g.role, g.byFailback = Standby, false
		if errors.Is(err, ErrLockBusy) {
			// Another gateway has the lock, or held the group since
			// the read (ErrHolderSince): read it again at once (that
			// holder is fenced before the next acquisition). Not a
			// failure of the new clients: no backend backoff.
			g.poke = true
			return nil
		}
		m.backendAcquireFailed(g)
		return nil
	}
	// The lease runs from no earlier than when the request was sent.
	g.role, g.leaseEnd, g.lastRenew, g.holder, g.requested = Owner, g.issued.Add(m.cfg.Lease), g.issued, m.cfg.Name, false
	g.last, g.everHeld = Record{Name: m.cfg.Name, Session: m.cfg.Session, Epoch: g.epoch, Failbacks: g.failbacks, BackendDowns: m.recordDowns(g)}, true
	g.servingAt = time.Time{}
	g.be.reopen, g.be.down = false, false // its clients were replaced, if they had to be
	return m.setANA(m.serveUntil(nil, g), g, true)
}

// serveUntil emits the group's serving deadline: the moment the tick
// would step down for want of a renewal.
func (m *Machine) serveUntil(acts []Action, g *group) []Action {
	return append(acts, Action{Kind: ActServeUntil, Group: g.id, Until: g.leaseEnd.Add(-m.cfg.Margin)})
}

// RenewDone reports the result of ActRenew, with the handover request
// found on the group object.
func (m *Machine) RenewDone(id uint32, handoverRequest string, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Owner)
	if g == nil {
		return nil
	}
	if errors.Is(err, ErrLockBusy) {
		g.noteErr(err)
		return m.stepDown(nil, g, g.issued, "the lock is no longer ours: "+err.Error())
	}
	if err != nil {
		g.noteErr(err) // retried at the next tick; the margin decides
		return nil
	}
	g.leaseEnd = g.issued.Add(m.cfg.Lease)
	acts := m.serveUntil(nil, g)
	if !g.releasing && handoverRequest != "" && handoverRequest != m.cfg.Name && handoverRequest == g.preferred {
		// Failback, gracefully: inaccessible here first (ANA change to
		// the hosts), then (once that is applied) flush, mark released
		// and unlock. Renewals go on until then.
		g.releasing, g.releaseTo = true, handoverRequest
		acts = m.setANA(acts, g, false)
	}
	return m.maybeRelease(acts, g, g.issued)
}

// ReleaseDone reports the result of ActRelease. Failed or not, the group
// is no longer served here; if the release failed, the lock expires and
// the new owner fences this gateway.
func (m *Machine) ReleaseDone(id uint32, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Releasing)
	if g == nil {
		return nil
	}
	g.noteErr(err)
	if err != nil {
		// The flush or the record write failed: perhaps on its clients
		// (blocklisted, cut). The group is taken again here only on
		// new ones (its own lock or record taken back included).
		g.be.reopen = true
	}
	m.lost(g, g.issued)
	g.role, g.freeSince, g.holder, g.poke = Standby, time.Time{}, "", true
	return nil
}

// RequestDone reports the result of ActRequestHandover.
func (m *Machine) RequestDone(id uint32, err error) []Action {
	if acts, ok := m.fenced(err); ok {
		return acts
	}
	g := m.result(id, Standby)
	if g == nil {
		return nil
	}
	g.noteErr(err)
	return nil
}

// Shutdown ends the machine for a clean stop: each group it owns goes
// inaccessible and, once [Machine.SetANADone] reported that applied, is
// released to nobody (the first survivor to see it takes it). The driver
// reports the ANA changes' results (SetANADone returns the releases); the
// results of the releases need not be reported, and results of operations
// out before Shutdown are not (their actions are dropped). A group whose ANA change
// fails is not released: its lease ends and the next owner fences this
// gateway.
func (m *Machine) Shutdown() []Action {
	if m.exited {
		return nil
	}
	m.exited, m.shutdown = true, true
	var acts []Action
	for _, g := range m.groups {
		owner := g.role == Owner
		// The driver dropped what was still out.
		g.role, g.pending, g.releasing, g.anaPending = Standby, false, false, false
		if owner {
			g.role, g.releasing, g.releaseTo = Owner, true, ""
			acts = m.setANA(acts, g, false)
			acts = m.maybeRelease(acts, g, time.Time{})
		}
	}
	return acts
}
