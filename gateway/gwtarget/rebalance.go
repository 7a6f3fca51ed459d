package gwtarget

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway"
)

// Rebalancing (docs/rbd.md "Rebalancing"): with gateway.rebalance: auto
// (the default) the group spreads its ANA groups' preferred owners evenly
// over its live, undrained members when a member joins or leaves. A
// rebalance is a change of the group's configuration like `nvmetctl
// group move`: a version storing the new preferred owners, stored by the
// one compare-and-set of every change, after which each move is the
// machine's graceful, fenced failback. Nothing else serves or moves.
//
//   - Liveness, one definition: a member is alive when its watch of the
//     config object answers a probe with its name (gateway.AliveMembers).
//     A crashed, frozen or cut-off gateway does not answer, although the
//     OSD lists its watch until osd_client_watch_timeout; a clean stop
//     unwatches. The recorded ports (kept by a crashed gateway) are not a
//     liveness signal. A member's lease-record renewals are not either: a
//     member that owns no group (one that just joined) renews nothing.
//   - Hold-down: a member counts as joined (or gone) once RebalanceHold
//     probes in a row, one a lease, agree; until every member's state is
//     settled so, nothing is decided. A gateway that comes and goes
//     within the hold-down moves nothing.
//   - One decider: the first (by name) settled live undrained member
//     decides, from the version it runs; a second decider's store loses
//     the compare-and-set (someone else did it) and reads the new version.
//   - Pinned groups (nvmetctl group pin) never move, and count for their
//     preferred owner's share.
//   - A probe answered without a name (a gateway of an older release) or
//     a version this gateway does not run stops the decision: liveness
//     cannot be told, or the group is changing.

// Rebalance settings (gateway.rebalance).
const (
	RebalanceAuto = "auto"
	RebalanceOff  = "off"
)

// RebalanceHold is how many probes in a row (one a lease) must agree
// before a member counts as joined or gone.
const RebalanceHold = 3

// Rebalanced returns the preferred owners (by ANA group ID) that spread
// ana evenly over live (the members that may own: alive and not
// drained), with the fewest moves: a group whose preferred owner is not
// in live goes to the least loaded live member; then, while the most
// loaded member has two more than the least loaded, its highest-ID group
// that is not pinned moves to the least loaded (ties by name). Pinned
// groups stay and count for their owner. Only the groups whose owner
// changes are in the answer; none without a live member. Pure and
// deterministic: every gateway computes the same from the same version
// and liveness.
func Rebalanced(ana []GroupConfig, pinned []uint32, live []string) map[uint32]string {
	moves := map[uint32]string{}
	if len(live) == 0 {
		return moves
	}
	live = slices.Clone(live)
	slices.Sort(live)
	live = slices.Compact(live)
	owner := map[uint32]string{}
	load := map[string]int{}
	ids := make([]uint32, 0, len(ana))
	for _, a := range ana {
		ids = append(ids, a.ID)
		owner[a.ID] = a.Preferred
	}
	slices.Sort(ids)
	for _, id := range ids {
		if slices.Contains(live, owner[id]) {
			load[owner[id]]++
		}
	}
	least := func() string {
		best := live[0]
		for _, m := range live[1:] {
			if load[m] < load[best] {
				best = m
			}
		}
		return best
	}
	move := func(id uint32, to string) {
		if slices.Contains(live, owner[id]) {
			load[owner[id]]--
		}
		owner[id] = to
		load[to]++
	}
	// Groups whose preferred owner is gone or drained (pinned ones too:
	// a pin keeps a group where it is served, not on a member that is
	// gone).
	for _, id := range ids {
		if !slices.Contains(live, owner[id]) {
			move(id, least())
		}
	}
	for {
		lo := least()
		hi, hiID := "", uint32(0)
		for _, m := range live {
			if hi != "" && load[m] <= load[hi] {
				continue
			}
			// Its highest movable group.
			var cand uint32
			found := false
			for _, id := range ids {
				if owner[id] == m && !slices.Contains(pinned, id) {
					cand, found = id, true
				}
			}
			if found {
				hi, hiID = m, cand
			}
		}
		if hi == "" || load[hi]-load[lo] < 2 {
			break
		}
		move(hiID, lo)
	}
	for _, a := range ana {
		if owner[a.ID] != a.Preferred {
			moves[a.ID] = owner[a.ID]
		}
	}
	return moves
}

// RebalanceEdit spreads the preferred owners over the members in alive
// that are not drained (Rebalanced), or changes nothing.
func RebalanceEdit(alive []string) GroupEdit {
	return func(d *GroupDoc, _ GroupView) error {
		live := slices.DeleteFunc(slices.Clone(alive), func(m string) bool { return slices.Contains(d.Drained, m) })
		for id, to := range Rebalanced(d.ANAGroups, d.Pinned, live) {
			i := slices.IndexFunc(d.ANAGroups, func(a GroupConfig) bool { return a.ID == id })
			d.ANAGroups[i].Preferred = to
		}
		return nil
	}
}

