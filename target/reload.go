package target

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// reload applies a new configuration (validated, defaults applied) from
// Diff(current, new). Connections the change does not touch stay up; see
// Target.Reload.
func (s *server) reload(nc *Config) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.stopped {
		return errors.New("target: reload after shutdown")
	}
	if !s.started {
		s.regMu.Lock()
		s.cfg = nc
		s.regMu.Unlock()
		return nil
	}
	old := s.cfg
	d := Diff(old, nc)
	if d.Empty() {
		s.regMu.Lock()
		s.cfg = nc
		s.regMu.Unlock()
		return nil
	}
	begin := time.Now()
	s.log.Info("reloading configuration", zap.Strings("changes", d.Summary()))
	var errs []error

	// What each discovery controller sees now, to notify those whose log
	// changes.
	s.regMu.RLock()
	views := map[*controller]string{}
	for _, c := range s.disc.controllers() {
		views[c] = s.discoveryView(c)
	}
	sigBefore := discoverySignature(old)
	s.regMu.RUnlock()

	if slices.Contains(d.TuningChanged, "tuning.io_workers") {
		s.shared.resize(nc.Tuning.IOWorkers)
	}

	// New subsystems: open their namespaces before anybody can connect.
	added := make([]*subsystem, 0, len(d.SubsystemsAdded))
	for i := range d.SubsystemsAdded {
		sc := &d.SubsystemsAdded[i]
		sub := newSubsystem(sc)
		sub.ns.Store(newNSTable(s.openNamespaces(sc.NQN, sc.Namespaces)))
		added = append(added, sub)
	}

	// Changed namespaces become unavailable (commands get a path error the
	// host retries) while their backends are replaced; removed ones
	// disappear (Invalid Namespace).
	type nsChange struct {
		sub     *subsystem
		retire  []*namespace
		open    []NamespaceConfig
		changed []uint32
	}
	var nsChanges []nsChange
	s.regMu.RLock()
	for _, sc := range d.SubsystemsChanged {
		sub := s.subsystems[sc.NQN]
		if sub == nil {
			continue
		}
		ch := nsChange{sub: sub}
		tab := sub.ns.Load()
		interim := make([]*namespace, 0, len(tab.byID))
		gone := map[uint32]bool{}
		for _, n := range sc.NamespacesRemoved {
			gone[n.NSID] = true
			ch.changed = append(ch.changed, n.NSID)
		}
		for _, n := range sc.NamespacesChanged {
			gone[n.NSID] = true
			ch.changed = append(ch.changed, n.NSID)
			ch.open = append(ch.open, n.New)
			interim = append(interim, &namespace{nsid: n.NSID, nqn: sc.NQN, cfg: n.New, state: NamespaceStopped, drained: make(chan struct{})})
		}
		for _, n := range sc.NamespacesAdded {
			ch.changed = append(ch.changed, n.NSID)
			ch.open = append(ch.open, n)
		}
		for id, ns := range tab.byID {
			if gone[id] {
				ch.retire = append(ch.retire, ns)
			} else {
				interim = append(interim, ns)
			}
		}
		if len(ch.retire) > 0 {
			sub.ns.Store(newNSTable(interim))
		}
		nsChanges = append(nsChanges, ch)
	}
	s.regMu.RUnlock()

	// The configuration view Connect and the discovery log read.
	var removedSubs []*subsystem
	var portsToShut []*port
	relisten := map[uint16]PortConfig{}
	s.regMu.Lock()
	s.cfg = nc
	for _, sc := range d.SubsystemsRemoved {
		if sub := s.subsystems[sc.NQN]; sub != nil {
			removedSubs = append(removedSubs, sub)
			delete(s.subsystems, sc.NQN)
		}
	}
	for _, sub := range added {
		s.subsystems[sub.nqn] = sub
	}
	for _, sc := range d.SubsystemsChanged {
		if sub := s.subsystems[sc.NQN]; sub != nil {
			c := sc.New
			sub.cfg.Store(&c)
			// From now on the I/O of disallowed hosts is refused; their
			// controllers are torn down below.
			for _, ctrl := range sub.controllers() {
				if !sub.hostAllowed(ctrl.hostNQN) {
					ctrl.revoked.Store(true)
				}
			}
		}
	}
	for _, pc := range d.PortsRemoved {
		if p := s.ports[pc.ID]; p != nil {
			portsToShut = append(portsToShut, p)
			delete(s.ports, pc.ID)
		}
	}
	for _, pch := range d.PortsChanged {
		p := s.ports[pch.New.ID]
		if p == nil {
			continue
		}
		if pch.Relisten {
			portsToShut = append(portsToShut, p)
			delete(s.ports, pch.New.ID)
			relisten[pch.New.ID] = pch.New
			continue
		}
		p.cfg = pch.New
	}
	if discoverySignature(nc) != sigBefore {
		s.genctr.Add(1)
	}
	s.regMu.Unlock()

	// Ports that go away take their connections along.
	for _, p := range portsToShut {
		s.log.Info("port closed by reload", zap.Uint16("port_id", p.id), zap.String("address", p.cfg.ListenAddress()))
		p.shut("removed by reload")
	}
	// Removed subsystems: their controllers and namespaces.
	for _, sub := range removedSubs {
		for _, c := range sub.controllers() {
			c.teardown("subsystem removed")
		}
		for _, ns := range sub.ns.Load().byID {
			if err := ns.close(nil); err != nil {
				errs = append(errs, err)
			}
		}
		s.log.Info("subsystem removed", zap.String("subsystem", sub.nqn))
	}
	// Hosts no longer allowed lose their controllers; so do hosts connected
	// through a port that stopped serving their subsystem.
	for _, sc := range d.SubsystemsChanged {
		s.regMu.RLock()
		sub := s.subsystems[sc.NQN]
		s.regMu.RUnlock()
		if sub == nil {
			continue
		}
		for _, c := range sub.controllers() {
			if c.revoked.Load() || !sub.hostAllowed(c.hostNQN) {
				c.teardown("host no longer allowed")
			}
		}
	}
	for _, pch := range d.PortsChanged {
		if pch.Relisten || len(pch.SubsystemsRemoved) == 0 {
			continue
		}
		for _, nqn := range pch.SubsystemsRemoved {
			s.regMu.RLock()
			sub := s.subsystems[nqn]
			s.regMu.RUnlock()
			if sub == nil {
				continue
			}
			for _, c := range sub.controllers() {
				if c.port.id == pch.New.ID {
					c.teardown("port no longer serves the subsystem")
				}
			}
		}
	}
	// Replace the namespaces, then tell the subsystems' controllers.
	for _, ch := range nsChanges {
		for _, ns := range ch.retire {
			if err := ns.close(nil); err != nil {
				errs = append(errs, err)
			}
		}
		if len(ch.retire) == 0 && len(ch.open) == 0 {
			continue
		}
		tab := ch.sub.ns.Load()
		list := make([]*namespace, 0, len(tab.byID)+len(ch.open))
		fresh := map[uint32]bool{}
		for _, nsc := range ch.open {
			fresh[nsc.NSID] = true
		}
		for id, ns := range tab.byID {
			if !fresh[id] {
				list = append(list, ns)
			}
		}
		for _, ns := range s.openNamespaces(ch.sub.nqn, ch.open) {
			if ns.state == NamespaceFailed {
				errs = append(errs, fmt.Errorf("subsystem %s namespace %d: %s", ch.sub.nqn, ns.nsid, ns.err))
			}
			list = append(list, ns)
		}
		ch.sub.ns.Store(newNSTable(list))
		slices.Sort(ch.changed)
		ch.sub.nsChanged(ch.changed)
	}
	// New ports, and ports that moved.
	var newPorts []PortConfig
	newPorts = append(newPorts, d.PortsAdded...)
	for _, pc := range relisten {
		newPorts = append(newPorts, pc)
	}
	for _, pc := range newPorts {
		p := newPort(s, pc)
		cc, err := s.controllerConfig(nc, &pc)
		if err == nil {
			err = p.listen(pc, cc)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d (%s): %w", pc.ID, pc.ListenAddress(), err))
		} else {
			s.log.Info("port listening", zap.Uint16("port_id", pc.ID), zap.String("address", pc.ListenAddress()), zap.Strings("subsystems", pc.Subsystems))
		}
		s.regMu.Lock()
		s.ports[pc.ID] = p
		s.regMu.Unlock()
	}
	// Listener settings apply to new connections: re-listen without
	// dropping the connections already accepted.
	listenerWide := len(d.TransportChanged) > 0 || slices.Contains(d.TuningChanged, "tuning.max_transfer_size") ||
		slices.Contains(d.TuningChanged, "tuning.buffer_pool_size")
	for _, pch := range d.PortsChanged {
		if pch.Relisten {
			continue
		}
		if !listenerWide && !slices.Contains(pch.Fields, "inline_data_size") && !slices.Contains(pch.Fields, "max_queue_size") {
			continue
		}
		s.regMu.RLock()
		p := s.ports[pch.New.ID]
		s.regMu.RUnlock()
		if p != nil {
			errs = append(errs, s.relisten(nc, p))
		}
	}
	if listenerWide {
		changed := map[uint16]bool{}
		for _, pch := range d.PortsChanged {
			changed[pch.New.ID] = true
		}
		for _, pc := range d.PortsAdded {
			changed[pc.ID] = true
		}
		s.regMu.RLock()
		ports := s.sortedPorts()
		s.regMu.RUnlock()
		for _, p := range ports {
			if !changed[p.id] {
				errs = append(errs, s.relisten(nc, p))
			}
		}
	}
	// Discovery log change notices (nvmet_port_disc_changed,
	// nvmet_subsys_disc_changed) to the discovery controllers whose log
	// now reads differently.
	s.regMu.RLock()
	var notify []*controller
	for _, c := range s.disc.controllers() {
		if v, ok := views[c]; !ok || v != s.discoveryView(c) {
			notify = append(notify, c)
		}
	}
	s.regMu.RUnlock()
	for _, c := range notify {
		c.event(nvmeof.AENDiscoveryChanged, nvmeof.AECDiscoveryChange)
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Error("reload applied with errors", zap.Error(err))
		return fmt.Errorf("target: reload: %w", err)
	}
	s.log.Info("configuration reloaded", zap.Duration("took", time.Since(begin)))
	return nil
}

// relisten replaces a port's listener with one of the current settings;
// connections already accepted go on with theirs.
func (s *server) relisten(cfg *Config, p *port) error {
	s.regMu.RLock()
	pc := p.cfg
	s.regMu.RUnlock()
	cc, err := s.controllerConfig(cfg, &pc)
	if err != nil {
		return err
	}
	p.stopListening("re-listening")
	if err := p.listen(pc, cc); err != nil {
		return fmt.Errorf("port %d (%s): %w", pc.ID, pc.ListenAddress(), err)
	}
	return nil
}

// discoverySignature summarizes everything a discovery log can show, to
// bump the generation counter when any of it changes.
func discoverySignature(c *Config) string {
	var b []byte
	for _, p := range c.Ports {
		b = fmt.Appendf(b, "port %d %s %v %v\n", p.ID, p.ListenAddress(), p.Subsystems, p.Referrals)
	}
	for _, sc := range c.Subsystems {
		b = fmt.Appendf(b, "subsys %s %v %v\n", sc.NQN, sc.AllowAnyHost, sc.AllowedHosts)
	}
	return string(b)
}
