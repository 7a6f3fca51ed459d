package gwtarget

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/target"
)

// Changes of the group's own state through a version of its configuration
// (docs/rbd.md "Maintenance: drain and rolling upgrade"): an ANA group's
// preferred owner (nvmetctl group move) and the drained members
// (nvmetctl gateway drain/undrain). Each is made once, through any
// gateway, checked for the whole group, stored by the compare-and-set of
// every change, and applied by every gateway to its machine
// (gateway.Runner.SetGroupState): the moves themselves are the machine's
// failback and release paths, fenced as always.

// ErrNoSuchMember is in the error of a change naming a gateway that is not
// a member of the group (HTTP 404).
var ErrNoSuchMember = errors.New("not a member of the gateway group")

// ErrNoSuchANAGroup is in the error of a change naming an ANA group that
// is not the group's (HTTP 404).
var ErrNoSuchANAGroup = errors.New("not an ANA group of the gateway group")

// ErrLastServer is in the error of a drain refused because no other member
// could serve the group's ANA groups (HTTP 409).
var ErrLastServer = errors.New("no other member of the group could serve its ANA groups")

// ErrNotRADOSHeld is in the error of a change of the group's state on a
// gateway whose group configuration is in its file (HTTP 409): a drain or
// a move must reach every gateway, which only a version does.
var ErrNotRADOSHeld = errors.New("the group's configuration is not held in RADOS (gateway.group_config: rados): a drain or a move of an ANA group needs it")

// GroupView is what a GroupEdit may check the group against: its members
// (their entries), the members whose ports are recorded (running, or
// stopped without a clean stop: a clean stop withdraws them) and the
// members alive now (gateway.RADOS.AliveMembers: their watch of the config
// object answered; rebalance.go).
type GroupView struct {
	Members []gateway.Member
	Ports   map[string][]gateway.Port
	// Alive are the members that answered the liveness probe; AliveKnown
	// is false when it could not tell (a probe error, or a watch that
	// answered without a name: a gateway of an older release), and then
	// the recorded ports stand in for it.
	Alive      []string
	AliveKnown bool
}

// couldServe reports whether member m is alive (or, when liveness cannot
// be told, has its ports recorded).
func (v GroupView) couldServe(m string) bool {
	if v.AliveKnown {
		return slices.Contains(v.Alive, m)
	}
	return len(v.Ports[m]) > 0
}

func (v GroupView) member(name string) bool {
	return slices.ContainsFunc(v.Members, func(m gateway.Member) bool { return m.Name == name })
}

