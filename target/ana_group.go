package target

import (
	"fmt"
	"maps"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// SetGroupANA sets ANA group group to state st on every port, whatever the
// configuration says for it, until the target stops (later reloads keep
// it): the path of a gateway's ANA changes (docs/rbd.md, "Gateway group").
// It is not a reload: no namespace is opened, flushed or closed, nothing
// waits for Reload or Shutdown in progress or for backend I/O, so that a
// gateway that steps down goes inaccessible at once even while its
// backends' writes hang on a lost OSD.
//
// The ports' states change first, in one swap under the configuration
// lock (the I/O path refuses the group's new commands from then on: NVMe
// Base 2.0 §8.20.3, Asymmetric Access Inaccessible), and the hosts get an
// ANA Change notice (§5.27.1.17: Asynchronous Event Request, ANA change).
// Then the group's rbd backends follow the new state
// (backend.WriteLocker): made inaccessible, they stop writing and release
// the image's exclusive lock in the background (librbd releases it only
// once the writes it has in flight are done; those commands keep their
// namespace references meanwhile: GroupInFlight counts them); made
// optimized or non-optimized, they take it before SetGroupANA returns, and
// a lock that cannot be taken in a gateway is its error (the group must
// not be served then: the caller makes it inaccessible again). Each member
// follows its own state (applyWritable, the one decision a reload makes
// too): a member whose subsystem no port serves is released in the
// background whatever st is.
func (t *Target) SetGroupANA(group uint32, st nvmeof.ANAState) error {
	return t.s.setGroupANA(group, st)
}

func (s *server) setGroupANA(group uint32, st nvmeof.ANAState) error {
	if group < 1 || group > MaxANAGroup {
		return fmt.Errorf("target: ANA group %d out of range (1..%d)", group, MaxANAGroup)
	}
	switch st {
	case nvmeof.ANAOptimized, nvmeof.ANANonOptimized, nvmeof.ANAInaccessible, nvmeof.ANAPersistentLoss, nvmeof.ANAChange:
	default:
		return fmt.Errorf("target: ANA state %d is not one of NVMe's", st)
	}
	// anaMu orders the changes (two of them never publish out of order);
	// it is never held across I/O.
	s.anaMu.Lock()
	next := map[uint32]nvmeof.ANAState{}
	if f := s.anaForced.Load(); f != nil {
		maps.Copy(next, *f)
	}
	next[group] = st
	s.anaForced.Store(&next)
	var changed []*port
	var members []*namespace
	s.regMu.Lock()
	for _, p := range s.ports {
		if p.setANA(&p.cfg) {
			changed = append(changed, p)
		}
	}
	for _, sub := range s.subsystems {
		for _, ns := range sub.ns.Load().byID {
			if ns.cfg.ANAGroup == group && ns.state == NamespaceOnline && ns.be != nil {
				members = append(members, ns)
			}
		}
	}
	s.regMu.Unlock()
	s.anaMu.Unlock()
	for _, p := range changed {
		s.anaChanged(p, &p.cfg)
	}
	if err := s.applyWritable(members); err != nil {
		return fmt.Errorf("target: ANA group %d: %w", group, err)
	}
	return nil
}
