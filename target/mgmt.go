package target

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// This file holds the edits of the management API (nvmetd's control
// socket, nvmetctl): each changes a configuration in memory, and the daemon
// then applies the result exactly as a reload would (Config.Validate, then
// Target.Reload: plan, prepare, apply, with the same notices to hosts). The
// edits only check what the configuration cannot express (an ID that
// exists, an NQN that does not); every other check is Validate's, so that
// an edit and a reload refuse the same things.

// EditKind classifies an EditError, for the status of the answer.
type EditKind uint8

// Kinds of EditError.
const (
	// EditInvalid: a parameter is wrong (HTTP 400).
	EditInvalid EditKind = iota
	// EditNotFound: the port, subsystem, namespace or host does not exist
	// (HTTP 404).
	EditNotFound
	// EditExists: what is to be added exists already (HTTP 409).
	EditExists
)

// EditError is an edit the configuration refuses. Field names the
// parameter of the request ("nsid", "backend.size", "id").
type EditError struct {
	Kind   EditKind
	Field  string
	Reason string
}

// Error returns "field: reason".
func (e *EditError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func notFound(field, format string, a ...any) error {
	return &EditError{Kind: EditNotFound, Field: field, Reason: fmt.Sprintf(format, a...)}
}

func exists(field, format string, a ...any) error {
	return &EditError{Kind: EditExists, Field: field, Reason: fmt.Sprintf(format, a...)}
}

func invalid(field, format string, a ...any) error {
	return &EditError{Kind: EditInvalid, Field: field, Reason: fmt.Sprintf(format, a...)}
}

// keyed is one of the configuration's lists that the edits add to and
// remove from by key: ports by ID, subsystems and known hosts by NQN, a
// subsystem's namespaces by NSID.
type keyed[K comparable, T any] struct {
	items *[]T
	key   func(*T) *K
	// field is the key's name in a request.
	field string
	// next gives a zero key the smallest one not taken (nil: the key is
	// required).
	next func(taken func(K) bool) K
	// exists and missing are the refusals of a key in use and of an
	// unknown key.
	exists, missing func(K) string
}

// index returns the index of key k in the list, or -1.
func (l keyed[K, T]) index(k K) int {
	for i := range *l.items {
		if *l.key(&(*l.items)[i]) == k {
			return i
		}
	}
	return -1
}

// add appends e and returns its index.
func (l keyed[K, T]) add(e T) (int, error) {
	var zero K
	switch k := l.key(&e); {
	case *k == zero && l.next == nil:
		return -1, invalid(l.field, "required")
	case *k == zero:
		*k = l.next(func(x K) bool { return l.index(x) >= 0 })
	case l.index(*k) >= 0:
		return -1, exists(l.field, "%s", l.exists(*k))
	}
	*l.items = append(*l.items, e)
	return len(*l.items) - 1, nil
}

// remove deletes the entry of key k.
func (l keyed[K, T]) remove(k K) error {
	i := l.index(k)
	if i < 0 {
		return notFound(l.field, "%s", l.missing(k))
	}
	*l.items = slices.Delete(*l.items, i, i+1)
	return nil
}

// smallestFree returns a keyed.next that takes the smallest ID from 1 to
// limit not taken (0 when all are).
func smallestFree[K uint16 | uint32](limit K) func(taken func(K) bool) K {
	return func(taken func(K) bool) K {
		for id := K(1); id != 0 && id <= limit; id++ {
			if !taken(id) {
				return id
			}
		}
		return 0
	}
}

func (c *Config) ports() keyed[uint16, PortConfig] {
	return keyed[uint16, PortConfig]{items: &c.Ports, key: func(p *PortConfig) *uint16 { return &p.ID }, field: "id",
		next:    smallestFree(uint16(math.MaxUint16)),
		exists:  func(id uint16) string { return fmt.Sprintf("port %d exists", id) },
		missing: func(id uint16) string { return fmt.Sprintf("no port %d", id) }}
}

func (c *Config) subsystems() keyed[string, SubsystemConfig] {
	return keyed[string, SubsystemConfig]{items: &c.Subsystems, key: func(s *SubsystemConfig) *string { return &s.NQN }, field: "nqn",
		exists:  func(nqn string) string { return fmt.Sprintf("subsystem %s exists", nqn) },
		missing: func(nqn string) string { return fmt.Sprintf("no subsystem %s", nqn) }}
}

func (s *SubsystemConfig) namespaces() keyed[uint32, NamespaceConfig] {
	return keyed[uint32, NamespaceConfig]{items: &s.Namespaces, key: func(n *NamespaceConfig) *uint32 { return &n.NSID }, field: "nsid",
		next:    smallestFree(uint32(MaxNSID)),
		exists:  func(nsid uint32) string { return fmt.Sprintf("subsystem %s has a namespace %d", s.NQN, nsid) },
		missing: func(nsid uint32) string { return fmt.Sprintf("subsystem %s has no namespace %d", s.NQN, nsid) }}
}

func (c *Config) hosts() keyed[string, HostConfig] {
	return keyed[string, HostConfig]{items: &c.Hosts, key: func(h *HostConfig) *string { return &h.NQN }, field: "nqn",
		exists:  func(nqn string) string { return fmt.Sprintf("host %s exists", nqn) },
		missing: func(nqn string) string { return fmt.Sprintf("no host %s", nqn) }}
}

// PortIndex returns the index of port id in c.Ports, or -1.
func (c *Config) PortIndex(id uint16) int { return c.ports().index(id) }

// SubsystemIndex returns the index of subsystem nqn in c.Subsystems, or -1.
func (c *Config) SubsystemIndex(nqn string) int { return c.subsystems().index(nqn) }

// NamespaceIndex returns the index of namespace nsid in the subsystem's
// Namespaces, or -1.
func (s *SubsystemConfig) NamespaceIndex(nsid uint32) int { return s.namespaces().index(nsid) }

// HostIndex returns the index of known host nqn in c.Hosts, or -1.
func (c *Config) HostIndex(nqn string) int { return c.hosts().index(nqn) }

// AddPort adds p. An ID of 0 takes the smallest unused one. It returns the
// configuration path of the new port ("ports[2]").
func (c *Config) AddPort(p PortConfig) (string, error) {
	i, err := c.ports().add(p)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("ports[%d]", i), nil
}

// RemovePort removes port id (its connections close when applied).
func (c *Config) RemovePort(id uint16) error { return c.ports().remove(id) }

// findPort returns port id or a not-found error.
func (c *Config) findPort(id uint16) (*PortConfig, int, error) {
	i := c.PortIndex(id)
	if i < 0 {
		return nil, -1, notFound("port_id", "no port %d", id)
	}
	return &c.Ports[i], i, nil
}

// LinkSubsystem makes port id serve subsystem nqn (nvmetcli's link of
// ports/ID/subsystems/NQN). Linking twice is no change.
func (c *Config) LinkSubsystem(id uint16, nqn string) (string, error) {
	p, i, err := c.findPort(id)
	if err != nil {
		return "", err
	}
	if c.SubsystemIndex(nqn) < 0 {
		return "", notFound("nqn", "no subsystem %s", nqn)
	}
	if !slices.Contains(p.Subsystems, nqn) {
		p.Subsystems = append(slices.Clone(p.Subsystems), nqn)
	}
	return fmt.Sprintf("ports[%d]", i), nil
}

// UnlinkSubsystem stops port id serving subsystem nqn; hosts connected to
// it through the port lose their controllers when applied.
func (c *Config) UnlinkSubsystem(id uint16, nqn string) error {
	p, _, err := c.findPort(id)
	if err != nil {
		return err
	}
	j := slices.Index(p.Subsystems, nqn)
	if j < 0 {
		return notFound("nqn", "port %d does not serve %s", id, nqn)
	}
	p.Subsystems = slices.Delete(slices.Clone(p.Subsystems), j, j+1)
	return nil
}

// SetANAState sets the state of ANA group group as seen through port id
// (nvmetcli's ports/ID/ana_groups/GROUP ana_state); hosts connected
// through the port get an ANA change notice when applied. Setting
// "optimized" keeps an entry for the group, as nvmetcli does.
func (c *Config) SetANAState(id uint16, group uint32, state string) (string, error) {
	p, i, err := c.findPort(id)
	if err != nil {
		return "", err
	}
	if group < 1 || group > MaxANAGroup {
		return "", invalid("group", "%d is not an ANA group ID (1..%d)", group, MaxANAGroup)
	}
	if _, err := ParseANAState(state); err != nil {
		return "", invalid("state", "%v", err)
	}
	p.ANAGroups = slices.Clone(p.ANAGroups)
	j := slices.IndexFunc(p.ANAGroups, func(g ANAGroupConfig) bool { return g.ID == group })
	if j < 0 {
		p.ANAGroups = append(p.ANAGroups, ANAGroupConfig{ID: group, State: state})
		j = len(p.ANAGroups) - 1
	} else {
		p.ANAGroups[j].State = state
	}
	return fmt.Sprintf("ports[%d].ana_groups[%d]", i, j), nil
}

// AddSubsystem adds s.
func (c *Config) AddSubsystem(s SubsystemConfig) (string, error) {
	i, err := c.subsystems().add(s)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("subsystems[%d]", i), nil
}

// RemoveSubsystem removes subsystem nqn and its namespaces, and takes it
// off every port that served it.
func (c *Config) RemoveSubsystem(nqn string) error {
	if err := c.subsystems().remove(nqn); err != nil {
		return err
	}
	for k := range c.Ports {
		p := &c.Ports[k]
		if j := slices.Index(p.Subsystems, nqn); j >= 0 {
			p.Subsystems = slices.Delete(slices.Clone(p.Subsystems), j, j+1)
		}
	}
	return nil
}

// findSubsystem returns subsystem nqn or a not-found error.
func (c *Config) findSubsystem(nqn string) (*SubsystemConfig, int, error) {
	i := c.SubsystemIndex(nqn)
	if i < 0 {
		return nil, -1, notFound("nqn", "no subsystem %s", nqn)
	}
	return &c.Subsystems[i], i, nil
}

// AddNamespace adds n to subsystem nqn. An NSID of 0 takes the smallest
// unused one (as nvmetcli). It returns the configuration path of the new
// namespace and its NSID.
func (c *Config) AddNamespace(nqn string, n NamespaceConfig) (string, uint32, error) {
	s, i, err := c.findSubsystem(nqn)
	if err != nil {
		return "", 0, err
	}
	j, err := s.namespaces().add(n)
	if err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j), s.Namespaces[j].NSID, nil
}

