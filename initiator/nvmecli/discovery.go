package nvmecli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// Strings of the discovery log fields, as libnvme prints them
// (nvmf_trtype_str and friends).
func trtypeStr(t uint8) string {
	switch t {
	case nvmeof.TrTypeRDMA:
		return "rdma"
	case nvmeof.TrTypeFC:
		return "fc"
	case nvmeof.TrTypeTCP:
		return "tcp"
	case nvmeof.TrTypeLoop:
		return "loop"
	}
	return "unrecognized"
}

func adrfamStr(a uint8) string {
	switch a {
	case nvmeof.AdrFamIPv4:
		return "ipv4"
	case nvmeof.AdrFamIPv6:
		return "ipv6"
	case nvmeof.AdrFamIB:
		return "infiniband"
	case nvmeof.AdrFamFC:
		return "fibre-channel"
	case nvmeof.AdrFamLoop:
		return "loop"
	}
	return "unrecognized"
}

func subtypeStr(s uint8) string {
	switch s {
	case nvmeof.SubTypeReferral:
		return "discovery subsystem referral"
	case nvmeof.SubTypeNVMe:
		return "nvme subsystem"
	case nvmeof.SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return "unrecognized"
}

func treqStr(t uint8) string {
	var s string
	switch t & nvmeof.TREQSecureMask {
	case nvmeof.TREQNotSpecified:
		s = "not specified"
	case nvmeof.TREQRequired:
		s = "required"
	case nvmeof.TREQNotRequired:
		s = "not required"
	default:
		s = "unrecognized"
	}
	if t&nvmeof.TREQDisableSQFlow != 0 {
		s += ", sq flow control disable supported"
	}
	return s
}

func eflagsStr(f uint16) string {
	var parts []string
	if f&nvmeof.EFLAGSDupRetInfo != 0 {
		parts = append(parts, "duplicate discovery information")
	}
	if f&nvmeof.EFLAGSEPCSD != 0 {
		parts = append(parts, "explicit discovery connections")
	}
	if f&nvmeof.EFLAGSNCC != 0 {
		parts = append(parts, "no cdc connectivity")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func prtypeStr(p uint8) string {
	switch p {
	case nvmeof.RDMAPRTypeNone:
		return "not specified"
	case nvmeof.RDMAPRTypeIB:
		return "infiniband"
	case nvmeof.RDMAPRTypeRoCE:
		return "roce"
	case nvmeof.RDMAPRTypeRoCEv2:
		return "roce-v2"
	case nvmeof.RDMAPRTypeIWARP:
		return "iwarp"
	}
	return "unrecognized"
}

func qptypeStr(q uint8) string {
	switch q {
	case nvmeof.RDMAQPTypeRC:
		return "connected"
	case nvmeof.RDMAQPTypeRD:
		return "datagram"
	}
	return "unrecognized"
}

func cmsStr(c uint8) string {
	if c == nvmeof.RDMACMSRDMACM {
		return "rdma-cm"
	}
	return "unrecognized"
}

// sectypeStr is libnvme's nvmf_sectype_str.
func sectypeStr(t uint8) string {
	switch t {
	case 0:
		return "none"
	case 1:
		return "tls"
	case 2:
		return "tls13"
	}
	return "unrecognized"
}

// WriteDiscovery prints a discovery log like nvme-cli's stdout output.
func WriteDiscovery(w io.Writer, l *nvmeof.DiscoveryLog) {
	fmt.Fprintf(w, "\nDiscovery Log Number of Records %d, Generation counter %d\n", len(l.Entries), l.GenCtr)
	for i, e := range l.Entries {
		fmt.Fprintf(w, "=====Discovery Log Entry %d======\n", i)
		fmt.Fprintf(w, "trtype:  %s\n", trtypeStr(e.TrType))
		adrfam := ""
		if e.TrAddr != "" {
			adrfam = adrfamStr(e.AdrFam)
		}
		fmt.Fprintf(w, "adrfam:  %s\n", adrfam)
		fmt.Fprintf(w, "subtype: %s\n", subtypeStr(e.SubType))
		fmt.Fprintf(w, "treq:    %s\n", treqStr(e.TReq))
		fmt.Fprintf(w, "portid:  %d\n", e.PortID)
		fmt.Fprintf(w, "trsvcid: %s\n", e.TrSvcID)
		fmt.Fprintf(w, "subnqn:  %s\n", e.SubNQN)
		fmt.Fprintf(w, "traddr:  %s\n", e.TrAddr)
		fmt.Fprintf(w, "eflags:  %s\n", eflagsStr(e.EFlags))
		if e.TrType == nvmeof.TrTypeRDMA {
			fmt.Fprintf(w, "rdma_prtype: %s\n", prtypeStr(e.RDMAPRType))
			fmt.Fprintf(w, "rdma_qptype: %s\n", qptypeStr(e.RDMAQPType))
			fmt.Fprintf(w, "rdma_cms:    %s\n", cmsStr(e.RDMACMS))
			fmt.Fprintf(w, "rdma_pkey: 0x%04x\n", e.RDMAPKey)
		}
		if e.TrType == nvmeof.TrTypeTCP {
			// nvme-cli's nvme_show_discovery_log (nvmf_sectype_str).
			fmt.Fprintf(w, "sectype: %s\n", sectypeStr(e.TCPSecType))
		}
	}
}

// discoveryRecord is one entry in nvme-cli's JSON output.
type discoveryRecord struct {
	TrType     string `json:"trtype"`
	AdrFam     string `json:"adrfam"`
	SubType    string `json:"subtype"`
	TReq       string `json:"treq"`
	PortID     uint16 `json:"portid"`
	TrSvcID    string `json:"trsvcid"`
	SubNQN     string `json:"subnqn"`
	TrAddr     string `json:"traddr"`
	EFlags     string `json:"eflags"`
	RDMAPRType string `json:"rdma_prtype,omitempty"`
	RDMAQPType string `json:"rdma_qptype,omitempty"`
	RDMACMS    string `json:"rdma_cms,omitempty"`
	RDMAPKey   *int   `json:"rdma_pkey,omitempty"`
	SecType    string `json:"sectype,omitempty"`
}

// discoveryJSON is nvme-cli's JSON discovery output.
type discoveryJSON struct {
	GenCtr  uint64            `json:"genctr"`
	Records []discoveryRecord `json:"records"`
}

func discoveryToJSON(l *nvmeof.DiscoveryLog) discoveryJSON {
	d := discoveryJSON{GenCtr: l.GenCtr, Records: []discoveryRecord{}}
	for _, e := range l.Entries {
		r := discoveryRecord{
			TrType: trtypeStr(e.TrType), AdrFam: adrfamStr(e.AdrFam), SubType: subtypeStr(e.SubType),
			TReq: treqStr(e.TReq), PortID: e.PortID, TrSvcID: e.TrSvcID, SubNQN: e.SubNQN, TrAddr: e.TrAddr,
			EFlags: eflagsStr(e.EFlags),
		}
		if e.TrType == nvmeof.TrTypeRDMA {
			pkey := int(e.RDMAPKey)
			r.RDMAPRType, r.RDMAQPType, r.RDMACMS, r.RDMAPKey = prtypeStr(e.RDMAPRType), qptypeStr(e.RDMAQPType), cmsStr(e.RDMACMS), &pkey
		}
		if e.TrType == nvmeof.TrTypeTCP {
			r.SecType = sectypeStr(e.TCPSecType)
		}
		d.Records = append(d.Records, r)
	}
	return d
}

func WriteDiscoveryJSON(w io.Writer, l *nvmeof.DiscoveryLog) {
	b, _ := json.MarshalIndent(discoveryToJSON(l), "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}
