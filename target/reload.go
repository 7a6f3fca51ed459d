package target

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// A reload is a plan, then an apply:
//
//  1. planReload (pure) works out from the running configuration, the
//     namespaces that failed to open, and the new configuration what is to
//     change: subsystems, namespaces, ports, hosts to cut off, listeners.
//  2. server.prepare checks and opens everything new before anything live
//     changes: the backend of every added or changed namespace (a backend
//     on the same storage as the one it replaces is opened without its
//     claim, backend.Config.DeferClaim, and claims once the old one is
//     closed), and a listen probe of every new listen address. If any of it
//     fails, what was opened is closed and the reload is refused: nothing
//     changes. Namespaces that had failed and are unchanged are retried;
//     those that still fail stay failed without refusing the reload.
//  3. server.apply swaps the prepared objects in and retires the replaced
//     ones: their commands in flight drain for at most DrainTimeout (or
//     until Shutdown starts) before their backends are flushed and closed.

// DrainTimeout bounds how long a reload waits for the commands in flight on
// a namespace it removes or replaces. A namespace that has not drained by
// then (a stuck backend) is closed in the background once it drains, or at
// shutdown; the reload reports it.
const DrainTimeout = 30 * time.Second

// ErrReloadRefused is in the error of a Reload that changed nothing because
// part of the new configuration could not be prepared (errors.Is).
var ErrReloadRefused = errors.New("reload refused, nothing changed")

// nsKey names a namespace of a subsystem.
type nsKey struct {
	nqn  string
	nsid uint32
}

// reloadPlan is what a reload changes, worked out before anything is
// touched.
type reloadPlan struct {
	cfg  *Config
	diff *ConfigDiff

	resizeWorkers bool
	// subsAdded are the new subsystems; subsRemoved the NQNs that go.
	subsAdded   []*SubsystemConfig
	subsRemoved []string
	// subs are the changes to subsystems that stay, by NQN order.
	subs []*subPlan
	// portsShut are ports closed with their connections (removed, or
	// moved); portsAdded listen anew (added, or moved).
	portsShut  []uint16
	portsAdded []PortConfig
	// portsUpdated keep their listener and connections, with new settings.
	portsUpdated []PortConfig
	// portsDropSubs: hosts connected through port ID to these subsystems
	// lose their controllers.
	portsDropSubs map[uint16][]string
	// relisten are ports (kept) whose listener is replaced with one of the
	// new settings; connections already accepted keep theirs.
	relisten []uint16
	// discoveryChanged bumps the discovery log generation counter.
	discoveryChanged bool
}

// subPlan is the change to a subsystem present before and after.
type subPlan struct {
	nqn string
	cfg *SubsystemConfig // the new configuration
	// setCfg: subsystem-level settings or host access changed.
	setCfg bool
	// open are the namespaces to open (added, changed or retried), remove
	// the NSIDs whose namespace goes (removed, or replaced by one of open).
	open   []NamespaceConfig
	remove []uint32
	// retry marks the NSIDs of open that are retries of failed namespaces
	// with an unchanged configuration.
	retry map[uint32]bool
	// sameStorage marks the NSIDs of open replacing an online namespace on
	// the same storage (kind and path): opened with deferred claim.
	sameStorage map[uint32]bool
	// anaGroupMoved: a namespace changed ANA group, which changes the ANA
	// log of every controller of the subsystem (an ANA Change notice on
	// each, as nvmet_ns_ana_grpid_store does).
	anaGroupMoved bool
}

// empty reports whether the plan changes nothing.
func (p *reloadPlan) empty() bool {
	return p.diff.Empty() && len(p.subs) == 0
}

