package target

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// A gateway of a group (the gateway section, gateway/gwtarget, docs/rbd.md
// "Gateway group") serves the same namespaces as the other gateways, and
// each ANA group is optimized on one gateway at a time: the one that holds
// its lease. Two rules keep a second writer out whatever path a
// configuration takes to the target (the first start, a reload on SIGHUP,
// an edit of the management API, an ANA change of the gateway itself),
// because every one of them goes through server.start or server.reload,
// which check them here:
//
//   - every namespace is in an ANA group that the gateway group manages:
//     another group's state would default to optimized on every gateway at
//     once, with no lease and no fence;
//   - every writable rbd namespace's image has the exclusive-lock feature,
//     so that librbd's lock (backend.WriteLocker) lets one gateway write.
//
// And in a gateway a managed group that a port does not list is
// inaccessible there, never optimized (newANAView).

// GatewayGuard is what a gateway requires of every configuration the
// target serves; see Target.SetGatewayGuard.
type GatewayGuard struct {
	// ANAGroups are the ANA groups the gateway group manages (each owned
	// by one gateway at a time).
	ANAGroups []uint32
}

// ErrGatewayGuard is in the error of a configuration the gateway guard
// refuses (errors.Is), next to the *ValidationError that names the
// fields.
var ErrGatewayGuard = errors.New("refused in a gateway")

// manages reports whether the group is one of the gateway's.
func (g *GatewayGuard) manages(group uint32) bool { return slices.Contains(g.ANAGroups, group) }

// check returns a problem for each namespace of cfg outside the managed
// groups.
func (g *GatewayGuard) check(cfg *Config) []*FieldError {
	var out []*FieldError
	for i := range cfg.Subsystems {
		sc := &cfg.Subsystems[i]
		for j := range sc.Namespaces {
			n := &sc.Namespaces[j]
			if !g.manages(n.ANAGroup) {
				out = append(out, &FieldError{
					Field: fmt.Sprintf("subsystems[%d].namespaces[%d].ana_group", i, j),
					Reason: fmt.Sprintf("ANA group %d is not one of the gateway's (%v): every gateway would serve it optimized at once",
						n.ANAGroup, g.ANAGroups),
					Err: ErrGatewayGuard,
				})
			}
		}
	}
	return out
}

// guardError is the error of a configuration the guard refuses.
func guardError(problems []*FieldError) error {
	return fmt.Errorf("target: %w: %w:\n%w", ErrReloadRefused, ErrGatewayGuard, &ValidationError{Problems: problems})
}

// checkGuard checks cfg against the guard, if there is one. The caller
// holds opMu.
func (s *server) checkGuard(cfg *Config) error {
	g := s.guard.Load()
	if g == nil {
		return nil
	}
	if p := g.check(cfg); len(p) > 0 {
		return guardError(p)
	}
	return nil
}

// guardNamespace fails an opened namespace that the guard refuses: a
// writable backend whose image lacks the exclusive-lock feature. Without a
// guard (a stand-alone target) such a namespace is served, with a warning.
func (s *server) guardNamespace(ns *namespace) {
	if ns.state != NamespaceOnline {
		return
	}
	wl, ok := ns.be.(backend.WriteLocker)
	if !ok {
		return
	}
	err := wl.WriteLockErr()
	if err != nil && s.guard.Load() == nil {
		s.log.Warn("namespace: another client could write its image at the same time", zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid), zap.Error(err))
		return
	}
	if err != nil {
		_ = ns.close(nil)
		ns.be = nil
		// ErrGatewayGuard in the cause: the management API answers 409
		// (a conflict with the gateway group, as for an ANA group it does
		// not manage), not 400 (storage that does not open).
		ns.cause = fmt.Errorf("%w: %w", ErrGatewayGuard, err)
		ns.state, ns.err, ns.field = NamespaceFailed, ns.cause.Error(), ns.field+".backend"
	}
}

// SetGatewayGuard makes the target a gateway's: from now on a start, a
// reload or a management change whose configuration breaks g's rules is
// refused as a whole (ErrReloadRefused, ErrGatewayGuard, and a
// *ValidationError naming each field), and managed groups that a port does
// not list are inaccessible there. The running configuration is checked
// first: if it breaks them (or a namespace's image lacks the exclusive-lock
// feature), SetGatewayGuard returns that error (ErrGatewayGuard, a
// *ValidationError) and sets nothing.
func (t *Target) SetGatewayGuard(g GatewayGuard) error {
	return t.s.setGuard(&g)
}

