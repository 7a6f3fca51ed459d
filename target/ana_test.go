package target

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// anaConfig is one subsystem with namespaces 1 (group 1) and 2 (group 2)
// on two ports; port 2 gives group 1 the state st1.
func anaConfig(t *testing.T, st1 string) *Config {
	cfg := testConfig(t, memNS(1, "1MiB"), memNS(2, "1MiB"))
	cfg.Subsystems[0].Namespaces[1].ANAGroup = 2
	cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN},
		ANAGroups: []ANAGroupConfig{{ID: 1, State: st1}}})
	return cfg
}

// anaLog reads and decodes the ANA log (with or without NSIDs).
func (h *host) anaLog(rgo bool) nvmeof.ANALog {
	h.t.Helper()
	b := make([]byte, 8192)
	r := rw(false, 0, 0, b, 512)
	r.SQE.BuildGetLogPage(nvmeof.LIDANA, 0, 0, uint32(len(b)))
	if rgo {
		r.SQE.GetLogPageCmd().SetLSP(nvmeof.ANALSPRGO)
	}
	if err := h.adminDo(r); err != nil {
		h.t.Fatalf("ANA log: %v", err)
	}
	l, err := nvmeof.ParseANALog(b)
	if err != nil {
		h.t.Fatalf("ANA log: %v", err)
	}
	return l
}

func groupState(l nvmeof.ANALog, id uint32) (nvmeof.ANAState, []uint32) {
	for _, g := range l.Groups {
		if g.ID == id {
			return g.State, g.NSIDs
		}
	}
	return 0, nil
}

// TestANAPerPort: the same subsystem through two ports shows each port's
// states: Identify advertises ANA reporting as nvmet does, the log lists
// every group with its namespaces (none with RGO), and I/O on a path whose
// group is inaccessible gets the path-related status (no DNR, so the host
// fails over instead of failing the I/O); the other group on that path and
// every group on the other path work.
func TestANAPerPort(t *testing.T) {
	s := startServer(t, anaConfig(t, "inaccessible"))
	h1 := mustConnect(t, portAddr(s, 1), testSubNQN)
	h1.setup(1)
	h2 := mustConnect(t, portAddr(s, 2), testSubNQN)
	h2.setup(1)

	id := h1.identifyController()
	if id.CMIC()&nvmeof.CMICANA == 0 || id.ANACAP() != 0x1F || id.NANAGRPID() != MaxANAGroup || id.ANAGRPMAX() != MaxANAGroup || id.MNAN() == 0 || id.MNAN() > id.NN() {
		t.Fatalf("Identify: CMIC %#x ANACAP %#x NANAGRPID %d ANAGRPMAX %d MNAN %d NN %d", id.CMIC(), id.ANACAP(), id.NANAGRPID(), id.ANAGRPMAX(), id.MNAN(), id.NN())
	}
	b, err := h1.identify(nvmeof.CNSNamespace, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ns, _ := nvmeof.ParseIdentifyNamespace(b); ns.ANAGRPID() != 2 {
		t.Fatalf("namespace 2 ANAGRPID %d", ns.ANAGRPID())
	}

	l1, l2 := h1.anaLog(false), h2.anaLog(false)
	if st, ids := groupState(l1, 1); st != nvmeof.ANAOptimized || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("port 1 group 1: %v %v", st, ids)
	}
	if st, ids := groupState(l2, 1); st != nvmeof.ANAInaccessible || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("port 2 group 1: %v %v", st, ids)
	}
	if st, ids := groupState(l2, 2); st != nvmeof.ANAOptimized || len(ids) != 1 || ids[0] != 2 {
		t.Fatalf("port 2 group 2: %v %v", st, ids)
	}
	if rgo := h2.anaLog(true); len(rgo.Groups) != 2 || len(rgo.Groups[0].NSIDs) != 0 {
		t.Fatalf("RGO log %+v", rgo)
	}

	data := make([]byte, 4096)
	wantStatus(t, "I/O on an inaccessible path", do(t, h2.io[0], rw(false, 1, 0, data, 512)), nvmeof.StatusANAInaccessible)
	if err := do(t, h2.io[0], rw(false, 2, 0, data, 512)); err != nil {
		t.Fatalf("I/O to group 2 on port 2: %v", err)
	}
	if err := do(t, h1.io[0], rw(true, 1, 0, data, 512)); err != nil {
		t.Fatalf("I/O to group 1 on port 1: %v", err)
	}
}