// Namespace returns namespace nsid of subsystem nqn and its configuration
// path, or a not-found error.
func (c *Config) Namespace(nqn string, nsid uint32) (*NamespaceConfig, string, error) {
	s, i, err := c.findSubsystem(nqn)
	if err != nil {
		return nil, "", err
	}
	j := s.NamespaceIndex(nsid)
	if j < 0 {
		return nil, "", notFound("nsid", "%s", s.namespaces().missing(nsid))
	}
	return &s.Namespaces[j], fmt.Sprintf("subsystems[%d].namespaces[%d]", i, j), nil
}

// RemoveNamespace removes namespace nsid of subsystem nqn.
func (c *Config) RemoveNamespace(nqn string, nsid uint32) error {
	s, _, err := c.findSubsystem(nqn)
	if err != nil {
		return err
	}
	return s.namespaces().remove(nsid)
}

// ResizeNamespace sets the backend size of namespace nsid of subsystem nqn
// (a size string, "2GiB"). Applied, it is a reload's changed backend.size:
// the namespace is reopened on its storage (a file smaller than size is
// grown to it) and hosts get a Namespace Attribute Changed notice.
func (c *Config) ResizeNamespace(nqn string, nsid uint32, size string) (string, error) {
	n, path, err := c.Namespace(nqn, nsid)
	if err != nil {
		return "", err
	}
	if size == "" {
		return "", invalid("size", "required")
	}
	n.Backend.Size = size
	return path, nil
}