func (s *server) setGuard(g *GatewayGuard) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.regMu.RLock()
	cfg := s.cfg
	s.regMu.RUnlock()
	problems := g.check(cfg)
	for _, sub := range s.subsystemList() {
		for _, ns := range sub.ns.Load().byID {
			if ns.state != NamespaceOnline {
				continue
			}
			if wl, ok := ns.be.(backend.WriteLocker); ok {
				if err := wl.WriteLockErr(); err != nil {
					problems = append(problems, &FieldError{Field: namespaceField(cfg, sub.nqn, ns.nsid) + ".backend", Reason: err.Error(), Err: err})
				}
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("target: the running configuration %w:\n%w", ErrGatewayGuard, &ValidationError{Problems: problems})
	}
	s.guard.Store(g)
	// The managed groups' default is inaccessible from now on.
	var changed []*port
	s.regMu.Lock()
	for _, p := range s.ports {
		if p.setANA(&p.cfg) {
			changed = append(changed, p)
		}
	}
	s.regMu.Unlock()
	for _, p := range changed {
		s.anaChanged(p, &p.cfg)
	}
	if err := s.syncWritable(); err != nil {
		return err
	}
	s.log.Info("gateway guard set", zap.Uint32s("ana_groups", g.ANAGroups))
	return nil
}

// syncWritable lets each namespace's backend write, and hold the image's
// exclusive lock (backend.WriteLocker), exactly when its ANA group is
// optimized or non-optimized on a port that serves its subsystem; the
// others stop writing and release the lock (librbd waits for the writes
// it has in flight first). A lock that cannot be taken is an error in a
// gateway (the group must not be served optimized without it) and a
// warning otherwise (each write tries again).
func (s *server) syncWritable() error {
	var list []*namespace
	s.regMu.RLock()
	for _, sub := range s.subsystems {
		for _, ns := range sub.ns.Load().byID {
			if ns.state != NamespaceOnline || ns.be == nil {
				continue
			}
			if _, ok := ns.be.(backend.WriteLocker); !ok {
				continue
			}
			list = append(list, ns)
		}
	}
	s.regMu.RUnlock()
	return s.applyWritable(list)
}

// applyWritable is the one place that decides how each namespace of list
// follows its ANA state (writableWanted, per namespace, from the ports'
// views now): the ones that may write take the image's exclusive lock
// before applyWritable returns (a lock that cannot be taken is its error
// in a gateway); the others release it in the background, because a
// release may wait for writes stuck in librbd (an OSD out of reach: up to
// its op timeout) and nothing (an ANA change, a reload) may wait for that.
// A later acquisition waits for a release still running (namespace.wmu),
// then applies the latest state. SetGroupANA and every reload
// (syncWritable) go through it.
func (s *server) applyWritable(list []*namespace) error {
	var errs []error
	var release []*namespace
	for _, ns := range list {
		if _, ok := ns.be.(backend.WriteLocker); !ok {
			continue
		}
		s.regMu.RLock()
		w := s.writableWanted(ns)
		s.regMu.RUnlock()
		if !w {
			release = append(release, ns)
			continue
		}
		if err := s.syncNamespaceWritable(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if len(release) > 0 {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			for _, ns := range release {
				_ = s.syncNamespaceWritable(ns)
			}
		}()
	}
	return errors.Join(errs...)
}

// writableWanted reports whether ns's backend may write: its ANA group is
// optimized or non-optimized on a port that serves its subsystem. The
// caller holds regMu.
func (s *server) writableWanted(ns *namespace) bool {
	for _, p := range s.ports {
		if !p.serves(ns.nqn) {
			continue
		}
		if v := p.ana.Load(); v != nil && int(ns.cfg.ANAGroup) < len(v) {
			if st := v[ns.cfg.ANAGroup]; st == nvmeof.ANAOptimized || st == nvmeof.ANANonOptimized {
				return true
			}
		}
	}
	return false
}

// syncNamespaceWritable makes ns's backend writable (taking the image's
// exclusive lock) or not (releasing it) as the ports say now
// (writableWanted), under ns.wmu: the state is read right before the
// change, so that a release running late in the background (librbd waits
// for the writes it has in flight) and an acquisition after it end in the
// state of the latest ANA views, whatever their order. A lock that cannot
// be taken is an error in a gateway; a release that fails is logged.
func (s *server) syncNamespaceWritable(ns *namespace) error {
	wl, ok := ns.be.(backend.WriteLocker)
	if !ok {
		return nil
	}
	ns.wmu.Lock()
	defer ns.wmu.Unlock()
	s.regMu.RLock()
	writable := s.writableWanted(ns)
	s.regMu.RUnlock()
	begin := time.Now()
	err := wl.SetWritable(writable)
	if took := time.Since(begin); took > 100*time.Millisecond {
		s.log.Info("namespace: exclusive lock", zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid),
			zap.Bool("writable", writable), zap.Duration("took", took), zap.Error(err))
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("subsystem %s namespace %d: %w", ns.nqn, ns.nsid, err)
	if writable && s.guard.Load() != nil {
		return err
	}
	s.log.Warn("namespace: exclusive lock", zap.String("subsystem", ns.nqn), zap.Uint32("nsid", ns.nsid), zap.Bool("writable", writable), zap.Error(err))
	return nil
}