// TestANAChangeByReload: a reload that changes a port's group states
// raises an ANA Change notice on the controllers of that port only, masked
// until the host reads the log; the states give their statuses at once
// (change → ANA Transition, persistent-loss → ANA Persistent Loss,
// non-optimized → served), and the change count moves.
func TestANAChangeByReload(t *testing.T) {
	cfg := anaConfig(t, "optimized")
	s := startServer(t, cfg)
	h1 := mustConnect(t, portAddr(s, 1), testSubNQN)
	h1.setup(1)
	h2 := mustConnect(t, portAddr(s, 2), testSubNQN)
	h2.setup(1)
	for _, h := range []*host{h1, h2} {
		if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECANAChange|nvmeof.AECNSAttr); err != nil {
			t.Fatal(err)
		}
	}
	before := h2.anaLog(false).ChangeCount
	ev1, ev2 := h1.aer(), h2.aer()
	data := make([]byte, 4096)
	for _, tc := range []struct {
		state string
		want  nvmeof.ANAState
		io    nvmeof.Status
	}{
		{"change", nvmeof.ANAChange, nvmeof.StatusANATransition},
		{"persistent-loss", nvmeof.ANAPersistentLoss, nvmeof.StatusANAPersistentLoss},
		{"non-optimized", nvmeof.ANANonOptimized, nvmeof.StatusSuccess},
		{"optimized", nvmeof.ANAOptimized, nvmeof.StatusSuccess},
	} {
		cfg.Ports[1].ANAGroups = []ANAGroupConfig{{ID: 1, State: tc.state}}
		reload(t, s, cfg)
		waitAEN(t, ev2, nvmeof.AENANAChange)
		l := h2.anaLog(false) // unmasks the notice
		if st, _ := groupState(l, 1); st != tc.want || l.ChangeCount <= before {
			t.Fatalf("%s: group 1 is %v, change count %d (before %d)", tc.state, st, l.ChangeCount, before)
		}
		before = l.ChangeCount
		err := do(t, h2.io[0], rw(false, 1, 0, data, 512))
		if tc.io == nvmeof.StatusSuccess {
			if err != nil {
				t.Fatalf("%s: I/O: %v", tc.state, err)
			}
		} else {
			wantStatus(t, tc.state, err, tc.io)
		}
		ev2 = h2.aer()
	}
	// Port 1 never changed: no notice there.
	noAEN(t, ev1)
}

// TestANAConfigValidation: group IDs in range and listed once, known states.
func TestANAConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		groups []ANAGroupConfig
		field  string
	}{
		{[]ANAGroupConfig{{ID: 0}}, "ports[0].ana_groups[0].id"},
		{[]ANAGroupConfig{{ID: 129}}, "ports[0].ana_groups[0].id"},
		{[]ANAGroupConfig{{ID: 3}, {ID: 3}}, "ports[0].ana_groups[1].id"},
		{[]ANAGroupConfig{{ID: 3, State: "gone"}}, "ports[0].ana_groups[0].state"},
	} {
		cfg := testConfig(t, memNS(1, "1MiB"))
		cfg.Ports[0].ANAGroups = tc.groups
		cfg.ApplyDefaults()
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want an error naming %s", tc.groups, err, tc.field)
		}
	}
}

// TestANAGroupMovedByReload: a reload that moves a namespace to another
// ANA group raises an ANA Change notice on every controller of the
// subsystem (nvmet_ns_ana_grpid_store), and the log lists it in its new
// group with that group's state on the port.
func TestANAGroupMovedByReload(t *testing.T) {
	cfg := anaConfig(t, "inaccessible")
	s := startServer(t, cfg)
	h1 := mustConnect(t, portAddr(s, 1), testSubNQN)
	h1.setup(1)
	h2 := mustConnect(t, portAddr(s, 2), testSubNQN)
	h2.setup(1)
	for _, h := range []*host{h1, h2} {
		if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECANAChange|nvmeof.AECNSAttr); err != nil {
			t.Fatal(err)
		}
	}
	ev1, ev2 := h1.aer(), h2.aer()
	cfg.Subsystems[0].Namespaces[1].ANAGroup = 1 // namespace 2 joins group 1
	reload(t, s, cfg)
	for i, ev := range []<-chan *rdma.HostRequest{ev1, ev2} {
		waitANAChange(t, []*host{h1, h2}[i], ev)
	}
	if st, ids := groupState(h2.anaLog(false), 1); st != nvmeof.ANAInaccessible || len(ids) != 2 {
		t.Fatalf("port 2 group 1 after the move: %v %v", st, ids)
	}
	data := make([]byte, 4096)
	wantStatus(t, "namespace 2 in group 1 on port 2", do(t, h2.io[0], rw(false, 2, 0, data, 512)), nvmeof.StatusANAInaccessible)
}

