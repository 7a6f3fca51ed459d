package target

import (
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestPeerPorts: the discovery log of a gateway lists the other gateways'
// ports of its group (SetPeerPorts) after its own, for the subsystems the
// host may see here and on ports of the discovery port's transport only;
// GENCTR moves and a Discovery Log Change notice goes out only when the
// set of peer ports changes (the same set again, in another order, is no
// change).
func TestPeerPorts(t *testing.T) {
	s := startServer(t, discoveryConfig(t))
	p1 := portAddr(s, 1)
	d := discover(t, p1, testHostNQN)
	if _, err := d.setFeature(nvmeof.FeatAsyncEventConfig, nvmeof.AECDiscoveryChange); err != nil {
		t.Fatal(err)
	}
	aen := d.aer()
	gen0, e0 := readDiscoveryLog(t, d)
	if len(e0) != 3 {
		t.Fatalf("own entries %+v", e0)
	}

	peers := []PeerPort{
		// Both subsystems: testHostNQN may see only testSubNQN.
		{Gateway: "gw-b", PortID: 11, Transport: TransportRDMA, Address: "192.0.2.20", ServiceID: 4420, Subsystems: []string{testSubNQN2, testSubNQN}},
		// A subsystem this target does not know is not listed.
		{Gateway: "gw-b", PortID: 12, Transport: TransportRDMA, Address: "2001:db8::20", ServiceID: 4421, Subsystems: []string{"nqn.2024-01.io.nvmetd:unknown"}},
		// A TCP port is not listed on an RDMA discovery port.
		{Gateway: "gw-c", PortID: 13, Transport: TransportTCP, Address: "192.0.2.30", ServiceID: 4420, Subsystems: []string{testSubNQN}},
		{Gateway: "gw-c", PortID: 14, Transport: TransportRDMA, Address: "2001:db8::30", ServiceID: 4422, Subsystems: []string{testSubNQN}},
	}
	if !s.setPeerPorts(peers) {
		t.Fatal("a new set of peer ports: no change reported")
	}
	waitAEN(t, aen, nvmeof.AENDiscoveryChanged)
	gen1, e1 := readDiscoveryLog(t, d)
	if gen1 == gen0 {
		t.Fatalf("GENCTR stayed %d", gen1)
	}
	// Own: current discovery, testSubNQN, then the peers (sorted), then the referral.
	if len(e1) != 5 {
		t.Fatalf("entries with peers %+v", e1)
	}
	want := []struct {
		addr, svc string
		portid    uint16
		adrfam    uint8
	}{{"192.0.2.20", "4420", 11, nvmeof.AdrFamIPv4}, {"2001:db8::30", "4422", 14, nvmeof.AdrFamIPv6}}
	for i, w := range want {
		e := e1[2+i]
		if e.SubType != nvmeof.SubTypeNVMe || e.SubNQN != testSubNQN || e.TrAddr != w.addr || e.TrSvcID != w.svc || e.PortID != w.portid ||
			e.AdrFam != w.adrfam || e.TrType != nvmeof.TrTypeRDMA || e.CntlID != nvmeof.CNTLIDDynamic {
			t.Errorf("peer entry %d: %+v, want %+v", i, e, w)
		}
	}
	if e1[4].SubType != nvmeof.SubTypeReferral {
		t.Errorf("last entry %+v, want the referral", e1[4])
	}

	// The host allowed into testSubNQN2 sees gw-b's port for it too.
	d2 := discover(t, p1, otherHost)
	if _, e := readDiscoveryLog(t, d2); len(e) != 7 {
		t.Fatalf("entries for %s: %+v", otherHost, e)
	}

	// The same set, in another order: nothing changes.
	again := []PeerPort{peers[3], peers[2], peers[1], peers[0]}
	again[0].Subsystems = []string{testSubNQN, testSubNQN}
	aen = d.aer()
	if s.setPeerPorts(again) {
		t.Fatal("the same set reported as a change")
	}
	noAEN(t, aen)
	if g, _ := readDiscoveryLog(t, d); g != gen1 {
		t.Fatalf("GENCTR moved from %d to %d for the same set", gen1, g)
	}

	// gw-c leaves: the set changes, the log shows gw-b's port only.
	if !s.setPeerPorts(peers[:2]) {
		t.Fatal("a smaller set: no change reported")
	}
	waitAEN(t, aen, nvmeof.AENDiscoveryChanged)
	gen2, e2 := readDiscoveryLog(t, d)
	if gen2 == gen1 || len(e2) != 4 || e2[2].TrAddr != "192.0.2.20" {
		t.Fatalf("after gw-c left: GENCTR %d (was %d), entries %+v", gen2, gen1, e2)
	}
	aen = d.aer()
	// None left.
	if !s.setPeerPorts(nil) {
		t.Fatal("no peers: no change reported")
	}
	waitAEN(t, aen, nvmeof.AENDiscoveryChanged)
	if g, e := readDiscoveryLog(t, d); g == gen2 || len(e) != 3 {
		t.Fatalf("no peers: GENCTR %d, entries %+v", g, e)
	}
}

// TestAdvertisedAddresses: with an advertised address for a port (a
// gateway's gateway.advertise) the port's own discovery log entries give
// it instead of the listen address or, on a wildcard port, the address
// the host connected to; setting the same again changes nothing; a
// wildcard is refused.
func TestAdvertisedAddresses(t *testing.T) {
	s := startServer(t, discoveryConfig(t))
	tg := &Target{s: s}
	d := discover(t, portAddr(s, 2), testHostNQN)
	gen0, e0 := readDiscoveryLog(t, d)
	if len(e0) != 2 || e0[1].TrAddr != "127.0.0.1" {
		t.Fatalf("wildcard port entries %+v", e0)
	}
	if err := tg.SetAdvertisedAddresses(map[uint16]string{2: "2001:db8::7"}); err != nil {
		t.Fatal(err)
	}
	gen1, e1 := readDiscoveryLog(t, d)
	if gen1 == gen0 || len(e1) != 2 {
		t.Fatalf("GENCTR %d (was %d), entries %+v", gen1, gen0, e1)
	}
	for _, e := range e1 {
		if e.TrAddr != "2001:db8::7" || e.AdrFam != nvmeof.AdrFamIPv6 || e.PortID != 2 {
			t.Errorf("entry with the advertised address: %+v", e)
		}
	}
	if err := tg.SetAdvertisedAddresses(map[uint16]string{2: "2001:db8::7"}); err != nil {
		t.Fatal(err)
	}
	if g, _ := readDiscoveryLog(t, d); g != gen1 {
		t.Fatalf("GENCTR moved from %d to %d for the same addresses", gen1, g)
	}
	if err := tg.SetAdvertisedAddresses(map[uint16]string{2: "0.0.0.0"}); err == nil {
		t.Fatal("a wildcard advertised address accepted")
	}
	// Port 1's log is unchanged.
	if _, e := readDiscoveryLog(t, discover(t, portAddr(s, 1), testHostNQN)); e[1].TrAddr != "127.0.0.1" {
		t.Fatalf("port 1 entries %+v", e)
	}
}
