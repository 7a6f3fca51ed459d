package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The members' ports (docs/rbd.md "Discovery across the group"): each
// gateway records the ports hosts reach it on, and the subsystems each
// serves, in the group's config object (omap key ports.<name>) when it
// starts and when its ports change, and removes the entry on a clean
// stop. Every gateway's discovery controller lists the other members'
// ports, so that a host discovering through any gateway learns every
// path. A separate key, not a line of member.<name>: gateways that read
// member entries refuse lines they do not know.

// PortsKeyPrefix prefixes the omap keys of the members' ports on the
// config object.
const PortsKeyPrefix = "ports."

// maxPorts bounds the ports read from one member's entry.
const maxPorts = 256

// Port is one port of a member as hosts reach it.
type Port struct {
	// ID is the port ID (PORTID in discovery log entries).
	ID uint16
	// Transport is "rdma" or "tcp".
	Transport string
	// Address is the address hosts connect to (the port's advertised
	// address): an IP literal, never a wildcard.
	Address string
	// ServiceID is the TCP port (TRSVCID).
	ServiceID int
	// Subsystems are the NQNs the port serves.
	Subsystems []string
}

// line is p as one line of a ports entry.
func (p Port) line() string {
	subs := slices.Clone(p.Subsystems)
	slices.Sort(subs)
	subs = slices.Compact(subs)
	s := "-"
	if len(subs) > 0 {
		s = strings.Join(subs, ",")
	}
	return fmt.Sprintf("port %d %s %s %d %s", p.ID, p.Transport, p.Address, p.ServiceID, s)
}

// EncodePorts is a member's ports entry: one port a line, sorted.
func EncodePorts(ports []Port) string {
	lines := make([]string, 0, len(ports))
	for _, p := range ports {
		lines = append(lines, p.line())
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n") + "\n"
}

// ParsePorts reads an entry that EncodePorts wrote (name is the member's,
// for the errors). An entry with a line that does not parse is refused
// whole: a path that cannot be read is not listed half-right.
func ParsePorts(name, entry string) ([]Port, error) {
	var out []Port
	for _, l := range strings.Split(entry, "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "port" {
			return nil, fmt.Errorf("gateway: ports of member %s: line %q is not \"port ID TRANSPORT ADDRESS SERVICE_ID NQN,...\"", name, l)
		}
		id, err := strconv.ParseUint(f[1], 10, 16)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("gateway: ports of member %s: line %q: port ID %q", name, l, f[1])
		}
		if f[2] != "rdma" && f[2] != "tcp" {
			return nil, fmt.Errorf("gateway: ports of member %s: line %q: transport %q is neither rdma nor tcp", name, l, f[2])
		}
		a, err := netip.ParseAddr(f[3])
		if err != nil || a.IsUnspecified() || a.Zone() != "" {
			return nil, fmt.Errorf("gateway: ports of member %s: line %q: address %q is not one hosts can connect to", name, l, f[3])
		}
		svc, err := strconv.Atoi(f[4])
		if err != nil || svc < 1 || svc > 65535 {
			return nil, fmt.Errorf("gateway: ports of member %s: line %q: service ID %q", name, l, f[4])
		}
		p := Port{ID: uint16(id), Transport: f[2], Address: a.String(), ServiceID: svc}
		if f[5] != "-" {
			p.Subsystems = strings.Split(f[5], ",")
		}
		out = append(out, p)
		if len(out) > maxPorts {
			return nil, fmt.Errorf("gateway: ports of member %s: more than %d ports", name, maxPorts)
		}
	}
	return out, nil
}
