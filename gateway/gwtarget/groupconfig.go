package gwtarget

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/target/configfile"
)

// The group's configuration held in RADOS (gateway.group_config: rados;
// docs/rbd.md "Group configuration in RADOS"): what every gateway of the
// group serves alike. The plain functions here split a configuration
// into the group's part and the gateway's own, merge them back, and
// validate a group configuration as a whole; gateway.RADOS stores it,
// versioned.

// Where a gateway's group configuration comes from (gateway.group_config).
const (
	// GroupConfigFile: each gateway's file holds it, and the gateways
	// compare their files' agreement text (CheckConfig).
	GroupConfigFile = "file"
	// GroupConfigRADOS: the group's config object holds it, versioned;
	// the file's subsystems and hosts only seed version 1.
	GroupConfigRADOS = "rados"
)

// GroupDoc is the group's configuration as stored: the subsystems (their
// namespaces, allowed hosts, identity), the hosts (DH-HMAC-CHAP keys as
// file: references only) and the ANA groups with their preferred owners.
// A gateway's own CNTLID ranges are not in it (they are each gateway's:
// gateway.cntlid_min/cntlid_max, or its file's subsystem entry).
type GroupDoc struct {
	Subsystems []target.SubsystemConfig `mapstructure:"subsystems"`
	Hosts      []target.HostConfig      `mapstructure:"hosts"`
	ANAGroups  []GroupConfig            `mapstructure:"ana_groups"`
	// Drained are the members under maintenance (nvmetctl gateway
	// drain): each is never a group's owner until undrained (drain.go).
	// Sorted; nil when none (so that a group that never drained stores
	// the same text as before).
	Drained []string `mapstructure:"drained"`
	// Pinned are the ANA groups rebalancing never moves (nvmetctl group
	// pin): their preferred owner changes only by nvmetctl group move.
	// Sorted; nil when none.
	Pinned []uint32 `mapstructure:"pinned"`
}

// SplitGroup is the group's part of cfg, with the ANA groups ana.
func SplitGroup(cfg *target.Config, ana []GroupConfig) GroupDoc {
	c := cfg.Clone()
	d := GroupDoc{Subsystems: c.Subsystems, Hosts: c.Hosts, ANAGroups: slices.Clone(ana)}
	for i := range d.Subsystems {
		s := &d.Subsystems[i]
		s.CNTLIDMin, s.CNTLIDMax = 0, 0
		// The default firmware revision is each gateway's own program
		// version (a rolling upgrade shows in it), not the seeding
		// gateway's.
		if s.FirmwareRevision == target.DefaultFirmwareRevision {
			s.FirmwareRevision = ""
		}
	}
	slices.SortFunc(d.ANAGroups, func(a, b GroupConfig) int { return int(a.ID) - int(b.ID) })
	return d
}

// EncodeGroup is d as stored: YAML in the configuration file's form.
func EncodeGroup(d GroupDoc) ([]byte, error) {
	return yaml.Marshal(configfile.Node(reflect.ValueOf(d), true))
}

// DecodeGroup reads what EncodeGroup wrote.
func DecodeGroup(b []byte) (GroupDoc, error) {
	var d GroupDoc
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return d, fmt.Errorf("gateway: the group configuration does not read as YAML: %w", err)
	}
	if err := target.DecodeMap(m, &d); err != nil {
		return d, fmt.Errorf("gateway: the group configuration: %w", err)
	}
	return d, nil
}

// Ranges are this gateway's CNTLID ranges: per subsystem (its file's
// entries), and Default for every other subsystem of the group (zero:
// none, the whole range).
type Ranges struct {
	Subsystems map[string][2]uint16
	Default    [2]uint16
}

// FileRanges are the ranges of the file's subsystems and the gateway
// section's default.
func FileRanges(g *Config, file *target.Config) Ranges {
	r := Ranges{Subsystems: map[string][2]uint16{}, Default: [2]uint16{g.CNTLIDMin, g.CNTLIDMax}}
	for _, s := range file.Subsystems {
		if s.CNTLIDMin == 0 && s.CNTLIDMax == 0 {
			continue
		}
		// A loaded file's subsystem without a range holds the target's
		// default, every CNTLID, which overlaps every other member's:
		// with gateway.cntlid_min/max set, that range is the gateway's
		// (before, the seeding gateway's own subsystems kept 1-65519 and
		// the next gateway to join was degraded for the overlap).
		if r.Default != [2]uint16{} && s.CNTLIDMin == target.DefaultCNTLIDMin && s.CNTLIDMax == target.DefaultCNTLIDMax {
			continue
		}
		r.Subsystems[s.NQN] = [2]uint16{s.CNTLIDMin, s.CNTLIDMax}
	}
	return r
}