// PinEdit pins (or, with pin false, unpins) ANA group id: rebalancing
// never moves a pinned group.
func PinEdit(id uint32, pin bool) GroupEdit {
	return func(d *GroupDoc, _ GroupView) error {
		if !slices.ContainsFunc(d.ANAGroups, func(a GroupConfig) bool { return a.ID == id }) {
			ids := []string{}
			for _, a := range d.ANAGroups {
				ids = append(ids, fmt.Sprint(a.ID))
			}
			return fmt.Errorf("ANA group %d: %w (the group's: %s)", id, ErrNoSuchANAGroup, strings.Join(ids, ", "))
		}
		d.Pinned = slices.DeleteFunc(d.Pinned, func(p uint32) bool { return p == id })
		if pin {
			d.Pinned = append(d.Pinned, id)
			slices.Sort(d.Pinned)
		}
		if len(d.Pinned) == 0 {
			d.Pinned = nil
		}
		return nil
	}
}

// memberWatch is one member's liveness as probed, held down: state
// changes once RebalanceHold probes in a row agree.
type memberWatch struct {
	settled, alive bool // the held-down state
	cand           bool // the last probes' answer
	n              int  // how many probes in a row answered cand
}

// liveness holds the members' probed liveness down (RebalanceHold).
type liveness struct {
	m map[string]*memberWatch
}

// observe records one probe: alive are the members that answered, of
// members. It returns the settled live members and whether every member's
// state is settled.
func (l *liveness) observe(members, alive []string) ([]string, bool) {
	if l.m == nil {
		l.m = map[string]*memberWatch{}
	}
	for name := range l.m {
		if !slices.Contains(members, name) {
			delete(l.m, name)
		}
	}
	all := true
	var live []string
	for _, name := range members {
		w := l.m[name]
		if w == nil {
			w = &memberWatch{}
			l.m[name] = w
		}
		a := slices.Contains(alive, name)
		if w.n > 0 && a == w.cand {
			w.n++
		} else {
			w.cand, w.n = a, 1
		}
		if w.n >= RebalanceHold {
			w.settled, w.alive = true, a
		}
		if !w.settled {
			all = false
		}
		if w.settled && w.alive {
			live = append(live, name)
		}
	}
	slices.Sort(live)
	return live, all
}

// rebalanceRound probes the members' liveness (every lease, from
// followGroup) and, on the decider, stores a rebalance if the version it
// runs is not spread evenly over the settled live undrained members.
func (gs *Gateway) rebalanceRound(l *liveness) {
	if !gs.RADOSHeld() || gs.cfg.Rebalance != RebalanceAuto {
		return
	}
	members, err := gs.cl.Members()
	if err != nil {
		gs.log.Warn("gateway: rebalance: cannot read the group's members", zap.Error(err))
		return
	}
	names := make([]string, 0, len(members))
	for _, m := range members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	probe, err := gs.cl.AliveMembers(probeTimeout(gs.cfg.Lease))
	if err != nil {
		gs.log.Warn("gateway: rebalance: cannot probe the members' liveness", zap.Error(err))
		return
	}
	live, settled := l.observe(names, probe.Alive)
	gs.mu.Lock()
	gs.live, gs.liveSettled = live, settled && probe.Unnamed == 0
	gs.mu.Unlock()
	if probe.Unnamed > 0 || !settled {
		return
	}
	gs.mu.Lock()
	st := *gs.grp
	gs.mu.Unlock()
	undrained := slices.DeleteFunc(slices.Clone(live), func(m string) bool { return slices.Contains(st.doc.Drained, m) })
	if len(undrained) == 0 || undrained[0] != gs.cfg.Name {
		return // not the decider
	}
	moves := Rebalanced(st.doc.ANAGroups, st.doc.Pinned, undrained)
	if len(moves) == 0 {
		return
	}
	gs.change.Lock()
	defer gs.change.Unlock()
	desc := make([]string, 0, len(moves))
	for _, a := range st.doc.ANAGroups {
		if to, ok := moves[a.ID]; ok {
			desc = append(desc, fmt.Sprintf("%d: %s → %s", a.ID, a.Preferred, to))
		}
	}
	what := "rebalance ANA groups (" + strings.Join(desc, ", ") + ") over " + strings.Join(undrained, ", ")
	v, changed, err := gs.ChangeGroupState(st.version, what, RebalanceEdit(live))
	var vc *gateway.VersionConflictError
	switch {
	case errors.As(err, &vc):
		gs.log.Info("gateway: rebalance: another change was stored first (it is read at the next sync)", zap.Error(err))
	case err != nil:
		gs.log.Warn("gateway: rebalance: not stored", zap.Error(err))
	case changed:
		gs.log.Info("gateway: "+what, zap.Uint64("version", v), zap.Strings("live", live))
	}
}

// probeTimeout bounds a liveness probe: half a lease, at most 2 s.
func probeTimeout(lease time.Duration) time.Duration {
	return min(lease/2, 2*time.Second)
}
