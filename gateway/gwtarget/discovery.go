package gwtarget

import (
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/target"
)

// Discovery across the group (docs/rbd.md "Discovery across the group"):
// this gateway records its ports in the group's config object
// (ports.<name>) and its discovery controllers list the other members'
// ports, for the subsystems the host may see (target.PeerPort).

// peerSetter is the target's SetPeerPorts (*target.Target has it).
type peerSetter interface {
	SetPeerPorts([]target.PeerPort) bool
}

// PeerPorts converts the members' ports (GroupPorts) into what the
// discovery log lists: every member's but self's, sorted.
func PeerPorts(self string, ports map[string][]gateway.Port) []target.PeerPort {
	var out []target.PeerPort
	for name, ps := range ports {
		if name == self {
			continue
		}
		for _, p := range ps {
			out = append(out, target.PeerPort{Gateway: name, PortID: p.ID, Transport: p.Transport, Address: p.Address,
				ServiceID: p.ServiceID, Subsystems: slices.Clone(p.Subsystems)})
		}
	}
	slices.SortFunc(out, func(a, b target.PeerPort) int {
		if c := strings.Compare(a.Gateway, b.Gateway); c != 0 {
			return c
		}
		return int(a.PortID) - int(b.PortID)
	})
	return out
}

// discoveryState is what followGroup keeps between rounds.
type discoveryState struct {
	published string // the ports entry recorded last ("" none)
	bad       string // the unreadable entries reported last
	failed    bool   // the last read of the members' ports failed (reported)
}

// ownsName reports whether member.<name> on the config object is absent
// or this gateway's (its identity): a gateway refused for a name another
// holds must not write or remove that one's ports.
func (gs *Gateway) ownsName() bool {
	members, err := gs.cl.Members()
	if err != nil {
		return false
	}
	for _, m := range members {
		if m.Name == gs.cfg.Name {
			return m.Identity == gs.identity
		}
	}
	return true
}

// syncDiscovery records this gateway's ports if they changed and gives
// the target the other members' ports.
func (gs *Gateway) syncDiscovery(ds *discoveryState) {
	mine := gs.cfg.advertised(gs.running())
	if enc := gateway.EncodePorts(mine); enc != ds.published && gs.ownsName() {
		if ok, err := gs.cl.SetPorts(gs.cfg.Name, mine); err != nil {
			gs.log.Warn("gateway: cannot record this gateway's ports for the group's discovery", zap.Error(err))
		} else if ok {
			ds.published = enc
			gs.log.Info("gateway: recorded this gateway's ports for the group's discovery", zap.String("ports", strings.TrimSpace(enc)))
		}
	}
	ps, ok := gs.t.(peerSetter)
	if !ok {
		return
	}
	all, bad, err := gs.cl.GroupPorts()
	if err != nil {
		// The last set stays listed: a path is not dropped because the
		// cluster is out of reach.
		if !ds.failed {
			gs.log.Warn("gateway: cannot read the members' ports for the group's discovery", zap.Error(err))
		}
		ds.failed = true
		return
	}
	ds.failed = false
	if b := strings.Join(bad, "; "); b != ds.bad {
		ds.bad = b
		if b != "" {
			gs.log.Warn("gateway: members' ports that cannot be read are not listed in discovery", zap.String("entries", b))
		}
	}
	peers := PeerPorts(gs.cfg.Name, all)
	gs.mu.Lock()
	gs.peers = peers
	gs.mu.Unlock()
	if ps.SetPeerPorts(peers) {
		names := []string{}
		for _, p := range peers {
			names = append(names, p.Gateway)
		}
		gs.log.Info("gateway: the discovery log lists the group's other ports", zap.Int("ports", len(peers)),
			zap.Strings("gateways", slices.Compact(names)))
	}
}

// followGroup follows the group's config object: at every notification,
// and every lease (a notification may be lost), it applies a newer
// version of the group's configuration (held in RADOS) and brings the
// discovery log's other ports up to date. It ends at stop.
func (gs *Gateway) followGroup(stop <-chan struct{}) {
	t := time.NewTicker(gs.cfg.Lease)
	defer t.Stop()
	var ds discoveryState
	watched := false
	round := func() {
		if gs.RADOSHeld() {
			gs.syncOnce()
		} else if !watched {
			// A gateway keeping the group's configuration in its file
			// watches the config object once it exists (the runner's
			// first comparison stores it); until then, every lease.
			var err error
			if watched, err = gs.cl.WatchConfigObject(); err != nil {
				gs.log.Warn("gateway: cannot watch the group's config object (the members' ports are read every lease)", zap.Error(err))
			}
		}
		gs.syncDiscovery(&ds)
	}
	round()
	// The members' liveness is probed once a lease (the hold-down counts
	// probes), not at each notification.
	var lv liveness
	for {
		select {
		case <-stop:
			return
		case <-gs.cl.ConfigChanged():
			round()
		case <-t.C:
			round()
			gs.rebalanceRound(&lv)
		}
	}
}

// withdrawPorts removes this gateway's ports from the group's discovery
// (a clean stop): the other gateways' discovery logs stop listing them.
func (gs *Gateway) withdrawPorts() {
	if !gs.ownsName() {
		return
	}
	if err := gs.cl.RemovePorts(gs.cfg.Name); err != nil {
		gs.log.Warn("gateway: cannot remove this gateway's ports from the group's discovery", zap.Error(err))
	}
}