// MergeGroup is the configuration a gateway serves: local's own parts
// (ports, transport, tuning, limits, metrics) with d's subsystems and
// hosts, each subsystem with this gateway's CNTLID range (r), and every
// port serving every subsystem of the group.
func MergeGroup(local *target.Config, d GroupDoc, r Ranges) *target.Config {
	c := local.Clone()
	g := d.clone()
	c.Subsystems, c.Hosts = g.Subsystems, g.Hosts
	nqns := make([]string, 0, len(c.Subsystems))
	for i := range c.Subsystems {
		s := &c.Subsystems[i]
		rg, ok := r.Subsystems[s.NQN]
		if !ok {
			rg = r.Default
		}
		s.CNTLIDMin, s.CNTLIDMax = rg[0], rg[1]
		nqns = append(nqns, s.NQN)
	}
	for i := range c.Ports {
		c.Ports[i].Subsystems = slices.Clone(nqns)
	}
	return c
}

func (d GroupDoc) clone() GroupDoc {
	t := (&target.Config{Subsystems: d.Subsystems, Hosts: d.Hosts}).Clone()
	return GroupDoc{Subsystems: t.Subsystems, Hosts: t.Hosts, ANAGroups: slices.Clone(d.ANAGroups), Drained: slices.Clone(d.Drained), Pinned: slices.Clone(d.Pinned)}
}

// ErrGroupInvalid is in the error of a group configuration refused as a
// whole (errors.Is): nothing of it is stored.
var ErrGroupInvalid = errors.New("the group configuration is refused as a whole, nothing stored")

// ValidateGroup checks d, merged into the configuration merged (as
// MergeGroup makes it), for the whole group: what target validation
// checks (NQNs and NSIDs unique, one image per namespace, ...), every
// namespace in one of the ANA groups, each ANA group listed once with a
// preferred owner, hosts' keys as file: references only (a literal
// secret in the cluster would be readable by every client with the
// pool's caps), and each subsystem's CNTLID ranges disjoint between the
// members. Each problem is a line.
func ValidateGroup(d GroupDoc, merged *target.Config, members []gateway.Member) error {
	var p []string
	c := merged.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		p = append(p, err.Error())
	}
	groups := map[uint32]bool{}
	for i, a := range d.ANAGroups {
		switch {
		case a.ID < 1 || a.ID > target.MaxANAGroup:
			p = append(p, fmt.Sprintf("ana_groups[%d].id: %d is out of range (1..%d)", i, a.ID, target.MaxANAGroup))
		case groups[a.ID]:
			p = append(p, fmt.Sprintf("ana_groups[%d].id: ANA group %d is listed twice", i, a.ID))
		}
		groups[a.ID] = true
		if a.Preferred == "" {
			p = append(p, fmt.Sprintf("ana_groups[%d].preferred: required", i))
		}
	}
	nqns := []string{}
	for i, s := range d.Subsystems {
		nqns = append(nqns, s.NQN)
		for j, n := range s.Namespaces {
			if !groups[n.ANAGroup] {
				p = append(p, fmt.Sprintf("subsystems[%d].namespaces[%d].ana_group: ANA group %d is not one of the group's (every gateway would serve it optimized at once)", i, j, n.ANAGroup))
			}
		}
	}
	for i, h := range d.Hosts {
		if configfile.IsLiteralSecret(h.DHCHAPKey) {
			p = append(p, fmt.Sprintf("hosts[%d].dhchap_key: a literal secret; in the group's configuration a key is a reference (file:/path, the same on every gateway)", i))
		}
		if configfile.IsLiteralSecret(h.DHCHAPCtrlKey) {
			p = append(p, fmt.Sprintf("hosts[%d].dhchap_ctrl_key: a literal secret; in the group's configuration a key is a reference (file:/path, the same on every gateway)", i))
		}
	}
	p = append(p, gateway.CNTLIDConflicts(nqns, members)...)
	if len(p) > 0 {
		return fmt.Errorf("gateway: %w:\n%s", ErrGroupInvalid, strings.Join(p, "\n"))
	}
	return nil
}

// radosCanonical is the agreement text of a group whose configuration is
// in RADOS: what each member's file must still agree on (the lease) and
// the ANA groups of the stored configuration.
func radosCanonical(lease string, ana []GroupConfig) string {
	lines := []string{"lease " + lease}
	for _, a := range ana {
		lines = append(lines, fmt.Sprintf("ana_group %d preferred %s", a.ID, a.Preferred))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
