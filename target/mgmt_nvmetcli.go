package target

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// nvmetcli's config.json (nvmetcli save/restore, /etc/nvmet/config.json):
// the dump of Linux nvmet's configfs tree, every attribute a string as
// configfs shows it (nvmetcli nvmet/nvme.py, Root.dump):
//
//	{"hosts": [{"nqn": ...}],
//	 "ports": [{"portid": 1, "addr": {"adrfam", "traddr", "treq", "trsvcid", "trtype"},
//	            "param": {"inline_data_size", "max_queue_size", "pi_enable"},
//	            "subsystems": [NQN...], "referrals": [{"name", "addr": {... "portid"}, "enable"}],
//	            "ana_groups": [{"grpid": 1, "ana": {"state": "optimized"}}]}],
//	 "subsystems": [{"nqn", "allowed_hosts": [...], "attr": {"allow_any_host", "serial", "model",
//	                 "firmware", "version", "cntlid_min", "cntlid_max", "ieee_oui", "pi_enable", "qid_max"},
//	                 "namespaces": [{"nsid", "enable", "device": {"path", "nguid", "uuid"}, "ana_grpid",
//	                                 "ana": {"grpid"}, "resv": {"enable"}}]}]}
//
// ImportNvmetcli and ExportNvmetcli map it to and from Config; whatever has
// no counterpart (another transport, protection information, passthru, a
// memory namespace, ...) is a problem naming its field, never dropped in
// silence.

// NvmetcliConfig is nvmetcli's config.json.
type NvmetcliConfig struct {
	Hosts      []NvmetcliHost      `json:"hosts"`
	Ports      []NvmetcliPort      `json:"ports"`
	Subsystems []NvmetcliSubsystem `json:"subsystems"`
}

// NvmetcliHost is a hosts[] entry.
type NvmetcliHost struct {
	NQN string `json:"nqn"`
}

// NvmetcliPort is a ports[] entry.
type NvmetcliPort struct {
	PortID     int                `json:"portid"`
	Addr       map[string]any     `json:"addr"`
	Param      map[string]any     `json:"param,omitempty"`
	Subsystems []string           `json:"subsystems"`
	Referrals  []NvmetcliReferral `json:"referrals"`
	ANAGroups  []NvmetcliANAGroup `json:"ana_groups,omitempty"`
}

// NvmetcliReferral is a referrals[] entry of a port.
type NvmetcliReferral struct {
	Name   string         `json:"name"`
	Addr   map[string]any `json:"addr"`
	Enable *int           `json:"enable,omitempty"`
}

// NvmetcliANAGroup is an ana_groups[] entry of a port.
type NvmetcliANAGroup struct {
	GrpID int               `json:"grpid"`
	ANA   map[string]string `json:"ana"`
}

// NvmetcliSubsystem is a subsystems[] entry.
type NvmetcliSubsystem struct {
	NQN          string              `json:"nqn"`
	AllowedHosts []string            `json:"allowed_hosts"`
	Attr         map[string]any      `json:"attr"`
	Namespaces   []NvmetcliNamespace `json:"namespaces"`
	Passthru     []any               `json:"passthru,omitempty"`
}

// NvmetcliNamespace is a namespaces[] entry of a subsystem.
type NvmetcliNamespace struct {
	NSID     int            `json:"nsid"`
	Enable   *int           `json:"enable,omitempty"`
	Device   map[string]any `json:"device"`
	ANAGrpID int            `json:"ana_grpid,omitempty"`
	ANA      map[string]any `json:"ana,omitempty"`
	Resv     map[string]any `json:"resv,omitempty"`
}

// The values of Linux nvmet (6.1) that carry no setting of ours, accepted
// on import and written on export.
const (
	nvmetVersion = "1.3" // NVMET_DEFAULT_VS
	nvmetQIDMax  = "128" // NVMET_NR_QUEUES
)

// attrString is a configfs attribute as a string (nvmetcli writes strings;
// a hand-written file may hold numbers).
func attrString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "1"
		}
		return "0"
	}
	return fmt.Sprint(v)
}

// nvmetcliProblems collects problems with their field.
type nvmetcliProblems []*FieldError

