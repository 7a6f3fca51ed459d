package target

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// discoveryEntries lists what the discovery log of port shows host, as
// nvmet_execute_disc_get_log_page does: the current discovery subsystem
// (SUBTYPE 3), each subsystem the port serves that the host may connect
// to, and the port's referrals. local is the address the host connected
// to, reported instead of a wildcard listen address (nvmet_set_disc_traddr:
// a wildcard must never appear in an entry). The caller holds regMu.
func (s *server) discoveryEntries(p *port, host string, local net.Addr) []nvmeof.DiscoveryEntry {
	pc := &p.cfg
	traddr := pc.Address
	adrfam := pc.AdrFam()
	if a, ok := s.advertised[p.id]; ok {
		// The address hosts must use (a gateway's gateway.advertise):
		// the listen address, or the one the host reached, may be one
		// it cannot use again (NAT, a namespace's address).
		traddr = a.String()
		adrfam = nvmeof.AdrFamIPv4
		if !a.Is4() {
			adrfam = nvmeof.AdrFamIPv6
		}
	} else if pc.IsWildcard() {
		if a, ok := addrIP(local); ok {
			traddr = a.String()
			adrfam = nvmeof.AdrFamIPv4
			if !a.Is4() {
				adrfam = nvmeof.AdrFamIPv6
			}
		}
	}
	entry := func(subtype uint8, nqn string) nvmeof.DiscoveryEntry {
		e := nvmeof.DiscoveryEntry{
			TrType: pc.TrType(), AdrFam: adrfam, SubType: subtype, TReq: nvmeof.TREQNotSpecified | nvmeof.TREQDisableSQFlow,
			PortID: p.id, CntlID: nvmeof.CNTLIDDynamic, ASQSZ: nvmeof.DiscoveryASQSZ,
			TrSvcID: strconv.Itoa(pc.ServiceID), SubNQN: nqn, TrAddr: traddr,
		}
		if !pc.IsTCP() {
			e.RDMAQPType, e.RDMAPRType, e.RDMACMS = nvmeof.RDMAQPTypeRC, nvmeof.RDMAPRTypeNone, nvmeof.RDMACMSRDMACM
		}
		// A TCP port's TSAS is SECTYPE 0, no security
		// (NVMF_TCP_SECTYPE_NONE, as nvmet's discovery.c reports it): the
		// subtype bytes stay zero. Referrals of a TCP port point at
		// discovery services of the same transport.
		return e
	}
	list := []nvmeof.DiscoveryEntry{entry(nvmeof.SubTypeCurrentDiscovery, nvmeof.DiscoveryNQN)}
	for _, nqn := range pc.Subsystems {
		if sub := s.subsystems[nqn]; sub != nil && sub.hostAllowed(host) {
			list = append(list, entry(nvmeof.SubTypeNVMe, nqn))
		}
	}
	// The other gateways' ports of the group of the same transport, for
	// the subsystems this host may see here (the group serves the same
	// subsystems and hosts on every gateway: the allow-list is this
	// target's; a subsystem unknown here is not listed).
	for _, pp := range s.peers {
		if pp.Transport != pc.Transport {
			continue
		}
		for _, nqn := range pp.Subsystems {
			if sub := s.subsystems[nqn]; sub == nil || !sub.hostAllowed(host) {
				continue
			}
			e := entry(nvmeof.SubTypeNVMe, nqn)
			e.PortID, e.TrAddr, e.TrSvcID = pp.PortID, pp.Address, strconv.Itoa(pp.ServiceID)
			e.AdrFam = nvmeof.AdrFamIPv4
			if strings.Contains(pp.Address, ":") {
				e.AdrFam = nvmeof.AdrFamIPv6
			}
			list = append(list, e)
		}
	}
	for _, ref := range pc.Referrals {
		e := entry(nvmeof.SubTypeReferral, nvmeof.DiscoveryNQN)
		e.PortID = ref.PortID
		e.TrAddr = ref.Address
		e.TrSvcID = strconv.Itoa(ref.ServiceID)
		e.AdrFam = nvmeof.AdrFamIPv4
		if strings.Contains(ref.Address, ":") {
			e.AdrFam = nvmeof.AdrFamIPv6
		}
		list = append(list, e)
	}
	return list
}

// discoveryLog builds the whole discovery log page for a discovery
// controller's Get Log Page on queue q.
func (s *server) discoveryLog(c *controller, q *queue) []byte {
	s.regMu.RLock()
	entries := s.discoveryEntries(c.port, c.hostNQN, q.local)
	genctr := s.genctr.Load()
	s.regMu.RUnlock()
	page, err := nvmeof.AppendDiscoveryLog(nil, genctr, entries)
	if err != nil {
		// Only over-long strings fail, and validation keeps them short:
		// serve the header with no records rather than nothing.
		page, _ = nvmeof.AppendDiscoveryLog(nil, genctr, nil)
	}
	return page
}

