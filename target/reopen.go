package target

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// ReopenNamespaces gives every online namespace of ANA group grp new
// backends, opened from their unchanged configuration and swapped in
// place, as a reload swaps a changed namespace on the same storage: the
// namespace stays attached (same NSID and identifiers; each controller gets
// a Namespace Attribute Changed notice and a host keeps its block device),
// its commands in flight drain on the old backend, which is then flushed and
// closed, and the new one takes the storage's claim after it. A gateway
// group reopens the namespaces of a group it takes over on new RADOS
// clients this way (gateway/gwtarget), which the fence of the old clients
// does not reach; closing them and opening them again instead would take
// the namespace away from a host whose only path is this one (a Linux host
// then fails every I/O on the disk it has open: "no available path").
//
// If a backend cannot be opened, nothing changes and the error says why
// (ErrReloadRefused). An error after the swap (an old backend whose flush
// fails: a fenced RADOS client's does) is returned with the new backends in
// place. A group with no online namespace is no error.
func (t *Target) ReopenNamespaces(grp uint32) error {
	return t.s.reopenGroup(grp)
}

func (s *server) reopenGroup(grp uint32) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if s.stopped {
		return errors.New("target: reopen after shutdown")
	}
	if !s.started {
		return nil
	}
	_, online := s.namespaceStates()
	p := planReopen(s.cfg, online, grp)
	if len(p.subs) == 0 {
		return nil
	}
	begin := time.Now()
	s.log.Info("reopening the backends of an ANA group's namespaces", zap.Uint32("ana_group", grp), zap.Int("subsystems", len(p.subs)))
	pr, err := s.prepare(p)
	if err != nil {
		s.log.Error("reopen refused, nothing changed:\n  " + indentLines(err.Error()))
		return fmt.Errorf("target: reopen ANA group %d: %w:\n%w", grp, ErrReloadRefused, err)
	}
	if err := s.apply(p, pr); err != nil {
		s.log.Warn("reopen applied with errors", zap.Uint32("ana_group", grp), zap.Error(err))
		return fmt.Errorf("target: reopen ANA group %d: %w", grp, err)
	}
	s.log.Info("ANA group's backends reopened", zap.Uint32("ana_group", grp), zap.Duration("took", time.Since(begin)))
	return nil
}

// planReopen is the reload plan that replaces each online namespace of ANA
// group grp by itself (cfg has defaults applied; it does not change). It is
// pure.
func planReopen(cfg *Config, online map[nsKey]bool, grp uint32) *reloadPlan {
	p := &reloadPlan{cfg: cfg, diff: Diff(cfg, cfg), portsDropSubs: map[uint16][]string{}}
	for i := range cfg.Subsystems {
		sc := &cfg.Subsystems[i]
		sp := &subPlan{nqn: sc.NQN, cfg: sc, retry: map[uint32]bool{}, sameStorage: map[uint32]bool{}}
		for _, n := range sc.Namespaces {
			if n.ANAGroup != grp || !n.IsEnabled() || !online[nsKey{sc.NQN, n.NSID}] {
				continue
			}
			sp.remove = append(sp.remove, n.NSID)
			sp.open = append(sp.open, n)
			sp.sameStorage[n.NSID] = true
		}
		if len(sp.open) > 0 {
			p.subs = append(p.subs, sp)
		}
	}
	return p
}
