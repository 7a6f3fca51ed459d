package target

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// This file compares two configurations for a reload (Diff) and
// describes the difference for logs.

// ConfigDiff is what changed between two configurations, for a reload.
// Ports are matched by ID, subsystems by NQN, namespaces by NSID and hosts
// by NQN; both sides are compared with defaults applied, so spelling out a
// default is not a change. Every list is sorted by that key.
type ConfigDiff struct {
	// PortsAdded and PortsRemoved are ports whose ID is only in the new
	// or only in the old configuration; PortsChanged are in both.
	PortsAdded   []PortConfig
	PortsRemoved []PortConfig
	PortsChanged []PortChange

	// SubsystemsAdded and SubsystemsRemoved are subsystems whose NQN is
	// only in the new or only in the old configuration; SubsystemsChanged
	// are in both, with different settings or namespaces.
	SubsystemsAdded   []SubsystemConfig
	SubsystemsRemoved []SubsystemConfig
	SubsystemsChanged []SubsystemChange

	// HostsAdded and HostsRemoved are known hosts (Config.Hosts) only in
	// the new or only in the old configuration.
	HostsAdded   []HostConfig
	HostsRemoved []HostConfig
	// HostsChanged are the NQNs of known hosts whose settings changed
	// (description, dhchap_*); HostFields has the changed keys of each.
	HostsChanged []string
	HostFields   map[string][]string

	// TransportChanged and TuningChanged name the settings that changed,
	// e.g. "transport.crc", "tuning.max_io_queues". They apply to new
	// connections and controllers; existing ones keep what they negotiated.
	TransportChanged []string
	TuningChanged    []string
	// LimitsChanged names the limits that changed; they apply at once.
	LimitsChanged []string
}

// PortChange is a port present in both configurations with different
// settings.
type PortChange struct {
	// Old and New are the port's two configurations, defaults applied.
	Old, New PortConfig
	// Fields are the changed keys: "address", "service_id", "transport",
	// "inline_data_size", "max_queue_size", "subsystems", "referrals".
	Fields []string
	// Relisten is set when the address, service ID or transport changed: the listener
	// must be replaced and its connections dropped.
	Relisten bool
	// SubsystemsAdded and SubsystemsRemoved are the NQNs that the port
	// starts or stops serving; hosts connected through this port to a
	// removed subsystem lose their controllers.
	SubsystemsAdded, SubsystemsRemoved []string
	// ReferralsAdded and ReferralsRemoved change the port's discovery log
	// (a changed referral is a removal and an addition).
	ReferralsAdded, ReferralsRemoved []ReferralConfig
}

// SubsystemChange is a subsystem present in both configurations with
// different settings or namespaces.
type SubsystemChange struct {
	// NQN names the subsystem.
	NQN string
	// Old and New are its two configurations, defaults applied.
	Old, New SubsystemConfig
	// Fields are the changed subsystem-level keys ("serial", "model",
	// "firmware_revision", "allow_any_host", "allowed_hosts",
	// "max_namespaces", "cntlid_min", "cntlid_max"); namespace changes are
	// below. A host sees a changed serial, model or firmware revision only
	// when it reconnects.
	Fields []string
	// HostsAllowed and HostsDisallowed are the host NQNs added to and
	// removed from allowed_hosts. When access shrinks (a host disallowed,
	// or allow_any_host turned off) the target disconnects the controllers
	// of hosts no longer allowed.
	HostsAllowed, HostsDisallowed []string
	// NamespacesAdded and NamespacesRemoved are namespaces whose NSID is
	// only in the new or only in the old configuration; NamespacesChanged
	// are in both with different settings.
	NamespacesAdded   []NamespaceConfig
	NamespacesRemoved []NamespaceConfig
	NamespacesChanged []NamespaceChange
}