// planReload works out a reload from the running configuration old (with
// the namespaces that failed to open, and those online) to nc. Both have
// defaults applied. It is pure.
func planReload(old, nc *Config, failed, online map[nsKey]bool) *reloadPlan {
	d := Diff(old, nc)
	p := &reloadPlan{cfg: nc, diff: d, portsDropSubs: map[uint16][]string{}}
	p.resizeWorkers = slices.Contains(d.TuningChanged, "tuning.io_workers")
	for i := range d.SubsystemsAdded {
		p.subsAdded = append(p.subsAdded, &d.SubsystemsAdded[i])
	}
	for _, sc := range d.SubsystemsRemoved {
		p.subsRemoved = append(p.subsRemoved, sc.NQN)
	}
	changed := map[string]*SubsystemChange{}
	for i := range d.SubsystemsChanged {
		changed[d.SubsystemsChanged[i].NQN] = &d.SubsystemsChanged[i]
	}
	for i := range nc.Subsystems {
		sc := &nc.Subsystems[i]
		if old.Subsystem(sc.NQN) == nil {
			continue
		}
		sp := &subPlan{nqn: sc.NQN, cfg: sc, retry: map[uint32]bool{}, sameStorage: map[uint32]bool{}}
		touched := map[uint32]bool{}
		if ch := changed[sc.NQN]; ch != nil {
			sp.setCfg = len(ch.Fields) > 0 || len(ch.HostsAllowed)+len(ch.HostsDisallowed) > 0
			for _, n := range ch.NamespacesRemoved {
				sp.remove = append(sp.remove, n.NSID)
			}
			for _, n := range ch.NamespacesChanged {
				sp.remove = append(sp.remove, n.NSID)
				sp.open = append(sp.open, n.New)
				touched[n.NSID] = true
				if n.Old.ANAGroup != n.New.ANAGroup {
					sp.anaGroupMoved = true
				}
				if online[nsKey{sc.NQN, n.NSID}] && sameStorage(&n.Old.Backend, &n.New.Backend) {
					sp.sameStorage[n.NSID] = true
				}
			}
			for _, n := range ch.NamespacesAdded {
				sp.open = append(sp.open, n)
				touched[n.NSID] = true
			}
		}
		for _, n := range sc.Namespaces {
			if !touched[n.NSID] && n.IsEnabled() && failed[nsKey{sc.NQN, n.NSID}] {
				sp.remove = append(sp.remove, n.NSID)
				sp.open = append(sp.open, n)
				sp.retry[n.NSID] = true
			}
		}
		if sp.setCfg || len(sp.open) > 0 || len(sp.remove) > 0 {
			p.subs = append(p.subs, sp)
		}
	}

	for _, pc := range d.PortsRemoved {
		p.portsShut = append(p.portsShut, pc.ID)
	}
	p.portsAdded = append(p.portsAdded, d.PortsAdded...)
	listenerWide := len(d.TransportChanged) > 0 || slices.Contains(d.TuningChanged, "tuning.max_transfer_size") ||
		slices.Contains(d.TuningChanged, "tuning.buffer_pool_size")
	kept := map[uint16]bool{}
	for _, pch := range d.PortsChanged {
		if pch.Relisten {
			p.portsShut = append(p.portsShut, pch.New.ID)
			p.portsAdded = append(p.portsAdded, pch.New)
			continue
		}
		kept[pch.New.ID] = true
		p.portsUpdated = append(p.portsUpdated, pch.New)
		if len(pch.SubsystemsRemoved) > 0 {
			p.portsDropSubs[pch.New.ID] = pch.SubsystemsRemoved
		}
		if listenerWide || slices.Contains(pch.Fields, "inline_data_size") || slices.Contains(pch.Fields, "max_queue_size") {
			p.relisten = append(p.relisten, pch.New.ID)
		}
	}
	if listenerWide {
		added := map[uint16]bool{}
		for _, pc := range p.portsAdded {
			added[pc.ID] = true
		}
		for _, pc := range nc.Ports {
			if !kept[pc.ID] && !added[pc.ID] {
				p.relisten = append(p.relisten, pc.ID)
			}
		}
	}
	slices.Sort(p.relisten)
	p.discoveryChanged = discoverySignature(old) != discoverySignature(nc)
	return p
}

// prepared is what prepare opened for a plan.
type prepared struct {
	// subs are the new subsystems, namespaces open.
	subs []*subsystem
	// ns are the namespaces opened for each subPlan (same order as open).
	ns map[string][]*namespace
}

