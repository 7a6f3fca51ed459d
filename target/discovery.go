package target

import (
	"net"
	"net/netip"
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
	if pc.IsWildcard() {
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
