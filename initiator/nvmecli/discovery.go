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

// discoveryField is one field of a discovery log entry as nvme-cli prints
// it (nvme_show_discovery_log and its JSON form): the one description both
// outputs are made from, in nvme-cli's order.
type discoveryField struct {
	key   string                                // the JSON key
	label string                                // the normal output's label, nvme-cli's padding
	only  uint8                                 // the transport the field belongs to (0: every entry)
	text  func(e *nvmeof.DiscoveryEntry) string // the value as the normal output prints it
	json  func(e *nvmeof.DiscoveryEntry) any    // the JSON value (nil: text)
}

var discoveryFields = []discoveryField{
	{key: "trtype", label: "trtype:  ", text: func(e *nvmeof.DiscoveryEntry) string { return trtypeStr(e.TrType) }},
	{key: "adrfam", label: "adrfam:  ",
		// nvme-cli prints no address family where there is no address,
		// but names it in JSON.
		text: func(e *nvmeof.DiscoveryEntry) string {
			if e.TrAddr == "" {
				return ""
			}
			return adrfamStr(e.AdrFam)
		},
		json: func(e *nvmeof.DiscoveryEntry) any { return adrfamStr(e.AdrFam) }},
	{key: "subtype", label: "subtype: ", text: func(e *nvmeof.DiscoveryEntry) string { return subtypeStr(e.SubType) }},
	{key: "treq", label: "treq:    ", text: func(e *nvmeof.DiscoveryEntry) string { return treqStr(e.TReq) }},
	{key: "portid", label: "portid:  ", text: func(e *nvmeof.DiscoveryEntry) string { return fmt.Sprint(e.PortID) },
		json: func(e *nvmeof.DiscoveryEntry) any { return e.PortID }},
	{key: "trsvcid", label: "trsvcid: ", text: func(e *nvmeof.DiscoveryEntry) string { return e.TrSvcID }},
	{key: "subnqn", label: "subnqn:  ", text: func(e *nvmeof.DiscoveryEntry) string { return e.SubNQN }},
	{key: "traddr", label: "traddr:  ", text: func(e *nvmeof.DiscoveryEntry) string { return e.TrAddr }},
	{key: "eflags", label: "eflags:  ", text: func(e *nvmeof.DiscoveryEntry) string { return eflagsStr(e.EFlags) }},
	{key: "rdma_prtype", label: "rdma_prtype: ", only: nvmeof.TrTypeRDMA, text: func(e *nvmeof.DiscoveryEntry) string { return prtypeStr(e.RDMAPRType) }},
	{key: "rdma_qptype", label: "rdma_qptype: ", only: nvmeof.TrTypeRDMA, text: func(e *nvmeof.DiscoveryEntry) string { return qptypeStr(e.RDMAQPType) }},
	{key: "rdma_cms", label: "rdma_cms:    ", only: nvmeof.TrTypeRDMA, text: func(e *nvmeof.DiscoveryEntry) string { return cmsStr(e.RDMACMS) }},
	{key: "rdma_pkey", label: "rdma_pkey: ", only: nvmeof.TrTypeRDMA,
		text: func(e *nvmeof.DiscoveryEntry) string { return fmt.Sprintf("0x%04x", e.RDMAPKey) },
		json: func(e *nvmeof.DiscoveryEntry) any { return int(e.RDMAPKey) }},
	// nvme-cli's nvmf_sectype_str: TCP ports only.
	{key: "sectype", label: "sectype: ", only: nvmeof.TrTypeTCP, text: func(e *nvmeof.DiscoveryEntry) string { return sectypeStr(e.TCPSecType) }},
}

// applies: the field is printed for entry e.
func (f *discoveryField) applies(e *nvmeof.DiscoveryEntry) bool {
	return f.only == 0 || f.only == e.TrType
}

// WriteDiscovery prints a discovery log like nvme-cli's stdout output.
func WriteDiscovery(w io.Writer, l *nvmeof.DiscoveryLog) {
	fmt.Fprintf(w, "\nDiscovery Log Number of Records %d, Generation counter %d\n", len(l.Entries), l.GenCtr)
	for i := range l.Entries {
		e := &l.Entries[i]
		fmt.Fprintf(w, "=====Discovery Log Entry %d======\n", i)
		for j := range discoveryFields {
			if f := &discoveryFields[j]; f.applies(e) {
				fmt.Fprintf(w, "%s%s\n", f.label, f.text(e))
			}
		}
	}
}

// discoveryRecord is one entry in nvme-cli's JSON output: the fields that
// apply to it, in the table's order.
type discoveryRecord struct{ e *nvmeof.DiscoveryEntry }

func (r discoveryRecord) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for j := range discoveryFields {
		f := &discoveryFields[j]
		if !f.applies(r.e) {
			continue
		}
		var v any
		if f.json != nil {
			v = f.json(r.e)
		} else {
			v = f.text(r.e)
		}
		kv, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, f.key...)
		b = append(b, '"', ':')
		b = append(b, kv...)
	}
	return append(b, '}'), nil
}

// discoveryJSON is nvme-cli's JSON discovery output.
type discoveryJSON struct {
	GenCtr  uint64            `json:"genctr"`
	Records []discoveryRecord `json:"records"`
}

func discoveryToJSON(l *nvmeof.DiscoveryLog) discoveryJSON {
	d := discoveryJSON{GenCtr: l.GenCtr, Records: []discoveryRecord{}}
	for i := range l.Entries {
		d.Records = append(d.Records, discoveryRecord{&l.Entries[i]})
	}
	return d
}

// WriteDiscoveryJSON prints a discovery log like nvme-cli's JSON output
// (-o json).
func WriteDiscoveryJSON(w io.Writer, l *nvmeof.DiscoveryLog) {
	b, _ := json.MarshalIndent(discoveryToJSON(l), "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}
