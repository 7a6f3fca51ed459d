package target

import (
	"slices"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// Namespace visibility per host (SPDK nvmf_ns_add_host, the Ceph
// gateway's --no-auto-visible): a namespace whose configuration lists
// hosts is, for every other host of the subsystem, as if it did not exist:
// absent from the active namespace lists, the ANA log and the SMART log of
// the whole subsystem, zeroes for Identify Namespace, Invalid Namespace for
// everything that names it.

// visibleTo reports whether host may see the namespace.
func (ns *namespace) visibleTo(host string) bool {
	return len(ns.cfg.Hosts) == 0 || slices.Contains(ns.cfg.Hosts, host)
}

// lookupNS is nsTable.lookup for the controller's host: a namespace it may
// not see is an Invalid Namespace, whatever its state.
func (c *controller) lookupNS(tab *nsTable, nsid uint32) (*namespace, nvmeof.Status) {
	ns, st := tab.lookup(nsid)
	switch {
	case st == nvmeof.StatusSuccess:
		if len(ns.cfg.Hosts) != 0 && !ns.visibleTo(c.hostNQN) {
			ns.put()
			return nil, nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
		}
	case st == nvmeof.StatusInternalPathError:
		if ns := tab.byID[nsid]; ns != nil && !ns.visibleTo(c.hostNQN) {
			return nil, nvmeof.StatusInvalidNamespace | nvmeof.StatusDNR
		}
	}
	return ns, st
}

// activeNS returns the active NSIDs the controller's host may see.
func (c *controller) activeNS(tab *nsTable) []uint32 {
	if !tab.restricted {
		return tab.active
	}
	ids := make([]uint32, 0, len(tab.active))
	for _, id := range tab.active {
		if tab.byID[id].visibleTo(c.hostNQN) {
			ids = append(ids, id)
		}
	}
	return ids
}

// restrictedTable reports whether a namespace of the table limits its
// hosts.
func restrictedTable(t *nsTable) bool {
	for _, ns := range t.byID {
		if len(ns.cfg.Hosts) != 0 {
			return true
		}
	}
	return false
}