// NamespaceChange is a namespace present in both configurations with
// different settings.
type NamespaceChange struct {
	// NSID names the namespace.
	NSID uint32
	// Old and New are its two configurations, defaults applied.
	Old, New NamespaceConfig
	// Fields are the changed keys, with backend keys as "backend.path",
	// "backend.size" and so on. A changed backend.kind or backend.path, or
	// an identifier, replaces the namespace (the host sees it removed and
	// added); a grown backend.size is a capacity change (Namespace Attribute
	// Changed notice).
	Fields []string
}

// Diff compares old and new (neither is modified) and returns what
// changed. Either may be nil, meaning an empty configuration.
func Diff(old, new *Config) *ConfigDiff {
	if old == nil {
		old = &Config{}
	}
	if new == nil {
		new = &Config{}
	}
	a, b := old.Clone(), new.Clone()
	a.ApplyDefaults()
	b.ApplyDefaults()
	d := &ConfigDiff{}

	// Ports, by ID.
	oldPorts := indexBy(a.Ports, func(c *PortConfig) uint16 { return c.ID })
	newPorts := indexBy(b.Ports, func(c *PortConfig) uint16 { return c.ID })
	for _, id := range sortedKeys(oldPorts) {
		o := oldPorts[id]
		n, ok := newPorts[id]
		if !ok {
			d.PortsRemoved = append(d.PortsRemoved, *o)
			continue
		}
		fields := changedFields("", reflect.ValueOf(*o), reflect.ValueOf(*n))
		if len(fields) == 0 {
			continue
		}
		pc := PortChange{Old: *o, New: *n, Fields: fields}
		pc.Relisten = o.Address != n.Address || o.ServiceID != n.ServiceID || o.Transport != n.Transport
		pc.SubsystemsAdded, pc.SubsystemsRemoved = stringSetDiff(o.Subsystems, n.Subsystems)
		pc.ReferralsAdded, pc.ReferralsRemoved = setDiff(o.Referrals, n.Referrals)
		// Lists are sets: a reordering alone is no change.
		if len(pc.SubsystemsAdded)+len(pc.SubsystemsRemoved) == 0 {
			pc.Fields = slices.DeleteFunc(pc.Fields, func(f string) bool { return f == "subsystems" })
		}
		if len(pc.ReferralsAdded)+len(pc.ReferralsRemoved) == 0 {
			pc.Fields = slices.DeleteFunc(pc.Fields, func(f string) bool { return f == "referrals" })
		}
		if len(pc.Fields) == 0 {
			continue
		}
		d.PortsChanged = append(d.PortsChanged, pc)
	}
	for _, id := range sortedKeys(newPorts) {
		if _, ok := oldPorts[id]; !ok {
			d.PortsAdded = append(d.PortsAdded, *newPorts[id])
		}
	}

	// Subsystems, by NQN.
	oldSubs := indexBy(a.Subsystems, func(c *SubsystemConfig) string { return c.NQN })
	newSubs := indexBy(b.Subsystems, func(c *SubsystemConfig) string { return c.NQN })
	for _, nqn := range sortedKeys(oldSubs) {
		o := oldSubs[nqn]
		n, ok := newSubs[nqn]
		if !ok {
			d.SubsystemsRemoved = append(d.SubsystemsRemoved, *o)
			continue
		}
		if sc, changed := diffSubsystem(o, n); changed {
			d.SubsystemsChanged = append(d.SubsystemsChanged, sc)
		}
	}
	for _, nqn := range sortedKeys(newSubs) {
		if _, ok := oldSubs[nqn]; !ok {
			d.SubsystemsAdded = append(d.SubsystemsAdded, *newSubs[nqn])
		}
	}

	// Known hosts, by NQN.
	oldHosts := indexBy(a.Hosts, func(c *HostConfig) string { return c.NQN })
	newHosts := indexBy(b.Hosts, func(c *HostConfig) string { return c.NQN })
	for _, nqn := range sortedKeys(oldHosts) {
		n, ok := newHosts[nqn]
		switch {
		case !ok:
			d.HostsRemoved = append(d.HostsRemoved, *oldHosts[nqn])
		case *n != *oldHosts[nqn]:
			d.HostsChanged = append(d.HostsChanged, nqn)
			if d.HostFields == nil {
				d.HostFields = map[string][]string{}
			}
			d.HostFields[nqn] = changedFields("", reflect.ValueOf(*oldHosts[nqn]), reflect.ValueOf(*n))
		}
	}
	for _, nqn := range sortedKeys(newHosts) {
		if _, ok := oldHosts[nqn]; !ok {
			d.HostsAdded = append(d.HostsAdded, *newHosts[nqn])
		}
	}

	d.TransportChanged = changedFields("transport.", reflect.ValueOf(a.Transport), reflect.ValueOf(b.Transport))
	d.TuningChanged = changedFields("tuning.", reflect.ValueOf(a.Tuning), reflect.ValueOf(b.Tuning))
	d.LimitsChanged = changedFields("limits.", reflect.ValueOf(a.Limits), reflect.ValueOf(b.Limits))
	return d
}

