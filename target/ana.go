package target

import (
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// Asymmetric Namespace Access (NVMe Base 2.0 §8.20; nvmet: core.c
// nvmet_check_ana_state, admin-cmd.c nvmet_execute_get_log_page_ana). Every
// namespace belongs to an ANA group (NamespaceConfig.ANAGroup, default 1);
// each port gives each group a state (PortConfig.ANAGroups; optimized when
// not listed, as nvmet's default group), and a host sees the states of the
// port its controller is connected through: the same subsystem served on
// two ports (or by two nvmetd processes) is two paths whose states the host
// compares.

// ANA values reported in Identify Controller (as nvmet).
const (
	// anaTransitionTime is ANATT in seconds: how long a group may stay in
	// the change state.
	anaTransitionTime = 10
	// anaCapabilities is ANACAP: optimized, non-optimized, inaccessible,
	// persistent loss and change reported (bits 0..4).
	anaCapabilities = 0x1F
)

// anaView is one port's state of every ANA group, indexed by ANAGRPID.
type anaView [MaxANAGroup + 1]nvmeof.ANAState

// newANAView builds a port's view from its configuration. A group the
// port does not list is optimized (as nvmet's default group), except in a
// gateway (g not nil), where a group the gateway group manages is
// inaccessible unless the port lists it: only the gateway that owns the
// group says optimized (the daemon lists every managed group on every
// port), so that a port the overlay missed never makes it optimized.
//
// A group whose state was set with Target.SetGroupANA has that state on
// every port, whatever the configuration says (forced).
func newANAView(pc *PortConfig, g *GatewayGuard, forced map[uint32]nvmeof.ANAState) *anaView {
	var v anaView
	for i := range v {
		v[i] = nvmeof.ANAOptimized
		if g != nil && g.manages(uint32(i)) {
			v[i] = nvmeof.ANAInaccessible
		}
	}
	for _, g := range pc.ANAGroups {
		if g.ID >= 1 && int(g.ID) < len(v) {
			st, err := ParseANAState(g.State)
			if err == nil {
				v[g.ID] = st
			}
		}
	}
	for id, st := range forced {
		if id >= 1 && int(id) < len(v) {
			v[id] = st
		}
	}
	return &v
}

// ParseANAState parses an ANA state name as nvmetcli and nvme-cli write
// it: "optimized", "non-optimized", "inaccessible", "persistent-loss",
// "change". Empty is optimized.
func ParseANAState(s string) (nvmeof.ANAState, error) {
	switch s {
	case "", "optimized":
		return nvmeof.ANAOptimized, nil
	case "non-optimized", "non_optimized":
		return nvmeof.ANANonOptimized, nil
	case "inaccessible":
		return nvmeof.ANAInaccessible, nil
	case "persistent-loss", "persistent_loss":
		return nvmeof.ANAPersistentLoss, nil
	case "change":
		return nvmeof.ANAChange, nil
	}
	return 0, fmt.Errorf("ANA state %q: want optimized, non-optimized, inaccessible, persistent-loss or change", s)
}

// anaStatus is the path-related status an I/O command gets on a path
// whose group is in state st (nvmet_check_ana_state), or success.
func anaStatus(st nvmeof.ANAState) nvmeof.Status {
	switch st {
	case nvmeof.ANAInaccessible:
		return nvmeof.StatusANAInaccessible
	case nvmeof.ANAPersistentLoss:
		return nvmeof.StatusANAPersistentLoss
	case nvmeof.ANAChange:
		return nvmeof.StatusANATransition
	}
	return nvmeof.StatusSuccess
}

// anaState is the state of group through the controller's port.
func (c *controller) anaState(group uint32) nvmeof.ANAState {
	v := c.port.ana.Load()
	if v == nil || group == 0 || int(group) >= len(v) {
		return nvmeof.ANAOptimized
	}
	return v[group]
}

// anaLog builds the ANA log page (LID 0x0C) as seen through the
// controller's port: one descriptor per group that has a namespace of the
// subsystem, is configured on the port, or is the default group; with the
// groups' NSIDs unless rgo (Return Groups Only).
func (c *controller) anaLog(rgo bool) []byte {
	tab := c.sub.ns.Load()
	members := map[uint32][]uint32{}
	groups := []uint32{DefaultANAGroup}
	for _, id := range c.activeNS(tab) {
		ns := tab.byID[id]
		g := ns.cfg.ANAGroup
		members[g] = append(members[g], id)
		groups = append(groups, g)
	}
	c.s.regMu.RLock()
	for _, g := range c.port.cfg.ANAGroups {
		groups = append(groups, g.ID)
	}
	c.s.regMu.RUnlock()
	slices.Sort(groups)
	groups = slices.Compact(groups)
	chg := c.s.anaChange.Load()
	out := make([]nvmeof.ANAGroup, 0, len(groups))
	for _, g := range groups {
		ids := members[g]
		slices.Sort(ids)
		out = append(out, nvmeof.ANAGroup{ID: g, ChangeCount: chg, State: c.anaState(g), NSIDs: ids})
	}
	page, _ := nvmeof.AppendANALog(nil, chg, out, rgo) // at most 129 groups
	return page
}

// anaLogMaxSize is the largest ANA log the controller may return, as a
// host computes it from Identify Controller (nvme_get_ana_log_len): the
// header, NANAGRPID group descriptors and MNAN NSIDs.
func (c *controller) anaLogMaxSize() int {
	return nvmeof.ANALogHeaderSize + MaxANAGroup*nvmeof.ANAGroupDescSize + 4*int(c.sub.cfg.Load().MaxNamespaces)
}

// setANA publishes a port's ANA states; it reports whether any changed.
func (p *port) setANA(pc *PortConfig) bool {
	var forced map[uint32]nvmeof.ANAState
	if f := p.s.anaForced.Load(); f != nil {
		forced = *f
	}
	nv := newANAView(pc, p.s.guard.Load(), forced)
	old := p.ana.Swap(nv)
	return old == nil || *old != *nv
}

// anaChanged tells every controller on the port that its ANA states
// changed (an ANA Change notice, masked until the host reads the log).
func (s *server) anaChanged(p *port, pc *PortConfig) {
	s.anaChange.Add(1)
	n := 0
	for _, c := range s.allControllers() {
		if c.port == p && !c.sub.disc {
			c.event(nvmeof.AENANAChange, nvmeof.AECANAChange)
			n++
		}
	}
	var forced map[uint32]nvmeof.ANAState
	if f := s.anaForced.Load(); f != nil {
		forced = *f
	}
	s.log.Info("ANA states changed", zap.Uint16("port_id", p.id), zap.Any("ana_groups", pc.ANAGroups), zap.Any("set_by_gateway", forced), zap.Int("controllers_notified", n))
}

// anaGroupsMoved tells every controller of sub that its ANA log changed
// because a namespace moved to another ANA group (nvmet raises
// NVME_AEN_CFG_ANA_CHANGE when a namespace's ana_grpid changes:
// nvmet_ns_ana_grpid_store).
func (s *server) anaGroupsMoved(sub *subsystem) {
	s.anaChange.Add(1)
	n := 0
	for _, c := range sub.controllers() {
		c.event(nvmeof.AENANAChange, nvmeof.AECANAChange)
		n++
	}
	s.log.Info("ANA groups of namespaces changed", zap.String("subsystem", sub.nqn), zap.Int("controllers_notified", n))
}