func (v GroupView) names() []string {
	out := make([]string, 0, len(v.Members))
	for _, m := range v.Members {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// GroupEdit changes the group's own state in d (its ANA groups' preferred
// owners, its drained members), or says why not.
type GroupEdit func(d *GroupDoc, v GroupView) error

// SetPreferredEdit makes name the preferred owner of ANA group id: the
// group moves there by the failback path (a graceful, fenced hand-over)
// once name can serve it.
func SetPreferredEdit(id uint32, name string) GroupEdit {
	return func(d *GroupDoc, v GroupView) error {
		if !v.member(name) {
			return fmt.Errorf("gateway %q: %w (members: %s)", name, ErrNoSuchMember, strings.Join(v.names(), ", "))
		}
		i := slices.IndexFunc(d.ANAGroups, func(a GroupConfig) bool { return a.ID == id })
		if i < 0 {
			ids := []string{}
			for _, a := range d.ANAGroups {
				ids = append(ids, fmt.Sprint(a.ID))
			}
			return fmt.Errorf("ANA group %d: %w (the group's: %s; adding one needs a restart of every gateway)", id, ErrNoSuchANAGroup, strings.Join(ids, ", "))
		}
		d.ANAGroups[i].Preferred = name
		return nil
	}
}

// DrainEdit drains (or, with drain false, undrains) member name. A drain
// is refused when no other member that is not drained is alive
// (GroupView.couldServe; ErrLastServer): nobody would serve the group's
// ANA groups.
func DrainEdit(name string, drain bool) GroupEdit {
	return func(d *GroupDoc, v GroupView) error {
		if !drain {
			d.Drained = slices.DeleteFunc(d.Drained, func(n string) bool { return n == name })
			if len(d.Drained) == 0 {
				d.Drained = nil
			}
			return nil
		}
		if !v.member(name) {
			return fmt.Errorf("gateway %q: %w (members: %s)", name, ErrNoSuchMember, strings.Join(v.names(), ", "))
		}
		if slices.Contains(d.Drained, name) {
			return nil
		}
		var could, stopped []string
		for _, m := range v.names() {
			switch {
			case m == name || slices.Contains(d.Drained, m):
			case v.couldServe(m):
				could = append(could, m)
			default:
				stopped = append(stopped, m)
			}
		}
		if len(could) == 0 {
			why := []string{}
			if len(d.Drained) > 0 {
				why = append(why, "drained: "+strings.Join(d.Drained, ", "))
			}
			if len(stopped) > 0 {
				if v.AliveKnown {
					why = append(why, "not alive (its watch of the group's config object does not answer): "+strings.Join(stopped, ", "))
				} else {
					why = append(why, "stopped (no ports recorded): "+strings.Join(stopped, ", "))
				}
			}
			if len(why) == 0 {
				why = append(why, "it is the only member")
			}
			return fmt.Errorf("draining %s: %w (%s); start or undrain another gateway first", name, ErrLastServer, strings.Join(why, "; "))
		}
		d.Drained = append(d.Drained, name)
		slices.Sort(d.Drained)
		return nil
	}
}

// ChangeGroupState applies edit to the group's configuration and stores
// the result as the version after base (one compare-and-set; the answer
// of a lost race is a *gateway.VersionConflictError), then gives it to
// this gateway's machine; the others apply it from RADOS. base must be
// the stored version and the one this gateway runs. It returns the
// version that runs and whether the edit changed anything (if not,
// nothing is stored). The caller holds the change lock.
func (gs *Gateway) ChangeGroupState(base uint64, what string, edit GroupEdit) (uint64, bool, error) {
	if !gs.RADOSHeld() {
		return 0, false, ErrNotRADOSHeld
	}
	gs.mu.Lock()
	st, cl := *gs.grp, gs.cl
	gs.mu.Unlock()
	if cl == nil {
		return 0, false, errors.New("gateway: not connected to the cluster")
	}
	sc, err := cl.ReadGroupConfig()
	if err != nil {
		return 0, false, err
	}
	if sc.Version != base {
		return 0, false, &gateway.VersionConflictError{Base: base, Current: sc.Version}
	}
	if base != st.version {
		return 0, false, fmt.Errorf("gateway: %s runs version %d of the group configuration, not the stored %d (%s): make the change through another gateway",
			gs.cfg.Name, st.version, sc.Version, st.pendingErr)
	}
	var v GroupView
	if v.Members, err = cl.Members(); err != nil {
		return 0, false, err
	}
	if v.Ports, _, err = cl.GroupPorts(); err != nil {
		return 0, false, err
	}
	if l, err := cl.AliveMembers(probeTimeout(gs.cfg.Lease)); err != nil {
		gs.log.Warn("gateway: cannot probe the members' liveness (their recorded ports stand in for it)", zap.Error(err))
	} else if l.Unnamed == 0 {
		v.Alive, v.AliveKnown = l.Alive, true
	}
	doc := st.doc.clone()
	if err := edit(&doc, v); err != nil {
		return 0, false, err
	}
	cur, err := EncodeGroup(st.doc)
	if err != nil {
		return 0, false, err
	}
	b, err := EncodeGroup(doc)
	if err != nil {
		return 0, false, err
	}
	if string(cur) == string(b) {
		return base, false, nil
	}
	agreement := ""
	if !slices.Equal(doc.ANAGroups, st.doc.ANAGroups) {
		// What every member's next start compares (CheckConfig).
		agreement = radosCanonical(gs.cfg.Lease.String(), doc.ANAGroups)
	}
	nv, err := cl.WriteGroupConfig(base, b, agreement)
	if err != nil {
		return 0, false, err
	}
	gs.log.Info("gateway: stored the group's state: "+what, zap.Uint64("version", nv), zap.Uint64("base", base),
		zap.Any("ana_groups", doc.ANAGroups), zap.Strings("drained", doc.Drained))
	gs.mu.Lock()
	gs.grp.doc = doc
	gs.grp.version = nv
	if gs.grp.pending <= nv {
		gs.grp.pending, gs.grp.pendingErr = 0, ""
	}
	gs.mu.Unlock()
	gs.pushGroupState()
	gs.recordRunning(cl, nv)
	return nv, true, nil
}

// pushGroupState gives the machine the preferred owners and the drained
// state of the version that runs here.
func (gs *Gateway) pushGroupState() {
	gs.mu.Lock()
	st := gs.grp
	if st == nil {
		gs.mu.Unlock()
		return
	}
	ana, drained := slices.Clone(st.doc.ANAGroups), slices.Clone(st.doc.Drained)
	gs.mu.Unlock()
	gs.pushState(ana, drained)
}

// pushState gives the machine the preferred owners ana and whether this
// gateway is among drained.
func (gs *Gateway) pushState(ana []GroupConfig, drained []string) {
	gs.mu.Lock()
	r := gs.runner
	gs.mu.Unlock()
	if r == nil {
		return
	}
	pref := map[uint32]string{}
	for _, a := range ana {
		pref[a.ID] = a.Preferred
	}
	r.SetGroupState(pref, slices.Contains(drained, gs.cfg.Name))
}

// Drained reports whether this gateway is drained in the version of the
// group's configuration it runs (false for a nil *Gateway).
func (gs *Gateway) Drained() bool {
	if gs == nil {
		return false
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.grp != nil && slices.Contains(gs.grp.doc.Drained, gs.cfg.Name)
}

// drainedOf returns the drained members of the version that runs here.
func (gs *Gateway) drainedOf() []string {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.grp == nil {
		return nil
	}
	return slices.Clone(gs.grp.doc.Drained)
}

// SpreadANAGroup is the ANA group a namespace added to c without one goes
// to: the group's ANA group with the fewest namespaces in c (across its
// subsystems), the lowest ID among equals, so that namespaces spread over
// the groups (and so over their owners) as they are added, the same on
// every gateway. 0 for a nil *Gateway (a stand-alone target keeps the
// default group).
func (gs *Gateway) SpreadANAGroup(c *target.Config) uint32 {
	if gs == nil {
		return 0
	}
	gs.mu.Lock()
	ana := gs.cfg.ANAGroups
	if gs.grp != nil {
		ana = gs.grp.doc.ANAGroups
	}
	ids := make([]uint32, 0, len(ana))
	for _, a := range ana {
		ids = append(ids, a.ID)
	}
	gs.mu.Unlock()
	return spread(ids, c)
}

// spread is SpreadANAGroup's choice among ids.
func spread(ids []uint32, c *target.Config) uint32 {
	if len(ids) == 0 {
		return 0
	}
	n := map[uint32]int{}
	for _, s := range c.Subsystems {
		for _, ns := range s.Namespaces {
			n[ns.ANAGroup]++
		}
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	best := ids[0]
	for _, id := range ids[1:] {
		if n[id] < n[best] {
			best = id
		}
	}
	return best
}