func (p *nvmetcliProblems) add(field, format string, a ...any) {
	*p = append(*p, &FieldError{Field: field, Reason: fmt.Sprintf(format, a...)})
}

func (p nvmetcliProblems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Problems: p}
}

// zeroID reports whether an NGUID or UUID string is all zeroes (configfs
// shows an unset one so).
func zeroID(s string) bool {
	return strings.Trim(s, "0-") == ""
}

// BackendKindByPath is the default classifier of ImportNvmetcli: a path
// under /dev/ is a block device, anything else a file.
func BackendKindByPath(path string) string {
	if strings.HasPrefix(path, "/dev/") {
		return "block"
	}
	return "file"
}

// ImportNvmetcli maps nvmetcli's config.json to a configuration (defaults
// not applied). kind tells a namespace's backend kind from its device path
// (BackendKindByPath if nil). What cannot be mapped is returned as a
// *ValidationError whose fields are config.json's paths
// ("ports[0].addr.trtype"), together with the configuration of everything
// else.
func ImportNvmetcli(data []byte, kind func(path string) string) (*Config, error) {
	if kind == nil {
		kind = BackendKindByPath
	}
	var nc NvmetcliConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&nc); err != nil {
		return nil, fmt.Errorf("nvmetcli config.json: %w", err)
	}
	var ps nvmetcliProblems
	c := &Config{}
	for _, h := range nc.Hosts {
		c.Hosts = append(c.Hosts, HostConfig{NQN: h.NQN})
	}
	// Host attribute groups (dhchap) are not in NvmetcliHost's fields:
	// look for them in the raw document.
	var raw struct {
		Hosts []map[string]any `json:"hosts"`
	}
	_ = json.Unmarshal(data, &raw)
	for i, h := range raw.Hosts {
		for k := range h {
			if k != "nqn" {
				ps.add(fmt.Sprintf("hosts[%d].%s", i, k), "cannot be mapped (host attributes such as DH-HMAC-CHAP keys are not configured here)")
			}
		}
	}
	for i, p := range nc.Ports {
		f := fmt.Sprintf("ports[%d]", i)
		pc := PortConfig{Subsystems: slices.Clone(p.Subsystems)}
		if p.PortID < 1 || p.PortID > 65535 {
			ps.add(f+".portid", "%d is not a port ID of 1..65535", p.PortID)
		} else {
			pc.ID = uint16(p.PortID)
		}
		importAddr(&ps, f+".addr", p.Addr, &pc.Address, &pc.ServiceID, nil)
		if tr := attrString(p.Addr["trtype"]); tr == TransportTCP {
			pc.Transport = TransportTCP
		}
		for k, v := range p.Param {
			s := attrString(v)
			switch k {
			case "inline_data_size", "max_queue_size":
				n, err := strconv.Atoi(s)
				switch {
				case err != nil:
					ps.add(f+".param."+k, "%q is not a number", s)
				case n < 0: // -1: the transport's default
				case k == "inline_data_size":
					pc.InlineDataSize = n
				default:
					pc.MaxQueueSize = n
				}
			case "pi_enable":
				if s != "0" && s != "" {
					ps.add(f+".param.pi_enable", "protection information cannot be mapped (not supported)")
				}
			default:
				ps.add(f+".param."+k, "cannot be mapped (no such port setting)")
			}
		}
		for j, r := range p.Referrals {
			rf := fmt.Sprintf("%s.referrals[%d]", f, j)
			if r.Enable != nil && *r.Enable == 0 {
				ps.add(rf+".enable", "a disabled referral cannot be mapped (referrals are listed or absent)")
				continue
			}
			var rc ReferralConfig
			var portID int
			importAddr(&ps, rf+".addr", r.Addr, &rc.Address, &rc.ServiceID, &portID)
			rc.PortID = uint16(portID)
			pc.Referrals = append(pc.Referrals, rc)
		}
		for j, g := range p.ANAGroups {
			gf := fmt.Sprintf("%s.ana_groups[%d]", f, j)
			st := g.ANA["state"]
			if _, err := ParseANAState(st); err != nil {
				ps.add(gf+".ana.state", "%v", err)
				continue
			}
			pc.ANAGroups = append(pc.ANAGroups, ANAGroupConfig{ID: uint32(g.GrpID), State: st})
		}
		c.Ports = append(c.Ports, pc)
	}
	for i, s := range nc.Subsystems {
		f := fmt.Sprintf("subsystems[%d]", i)
		sc := SubsystemConfig{NQN: s.NQN, AllowedHosts: slices.Clone(s.AllowedHosts)}
		if len(s.Passthru) > 0 {
			ps.add(f+".passthru", "a passthru subsystem cannot be mapped (not supported)")
		}
		for k, v := range s.Attr {
			a := attrString(v)
			af := f + ".attr." + k
			num := func(max int) uint16 {
				n, err := strconv.Atoi(a)
				if err != nil || n < 0 || n > max {
					ps.add(af, "%q is not a number of 0..%d", a, max)
					return 0
				}
				return uint16(n)
			}
			switch k {
			case "allow_any_host":
				sc.AllowAnyHost = a == "1"
			case "serial":
				sc.Serial = a
			case "model":
				sc.Model = a
			case "firmware":
				sc.FirmwareRevision = a
			case "cntlid_min":
				sc.CNTLIDMin = num(0xFFFF)
			case "cntlid_max":
				sc.CNTLIDMax = num(0xFFFF)
			case "version":
				if a != "" && a != nvmetVersion {
					ps.add(af, "NVMe version %s cannot be mapped (nvmetd reports %s)", a, nvmetVersion)
				}
			case "ieee_oui":
				if a != "" && strings.Trim(strings.TrimPrefix(a, "0x"), "0") != "" {
					ps.add(af, "IEEE OUI %s cannot be mapped (not configurable)", a)
				}
			case "pi_enable":
				if a != "" && a != "0" {
					ps.add(af, "protection information cannot be mapped (not supported)")
				}
			case "qid_max":
				if a != "" && a != nvmetQIDMax {
					ps.add(af, "a per-subsystem qid_max cannot be mapped (tuning.max_io_queues sets it for all)")
				}
			default:
				ps.add(af, "cannot be mapped (no such subsystem setting)")
			}
		}
		for j, n := range s.Namespaces {
			nf := fmt.Sprintf("%s.namespaces[%d]", f, j)
			ns := NamespaceConfig{}
			if n.NSID < 1 {
				ps.add(nf+".nsid", "%d is not an NSID", n.NSID)
			} else {
				ns.NSID = uint32(n.NSID)
			}
			if n.Enable != nil && *n.Enable == 0 {
				f := false
				ns.Enabled = &f
			}
			for k, v := range n.Device {
				a := attrString(v)
				switch k {
				case "path":
					ns.Backend.Path = a
					ns.Backend.Kind = kind(a)
					if ns.Backend.Kind == "file" {
						ns.Backend.MustExist = true // nvmet opens, never creates
					}
				case "nguid":
					if !zeroID(a) {
						ns.NGUID = a
					}
				case "uuid":
					if !zeroID(a) {
						ns.UUID = a
					}
				case "eui64":
					if !zeroID(a) {
						ns.EUI64 = a
					}
				default:
					ps.add(nf+".device."+k, "cannot be mapped (no such namespace setting)")
				}
			}
			if ns.Backend.Path == "" {
				ps.add(nf+".device.path", "required")
			}
			grp := n.ANAGrpID
			if g := attrString(n.ANA["grpid"]); g != "" {
				if x, err := strconv.Atoi(g); err == nil && grp == 0 {
					grp = x
				}
			}
			if grp > 0 {
				ns.ANAGroup = uint32(grp)
			}
			for k, v := range n.Resv {
				if a := attrString(v); !(k == "enable" && (a == "0" || a == "")) {
					ps.add(nf+".resv."+k, "reservations cannot be mapped (not supported)")
				}
			}
			sc.Namespaces = append(sc.Namespaces, ns)
		}
		c.Subsystems = append(c.Subsystems, sc)
	}
	return c, ps.err()
}