// diffSubsystem compares two subsystems with the same NQN.
func diffSubsystem(o, n *SubsystemConfig) (SubsystemChange, bool) {
	sc := SubsystemChange{NQN: o.NQN, Old: *o, New: *n}
	for _, f := range changedFields("", reflect.ValueOf(*o), reflect.ValueOf(*n)) {
		if f != "namespaces" {
			sc.Fields = append(sc.Fields, f)
		}
	}
	sc.HostsAllowed, sc.HostsDisallowed = stringSetDiff(o.AllowedHosts, n.AllowedHosts)
	if len(sc.HostsAllowed)+len(sc.HostsDisallowed) == 0 {
		// A set: a reordering alone is no change.
		sc.Fields = slices.DeleteFunc(sc.Fields, func(f string) bool { return f == "allowed_hosts" })
	}
	oldNS := indexBy(o.Namespaces, func(c *NamespaceConfig) uint32 { return c.NSID })
	newNS := indexBy(n.Namespaces, func(c *NamespaceConfig) uint32 { return c.NSID })
	for _, id := range sortedKeys(oldNS) {
		on := oldNS[id]
		nn, ok := newNS[id]
		if !ok {
			sc.NamespacesRemoved = append(sc.NamespacesRemoved, *on)
			continue
		}
		fields := changedFields("", reflect.ValueOf(*on), reflect.ValueOf(*nn))
		if a, r := stringSetDiff(on.Hosts, nn.Hosts); len(a)+len(r) == 0 {
			// A set: a reordering, or [] for none, is no change.
			fields = slices.DeleteFunc(fields, func(f string) bool { return f == "hosts" })
		}
		if len(fields) > 0 {
			sc.NamespacesChanged = append(sc.NamespacesChanged, NamespaceChange{NSID: id, Old: *on, New: *nn, Fields: fields})
		}
	}
	for _, id := range sortedKeys(newNS) {
		if _, ok := oldNS[id]; !ok {
			sc.NamespacesAdded = append(sc.NamespacesAdded, *newNS[id])
		}
	}
	changed := len(sc.Fields) > 0 || len(sc.NamespacesAdded) > 0 || len(sc.NamespacesRemoved) > 0 || len(sc.NamespacesChanged) > 0
	return sc, changed
}

// changedFields compares two structs of the same type field by field and
// returns the mapstructure keys (prefixed) of those that differ. Nested
// structs are compared per field ("backend.size"); slices, maps and
// pointers as a whole (pointers by the value they point to).
func changedFields(prefix string, a, b reflect.Value) []string {
	var out []string
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fa, fb := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, changedFields(prefix+name+".", fa, fb)...)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			out = append(out, prefix+name)
		}
	}
	return out
}

// stringSetDiff returns the strings of b not in a, and of a not in b, sorted.
func stringSetDiff(a, b []string) (added, removed []string) {
	added, removed = setDiff(a, b)
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}

