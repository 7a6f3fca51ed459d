package target

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// stuckLocker is a backend whose release of the write lock (SetWritable
// false) waits until the test lets it go: as librbd's rbd_lock_release
// waits for writes stuck on an OSD out of reach.
type stuckLocker struct {
	backend.Backend
	release  chan struct{}
	released atomic.Int32 // SetWritable(false) calls that returned
	writable atomic.Bool
}

func (b *stuckLocker) SetWritable(w bool) error {
	if !w {
		<-b.release
		b.released.Add(1)
	}
	b.writable.Store(w)
	return nil
}

func (b *stuckLocker) WriteLockErr() error { return nil }

// TestSetGroupANA (issue 21): a gateway's ANA change is not a reload and
// waits for no backend I/O. Made inaccessible, the group is so on every
// port at once, and SetGroupANA returns while the backend's lock release
// still waits (in the background) for its writes in flight; a later
// reload, whatever its ports list for the group, keeps the state set.
// Before, the change was a reload, which returned only once every backend
// had released its lock: TestGatewayProcessOSDCut's owner went
// inaccessible 7–12 s after it decided to.
func TestSetGroupANA(t *testing.T) {
	ns1 := memNS(1, "1MiB")
	ns1.ANAGroup = 1
	cfg := testConfig(t, ns1)
	s := startServer(t, cfg)
	tg := &Target{s: s}
	if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	view := func() nvmeof.ANAState {
		s.regMu.RLock()
		defer s.regMu.RUnlock()
		return s.ports[1].ana.Load()[1]
	}
	s.regMu.RLock()
	ns := s.subsystems[testSubNQN].ns.Load().byID[1]
	s.regMu.RUnlock()
	be := &stuckLocker{Backend: ns.be, release: make(chan struct{})}
	ns.be = be

	if err := tg.SetGroupANA(1, nvmeof.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	if st := view(); st != nvmeof.ANAOptimized || !be.writable.Load() {
		t.Fatalf("after SetGroupANA optimized: %v, writable %v", st, be.writable.Load())
	}
	// A reload whose port does not list the group (inaccessible in a
	// gateway) keeps it optimized.
	if err := guardReload(t, tg, func(c *Config) error {
		c.Ports[0].ANAGroups = []ANAGroupConfig{{ID: 5, State: "non-optimized"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st := view(); st != nvmeof.ANAOptimized {
		t.Fatalf("after a reload: %v, want the state set (optimized)", st)
	}

	done := make(chan error, 1)
	go func() { done <- tg.SetGroupANA(1, nvmeof.ANAInaccessible) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		close(be.release)
		t.Fatalf("SetGroupANA inaccessible did not return in %s while the backend's lock release waited", hang)
	}
	if st := view(); st != nvmeof.ANAInaccessible {
		t.Fatalf("after SetGroupANA inaccessible: %v", st)
	}
	if be.released.Load() != 0 {
		t.Fatal("the lock release returned before the test let it")
	}
	// A reload that lists the group optimized on the port keeps it
	// inaccessible.
	if err := guardReload(t, tg, func(c *Config) error {
		c.Ports[0].ANAGroups = []ANAGroupConfig{{ID: 1, State: "optimized"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st := view(); st != nvmeof.ANAInaccessible {
		t.Fatalf("after a reload listing it optimized: %v, want the state set (inaccessible)", st)
	}
	close(be.release)
	waitFor(t, "the lock released in the background", hang, func() bool { return be.released.Load() >= 1 && !be.writable.Load() })
	// Optimized again: the lock is taken (after the release, in order).
	if err := tg.SetGroupANA(1, nvmeof.ANAOptimized); err != nil {
		t.Fatal(err)
	}
	if st := view(); st != nvmeof.ANAOptimized || !be.writable.Load() {
		t.Fatalf("optimized again: %v, writable %v", st, be.writable.Load())
	}
}

// TestSetGroupANAOneDecision (issue 21): an ANA change of the gateway
// (SetGroupANA) and a reload (syncWritable) decide each namespace's
// writability the same way, per namespace (applyWritable): a member of the
// group whose subsystem no port serves may not write, whatever state the
// group is given, and its lock release (which may wait for writes stuck
// in librbd) runs in the background on both paths. Before, SetGroupANA
// chose by the state it was given: made optimized, it released that
// namespace's lock in the foreground and hung on the stuck release (the
// test fails at its hang bound).
func TestSetGroupANAOneDecision(t *testing.T) {
	const otherNQN = "nqn.2024-01.io.nvmetd.test:unserved"
	ns1 := memNS(1, "1MiB")
	ns1.ANAGroup = 1
	cfg := testConfig(t, ns1)
	cfg.Subsystems = append(cfg.Subsystems, SubsystemConfig{NQN: otherNQN, AllowAnyHost: true, Namespaces: []NamespaceConfig{ns1}})
	s := startServer(t, cfg)
	tg := &Target{s: s}
	if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	s.regMu.RLock()
	served := s.subsystems[testSubNQN].ns.Load().byID[1]
	unserved := s.subsystems[otherNQN].ns.Load().byID[1]
	s.regMu.RUnlock()
	sbe := &stuckLocker{Backend: served.be, release: make(chan struct{})}
	ube := &stuckLocker{Backend: unserved.be, release: make(chan struct{})}
	served.be, unserved.be = sbe, ube
	ube.writable.Store(true) // so that a release shows

	done := make(chan error, 1)
	go func() { done <- tg.SetGroupANA(1, nvmeof.ANAOptimized) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		close(ube.release)
		close(sbe.release)
		t.Fatalf("SetGroupANA optimized did not return in %s: it released the lock of a namespace no port serves in the foreground", hang)
	}
	if !sbe.writable.Load() {
		t.Fatal("the served namespace is not writable after SetGroupANA optimized")
	}
	if ube.released.Load() != 0 {
		t.Fatal("the unserved namespace's release returned before the test let it")
	}
	close(ube.release)
	waitFor(t, "the unserved namespace released in the background", hang, func() bool { return ube.released.Load() == 1 && !ube.writable.Load() })

	// The reload path decides the same: the served one stays writable
	// (no release), the unserved one is released again in the background.
	if err := guardReload(t, tg, func(c *Config) error {
		c.Ports[0].ANAGroups = []ANAGroupConfig{{ID: 1, State: "optimized"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's background release", hang, func() bool { return ube.released.Load() == 2 })
	if !sbe.writable.Load() || sbe.released.Load() != 0 {
		t.Fatalf("after a reload: served writable %v, released %d", sbe.writable.Load(), sbe.released.Load())
	}
	close(sbe.release)
}
