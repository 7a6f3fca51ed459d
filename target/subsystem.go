package target

import (
	"slices"
	"sync/atomic"

	"github.com/nvmetd/nvmetd/internal/perfcount"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// subsystem is an NVM subsystem, or (disc set) the discovery subsystem every
// port serves under the well-known discovery NQN.
type subsystem struct {
	nqn  string
	disc bool

	// cfg is the configuration new controllers take their identity from
	// (serial, model, firmware, NN, CNTLID range) and the host access list.
	// It is replaced on reload, under server.regMu.
	cfg atomic.Pointer[SubsystemConfig]

	// ns is the namespace table the I/O path reads without locks.
	ns atomic.Pointer[nsTable]

	mu    perfcount.Mutex
	ctrls map[uint16]*controller
	// next is where the CNTLID search starts: CNTLIDs are handed out round
	// robin so a torn-down controller's ID is not reused at once (a host
	// still holding it could otherwise reach another host's controller).
	next uint16
}

func newSubsystem(cfg *SubsystemConfig) *subsystem {
	sub := &subsystem{nqn: cfg.NQN, ctrls: map[uint16]*controller{}}
	c := *cfg
	sub.cfg.Store(&c)
	sub.ns.Store(newNSTable(nil))
	return sub
}

func newDiscoverySubsystem() *subsystem {
	cfg := &SubsystemConfig{NQN: nvmeof.DiscoveryNQN, AllowAnyHost: true, CNTLIDMin: nvmeof.CNTLIDMin, CNTLIDMax: nvmeof.CNTLIDMax}
	sub := newSubsystem(cfg)
	sub.disc = true
	return sub
}

// hostAllowed reports whether host may connect (nvmet_host_allowed). The
// discovery subsystem allows every host.
func (sub *subsystem) hostAllowed(host string) bool {
	if sub.disc {
		return true
	}
	cfg := sub.cfg.Load()
	return cfg.AllowAnyHost || slices.Contains(cfg.AllowedHosts, host)
}

// addController assigns c a CNTLID in the subsystem's range, runs init
// (which completes c knowing its CNTLID) and registers it, so that nobody
// sees a half-built controller. It returns false when every CNTLID in the
// range is taken.
func (sub *subsystem) addController(c *controller, init func()) bool {
	cfg := sub.cfg.Load()
	lo, hi := cfg.CNTLIDMin, cfg.CNTLIDMax
	if lo == 0 {
		lo = nvmeof.CNTLIDMin
	}
	if hi == 0 || hi > nvmeof.CNTLIDMax {
		hi = nvmeof.CNTLIDMax
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if lo > hi {
		return false
	}
	n := int(hi-lo) + 1
	id := sub.next
	for range n {
		if id < lo || id > hi {
			id = lo
		}
		if _, used := sub.ctrls[id]; !used {
			c.cntlid = id
			init()
			sub.ctrls[id] = c
			sub.next = id + 1
			return true
		}
		id++
	}
	return false
}

// removeController unregisters c.
func (sub *subsystem) removeController(c *controller) {
	sub.mu.Lock()
	if sub.ctrls[c.cntlid] == c {
		delete(sub.ctrls, c.cntlid)
	}
	sub.mu.Unlock()
}

// controllers returns the live controllers, by CNTLID.
func (sub *subsystem) controllers() []*controller {
	sub.mu.Lock()
	list := make([]*controller, 0, len(sub.ctrls))
	for _, c := range sub.ctrls {
		list = append(list, c)
	}
	sub.mu.Unlock()
	slices.SortFunc(list, func(a, b *controller) int { return int(a.cntlid) - int(b.cntlid) })
	return list
}

// findController returns the controller an I/O queue Connect names: the
// CNTLID and the host NQN must match (nvmet_ctrl_find_get).
func (sub *subsystem) findController(cntlid uint16, host string) *controller {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	c := sub.ctrls[cntlid]
	if c == nil || c.hostNQN != host {
		return nil
	}
	return c
}

// nsChanged tells every controller that nsid changed: it goes into their
// Changed Namespace List and raises a Namespace Attribute Changed event
// (nvmet_ns_changed).
func (sub *subsystem) nsChanged(nsids []uint32) {
	if len(nsids) == 0 {
		return
	}
	for _, c := range sub.controllers() {
		c.nsChanged(nsids)
	}
}
