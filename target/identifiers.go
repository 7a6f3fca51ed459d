package target

import "slices"

// KeepRunningEquivalents undoes, in nc, the differences from the running
// configuration that would not change what the target serves, so that
// applying nc does not reopen a namespace or notify a host for them. It
// exists for restoring an export (issue 23.12): nvmetcli's config.json
// spells out what nvmetd leaves implicit, and a restore of the file just
// exported must be no change at all. Undone, and only these:
//   - an NGUID, UUID or EUI-64 set to the value the running namespace
//     already derived and reports (the running configuration has it unset);
//   - must_exist on a namespace that is online (it only matters at open);
//   - a port's ANA group entries that state the default, optimized, for
//     groups the running port does not list.
//
// Anything else (another value, other storage, an identifier taken away)
// is left for the reload to apply.
func (t *Target) KeepRunningEquivalents(nc *Config) {
	s := t.s
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	cur := s.cfg
	if cur == nil {
		return
	}
	for i := range nc.Ports {
		p := &nc.Ports[i]
		for j := range cur.Ports {
			if op := &cur.Ports[j]; op.ID == p.ID {
				keepANADefaults(op, p)
			}
		}
	}
	for i := range nc.Subsystems {
		sc := &nc.Subsystems[i]
		old := cur.Subsystem(sc.NQN)
		sub := s.subsystems[sc.NQN]
		if old == nil || sub == nil {
			continue
		}
		tab := sub.ns.Load()
		for j := range sc.Namespaces {
			n := &sc.Namespaces[j]
			var on *NamespaceConfig
			for k := range old.Namespaces {
				if old.Namespaces[k].NSID == n.NSID {
					on = &old.Namespaces[k]
				}
			}
			rt := tab.byID[n.NSID]
			if on == nil || rt == nil || !rt.online() || on.Backend.Kind != n.Backend.Kind || on.Backend.Path != n.Backend.Path {
				continue
			}
			n.Backend.MustExist = on.Backend.MustExist
			keepLiveIDs(on, n, rt)
		}
	}
}

// keepLiveIDs unsets n's identifiers that on leaves unset and that equal
// what the running namespace rt reports.
func keepLiveIDs(on, n *NamespaceConfig, rt *namespace) {
	nguid, uuid, eui64 := idStrings(rt.ids)
	live, err := (&NamespaceConfig{NGUID: nguid, UUID: uuid, EUI64: eui64}).Identifiers()
	if err != nil {
		return
	}
	want, err := n.Identifiers()
	if err != nil {
		return // Validate names it
	}
	if on.NGUID == "" && want.HasNGUID && want.NGUID == live.NGUID {
		n.NGUID = ""
	}
	if on.UUID == "" && want.HasUUID && want.UUID == live.UUID {
		n.UUID = ""
	}
	if on.EUI64 == "" && want.HasEUI64 && want.EUI64 == live.EUI64 {
		n.EUI64 = ""
	}
}

// keepANADefaults drops from p the ANA group entries that state the
// default (optimized) for a group op does not list, when that makes the
// two lists equal.
func keepANADefaults(op, p *PortConfig) {
	listed := func(id uint32) bool {
		return slices.ContainsFunc(op.ANAGroups, func(g ANAGroupConfig) bool { return g.ID == id })
	}
	kept := slices.DeleteFunc(slices.Clone(p.ANAGroups), func(g ANAGroupConfig) bool {
		return (g.State == "" || g.State == "optimized") && !listed(g.ID)
	})
	if slices.Equal(kept, op.ANAGroups) {
		p.ANAGroups = slices.Clone(op.ANAGroups)
	}
}
