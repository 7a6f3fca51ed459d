package target

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// aer submits an Asynchronous Event Request and returns a channel that gets
// its completion.
func (h *host) aer() <-chan *rdma.HostRequest {
	h.t.Helper()
	ch := make(chan *rdma.HostRequest, 1)
	r := &rdma.HostRequest{Done: func(r *rdma.HostRequest) { ch <- r }}
	r.SQE.BuildAER()
	if err := h.admin.Submit(r); err != nil {
		h.t.Fatal(err)
	}
	return ch
}

func waitAEN(t testing.TB, ch <-chan *rdma.HostRequest, want nvmeof.AEN) {
	t.Helper()
	select {
	case r := <-ch:
		if err := r.Status(); err != nil {
			t.Fatalf("AER: %v", err)
		}
		if got := nvmeof.AEN(r.CQE.Result()); got != want {
			t.Fatalf("AEN %#x, want %#x", uint32(got), uint32(want))
		}
	case <-time.After(hang):
		t.Fatalf("no AEN %#x", uint32(want))
	}
}

func noAEN(t testing.TB, ch <-chan *rdma.HostRequest) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("unexpected AEN %#x (%v)", r.CQE.Result(), r.Status())
	case <-time.After(100 * time.Millisecond):
	}
}

func (h *host) changedNS() []uint32 {
	h.t.Helper()
	b, err := h.getLog(nvmeof.LIDChangedNSList, nvmeof.NSIDAll, 0, nvmeof.ChangedNSListSize)
	if err != nil {
		h.t.Fatal(err)
	}
	ids, _, err := nvmeof.ParseChangedNSList(b, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

func (h *host) activeNS() []uint32 {
	h.t.Helper()
	b, err := h.identify(nvmeof.CNSActiveNSList, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	ids, err := nvmeof.ParseNSList(b, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

// alive checks that a host's queues still work.
func (h *host) alive(what string) {
	h.t.Helper()
	for _, q := range append([]*rdma.HostQueue{h.admin}, h.io...) {
		select {
		case <-q.Done():
			h.t.Fatalf("%s: queue %d of %s closed: %v", what, q.QID(), h.nqn, q.Err())
		default:
		}
	}
	if _, err := h.getFeature(nvmeof.FeatKeepAliveTimer); err != nil {
		h.t.Fatalf("%s: admin queue: %v", what, err)
	}
}

func reload(t testing.TB, s *server, cfg *Config) {
	t.Helper()
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := s.reload(c); err != nil {
		t.Fatalf("reload: %v", err)
	}
}

func TestReload(t *testing.T) {
	cfg := testConfig(t, memNS(1, "4MiB"))
	s := startServer(t, cfg)
	addr := portAddr(s, 1)

	// Host A on sub1, waiting for namespace notices; a discovery
	// controller waiting for discovery log notices.
	a := mustConnect(t, addr, testSubNQN)
	a.setup(1)
	if _, err := a.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECNSAttr); err != nil {
		t.Fatal(err)
	}
	aenA := a.aer()
	d := discover(t, addr, testHostNQN)
	if _, err := d.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECDiscoveryChange); err != nil {
		t.Fatal(err)
	}
	aenD := d.aer()
	gen0, e0 := readDiscoveryLog(t, d)
	if len(e0) != 2 {
		t.Fatalf("entries %+v", e0)
	}
	data := pattern(4096, 5)
	if err := do(t, a.io[0], rw(true, 1, 0, data, 512)); err != nil {
		t.Fatal(err)
	}

	// 1. A namespace is added: Namespace Attribute Changed, listed in the
	// Changed Namespace List (read once), visible in the active list.
	cfg.Subsystems[0].Namespaces = append(cfg.Subsystems[0].Namespaces, memNS(2, "2MiB"))
	reload(t, s, cfg)
	waitAEN(t, aenA, nvmeof.AENNSAttrChanged)
	noAEN(t, aenD)
	if ids := a.changedNS(); !slices.Equal(ids, []uint32{2}) {
		t.Fatalf("changed namespaces %v", ids)
	}
	if ids := a.changedNS(); len(ids) != 0 {
		t.Fatalf("changed namespaces after a read %v", ids)
	}
	if ids := a.activeNS(); !slices.Equal(ids, []uint32{1, 2}) {
		t.Fatalf("active namespaces %v", ids)
	}
	if err := do(t, a.io[0], rw(true, 2, 8, data, 512)); err != nil {
		t.Fatal(err)
	}
	a.alive("after adding a namespace")

	// 2. The namespace is removed again; NSID 1 keeps its data.
	aenA = a.aer()
	cfg.Subsystems[0].Namespaces = cfg.Subsystems[0].Namespaces[:1]
	reload(t, s, cfg)
	waitAEN(t, aenA, nvmeof.AENNSAttrChanged)
	if ids := a.changedNS(); !slices.Equal(ids, []uint32{2}) {
		t.Fatalf("changed namespaces %v", ids)
	}
	wantStatus(t, "read of the removed namespace", do(t, a.io[0], rw(false, 2, 8, make([]byte, 512), 512)), nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
	got := make([]byte, 4096)
	if err := do(t, a.io[0], rw(false, 1, 0, got, 512)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("namespace 1 after the reload: %v", err)
	}
	// Changing a namespace (its size) replaces it: a notice, new size.
	aenA = a.aer()
	cfg.Subsystems[0].Namespaces[0].Backend.Size = "8MiB"
	reload(t, s, cfg)
	waitAEN(t, aenA, nvmeof.AENNSAttrChanged)
	b, _ := a.identify(nvmeof.CNSNamespace, 1, 0)
	if id, _ := nvmeof.ParseIdentifyNamespace(b); id.NSZE() != 8<<20/512 {
		t.Fatalf("NSZE after resize %d", id.NSZE())
	}
	a.alive("after changing a namespace")
	// (A memory backend starts empty again.)
	if err := do(t, a.io[0], rw(true, 1, 0, data, 512)); err != nil {
		t.Fatal(err)
	}

	// 3. A subsystem is added to the port: the discovery controller is
	// told, GENCTR moves, the new subsystem is listed; host A stays.
	cfg.Subsystems = append(cfg.Subsystems, SubsystemConfig{NQN: testSubNQN2, AllowedHosts: []string{testHostNQN}, Namespaces: []NamespaceConfig{memNS(1, "1MiB")}})
	cfg.Ports[0].Subsystems = append(cfg.Ports[0].Subsystems, testSubNQN2)
	reload(t, s, cfg)
	waitAEN(t, aenD, nvmeof.AENDiscoveryChanged)
	gen1, e1 := readDiscoveryLog(t, d)
	if gen1 <= gen0 || len(e1) != 3 || e1[2].SubNQN != testSubNQN2 {
		t.Fatalf("after adding a subsystem: GENCTR %d→%d, entries %+v", gen0, gen1, e1)
	}
	b2 := mustConnect(t, addr, testSubNQN2)
	b2.setup(1)
	a.alive("after adding a subsystem")

	// 4. The host is no longer allowed into sub2: its controller goes, the
	// discovery log no longer shows sub2 to it.
	aenD = d.aer()
	cfg.Subsystems[1].AllowedHosts = []string{otherHost}
	reload(t, s, cfg)
	select {
	case <-b2.admin.Done():
	case <-time.After(hang):
		t.Fatal("disallowed host still connected")
	}
	<-b2.io[0].Done()
	waitAEN(t, aenD, nvmeof.AENDiscoveryChanged)
	if _, e := readDiscoveryLog(t, d); len(e) != 2 {
		t.Fatalf("entries after disallowing %+v", e)
	}
	if _, err := connectHost(t, addr, testSubNQN2, testHostNQN, testKATO); err == nil {
		t.Fatal("disallowed host connected")
	}
	a.alive("after disallowing another host")

	// 5. A port is added, then the subsystem is removed with it.
	cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN2}})
	reload(t, s, cfg)
	c2, err := connectHost(t, portAddr(s, 2), testSubNQN2, otherHost, testKATO)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.status(); len(st.Ports) != 2 || !st.Ports[1].Listening {
		t.Fatalf("ports %+v", st.Ports)
	}
	cfg.Ports = cfg.Ports[:1]
	cfg.Ports[0].Subsystems = cfg.Ports[0].Subsystems[:1]
	cfg.Subsystems = cfg.Subsystems[:1]
	reload(t, s, cfg)
	select {
	case <-c2.admin.Done():
	case <-time.After(hang):
		t.Fatal("host of a removed port still connected")
	}
	if st := s.status(); len(st.Ports) != 1 || len(st.Subsystems) != 1 || len(st.Controllers) != 2 {
		t.Fatalf("after removals: %d ports, %d subsystems, controllers %+v", len(st.Ports), len(st.Subsystems), st.Controllers)
	}
	a.alive("after removing a port and a subsystem")
	d.alive("after removing a port and a subsystem")
	if err := do(t, a.io[0], rw(false, 1, 0, got, 512)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("namespace 1 at the end: %v", err)
	}
}

// TestReloadListener: port settings and tuning apply to new connections
// without dropping the old ones.
func TestReloadListener(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	s := startServer(t, cfg)
	addr := portAddr(s, 1)
	a := mustConnect(t, addr, testSubNQN)
	a.setup(1)
	cfg.Ports[0].InlineDataSize = 8192
	cfg.Tuning.IOWorkers = 3
	cfg.Tuning.MaxIOQueues = 2
	reload(t, s, cfg)
	a.alive("after a listener change")
	if a.identifyController().IOCCSZ() != 260 {
		t.Fatal("an existing controller's IOCCSZ changed")
	}
	b := mustConnect(t, addr, testSubNQN)
	b.setup(2)
	if got := b.identifyController().IOCCSZ(); got != nvmeof.IOCCSZ(8192) {
		t.Fatalf("new controller's IOCCSZ %d", got)
	}
	if _, err := b.connectIO(3, 16); err == nil {
		t.Fatal("a third I/O queue with max_io_queues 2")
	}
	// Moving the port drops its connections.
	cfg.Ports[0].ServiceID = freePort(t)
	reload(t, s, cfg)
	select {
	case <-a.admin.Done():
	case <-time.After(hang):
		t.Fatal("connection kept on a moved port")
	}
	mustConnect(t, portAddr(s, 1), testSubNQN)
}

// TestRevokedHostAccessDenied: between a reload disallowing a host and the
// teardown of its controller, its I/O is refused with Access Denied.
func TestRevokedHostAccessDenied(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	s.regMu.RLock()
	sub := s.subsystems[testSubNQN]
	s.regMu.RUnlock()
	c := sub.controllers()[0]
	c.revoked.Store(true) // what reload does before the teardown
	wantStatus(t, "read of a revoked host", do(t, h.io[0], rw(false, 1, 0, make([]byte, 512), 512)), nvmeof.StatusAccessDenied|nvmeof.StatusDNR)
	c.teardown("test")
	<-h.admin.Done()
}