// close closes everything prepared (a refused reload).
func (pr *prepared) close() {
	for _, sub := range pr.subs {
		for _, ns := range sub.ns.Load().byID {
			_ = ns.close(nil)
		}
	}
	for _, list := range pr.ns {
		for _, ns := range list {
			_ = ns.close(nil)
		}
	}
}

// prepare opens what the plan adds, before anything live changes. On
// failure it closes what it opened and returns every problem, each naming
// its configuration field.
func (s *server) prepare(p *reloadPlan) (*prepared, error) {
	pr := &prepared{ns: map[string][]*namespace{}}
	var problems []*FieldError
	for _, sc := range p.subsAdded {
		sub := newSubsystem(sc)
		list := s.openNamespaces(p.cfg, sc.NQN, sc.Namespaces, nil)
		sub.ns.Store(newNSTable(list))
		pr.subs = append(pr.subs, sub)
		for _, ns := range list {
			if ns.state == NamespaceFailed {
				problems = append(problems, &FieldError{Field: ns.field, Reason: ns.err, Err: ns.cause})
			}
		}
	}
	for _, sp := range p.subs {
		list := s.openNamespaces(p.cfg, sp.nqn, sp.open, sp.sameStorage)
		pr.ns[sp.nqn] = list
		// A namespace replaced in place (same NSID) keeps counting where
		// the old one left off: the SMART log's data units and commands
		// are the namespace's, not the open file's.
		s.regMu.RLock()
		if sub := s.subsystems[sp.nqn]; sub != nil {
			old := sub.ns.Load()
			for _, ns := range list {
				if o := old.byID[ns.nsid]; o != nil {
					ns.nsCounters = o.nsCounters
				}
			}
		}
		s.regMu.RUnlock()
		for _, ns := range list {
			if ns.state == NamespaceFailed && !sp.retry[ns.nsid] {
				problems = append(problems, &FieldError{Field: ns.field, Reason: ns.err, Err: ns.cause})
			}
		}
	}
	// A new listen address must be free (a probe: listen, close).
	s.regMu.RLock()
	inUse := map[string]bool{}
	for _, pt := range s.ports {
		inUse[pt.cfg.ListenAddress()] = true
	}
	s.regMu.RUnlock()
	for _, pc := range p.portsAdded {
		if inUse[pc.ListenAddress()] {
			continue // ours now: it is closed before the new one listens
		}
		ln, err := net.Listen(pc.Network(), pc.ListenAddress())
		if err != nil {
			problems = append(problems, &FieldError{Field: portField(p.cfg, pc.ID) + ".address", Reason: fmt.Sprintf("cannot listen on %s: %v", pc.ListenAddress(), err), Err: err})
			continue
		}
		ln.Close()
	}
	if len(problems) > 0 {
		pr.close()
		return nil, &ValidationError{Problems: problems}
	}
	return pr, nil
}

// reload applies a new configuration (validated, defaults applied): plan,
// prepare, apply. Connections the change does not touch stay up; see
// Target.Reload.
func (s *server) reload(nc *Config) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.stopped {
		return errors.New("target: reload after shutdown")
	}
	if err := s.checkGuard(nc); err != nil {
		s.log.Error("reload refused, nothing changed:\n  " + indentLines(err.Error()))
		return err
	}
	if !s.started {
		s.regMu.Lock()
		s.cfg = nc
		s.regMu.Unlock()
		s.applies++
		return nil
	}
	// Key files are read again on every reload (a rotated key may keep
	// its file name); a key that cannot be read refuses the reload.
	keys, err := loadAuthKeys(nc)
	if err != nil {
		s.log.Error("reload refused, nothing changed:\n  " + indentLines(err.Error()))
		return fmt.Errorf("target: %w:\n%w", ErrReloadRefused, err)
	}
	defer func() { s.setAuthKeys(keys) }()
	failed, online := s.namespaceStates()
	p := planReload(s.cfg, nc, failed, online)
	if p.empty() {
		s.regMu.Lock()
		s.cfg = nc
		s.regMu.Unlock()
		s.applies++
		return nil
	}
	begin := time.Now()
	s.log.Info("reloading configuration", zap.Strings("changes", p.diff.Summary()))
	pr, err := s.prepare(p)
	if err != nil {
		keys = *s.authKeys.Load()
		s.log.Error("reload refused, nothing changed:\n  " + indentLines(err.Error()))
		return fmt.Errorf("target: %w:\n%w", ErrReloadRefused, err)
	}
	if err := s.apply(p, pr); err != nil {
		s.log.Error("reload applied with errors", zap.Error(err))
		return fmt.Errorf("target: reload: %w", err)
	}
	s.log.Info("configuration reloaded", zap.Duration("took", time.Since(begin)))
	return nil
}

