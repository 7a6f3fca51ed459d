package target

import (
	"errors"
	"fmt"
	"sync"
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
//
// The backends open outside the target's operation lock (an rbd open can
// take as long as the cluster's timeouts), so a slow open of one group
// holds no reload, no other group's reopen and no management change; the
// swap is then made under it, if nothing was swapped meanwhile (else the
// reopen is prepared again, up to reopenTries times). swap, if not nil, is
// a lock of the caller's that orders its own reloads with the reopen (a
// gateway's change lock): it is held around each swap, never across the
// opens.
func (t *Target) ReopenNamespaces(grp uint32, swap sync.Locker) error {
	for try := 1; ; try++ {
		r, err := t.prepareReopen(grp)
		if err != nil {
			return err
		}
		if swap != nil {
			swap.Lock()
		}
		err = r.apply()
		if swap != nil {
			swap.Unlock()
		}
		if errors.Is(err, ErrReopenStale) && try < reopenTries {
			continue
		}
		return err
	}
}

// reopenTries bounds the reopens that ReopenNamespaces prepares again
// because a reload or another reopen swapped backends meanwhile.
const reopenTries = 3

// ErrReopenStale is the error of preparedReopen.apply when a reload or
// another reopen swapped namespaces after the reopen was prepared: nothing
// changed, the new backends are closed, and the reopen is to be prepared
// again.
var ErrReopenStale = errors.New("namespaces changed while the reopen was prepared")

// preparedReopen is ReopenNamespaces' first half: the new backends of an
// ANA group's online namespaces, open, not yet swapped in; apply swaps
// them in (or closes them).
type preparedReopen struct {
	s       *server
	grp     uint32
	p       *reloadPlan
	pr      *prepared
	applies uint64
	begin   time.Time
}

// prepareReopen opens new backends for every online namespace of ANA group
// grp (see ReopenNamespaces) without holding the target's operation lock
// across the opens. If one cannot be opened, nothing changes and the error
// says why (ErrReloadRefused). A group with no online namespace gives a
// preparedReopen whose apply does nothing.
func (t *Target) prepareReopen(grp uint32) (*preparedReopen, error) {
	s := t.s
	s.opMu.Lock()
	if s.stopped {
		s.opMu.Unlock()
		return nil, errors.New("target: reopen after shutdown")
	}
	r := &preparedReopen{s: s, grp: grp, applies: s.applies, begin: time.Now()}
	if !s.started {
		s.opMu.Unlock()
		return r, nil
	}
	_, online := s.namespaceStates()
	r.p = planReopen(s.cfg, online, grp)
	s.opMu.Unlock()
	if len(r.p.subs) == 0 {
		r.p = nil
		return r, nil
	}
	s.log.Info("reopening the backends of an ANA group's namespaces", zap.Uint32("ana_group", grp), zap.Int("subsystems", len(r.p.subs)))
	pr, err := s.prepare(r.p)
	if err != nil {
		s.log.Error("reopen refused, nothing changed:\n  " + indentLines(err.Error()))
		return nil, fmt.Errorf("target: reopen ANA group %d: %w:\n%w", grp, ErrReloadRefused, err)
	}
	r.pr = pr
	return r, nil
}

// apply swaps the prepared backends in (under the target's operation
// lock, ordered with reloads) unless a reload or another reopen swapped
// namespaces since prepareReopen: then it closes them and returns
// ErrReopenStale, nothing changed. An error after the swap (an old
// backend whose flush fails: a fenced RADOS client's does) is returned with
// the new backends in place.
func (r *preparedReopen) apply() error {
	if r.pr == nil {
		return nil
	}
	s := r.s
	s.opMu.Lock()
	defer s.opMu.Unlock()
	pr := r.pr
	r.pr = nil
	if s.stopped {
		pr.close()
		return errors.New("target: reopen after shutdown")
	}
	if s.applies != r.applies {
		pr.close()
		s.log.Info("reopen prepared again: namespaces were swapped meanwhile", zap.Uint32("ana_group", r.grp))
		return fmt.Errorf("target: reopen ANA group %d: %w", r.grp, ErrReopenStale)
	}
	if err := s.apply(r.p, pr); err != nil {
		s.log.Warn("reopen applied with errors", zap.Uint32("ana_group", r.grp), zap.Error(err))
		return fmt.Errorf("target: reopen ANA group %d: %w", r.grp, err)
	}
	s.log.Info("ANA group's backends reopened", zap.Uint32("ana_group", r.grp), zap.Duration("took", time.Since(r.begin)))
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
