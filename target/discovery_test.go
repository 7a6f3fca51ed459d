package target

import (
	"net"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

func discoveryConfig(t testing.TB) *Config {
	return &Config{
		Ports: []PortConfig{
			{ID: 1, Address: "127.0.0.1", ServiceID: freePort(t), Subsystems: []string{testSubNQN, testSubNQN2},
				Referrals: []ReferralConfig{{Address: "192.0.2.9", ServiceID: 4421, PortID: 7}}},
			{ID: 2, Address: "0.0.0.0", ServiceID: freePort(t), Subsystems: []string{testSubNQN}},
		},
		Subsystems: []SubsystemConfig{
			{NQN: testSubNQN, AllowAnyHost: true, Namespaces: []NamespaceConfig{memNS(1, "1MiB")}},
			{NQN: testSubNQN2, AllowedHosts: []string{otherHost}, Namespaces: []NamespaceConfig{memNS(1, "1MiB")}},
		},
	}
}

// discover connects a discovery controller as `nvme discover` does (KATO 0)
// and enables it.
func discover(t testing.TB, addr, hostnqn string) *host {
	t.Helper()
	h, err := connectHost(t, addr, nvmeof.DiscoveryNQN, hostnqn, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.enable()
	id := h.identifyController()
	if err := id.CheckFabrics(h.cntlid, true); err != nil {
		t.Fatal(err)
	}
	return h
}

// readDiscoveryLog reads the log as current libnvme does: a 20-byte header,
// the entries at LPO 1024 in 4 KiB pieces, the header again.
func readDiscoveryLog(t testing.TB, h *host) (uint64, []nvmeof.DiscoveryEntry) {
	t.Helper()
	hdr, err := h.getLog(nvmeof.LIDDiscovery, 0, 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	genctr, numrec, err := nvmeof.ParseDiscoveryLogHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var entries []nvmeof.DiscoveryEntry
	for i := uint64(0); i < numrec; i += 4 {
		n := min(numrec-i, 4)
		b, err := h.getLog(nvmeof.LIDDiscovery, 0, nvmeof.DiscoveryLogEntryOffset(i), int(n)*nvmeof.DiscoveryLogEntrySize)
		if err != nil {
			t.Fatal(err)
		}
		entries, err = nvmeof.ParseDiscoveryLogEntries(b, entries)
		if err != nil {
			t.Fatal(err)
		}
	}
	hdr, err = h.getLog(nvmeof.LIDDiscovery, 0, 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	if g, _, _ := nvmeof.ParseDiscoveryLogHeader(hdr); g != genctr {
		t.Fatalf("GENCTR moved from %d to %d during the read", genctr, g)
	}
	return genctr, entries
}

func TestDiscovery(t *testing.T) {
	s := startServer(t, discoveryConfig(t))
	p1, p2 := portAddr(s, 1), portAddr(s, 2)
	h := discover(t, p1, testHostNQN)
	if h.id.CNTRLTYPE() != nvmeof.CntrlTypeDiscovery || h.id.OAES() != nvmeof.AECDiscoveryChange || h.id.SUBNQN() != nvmeof.DiscoveryNQN {
		t.Fatalf("discovery Identify: type %d OAES %#x SUBNQN %q", h.id.CNTRLTYPE(), h.id.OAES(), h.id.SUBNQN())
	}
	// KATO 0 gets the configured default (120 s), as nvmet does.
	if v, err := h.getFeature(nvmeof.FeatKeepAliveTimer); err != nil || v != 120000 {
		t.Fatalf("discovery KATO %d %v", v, err)
	}

	gen, entries := readDiscoveryLog(t, h)
	if gen == 0 || len(entries) != 3 {
		t.Fatalf("GENCTR %d, %d entries: %+v", gen, len(entries), entries)
	}
	port := itoa(s.cfg.Ports[0].ServiceID)
	cur, sub, ref := entries[0], entries[1], entries[2]
	if cur.SubType != nvmeof.SubTypeCurrentDiscovery || cur.SubNQN != nvmeof.DiscoveryNQN || cur.TrAddr != "127.0.0.1" || cur.TrSvcID != port {
		t.Errorf("current discovery entry %+v", cur)
	}
	want := nvmeof.DiscoveryEntry{
		TrType: nvmeof.TrTypeRDMA, AdrFam: nvmeof.AdrFamIPv4, SubType: nvmeof.SubTypeNVMe, PortID: 1,
		TReq:   nvmeof.TREQDisableSQFlow, // as nvmet_ports_make sets every port's
		CntlID: nvmeof.CNTLIDDynamic, ASQSZ: 32, TrSvcID: port, SubNQN: testSubNQN, TrAddr: "127.0.0.1",
		RDMAQPType: nvmeof.RDMAQPTypeRC, RDMAPRType: nvmeof.RDMAPRTypeNone, RDMACMS: nvmeof.RDMACMSRDMACM,
	}
	if sub != want {
		t.Errorf("subsystem entry\n got %+v\nwant %+v", sub, want)
	}
	if ref.SubType != nvmeof.SubTypeReferral || ref.TrAddr != "192.0.2.9" || ref.TrSvcID != "4421" || ref.PortID != 7 || ref.SubNQN != nvmeof.DiscoveryNQN {
		t.Errorf("referral %+v", ref)
	}

	// Partial reads: one entry in the middle, the old 1024-byte header
	// read, a read past the end (zeroes), unaligned and out-of-range LPOs.
	b, err := h.getLog(nvmeof.LIDDiscovery, 0, nvmeof.DiscoveryLogEntryOffset(1), 1024)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := nvmeof.ParseDiscoveryLogEntries(b, nil); len(e) != 1 || e[0] != sub {
		t.Fatalf("entry 1 alone: %+v", e)
	}
	full, err := h.getLog(nvmeof.LIDDiscovery, 0, 0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := nvmeof.ParseDiscoveryLog(full)
	if err != nil || dl.NumRec != 3 || dl.GenCtr != gen || len(dl.Entries) != 3 {
		t.Fatalf("whole log: %+v %v", dl, err)
	}
	for _, c := range full[4096:] {
		if c != 0 {
			t.Fatal("bytes past the log are not zero")
		}
	}
	_, err = h.getLog(nvmeof.LIDDiscovery, 0, 2, 16)
	wantStatus(t, "unaligned LPO", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.getLog(nvmeof.LIDDiscovery, 0, 1<<20, 16)
	wantStatus(t, "LPO beyond the log", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.getLog(nvmeof.LIDSMART, nvmeof.NSIDAll, 0, 512)
	wantStatus(t, "SMART on a discovery controller", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.identify(nvmeof.CNSActiveNSList, 0, 0)
	wantStatus(t, "namespace list on a discovery controller", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.setFeature(nvmeof.FeatNumQueues, 0)
	wantStatus(t, "number of queues on a discovery controller", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	_, err = h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECNSAttr)
	wantStatus(t, "namespace notices on a discovery controller", err, nvmeof.StatusInvalidField|nvmeof.StatusDNR)
	if _, err := h.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECDiscoveryChange); err != nil {
		t.Fatal(err)
	}
	// A discovery controller has no I/O queues.
	if _, err := h.connectIO(1, 16); err == nil {
		t.Fatal("I/O queue on a discovery controller")
	}

	// The host allowed into sub2 sees it.
	h2 := discover(t, p1, otherHost)
	_, e2 := readDiscoveryLog(t, h2)
	if len(e2) != 4 || e2[2].SubNQN != testSubNQN2 {
		t.Fatalf("entries for the other host: %+v", e2)
	}

	// The wildcard port reports the address the host connected to.
	h3 := discover(t, p2, testHostNQN)
	_, e3 := readDiscoveryLog(t, h3)
	if len(e3) != 2 || e3[1].TrAddr != "127.0.0.1" || e3[1].PortID != 2 || e3[0].TrAddr != "127.0.0.1" {
		t.Fatalf("wildcard port entries %+v", e3)
	}

	st := s.status()
	if len(st.Controllers) != 3 || !st.Controllers[0].Discovery || st.Controllers[0].KATOMillis != 120000 {
		t.Fatalf("controllers %+v", st.Controllers)
	}
}

func TestConnectAccess(t *testing.T) {
	s := startServer(t, discoveryConfig(t))
	p1, p2 := portAddr(s, 1), portAddr(s, 2)
	for _, tc := range []struct {
		name, addr, sub, host string
		want                  nvmeof.Status
		result                uint32
	}{
		{"host not allowed", p1, testSubNQN2, testHostNQN, nvmeof.StatusConnectInvalidHost | nvmeof.StatusDNR, 0x10200},
		{"unknown subsystem", p1, "nqn.2024-01.io.nvmetd.test:nope", testHostNQN, nvmeof.StatusConnectInvalidParameters | nvmeof.StatusDNR, 0x10100},
		{"subsystem not on this port", p2, testSubNQN2, otherHost, nvmeof.StatusConnectInvalidParameters | nvmeof.StatusDNR, 0x10100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := dial(t, tc.addr, 0, 32)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			res, err := connectCmd(t, q, tc.sub, tc.host, nvmeof.CNTLIDDynamic, 0)
			wantStatus(t, "connect", err, tc.want)
			if res != tc.result {
				t.Fatalf("DW0 %#x, want %#x", res, tc.result)
			}
		})
	}
	// The allowed host gets in; CNTLIDs are unique in the subsystem.
	a := mustConnect(t, p1, testSubNQN)
	b := mustConnect(t, p2, testSubNQN)
	c, err := connectHost(t, p1, testSubNQN2, otherHost, testKATO)
	if err != nil {
		t.Fatal(err)
	}
	if a.cntlid == b.cntlid {
		t.Fatalf("two controllers with CNTLID %d", a.cntlid)
	}
	_ = c
}

// TestKeepAliveExpiry: end to end, over real connections, a controller
// whose host goes silent is torn down with all its queues once its
// keep-alive timeout has passed; an I/O command counts as keep-alive
// traffic (TBKAS) and a Keep Alive command restarts the timeout. When
// exactly the timer expires, with and without traffic, is
// TestKeepAliveTimer's (testing/synctest). Here real time only bounds the
// silent host's teardown from below (never before its timeout) and by a
// hang guard from above: nothing a host must do can run into the short
// timeout (the silent host sets it as its last command; the busy host's
// wiring is checked on its timer's state, not by racing a 1 s timeout
// with a loop of commands on a loaded machine).
func TestKeepAliveExpiry(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	s := startServer(t, cfg)
	addr := portAddr(s, 1)

	// A host that does I/O and Keep Alives.
	busy, err := connectHost(t, addr, testSubNQN, otherHost, testKATO)
	if err != nil {
		t.Fatal(err)
	}
	busy.setup(1)
	var ka *keepAlive
	for _, c := range s.allControllers() {
		if c.hostNQN == otherHost && c.cntlid == busy.cntlid {
			ka = c.ka
		}
	}
	if ka == nil {
		t.Fatalf("no controller %#x of %s", busy.cntlid, otherHost)
	}
	ka.traffic.Store(false)
	if err := do(t, busy.io[0], rw(false, 1, 0, make([]byte, 512), 512)); err != nil {
		t.Fatalf("busy host: %v", err)
	}
	if !ka.traffic.Load() {
		t.Fatal("an I/O command did not count as keep-alive traffic")
	}
	ka.mu.Lock()
	ka.deadline = time.Time{}
	ka.mu.Unlock()
	kaCmd := &rdma.HostRequest{}
	kaCmd.SQE.BuildKeepAlive()
	if err := busy.adminDo(kaCmd); err != nil {
		t.Fatal(err)
	}
	ka.mu.Lock()
	restarted := !ka.deadline.IsZero()
	ka.mu.Unlock()
	if !restarted {
		t.Fatal("a Keep Alive command did not restart the keep-alive timeout")
	}

	// A silent host: it connects and sets up with a long timeout, sets
	// 1 s (Set Features Keep Alive Timer) as its last command and goes
	// silent. The controller and all its queues go.
	silent, err := connectHost(t, addr, testSubNQN, testHostNQN, testKATO)
	if err != nil {
		t.Fatal(err)
	}
	silent.setup(2)
	start := time.Now()
	if v, err := silent.setFeature(nvmeof.FeatKeepAliveTimer, 1000); err != nil || v != 1000 {
		t.Fatalf("Set Features Keep Alive Timer 1000 ms: %d %v", v, err)
	}
	for _, q := range append(silent.io, silent.admin) {
		select {
		case <-q.Done():
		case <-time.After(hang):
			t.Fatalf("queue %d of the silent host still up %v after it set a keep-alive timeout of 1 s", q.QID(), hang)
		}
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("torn down %v after the keep-alive timeout was set to 1 s", el)
	}
	st := s.status()
	if len(st.Controllers) != 1 || st.Controllers[0].HostNQN != otherHost {
		t.Fatalf("controllers %+v", st.Controllers)
	}
	busy.alive("after the silent host's controller went")
}

// freePort6 returns a TCP port on ::1 that was free a moment ago.
func freePort6(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestIPv6Ports: a port on ::1 and a wildcard port on :: (reported as the
// address the host connected to) serve discovery and I/O.
func TestIPv6Ports(t *testing.T) {
	cfg := &Config{
		Ports: []PortConfig{
			{ID: 1, Address: "::1", ServiceID: freePort6(t), Subsystems: []string{testSubNQN},
				Referrals: []ReferralConfig{{Address: "2001:db8::9", PortID: 3}}},
			{ID: 2, Address: "::", ServiceID: freePort6(t), Subsystems: []string{testSubNQN}},
		},
		Subsystems: []SubsystemConfig{{NQN: testSubNQN, AllowAnyHost: true, Namespaces: []NamespaceConfig{memNS(1, "1MiB")}}},
	}
	s := startServer(t, cfg)
	for _, id := range []uint16{1, 2} {
		addr := net.JoinHostPort("::1", itoa(s.cfg.Ports[id-1].ServiceID))
		d := discover(t, addr, testHostNQN)
		_, e := readDiscoveryLog(t, d)
		if len(e) < 2 || e[1].AdrFam != nvmeof.AdrFamIPv6 || e[1].TrAddr != "::1" || e[1].SubNQN != testSubNQN {
			t.Fatalf("port %d: entries %+v", id, e)
		}
		if id == 1 && (len(e) != 3 || e[2].AdrFam != nvmeof.AdrFamIPv6 || e[2].TrAddr != "2001:db8::9" || e[2].TrSvcID != "4420") {
			t.Fatalf("IPv6 referral %+v", e)
		}
		h := mustConnect(t, addr, testSubNQN)
		h.setup(1)
		if err := do(t, h.io[0], rw(true, 1, 0, pattern(4096, 1), 512)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCNTLIDRange: controllers get IDs in the subsystem's range; when it is
// exhausted Connect answers Controller Busy (nvmet: ida_alloc_range fails).
func TestCNTLIDRange(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	cfg.Subsystems[0].CNTLIDMin, cfg.Subsystems[0].CNTLIDMax = 0x20, 0x21
	s := startServer(t, cfg)
	addr := portAddr(s, 1)
	a := mustConnect(t, addr, testSubNQN)
	b := mustConnect(t, addr, testSubNQN)
	if a.cntlid != 0x20 || b.cntlid != 0x21 {
		t.Fatalf("CNTLIDs %#x %#x", a.cntlid, b.cntlid)
	}
	q, err := dial(t, addr, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	_, err = connectCmd(t, q, testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic, testKATO)
	wantStatus(t, "third controller", err, nvmeof.StatusConnectControllerBusy|nvmeof.StatusDNR)
	// A freed ID is handed out again once the others are taken.
	a.close()
	waitFor(t, "controller 0x20 gone", hang, func() bool { return len(s.status().Controllers) == 1 })
	res, err := connectCmd(t, q, testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic, testKATO)
	if err != nil || res != 0x20 {
		t.Fatalf("connect after a controller left: %#x %v", res, err)
	}
}