// namespaceStates returns the namespaces that failed to open and those
// online.
func (s *server) namespaceStates() (failed, online map[nsKey]bool) {
	failed, online = map[nsKey]bool{}, map[nsKey]bool{}
	for _, sub := range s.subsystemList() {
		for id, ns := range sub.ns.Load().byID {
			switch ns.state {
			case NamespaceFailed:
				failed[nsKey{sub.nqn, id}] = true
			case NamespaceOnline:
				online[nsKey{sub.nqn, id}] = true
			}
		}
	}
	return failed, online
}

// apply carries out a prepared plan. What it cannot do (a port that cannot
// listen after all, a namespace that does not drain in time) is reported;
// the configuration of record is then the new one.
func (s *server) apply(p *reloadPlan, pr *prepared) error {
	s.applies++
	var errs []error
	nc := p.cfg

	// What each discovery controller sees now, to notify those whose log
	// changes.
	s.regMu.RLock()
	views := map[*controller]string{}
	for _, c := range s.disc.controllers() {
		views[c] = s.discoveryView(c)
	}
	s.regMu.RUnlock()

	if p.resizeWorkers {
		s.shared.resize(nc.Tuning.IOWorkers)
	}
	if s.adm != nil {
		s.adm.SetLimits(admissionLimits(nc))
	}

	// The configuration view Connect and the discovery log read, and the
	// namespace tables the I/O path reads: one swap.
	type retired struct {
		sub *subsystem
		ns  []*namespace
	}
	var retire []retired
	var removedSubs []*subsystem
	var portsToShut []*port
	notify := map[*subsystem][]uint32{}
	claims := map[*namespace]bool{}
	s.regMu.Lock()
	s.cfg = nc
	for _, nqn := range p.subsRemoved {
		if sub := s.subsystems[nqn]; sub != nil {
			removedSubs = append(removedSubs, sub)
			delete(s.subsystems, nqn)
		}
	}
	for _, sub := range pr.subs {
		s.subsystems[sub.nqn] = sub
	}
	for _, sp := range p.subs {
		sub := s.subsystems[sp.nqn]
		if sub == nil {
			continue
		}
		if sp.setCfg {
			c := *sp.cfg
			sub.cfg.Store(&c)
			// From now on the I/O of disallowed hosts is refused; their
			// controllers are torn down below.
			for _, ctrl := range sub.controllers() {
				if !sub.hostAllowed(ctrl.hostNQN) {
					ctrl.revoked.Store(true)
				}
			}
		}
		tab := sub.ns.Load()
		gone := map[uint32]bool{}
		for _, id := range sp.remove {
			gone[id] = true
		}
		list := make([]*namespace, 0, len(tab.byID)+len(sp.open))
		var old []*namespace
		for id, ns := range tab.byID {
			if gone[id] {
				old = append(old, ns)
			} else {
				list = append(list, ns)
			}
		}
		var changed []uint32
		for _, id := range sp.remove {
			if !sp.retry[id] {
				changed = append(changed, id)
			}
		}
		for _, ns := range pr.ns[sp.nqn] {
			list = append(list, ns)
			if sp.retry[ns.nsid] {
				if ns.online() {
					changed = append(changed, ns.nsid) // it appears
				}
				continue
			}
			changed = append(changed, ns.nsid)
			if sp.sameStorage[ns.nsid] && ns.online() {
				claims[ns] = true
			}
		}
		sub.ns.Store(newNSTable(list))
		if len(old) > 0 {
			retire = append(retire, retired{sub, old})
		}
		slices.Sort(changed)
		notify[sub] = slices.Compact(changed)
	}
	for _, id := range p.portsShut {
		if pt := s.ports[id]; pt != nil {
			portsToShut = append(portsToShut, pt)
			delete(s.ports, id)
		}
	}
	var anaPorts []*port
	for _, pc := range p.portsUpdated {
		if pt := s.ports[pc.ID]; pt != nil {
			pt.cfg = pc
			if pt.setANA(&pc) {
				anaPorts = append(anaPorts, pt)
			}
		}
	}
	if p.discoveryChanged {
		s.genctr.Add(1)
	}
	s.regMu.Unlock()

	// Hosts see the new namespaces now (a replaced namespace answers from
	// its new backend at once; the old one drains below).
	for sub, ids := range notify {
		sub.nsChanged(ids)
	}
	for _, pt := range anaPorts {
		s.anaChanged(pt, &pt.cfg)
	}
	for _, sp := range p.subs {
		if !sp.anaGroupMoved {
			continue
		}
		s.regMu.RLock()
		sub := s.subsystems[sp.nqn]
		s.regMu.RUnlock()
		if sub != nil {
			s.anaGroupsMoved(sub)
		}
	}
	// Backends write, and hold their image's exclusive lock, where their
	// ANA group is served optimized now; the others stop and release it
	// (after the hosts were told: a release waits for librbd's writes in
	// flight, and new I/O is refused by the ANA state already).
	if err := s.syncWritable(); err != nil {
		errs = append(errs, err)
	}
	// Ports that go away take their connections along.
	for _, pt := range portsToShut {
		s.log.Info("port closed by reload", zap.Uint16("port_id", pt.id), zap.String("address", pt.cfg.ListenAddress()))
		pt.shut("removed by reload")
	}
	// Removed subsystems: their controllers and namespaces.
	for _, sub := range removedSubs {
		for _, c := range sub.controllers() {
			c.teardown("subsystem removed")
		}
		var list []*namespace
		for _, ns := range sub.ns.Load().byID {
			list = append(list, ns)
		}
		retire = append(retire, retired{sub, list})
		s.log.Info("subsystem removed", zap.String("subsystem", sub.nqn))
	}
	// Hosts no longer allowed lose their controllers; so do hosts connected
	// through a port that stopped serving their subsystem.
	for _, sp := range p.subs {
		if !sp.setCfg {
			continue
		}
		s.regMu.RLock()
		sub := s.subsystems[sp.nqn]
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
	for id, nqns := range p.portsDropSubs {
		for _, nqn := range nqns {
			s.regMu.RLock()
			sub := s.subsystems[nqn]
			s.regMu.RUnlock()
			if sub == nil {
				continue
			}
			for _, c := range sub.controllers() {
				if c.port.id == id {
					c.teardown("port no longer serves the subsystem")
				}
			}
		}
	}
	// The replaced and removed namespaces drain (bounded), flush and close;
	// then their successors on the same storage take the claim.
	for _, r := range retire {
		for _, ns := range r.ns {
			if err := s.retireNamespace(ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for ns := range claims {
		if cl, ok := ns.be.(backend.Claimer); ok {
			if err := cl.Claim(); err != nil {
				errs = append(errs, fmt.Errorf("subsystem %s namespace %d: %w", ns.nqn, ns.nsid, err))
			}
		}
	}
	// New ports, and ports that moved.
	for _, pc := range p.portsAdded {
		pt := newPort(s, pc)
		cc, err := s.controllerConfig(nc, &pc)
		if err == nil {
			err = pt.listen(pc, cc)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("port %d (%s): %w", pc.ID, pc.ListenAddress(), err))
		} else {
			s.log.Info("port listening", zap.Uint16("port_id", pc.ID), zap.String("address", pc.ListenAddress()), zap.Strings("subsystems", pc.Subsystems))
		}
		s.regMu.Lock()
		s.ports[pc.ID] = pt
		// A group's state set meanwhile (SetGroupANA) missed this port.
		changed := pt.setANA(&pt.cfg)
		s.regMu.Unlock()
		if changed {
			s.anaChanged(pt, &pt.cfg)
		}
	}
	// Listener settings apply to new connections: re-listen without
	// dropping the connections already accepted.
	for _, id := range p.relisten {
		s.regMu.RLock()
		pt := s.ports[id]
		s.regMu.RUnlock()
		if pt != nil {
			if err := s.relisten(nc, pt); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Discovery log change notices (nvmet_port_disc_changed,
	// nvmet_subsys_disc_changed) to the discovery controllers whose log
	// now reads differently.
	s.regMu.RLock()
	var dnotify []*controller
	for _, c := range s.disc.controllers() {
		if v, ok := views[c]; !ok || v != s.discoveryView(c) {
			dnotify = append(dnotify, c)
		}
	}
	s.regMu.RUnlock()
	for _, c := range dnotify {
		c.event(nvmeof.AENDiscoveryChanged, nvmeof.AECDiscoveryChange)
	}
	return errors.Join(errs...)
}

// retireNamespace stops new commands on ns, waits for those in flight for
// at most s.drainTimeout or until shutdown starts, then flushes and closes
// its backend. A namespace that does not drain in time is closed in the
// background once it does (or at shutdown), and reported.
func (s *server) retireNamespace(ns *namespace) error {
	if ns.be == nil {
		return nil
	}
	drained := ns.retire()
	timer := time.NewTimer(s.drainTimeout)
	defer timer.Stop()
	select {
	case <-drained:
		return ns.close(nil)
	case <-s.quit:
	case <-timer.C:
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		select {
		case <-drained:
		case <-s.quit:
		}
		if err := ns.close(s.quit); err != nil {
			s.log.Error("closing a retired namespace", zap.Error(err))
		}
	}()
	return fmt.Errorf("subsystem %s namespace %d: commands still in flight after %s; its backend closes when they end", ns.nqn, ns.nsid, s.drainTimeout)
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
		b = fmt.Appendf(b, "port %d %s %s %v %v\n", p.ID, p.Transport, p.ListenAddress(), p.Subsystems, p.Referrals)
	}
	for _, sc := range c.Subsystems {
		b = fmt.Appendf(b, "subsys %s %v %v\n", sc.NQN, sc.AllowAnyHost, sc.AllowedHosts)
	}
	return string(b)
}

// namespaceField is the configuration path of a namespace
// ("subsystems[0].namespaces[1]"), or a description if cfg lacks it.
func namespaceField(cfg *Config, nqn string, nsid uint32) string {
	for i := range cfg.Subsystems {
		if cfg.Subsystems[i].NQN != nqn {
			continue
		}
		for j := range cfg.Subsystems[i].Namespaces {
			if cfg.Subsystems[i].Namespaces[j].NSID == nsid {
				return fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j)
			}
		}
	}
	return fmt.Sprintf("subsystem %s namespace %d", nqn, nsid)
}

// portField is the configuration path of a port ("ports[0]").
func portField(cfg *Config, id uint16) string {
	for i := range cfg.Ports {
		if cfg.Ports[i].ID == id {
			return fmt.Sprintf("ports[%d]", i)
		}
	}
	return fmt.Sprintf("port %d", id)
}

// indentLines indents every line after the first.
func indentLines(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == '\n' {
			out = append(out, ' ', ' ')
		}
	}
	return string(out)
}

// sameStorage reports whether two namespace backends are on the same
// storage, which the new one claims only once the old one is closed: a
// file or device (kind and path), or an RBD image (pool, RADOS namespace
// and image; with another ceph.conf it may be another cluster's, and then
// deferring the claim costs nothing).
func sameStorage(o, n *BackendConfig) bool {
	if o.Kind != n.Kind {
		return false
	}
	switch n.Kind {
	case string(backend.KindFile), string(backend.KindBlock):
		return o.Path == n.Path
	case string(backend.KindRBD):
		return o.Pool == n.Pool && o.RADOSNamespace == n.RADOSNamespace && o.Image == n.Image
	}
	return false
}