// AllowHost adds host to the allowed hosts of subsystem nqn (nvmetcli's
// allowed_hosts link); allowing twice is no change.
func (c *Config) AllowHost(nqn, host string) (string, error) {
	s, i, err := c.findSubsystem(nqn)
	if err != nil {
		return "", err
	}
	if host == "" {
		return "", invalid("host_nqn", "required")
	}
	if !slices.Contains(s.AllowedHosts, host) {
		s.AllowedHosts = append(slices.Clone(s.AllowedHosts), host)
	}
	return fmt.Sprintf("subsystems[%d]", i), nil
}

// DisallowHost removes host from the allowed hosts of subsystem nqn: its
// controllers are torn down when applied.
func (c *Config) DisallowHost(nqn, host string) error {
	s, _, err := c.findSubsystem(nqn)
	if err != nil {
		return err
	}
	j := slices.Index(s.AllowedHosts, host)
	if j < 0 {
		return notFound("host_nqn", "subsystem %s does not list host %s", nqn, host)
	}
	s.AllowedHosts = slices.Delete(slices.Clone(s.AllowedHosts), j, j+1)
	return nil
}

// AddHost adds a known host.
func (c *Config) AddHost(h HostConfig) (string, error) {
	i, err := c.hosts().add(h)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("hosts[%d]", i), nil
}

// RemoveHost removes a known host. Subsystems that allow it keep doing so
// (allowed_hosts may name any host NQN); DisallowHost takes it off them.
func (c *Config) RemoveHost(nqn string) error { return c.hosts().remove(nqn) }

// Clear removes every port, subsystem and known host (nvmetcli clear);
// transport, tuning and limits stay.
func (c *Config) Clear() {
	c.Ports, c.Subsystems, c.Hosts = nil, nil, nil
}

// ParsePortID parses a port ID of a request path.
func ParsePortID(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, invalid("port_id", "%q is not a port ID (1..65535)", s)
	}
	return uint16(n), nil
}

// ParseNSID parses an NSID of a request path.
func ParseNSID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n > MaxNSID {
		return 0, invalid("nsid", "%q is not an NSID (1..%d)", s, uint32(MaxNSID))
	}
	return uint32(n), nil
}

// AsEditError returns err's *EditError, if it has one.
func AsEditError(err error) (*EditError, bool) {
	var e *EditError
	ok := errors.As(err, &e)
	return e, ok
}