// importAddr maps a port's or referral's addr group.
func importAddr(ps *nvmetcliProblems, f string, addr map[string]any, address *string, svc *int, portID *int) {
	for k, v := range addr {
		a := attrString(v)
		switch k {
		case "trtype":
			if a != TransportRDMA && a != TransportTCP {
				ps.add(f+".trtype", "transport %q cannot be mapped (nvmetd serves rdma and tcp)", a)
			}
		case "adrfam":
			if a != "ipv4" && a != "ipv6" {
				ps.add(f+".adrfam", "address family %q cannot be mapped (ipv4 or ipv6)", a)
			}
		case "traddr":
			*address = a
		case "trsvcid":
			n, err := strconv.Atoi(a)
			if err != nil || n < 1 || n > 65535 {
				ps.add(f+".trsvcid", "%q is not a TCP port", a)
			} else {
				*svc = n
			}
		case "treq":
			if a != "" && a != "not specified" && a != "not required" {
				ps.add(f+".treq", "secure channel %q cannot be mapped (no TLS on rdma)", a)
			}
		case "tsas":
			if a != "" && a != "none" && a != "not specified" {
				ps.add(f+".tsas", "%q cannot be mapped (no TLS on rdma)", a)
			}
		case "portid":
			n, err := strconv.Atoi(a)
			if portID == nil || err != nil || n < 0 || n > 65535 {
				ps.add(f+".portid", "cannot be mapped")
			} else {
				*portID = n
			}
		default:
			ps.add(f+"."+k, "cannot be mapped (no such address setting)")
		}
	}
}