// setDiff returns the elements of b not in a, and of a not in b, in order.
func setDiff[T comparable](a, b []T) (added, removed []T) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}

// indexBy maps each element of list (by pointer) under its key.
func indexBy[K comparable, T any](list []T, key func(*T) K) map[K]*T {
	m := make(map[K]*T, len(list))
	for i := range list {
		m[key(&list[i])] = &list[i]
	}
	return m
}

// sortedKeys returns the keys of m in ascending order.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Empty reports whether nothing changed.
func (d *ConfigDiff) Empty() bool {
	return len(d.Summary()) == 0
}

// Summary describes the changes, one short line each, for logs.
func (d *ConfigDiff) Summary() []string {
	var s []string
	for _, p := range d.PortsAdded {
		s = append(s, fmt.Sprintf("port %d added (%s)", p.ID, p.ListenAddress()))
	}
	for _, p := range d.PortsRemoved {
		s = append(s, fmt.Sprintf("port %d removed (%s)", p.ID, p.ListenAddress()))
	}
	for _, p := range d.PortsChanged {
		line := fmt.Sprintf("port %d changed: %s", p.New.ID, strings.Join(p.Fields, ", "))
		if p.Relisten {
			line += fmt.Sprintf(" (listen %s -> %s)", p.Old.ListenAddress(), p.New.ListenAddress())
		}
		s = append(s, line)
	}
	for _, x := range d.SubsystemsAdded {
		s = append(s, fmt.Sprintf("subsystem %s added (%d namespaces)", x.NQN, len(x.Namespaces)))
	}
	for _, x := range d.SubsystemsRemoved {
		s = append(s, fmt.Sprintf("subsystem %s removed", x.NQN))
	}
	for _, x := range d.SubsystemsChanged {
		if len(x.Fields) > 0 {
			s = append(s, fmt.Sprintf("subsystem %s changed: %s", x.NQN, strings.Join(x.Fields, ", ")))
		}
		for _, h := range x.HostsAllowed {
			s = append(s, fmt.Sprintf("subsystem %s allows host %s", x.NQN, h))
		}
		for _, h := range x.HostsDisallowed {
			s = append(s, fmt.Sprintf("subsystem %s no longer allows host %s", x.NQN, h))
		}
		for _, n := range x.NamespacesAdded {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d added (%s %s)", x.NQN, n.NSID, n.Backend.Kind, n.Backend.Path))
		}
		for _, n := range x.NamespacesRemoved {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d removed", x.NQN, n.NSID))
		}
		for _, n := range x.NamespacesChanged {
			s = append(s, fmt.Sprintf("subsystem %s namespace %d changed: %s", x.NQN, n.NSID, strings.Join(n.Fields, ", ")))
		}
	}
	for _, h := range d.HostsAdded {
		s = append(s, fmt.Sprintf("host %s added", h.NQN))
	}
	for _, h := range d.HostsRemoved {
		s = append(s, fmt.Sprintf("host %s removed", h.NQN))
	}
	for _, h := range d.HostsChanged {
		s = append(s, fmt.Sprintf("host %s changed: %s", h, strings.Join(d.HostFields[h], ", ")))
	}
	if len(d.TransportChanged) > 0 {
		s = append(s, "transport changed: "+strings.Join(d.TransportChanged, ", "))
	}
	if len(d.LimitsChanged) > 0 {
		s = append(s, "limits changed: "+strings.Join(d.LimitsChanged, ", "))
	}
	if len(d.TuningChanged) > 0 {
		s = append(s, "tuning changed: "+strings.Join(d.TuningChanged, ", "))
	}
	return s
}

// String joins Summary with "; ", or returns "no changes".
func (d *ConfigDiff) String() string {
	s := d.Summary()
	if len(s) == 0 {
		return "no changes"
	}
	return strings.Join(s, "; ")
}