// discoveryView summarizes what a discovery controller sees, to tell after
// a reload whether its log changed. The caller holds regMu.
func (s *server) discoveryView(c *controller) string {
	var b strings.Builder
	for _, e := range s.discoveryEntries(c.port, c.hostNQN, c.adminLocal()) {
		b.WriteString(strconv.Itoa(int(e.SubType)) + " " + e.SubNQN + " " + e.TrAddr + " " + e.TrSvcID + " " + strconv.Itoa(int(e.PortID)) + "\n")
	}
	return b.String()
}

// addrIP returns the IP of a TCP address, without a zone.
func addrIP(a net.Addr) (netip.Addr, bool) {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta == nil {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return ip, false
	}
	return ip.Unmap().WithZone(""), true
}

// PeerPort is a port of another gateway of this gateway's group, as that
// gateway recorded it in the group's config object (package gateway,
// docs/rbd.md "Discovery across the group"): the discovery log of this
// target lists it, for the subsystems the host may see, so that a host
// discovering through any gateway learns every path.
type PeerPort struct {
	// Gateway names the gateway that serves the port.
	Gateway string
	// PortID is its port ID (PORTID), Transport "rdma" or "tcp" (the
	// ports[].transport vocabulary), Address the address hosts connect
	// to (TRADDR: never a wildcard) and ServiceID its TRSVCID.
	PortID    uint16
	Transport string
	Address   string
	ServiceID int
	// Subsystems are the NQNs the port serves.
	Subsystems []string
}

// key is the port's identity in the set of peer ports: one line, with its
// subsystems sorted.
func (pp PeerPort) key() string {
	subs := slices.Clone(pp.Subsystems)
	slices.Sort(subs)
	return pp.Gateway + " " + strconv.Itoa(int(pp.PortID)) + " " + pp.Transport + " " + pp.Address + " " +
		strconv.Itoa(pp.ServiceID) + " " + strings.Join(slices.Compact(subs), ",")
}

// peerSet is the set of peer ports, sorted and without duplicates: what
// tells whether the set changed.
func peerSet(ports []PeerPort) []string {
	out := make([]string, 0, len(ports))
	for _, p := range ports {
		out = append(out, p.key())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SetPeerPorts replaces the other gateways' ports the discovery log lists
// (nil: none). When the set changed, the generation counter (GENCTR,
// NVMe Base 2.0 §5.16.1.23) moves on and every discovery controller
// whose log now reads differently gets a Discovery Log Change notice
// (Asynchronous Event Information 0xF0, NVMe over Fabrics 1.1 §5.3, to
// the hosts that enabled it); an unchanged set changes nothing. It
// reports whether the set changed.
func (t *Target) SetPeerPorts(ports []PeerPort) bool { return t.s.setPeerPorts(ports) }

func (s *server) setPeerPorts(ports []PeerPort) bool {
	next := make([]PeerPort, 0, len(ports))
	for _, p := range ports {
		p.Subsystems = slices.Clone(p.Subsystems)
		next = append(next, p)
	}
	slices.SortFunc(next, func(a, b PeerPort) int { return strings.Compare(a.key(), b.key()) })
	next = slices.CompactFunc(next, func(a, b PeerPort) bool { return a.key() == b.key() })

	s.regMu.Lock()
	if slices.Equal(peerSet(s.peers), peerSet(next)) {
		s.regMu.Unlock()
		return false
	}
	s.discoveryChange(func() { s.peers = next })
	return true
}

// SetAdvertisedAddresses sets the address this target's own discovery log
// entries give for a port (port ID → IP literal; nil: none), instead of
// its listen address (or, on a wildcard port, the address the host
// connected to): a gateway's gateway.advertise, the address hosts must
// use. Like SetPeerPorts, a change moves GENCTR and notifies.
func (t *Target) SetAdvertisedAddresses(addrs map[uint16]string) error {
	next := make(map[uint16]netip.Addr, len(addrs))
	for id, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.IsUnspecified() || ip.Zone() != "" {
			return fmt.Errorf("target: port %d: advertised address %q is not an address a host can connect to", id, a)
		}
		next[id] = ip.Unmap()
	}
	s := t.s
	s.regMu.Lock()
	if maps.Equal(s.advertised, next) {
		s.regMu.Unlock()
		return nil
	}
	s.discoveryChange(func() { s.advertised = next })
	return nil
}

// discoveryChange applies change to what the discovery log shows, moves
// GENCTR on, and sends a Discovery Log Change notice to every discovery
// controller whose log now reads differently. The caller holds regMu,
// which it releases.
func (s *server) discoveryChange(change func()) {
	ctrls := s.disc.controllers()
	views := make(map[*controller]string, len(ctrls))
	for _, c := range ctrls {
		views[c] = s.discoveryView(c)
	}
	change()
	s.genctr.Add(1)
	var dnotify []*controller
	for _, c := range ctrls {
		if views[c] != s.discoveryView(c) {
			dnotify = append(dnotify, c)
		}
	}
	s.regMu.Unlock()
	for _, c := range dnotify {
		c.event(nvmeof.AENDiscoveryChanged, nvmeof.AECDiscoveryChange)
	}
}

// PeerPorts returns the other gateways' ports the discovery log lists.
func (t *Target) PeerPorts() []PeerPort {
	t.s.regMu.RLock()
	defer t.s.regMu.RUnlock()
	return slices.Clone(t.s.peers)
}