// ExportNvmetcli maps a configuration (defaults applied) to nvmetcli's
// config.json. Settings nvmetcli cannot express (a memory, null or rbd
// namespace, a read-only one, a block size, a host's description, ...)
// are returned as a *ValidationError naming each (the configuration's
// paths), together with the export of everything else.
func ExportNvmetcli(c *Config) (*NvmetcliConfig, error) {
	var ps nvmetcliProblems
	out := &NvmetcliConfig{Hosts: []NvmetcliHost{}, Ports: []NvmetcliPort{}, Subsystems: []NvmetcliSubsystem{}}
	for i, h := range c.Hosts {
		out.Hosts = append(out.Hosts, NvmetcliHost{NQN: h.NQN})
		if h.Description != "" {
			ps.add(fmt.Sprintf("hosts[%d].description", i), "nvmetcli has no host description")
		}
	}
	for _, p := range c.Ports {
		np := NvmetcliPort{PortID: int(p.ID), Subsystems: slices.Clone(p.Subsystems), Referrals: []NvmetcliReferral{}, ANAGroups: []NvmetcliANAGroup{},
			Addr: exportPortAddr(&p),
			Param: map[string]any{
				"inline_data_size": strconv.Itoa(p.InlineDataSize),
				"max_queue_size":   strconv.Itoa(p.MaxQueueSize),
				"pi_enable":        "0",
			}}
		if np.Subsystems == nil {
			np.Subsystems = []string{}
		}
		for j, r := range p.Referrals {
			one := 1
			np.Referrals = append(np.Referrals, NvmetcliReferral{Name: strconv.Itoa(j + 1), Enable: &one, Addr: exportAddr(r.Address, r.ServiceID, int(r.PortID))})
		}
		for _, g := range p.ANAGroups {
			np.ANAGroups = append(np.ANAGroups, NvmetcliANAGroup{GrpID: int(g.ID), ANA: map[string]string{"state": anaStateName(g.State)}})
		}
		if !slices.ContainsFunc(p.ANAGroups, func(g ANAGroupConfig) bool { return g.ID == DefaultANAGroup }) {
			// nvmet's group 1 always exists (optimized unless set).
			np.ANAGroups = append([]NvmetcliANAGroup{{GrpID: DefaultANAGroup, ANA: map[string]string{"state": "optimized"}}}, np.ANAGroups...)
		}
		out.Ports = append(out.Ports, np)
	}
	for i, s := range c.Subsystems {
		f := fmt.Sprintf("subsystems[%d]", i)
		allow := "0"
		if s.AllowAnyHost {
			allow = "1"
		}
		ns := NvmetcliSubsystem{NQN: s.NQN, AllowedHosts: slices.Clone(s.AllowedHosts), Namespaces: []NvmetcliNamespace{},
			Attr: map[string]any{
				"allow_any_host": allow, "serial": s.Serial, "model": s.Model, "firmware": s.FirmwareRevision,
				"cntlid_min": strconv.Itoa(int(s.CNTLIDMin)), "cntlid_max": strconv.Itoa(int(s.CNTLIDMax)),
				"version": nvmetVersion, "pi_enable": "0", "qid_max": nvmetQIDMax,
			}}
		if ns.AllowedHosts == nil {
			ns.AllowedHosts = []string{}
		}
		if s.MaxNamespaces != DefaultMaxNamespaces {
			ps.add(f+".max_namespaces", "nvmetcli has no max_namespaces (nvmet uses %d)", DefaultMaxNamespaces)
		}
		for j, n := range s.Namespaces {
			nf := fmt.Sprintf("%s.namespaces[%d]", f, j)
			en := 1
			if !n.IsEnabled() {
				en = 0
			}
			// Unset identifiers as configfs shows them (all zeroes); nvmetd
			// derives them.
			const zero = "00000000-0000-0000-0000-000000000000"
			nn := NvmetcliNamespace{NSID: int(n.NSID), Enable: &en, ANAGrpID: int(n.ANAGroup),
				ANA:    map[string]any{"grpid": strconv.Itoa(int(n.ANAGroup))},
				Device: map[string]any{"path": n.Backend.Path, "nguid": zero, "uuid": zero}}
			if n.NGUID != "" {
				nn.Device["nguid"] = formatNGUIDDashed(n.NGUID)
			}
			if n.UUID != "" {
				nn.Device["uuid"] = n.UUID
			}
			b := n.Backend
			switch {
			case b.Kind != "file" && b.Kind != "block":
				ps.add(nf+".backend.kind", "a %s namespace has no nvmetcli form (file and block only)", b.Kind)
			case b.ReadOnly:
				ps.add(nf+".backend.read_only", "nvmetcli has no read-only namespace")
			case b.BlockSize != 0:
				ps.add(nf+".backend.block_size", "nvmetcli has no block size (nvmet takes the device's)")
			}
			if n.EUI64 != "" {
				ps.add(nf+".eui64", "nvmetcli has no EUI-64")
			}
			if n.IOWorkers != 0 {
				ps.add(nf+".io_workers", "nvmetcli has no per-namespace workers")
			}
			ns.Namespaces = append(ns.Namespaces, nn)
		}
		out.Subsystems = append(out.Subsystems, ns)
	}
	return out, ps.err()
}