// waitANAChange waits for an ANA Change notice on h, reading the Changed
// Namespace List of a Namespace Attribute Changed notice that comes first
// (the namespace was reopened) and asking for the next event.
func waitANAChange(t *testing.T, h *host, ch <-chan *rdma.HostRequest) {
	t.Helper()
	for range 2 {
		var r *rdma.HostRequest
		select {
		case r = <-ch:
		case <-time.After(hang):
			t.Fatal("no ANA Change notice")
		}
		if err := r.Status(); err != nil {
			t.Fatalf("AER: %v", err)
		}
		switch got := nvmeof.AEN(r.CQE.Result()); got {
		case nvmeof.AENANAChange:
			return
		case nvmeof.AENNSAttrChanged:
			h.changedNS()
			ch = h.aer()
		default:
			t.Fatalf("AEN %#x", uint32(got))
		}
	}
	t.Fatal("no ANA Change notice")
}

// TestANALogInPieces: nvme ana-log (libnvme) sizes the ANA log by its
// maximum (header, NANAGRPID descriptors, MNAN NSIDs) and reads it in 4 KiB
// pieces at increasing offsets: every piece is served (zeroes past the
// groups), the first holds the log, and an offset past the maximum size is
// refused.
func TestANALogInPieces(t *testing.T) {
	s := startServer(t, anaConfig(t, "inaccessible"))
	h := mustConnect(t, portAddr(s, 2), testSubNQN)
	h.setup(1)
	id := h.identifyController()
	size := nvmeof.ANALogHeaderSize + int(id.NANAGRPID())*nvmeof.ANAGroupDescSize + 4*int(id.MNAN())
	all := make([]byte, 0, size)
	for off := 0; off < size; off += 4096 {
		n := min(4096, size-off)
		b, err := h.getLog(nvmeof.LIDANA, nvmeof.NSIDAll, uint64(off), n)
		if err != nil {
			t.Fatalf("ANA log piece at %d: %v", off, err)
		}
		all = append(all, b...)
	}
	l, err := nvmeof.ParseANALog(all)
	if err != nil {
		t.Fatal(err)
	}
	if st, ids := groupState(l, 1); st != nvmeof.ANAInaccessible || len(ids) != 1 {
		t.Fatalf("group 1: %v %v", st, ids)
	}
	if _, err := h.getLog(nvmeof.LIDANA, nvmeof.NSIDAll, uint64(size+4096), 4096); err == nil {
		t.Fatal("an offset past the log's maximum size was served")
	}
}

// TestANAChangeDuringLogRead: a second ANA change that comes while the
// host reads the ANA log (after the page was built, before the command
// completes) is not lost: the host either has the newest page or gets a
// new ANA Change notice (NVMe Base 2.0 §5.2: the event kind is unmasked
// when the log is read without RAE, before the page is built). The
// interleaving is scripted: the second change runs inside the Get Log
// Page, right after its page was built.
func TestANAChangeDuringLogRead(t *testing.T) {
	cfg := anaConfig(t, "optimized")
	s := startServer(t, cfg)
	h := mustConnect(t, portAddr(s, 2), testSubNQN)
	h.setup(1)
	if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECANAChange|nvmeof.AECNSAttr); err != nil {
		t.Fatal(err)
	}
	// The first change raises the notice (the kind is masked from now
	// until the host reads the log).
	ev := h.aer()
	cfg.Ports[1].ANAGroups = []ANAGroupConfig{{ID: 1, State: "inaccessible"}}
	reload(t, s, cfg)
	waitAEN(t, ev, nvmeof.AENANAChange)

	second := cfg.Clone()
	second.Ports[1].ANAGroups = []ANAGroupConfig{{ID: 1, State: "optimized"}}
	second.ApplyDefaults()
	var fired atomic.Bool
	hookErr := make(chan error, 1)
	hook := func(c *controller, lid uint8) {
		if lid != nvmeof.LIDANA || !fired.CompareAndSwap(false, true) {
			return
		}
		hookErr <- s.reload(second) // the second change, between the build and the completion
	}
	s.logPageBuilt.Store(&hook)
	l := h.anaLog(false)
	s.logPageBuilt.Store(nil)
	if err := <-hookErr; err != nil {
		t.Fatalf("the second change: %v", err)
	}
	if st, _ := groupState(l, 1); st != nvmeof.ANAInaccessible {
		t.Fatalf("the page was built before the second change: group 1 is %v, want inaccessible", st)
	}
	// The page the host holds is older than the second change: a new
	// notice must be waiting for it.
	pending := false
	for _, c := range s.allControllers() {
		if c.port.id != 2 {
			continue
		}
		c.mu.Lock()
		pending = slices.Contains(c.events, nvmeof.AENANAChange)
		c.mu.Unlock()
	}
	if !pending {
		t.Fatal("the ANA change that came while the host read the log raised no notice: the host keeps a page that says inaccessible")
	}
	waitAEN(t, h.aer(), nvmeof.AENANAChange) // completes at once: the notice is queued
	if st, _ := groupState(h.anaLog(false), 1); st != nvmeof.ANAOptimized {
		t.Fatalf("after the notice: group 1 is %v, want optimized", st)
	}
}