// exportPortAddr is a port's addr group, with its transport.
func exportPortAddr(p *PortConfig) map[string]any {
	m := exportAddr(p.Address, p.ServiceID, -1)
	if p.IsTCP() {
		m["trtype"] = TransportTCP
	}
	return m
}

// exportAddr is a port's or referral's addr group (portID < 0: none).
func exportAddr(address string, svc, portID int) map[string]any {
	fam := "ipv4"
	if strings.Contains(address, ":") {
		fam = "ipv6"
	}
	m := map[string]any{"adrfam": fam, "traddr": address, "treq": "not specified", "trsvcid": strconv.Itoa(svc), "trtype": "rdma"}
	if portID >= 0 {
		m["portid"] = strconv.Itoa(portID)
	}
	return m
}

// anaStateName is the configfs spelling of an ANA state.
func anaStateName(s string) string {
	switch s {
	case "", "optimized":
		return "optimized"
	case "non_optimized":
		return "non-optimized"
	case "persistent_loss":
		return "persistent-loss"
	}
	return s
}

// formatNGUIDDashed writes an NGUID in the 8-4-4-4-12 form configfs shows.
func formatNGUIDDashed(s string) string {
	id, err := ParseNGUID(s)
	if err != nil {
		return s
	}
	h := fmt.Sprintf("%x", id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// MarshalNvmetcli encodes c as nvmetcli save does: sorted keys, two
// spaces of indent, a final newline.
func MarshalNvmetcli(c *NvmetcliConfig) ([]byte, error) {
	// Through a generic value, so that keys come out sorted as Python's
	// json.dumps(sort_keys=True) writes them.
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
