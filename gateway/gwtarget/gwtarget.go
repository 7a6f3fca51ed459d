// Package gwtarget is how a gateway group member drives its nvmetd
// target: the gateway: section of nvmetd's configuration (Config), the
// ANA states of the gateway's groups overlaid on every configuration the
// target serves (Gateway.Overlay), and the applier the gateway machine
// (package gateway) acts through: SetANA reloads the target with a
// group optimized or inaccessible, Readiness and BackendHealth read the
// target's status, Flush waits for a group's commands in flight, Addrs
// and Reopen are the group's RADOS clients, ServeUntil its serving
// deadline. It sits beside package gateway, which knows no target, and
// is wired by the daemon (target/daemon).
package gwtarget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/target"
)

// Config is the gateway: section: this nvmetd is one gateway of a
// group that serves the same subsystems and RBD namespaces, each ANA group
// owned by one gateway at a time (package gateway, docs/rbd.md "Gateway
// group"). Without the section nvmetd is a stand-alone target.
type Config struct {
	// Name is this gateway's name, unique in the group.
	Name string `mapstructure:"name"`
	// Group names the gateway group (its RADOS objects); default "default".
	Group string `mapstructure:"group"`
	// Cluster is where ownership is kept.
	Cluster ClusterConfig `mapstructure:"cluster"`
	// Lease is the ownership lock's duration (default 10s).
	Lease time.Duration `mapstructure:"lease"`
	// RenewInterval is how often the owner renews (default lease/4).
	RenewInterval time.Duration `mapstructure:"renew_interval"`
	// StepDownMargin: an owner that could not renew goes inaccessible this
	// long before its lease can end on the cluster (default lease/4).
	StepDownMargin time.Duration `mapstructure:"step_down_margin"`
	// FailbackDelay is how long a preferred owner is up (or, after it
	// lost a group, how long since) before it asks for its groups back,
	// doubled for each failback strike of the group (default 30s; see
	// gateway/failback.go and docs/rbd.md).
	FailbackDelay time.Duration `mapstructure:"failback_delay"`
	// FailbackMaxDelay caps the doubled failback delay (default 1h).
	FailbackMaxDelay time.Duration `mapstructure:"failback_max_delay"`
	// FailbackStable is how long the preferred owner serves a group
	// before its failback strikes are cleared (default 60s).
	FailbackStable time.Duration `mapstructure:"failback_stable"`
	// BackendWindow is how long the owner's I/O of a group may fail with
	// path errors, or stand still in the backend, with none completing,
	// before it steps the group down (default: the lease; see
	// gateway/backend.go and docs/rbd.md).
	BackendWindow time.Duration `mapstructure:"backend_window"`
	// BackendBackoff is how long a group stepped down for its backends is
	// not taken again here after its release, doubled by each such
	// step-down in a row (default: two leases).
	BackendBackoff time.Duration `mapstructure:"backend_backoff"`
	// BackendMaxBackoff caps the doubled backoff (default: 32 ×
	// backend_backoff).
	BackendMaxBackoff time.Duration `mapstructure:"backend_max_backoff"`
	// ANAGroups are the groups and their preferred owners.
	ANAGroups []GroupConfig `mapstructure:"ana_groups"`
	// BlocklistExpire is how long a fence's blocklist entries last
	// (default 10 years, gateway.DefaultBlocklistExpire; at most
	// gateway.MaxBlocklistExpire).
	BlocklistExpire time.Duration `mapstructure:"blocklist_expire"`
	// GroupConfig says where the group's configuration (subsystems,
	// namespaces, hosts, ANA groups) is held: "rados" (the default: the
	// group's config object, versioned, changed through any gateway's
	// management API; the file's subsystems and hosts only seed version
	// 1) or "file" (each gateway's file, compared). See groupconfig.go
	// and docs/rbd.md.
	GroupConfig string `mapstructure:"group_config"`
	// Rebalance says whether the group spreads its ANA groups' preferred
	// owners evenly over its live, undrained members by itself when a
	// member joins or leaves: "auto" (the default) or "off" (moves only
	// through nvmetctl group move). Only with group_config: rados. See
	// rebalance.go and docs/rbd.md "Rebalancing".
	Rebalance string `mapstructure:"rebalance"`
	// CNTLIDMin and CNTLIDMax are this gateway's CNTLID range on the
	// subsystems its file does not list (those added to the group's
	// configuration later); disjoint from every other gateway's.
	CNTLIDMin uint16 `mapstructure:"cntlid_min"`
	CNTLIDMax uint16 `mapstructure:"cntlid_max"`
	// Advertise gives the address hosts must use for a port of this
	// gateway where it is not the listen address: the other gateways'
	// discovery logs list this gateway's ports (docs/rbd.md "Discovery
	// across the group"), and a wildcard (0.0.0.0, ::) or an address
	// only reachable inside this gateway's network namespace is no
	// address a host can connect to. Required for a wildcard port.
	Advertise []AdvertiseConfig `mapstructure:"advertise"`
}

// AdvertiseConfig is one of gateway.advertise: the address hosts connect
// to for port PortID of this gateway.
type AdvertiseConfig struct {
	PortID  uint16 `mapstructure:"port_id"`
	Address string `mapstructure:"address"`
}

// ClusterConfig is gateway.cluster: the RADOS client of the
// group's objects.
type ClusterConfig struct {
	CephConf       string `mapstructure:"ceph_conf"`
	ClientID       string `mapstructure:"client_id"`
	Keyring        string `mapstructure:"keyring"`
	Pool           string `mapstructure:"pool"`
	RADOSNamespace string `mapstructure:"rados_namespace"`
}

// GroupConfig is one of gateway.ana_groups.
type GroupConfig struct {
	ID        uint32 `mapstructure:"id"`
	Preferred string `mapstructure:"preferred"`
}

// Defaults of the gateway section.
const (
	defaultGatewayLease    = 10 * time.Second
	defaultGatewayFailback = 30 * time.Second
)

// ApplyDefaults fills in what is not set.
func (g *Config) ApplyDefaults() {
	if g.Group == "" {
		g.Group = "default"
	}
	if g.Lease == 0 {
		g.Lease = defaultGatewayLease
	}
	if g.RenewInterval == 0 {
		g.RenewInterval = g.Lease / 4
	}
	if g.StepDownMargin == 0 {
		g.StepDownMargin = g.Lease / 4
	}
	if g.FailbackDelay == 0 {
		g.FailbackDelay = defaultGatewayFailback
	}
	if g.FailbackMaxDelay == 0 {
		g.FailbackMaxDelay = gateway.DefaultFailbackMaxDelay
	}
	if g.FailbackStable == 0 {
		g.FailbackStable = gateway.DefaultFailbackStable
	}
	if g.BlocklistExpire == 0 {
		g.BlocklistExpire = gateway.DefaultBlocklistExpire
	}
	if g.BackendWindow == 0 {
		g.BackendWindow = g.Lease
	}
	if g.BackendBackoff == 0 {
		g.BackendBackoff = 2 * g.Lease
	}
	if g.BackendMaxBackoff == 0 {
		g.BackendMaxBackoff = 32 * g.BackendBackoff
	}
	if g.GroupConfig == "" {
		g.GroupConfig = GroupConfigRADOS
	}
	if g.Rebalance == "" {
		g.Rebalance = RebalanceAuto
	}
	if g.Cluster.CephConf == "" {
		g.Cluster.CephConf = backend.DefaultCephConf
	}
	if g.Cluster.ClientID == "" {
		g.Cluster.ClientID = backend.DefaultCephClientID
	}
}

// validate checks the section against the target's configuration; each
// problem names its key.
func (g *Config) Validate(cfg *target.Config) error {
	var p []string
	add := func(key, format string, args ...any) { p = append(p, "gateway."+key+": "+fmt.Sprintf(format, args...)) }
	if g.Name == "" {
		add("name", "required: this gateway's name in the group")
	}
	if strings.ContainsAny(g.Group, " /\n") {
		add("group", "%q: no spaces or slashes (it names RADOS objects)", g.Group)
	}
	if g.Cluster.Pool == "" {
		add("cluster.pool", "required: the pool of the group's objects")
	}
	if g.Lease < time.Second || g.Lease > time.Hour {
		add("lease", "%s is out of range (1s..1h)", g.Lease)
	}
	if g.StepDownMargin <= 0 || g.StepDownMargin >= g.Lease {
		add("step_down_margin", "%s must be positive and below the lease (%s)", g.StepDownMargin, g.Lease)
	} else if g.RenewInterval <= 0 || g.RenewInterval >= g.Lease-g.StepDownMargin {
		add("renew_interval", "%s must be positive and below lease - step_down_margin (%s)", g.RenewInterval, g.Lease-g.StepDownMargin)
	}
	if g.FailbackDelay < 0 {
		add("failback_delay", "%s is negative", g.FailbackDelay)
	}
	if g.FailbackMaxDelay < g.FailbackDelay || g.FailbackMaxDelay > 24*time.Hour {
		add("failback_max_delay", "%s is out of range (failback_delay %s..24h)", g.FailbackMaxDelay, g.FailbackDelay)
	}
	if g.FailbackStable < 0 || g.FailbackStable > 24*time.Hour {
		add("failback_stable", "%s is out of range (0..24h)", g.FailbackStable)
	}
	// The window must span several samples (the runner samples the
	// target every renew_interval/4, at most 250 ms) and not outlast
	// what a host waits for a path.
	if g.BackendWindow < g.RenewInterval || g.BackendWindow > 10*time.Minute {
		add("backend_window", "%s is out of range (renew_interval %s..10m)", g.BackendWindow, g.RenewInterval)
	}
	// At least a lease: a survivor takes the released group meanwhile.
	if g.BackendBackoff < g.Lease || g.BackendBackoff > 24*time.Hour {
		add("backend_backoff", "%s is out of range (lease %s..24h)", g.BackendBackoff, g.Lease)
	}
	if g.BackendMaxBackoff < g.BackendBackoff || g.BackendMaxBackoff > 7*24*time.Hour {
		add("backend_max_backoff", "%s is out of range (backend_backoff %s..168h)", g.BackendMaxBackoff, g.BackendBackoff)
	}
	// An entry that lapses lets a fenced gateway that was frozen longer
	// write again: at least a day.
	if g.BlocklistExpire < 24*time.Hour || g.BlocklistExpire > gateway.MaxBlocklistExpire {
		add("blocklist_expire", "%s is out of range (24h..%s)", g.BlocklistExpire, gateway.MaxBlocklistExpire)
	}
	if g.GroupConfig != GroupConfigFile && g.GroupConfig != GroupConfigRADOS {
		add("group_config", "%q: file or rados", g.GroupConfig)
	}
	if g.Rebalance != RebalanceAuto && g.Rebalance != RebalanceOff {
		add("rebalance", "%q: auto or off", g.Rebalance)
	}
	switch {
	case g.CNTLIDMin == 0 && g.CNTLIDMax == 0:
	case g.CNTLIDMin < nvmeof.CNTLIDMin || g.CNTLIDMax > nvmeof.CNTLIDMax || g.CNTLIDMin > g.CNTLIDMax:
		add("cntlid_min", "%d..%d is not a range within %d..%d", g.CNTLIDMin, g.CNTLIDMax, nvmeof.CNTLIDMin, nvmeof.CNTLIDMax)
	}
	if len(g.ANAGroups) == 0 {
		add("ana_groups", "at least one ANA group (id, preferred) is required")
	}
	seen := map[uint32]bool{}
	for i, a := range g.ANAGroups {
		key := fmt.Sprintf("ana_groups[%d]", i)
		switch {
		case a.ID < 1 || a.ID > target.MaxANAGroup:
			add(key+".id", "%d is out of range (1..%d)", a.ID, target.MaxANAGroup)
		case seen[a.ID]:
			add(key+".id", "ANA group %d is listed twice", a.ID)
		}
		seen[a.ID] = true
		if a.Preferred == "" {
			add(key+".preferred", "required: the gateway that owns the group when it is up")
		}
	}
	// A namespace outside every gateway group would be served optimized
	// by every gateway at once.
	for _, s := range cfg.Subsystems {
		for _, n := range s.Namespaces {
			if !seen[n.ANAGroup] {
				add("ana_groups", "subsystem %s namespace %d is in ANA group %d, which no gateway group entry lists", s.NQN, n.NSID, n.ANAGroup)
			}
		}
	}
	// The other gateways list this one's ports in their discovery logs:
	// each needs an address a host can connect to.
	adv := map[uint16]bool{}
	for i, a := range g.Advertise {
		key := fmt.Sprintf("advertise[%d]", i)
		j := slices.IndexFunc(cfg.Ports, func(pc target.PortConfig) bool { return pc.ID == a.PortID })
		ip, err := netip.ParseAddr(a.Address)
		switch {
		case j < 0:
			add(key+".port_id", "no port has ID %d", a.PortID)
		case adv[a.PortID]:
			add(key+".port_id", "port %d is listed twice", a.PortID)
		case err != nil || ip.IsUnspecified() || ip.Zone() != "":
			add(key+".address", "%q is not an address a host can connect to (an IPv4 or IPv6 literal, not a wildcard, no zone)", a.Address)
		case (ip.Is4() || ip.Is4In6()) != (cfg.Ports[j].AdrFam() == nvmeof.AdrFamIPv4):
			add(key+".address", "%s is not of the address family of port %d (%s)", a.Address, a.PortID, cfg.Ports[j].Address)
		}
		adv[a.PortID] = true
	}
	for _, pc := range cfg.Ports {
		if pc.IsWildcard() && !adv[pc.ID] {
			add("advertise", "port %d listens on %s, which the other gateways of the group cannot list in their discovery logs: "+
				"give the address hosts connect to (gateway.advertise: [{port_id: %d, address: ...}]) or listen on that address",
				pc.ID, pc.Address, pc.ID)
		}
	}
	if len(p) > 0 {
		return errors.New(strings.Join(p, "\n"))
	}
	return nil
}

// advertised is this gateway's ports as hosts reach them (gateway.Port):
// each port's advertised address, else its listen address; a wildcard
// port without one (refused by Validate) is left out.
func (g *Config) advertised(cfg *target.Config) []gateway.Port {
	var out []gateway.Port
	for _, pc := range cfg.Ports {
		addr := pc.Address
		if i := slices.IndexFunc(g.Advertise, func(a AdvertiseConfig) bool { return a.PortID == pc.ID }); i >= 0 {
			addr = g.Advertise[i].Address
		} else if pc.IsWildcard() {
			continue
		}
		if pc.ServiceID <= 0 {
			continue // an ephemeral port: none to advertise
		}
		if a, err := netip.ParseAddr(addr); err == nil {
			addr = a.Unmap().String()
		}
		transport := pc.Transport
		if transport == "" {
			transport = target.TransportRDMA
		}
		out = append(out, gateway.Port{ID: pc.ID, Transport: transport, Address: addr, ServiceID: pc.ServiceID,
			Subsystems: slices.Clone(pc.Subsystems)})
	}
	return out
}

// machineConfig is the gateway.Config of the section.
func (g *Config) machineConfig(session string) gateway.Config {
	groups := map[uint32]string{}
	for _, a := range g.ANAGroups {
		groups[a.ID] = a.Preferred
	}
	return gateway.Config{Name: g.Name, Session: session, Lease: g.Lease, RenewInterval: g.RenewInterval,
		Margin: g.StepDownMargin, FailbackDelay: g.FailbackDelay, FailbackMaxDelay: g.FailbackMaxDelay,
		FailbackStable: g.FailbackStable, Groups: groups,
		BackendWindow: g.BackendWindow, BackendBackoff: g.BackendBackoff, BackendMaxBackoff: g.BackendMaxBackoff}
}

// canonicalGroupConfig is what every gateway of the group must agree on,
// one fact a line, sorted: the lease, the ANA groups and their preferred
// owners, and each namespace's subsystem, NSID, group and storage.
func canonicalGroupConfig(g *Config, cfg *target.Config) string {
	lines := []string{fmt.Sprintf("lease %s", g.Lease)}
	for _, a := range g.ANAGroups {
		lines = append(lines, fmt.Sprintf("ana_group %d preferred %s", a.ID, a.Preferred))
	}
	for _, s := range cfg.Subsystems {
		for _, n := range s.Namespaces {
			store := n.Backend.Kind
			if n.Backend.Kind == string(backend.KindRBD) {
				store += " " + n.Backend.Pool + "/" + n.Backend.RADOSNamespace + "/" + n.Backend.Image
			}
			lines = append(lines, fmt.Sprintf("namespace %s %d ana_group %d %s", s.NQN, n.NSID, n.ANAGroup, store))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// member is what this gateway must hold alone in its group
// (gateway.Member): its name, where it runs (host name and its ports'
// listen addresses) and each subsystem's CNTLID range as the target hands
// them out (cntlid_min..cntlid_max; 0 is the default bound).
func member(g *Config, cfg *target.Config) gateway.Member {
	host, _ := os.Hostname()
	id := []string{host}
	for _, p := range cfg.Ports {
		id = append(id, net.JoinHostPort(p.Address, strconv.Itoa(int(p.ServiceID))))
	}
	m := gateway.Member{Name: g.Name, Identity: strings.Join(id, " "), CNTLIDs: map[string][2]uint16{}}
	for _, s := range cfg.Subsystems {
		lo, hi := s.CNTLIDMin, s.CNTLIDMax
		if lo == 0 {
			lo = nvmeof.CNTLIDMin
		}
		if hi == 0 || hi > nvmeof.CNTLIDMax {
			hi = nvmeof.CNTLIDMax
		}
		m.CNTLIDs[s.NQN] = [2]uint16{lo, hi}
	}
	if g.CNTLIDMin != 0 || g.CNTLIDMax != 0 {
		m.CNTLIDs[gateway.DefaultCNTLIDKey] = [2]uint16{g.CNTLIDMin, g.CNTLIDMax}
	}
	return m
}

// Target is what the gateway needs of the target; *target.Target has it,
// and the optional methods the gateway uses when the target has them
// (GroupInFlight, SetServingDeadline, BackendHealth, SetGatewayGuard).
type Target interface {
	Reload(cfg *target.Config) error
	// ReopenNamespaces holds swap around its swaps, not across its opens.
	ReopenNamespaces(anaGroup uint32, swap sync.Locker) error
	// SetGroupANA is the one path of an ANA change of the group (not a
	// reload: it waits for no backend I/O).
	SetGroupANA(anaGroup uint32, st nvmeof.ANAState) error
	Status() target.Status
	Queues() []target.QueueStatus
}

// Gateway is this nvmetd as a member of its gateway group: the runner and
// the groups it owns. Its methods are safe on a nil *Gateway where they
// say so (a stand-alone target has none).
type Gateway struct {
	cfg *Config
	// Set by Start, never changed after.
	t       Target
	running func() *target.Config // the running configuration
	change  sync.Locker           // serialises the target's reloads with the daemon's
	log     *zap.Logger

	runner *gateway.Runner
	cl     *gateway.RADOS
	// identity is this gateway's member identity (gateway.Member).
	identity string
	// syncStop ends followGroup (closed by Stop), syncDone is closed
	// when it has ended.
	syncStop, syncDone chan struct{}
	cancel             context.CancelFunc
	done               chan error // the runner's result

	mu    sync.Mutex
	owned map[uint32]bool
	// peers are the other gateways' ports the discovery log lists.
	peers []target.PeerPort
	// live are the members the last liveness probes settled as alive
	// (rebalance.go), liveSettled whether every member's state is
	// settled (nvmetctl group shows it then).
	live        []string
	liveSettled bool
	// grp is the group configuration this gateway runs, when it is
	// held in RADOS (nil otherwise).
	grp *groupState
	// retryAt: when Readiness may next reload the target to retry the
	// namespaces of a group that cannot be served (retrying: one is out).
	retryAt  time.Time
	retrying bool
}

// New returns the gateway of the section cfg (ApplyDefaults and Validate
// done), owning no group: until Start, Overlay makes every group of the
// section inaccessible.
func New(cfg *Config) *Gateway {
	return &Gateway{cfg: cfg, owned: map[uint32]bool{}, done: make(chan error, 1)}
}

// Overlay sets the gateway groups' ANA states on every port of cfg (in
// place, and returns it; cfg unchanged for a nil *Gateway):
// optimized where this gateway owns the group, inaccessible elsewhere
// (whatever the file says for those groups). Linux treats an inaccessible
// path as one to fail over from and retries there once it is optimized.
func (gs *Gateway) Overlay(cfg *target.Config) *target.Config {
	if gs == nil {
		return cfg
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	for i := range cfg.Ports {
		p := &cfg.Ports[i]
		for _, a := range gs.cfg.ANAGroups {
			st := "inaccessible"
			if gs.owned[a.ID] {
				st = "optimized"
			}
			j := slices.IndexFunc(p.ANAGroups, func(x target.ANAGroupConfig) bool { return x.ID == a.ID })
			if j < 0 {
				p.ANAGroups = append(p.ANAGroups, target.ANAGroupConfig{ID: a.ID, State: st})
			} else {
				p.ANAGroups[j].State = st
			}
		}
	}
	return cfg
}

// targetConfig is the configuration the target gets now: the running
// configuration with the gateway's ANA states.
func (gs *Gateway) targetConfig() *target.Config {
	return gs.Overlay(gs.running().Clone())
}

// applier applies ownership to the target (gateway.Applier).
type applier struct{ gs *Gateway }

// SetANA sets the group's state on every port of the target (ANA change
// events to the hosts) with target.Target.SetGroupANA, which is not a
// reload: an inaccessible change applies at once and waits for no backend
// I/O, no reload and no management change in progress (the change lock
// is not taken), so that a step-down is never held by writes stuck on
// storage out of reach. An optimized change takes the images' exclusive
// locks; if an enabled namespace of the group is not online, the
// namespaces that failed to open are retried first by a reload (under
// the change lock), and a group still not servable is refused (made
// inaccessible again). The ownership is also recorded for the overlay,
// so that the configuration of every later reload says the same.
func (a applier) SetANA(group uint32, optimized bool) error {
	gs := a.gs
	set := gs.t
	gs.mu.Lock()
	was := gs.owned[group]
	gs.mu.Unlock()
	if !optimized && was {
		// A test build's injected failure (faultinject.go): nothing
		// changes, the ports still say optimized.
		if err := stepDownFault(group); err != nil {
			return err
		}
	}
	gs.mu.Lock()
	gs.owned[group] = optimized
	gs.mu.Unlock()
	if !optimized {
		return set.SetGroupANA(group, nvmeof.ANAInaccessible)
	}
	refuse := func(err error) error {
		gs.mu.Lock()
		gs.owned[group] = false
		gs.mu.Unlock()
		if rerr := set.SetGroupANA(group, nvmeof.ANAInaccessible); rerr != nil {
			err = fmt.Errorf("%w; making it inaccessible again: %w", err, rerr)
		}
		return err
	}
	if unservable(group, gs.t.Status()) != "" {
		// A namespace that failed to open is retried only by a reload.
		gs.change.Lock()
		err := gs.t.Reload(gs.targetConfig())
		gs.change.Unlock()
		if err != nil {
			gs.log.Warn("gateway: retrying the namespaces of a group before serving it", zap.Uint32("group", group), zap.Error(err))
		}
		// The group is served only if it is whole: it would be
		// optimized here with a namespace missing, and no other gateway
		// would serve it. The machine counts it as a serve failure
		// (failback.go) and releases the group.
		if why := unservable(group, gs.t.Status()); why != "" {
			return refuse(fmt.Errorf("ANA group %d cannot be served here: %s", group, why))
		}
	}
	if err := set.SetGroupANA(group, nvmeof.ANAOptimized); err != nil {
		return refuse(err)
	}
	return nil
}

// unservable says why the target of st cannot serve ANA group group ("" if
// it can): an enabled namespace of the group that is not online (its
// backend did not open, or the gateway guard refused it). Disabled
// namespaces (by the configuration, or for a moment by Reopen) do not
// count.
func unservable(group uint32, st target.Status) string {
	var why []string
	for _, s := range st.Subsystems {
		for _, n := range s.Namespaces {
			if n.ANAGroup != group || !n.Enabled || n.State == target.NamespaceOnline {
				continue
			}
			w := fmt.Sprintf("subsystem %s namespace %d is %s", s.NQN, n.NSID, n.State)
			if n.Error != "" {
				w += ": " + n.Error
			}
			why = append(why, w)
		}
	}
	return strings.Join(why, "; ")
}

// Readiness reports whether the target can serve the group and how many
// hosts can use it here (groupReadiness); a group that cannot be served
// has its failed namespaces retried (retryNamespaces). Status does no I/O.
func (a applier) Readiness(group uint32) gateway.Readiness {
	r := groupReadiness(group, a.gs.t.Status(), a.gs.running())
	if r.Unservable != "" {
		a.retryNamespaces()
	}
	return r
}

// groupReadiness is the readiness of ANA group group in the target's
// status st, cfg its configuration: servable when every enabled namespace
// of the group is online (unservable), and the number of host controllers
// with I/O queues connected to a subsystem with a namespace of the group
// that their host may see (a group with no namespace: any host
// controller).
func groupReadiness(group uint32, st target.Status, cfg *target.Config) gateway.Readiness {
	visible := map[string][][]string{} // subsystem: the host lists of its namespaces in the group
	empty := true
	for _, s := range cfg.Subsystems {
		for _, n := range s.Namespaces {
			if n.ANAGroup == group {
				visible[s.NQN] = append(visible[s.NQN], n.Hosts)
				empty = false
			}
		}
	}
	r := gateway.Readiness{Unservable: unservable(group, st)}
	for _, c := range st.Controllers {
		if c.Discovery || c.IOQueues == 0 {
			continue
		}
		if empty || slices.ContainsFunc(visible[c.Subsystem], func(h []string) bool { return len(h) == 0 || slices.Contains(h, c.HostNQN) }) {
			r.Hosts++
		}
	}
	return r
}

// drainTimeout bounds Flush's wait for the commands in flight; a release
// waits at most the lease less the step-down margin besides (the lock is
// not renewed while the release is out: past that it would be gone).
const drainTimeout = 30 * time.Second

// Flush waits until no command holds a namespace of the group (after
// SetANA inaccessible no new I/O is accepted on it): an rbd write completes
// only once it is on the OSDs (no librbd cache), so nothing acknowledged
// then remains in this gateway. It counts the group's commands only
// (target.Target.GroupInFlight), those of closed connections included, so
// that the I/O of the gateway's other groups, which goes on, does not hold
// the hand-over.
func (a applier) Flush(group uint32) error {
	bound := min(drainTimeout, a.gs.cfg.Lease-a.gs.cfg.StepDownMargin)
	deadline := time.Now().Add(bound)
	inFlight := func() int64 {
		if t, ok := a.gs.t.(interface{ GroupInFlight(uint32) int64 }); ok {
			return t.GroupInFlight(group)
		}
		var n int64
		for _, q := range a.gs.t.Queues() {
			if q.QID > 0 {
				n += q.InFlight
			}
		}
		return n
	}
	for {
		n := inFlight()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ANA group %d: %d commands still in flight after %s", group, n, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// groupImages returns the rbd images (pool/[namespace/]image) of the
// namespaces of ANA group group in the running configuration: all of
// them, and those enabled.
func (a applier) groupImages(group uint32) (all, enabled map[string]bool) {
	all, enabled = map[string]bool{}, map[string]bool{}
	for _, s := range a.gs.running().Subsystems {
		for _, n := range s.Namespaces {
			if n.ANAGroup != group || n.Backend.Kind != string(backend.KindRBD) {
				continue
			}
			spec := backend.RBDOptions{Pool: n.Backend.Pool, RADOSNamespace: n.Backend.RADOSNamespace, Image: n.Backend.Image}.Spec()
			all[spec] = true
			if n.IsEnabled() {
				enabled[spec] = true
			}
		}
	}
	return all, enabled
}

// Addrs are the RADOS clients of every rbd backend this process opened on
// an image of the group's namespaces (closed ones included: a write may
// still be in flight on one), and no other: fencing them leaves the
// gateway's other groups alone.
func (a applier) Addrs(group uint32) []string {
	imgs, _ := a.groupImages(group)
	var out []string
	for _, c := range backend.CephClients() {
		if imgs[c.Image] {
			out = append(out, c.Addrs)
		}
	}
	return out
}

// servingDeadliner is the target's serving deadline; *target.Target must
// have it (checked at compile time: without it ServeUntil would do
// nothing, as it did until issue 21's TestGatewayProcessFreezeBlocklistLapsed
// found the probe's writes landing).
type servingDeadliner interface{ SetServingDeadline(uint32, time.Time) }

var _ servingDeadliner = (*target.Target)(nil)

// ServeUntil sets the group's serving deadline in the target: no read or
// write of the group's namespaces past it (target.Target.SetServingDeadline).
// The daemon's tests' fake target has none.
func (a applier) ServeUntil(group uint32, until time.Time) {
	if t, ok := a.gs.t.(servingDeadliner); ok {
		t.SetServingDeadline(group, until)
	}
}

// BackendHealth is the outcome of the I/O of the group's namespaces in
// the target (target.Target.BackendHealth): the runner samples it, and the
// machine steps a group down whose backends no longer serve it
// (gateway.Machine.BackendObserved).
func (a applier) BackendHealth(group uint32) gateway.BackendHealth {
	t, ok := a.gs.t.(interface {
		BackendHealth(uint32) target.BackendHealth
	})
	if !ok {
		return gateway.BackendHealth{}
	}
	h := t.BackendHealth(group)
	return gateway.BackendHealth{Transferred: h.Transferred, PathErrors: h.PathErrors, Blocklisted: h.Blocklisted, LastError: h.LastError,
		Completed: h.Completed, Ended: h.Ended, InFlight: h.InFlight}
}

// WaitForLatestOSDMap is the OSD-map barrier on the RADOS clients of the
// group's open rbd namespaces: after a fence, before the gateway serves.
func (a applier) WaitForLatestOSDMap(group uint32) error {
	imgs, _ := a.groupImages(group)
	if len(imgs) == 0 {
		return nil
	}
	return backend.WaitForLatestOSDMap(imgs)
}

// Reopen gives the group's rbd namespaces new RADOS clients (a new client
// has a new address nonce: the fence of the old ones does not apply to
// it). The namespaces are reopened in place (target.ReopenNamespaces): they
// stay attached, so a host whose only path is this gateway keeps its disk;
// the group is inaccessible here meanwhile. If a new client cannot open the
// image, nothing changes and the acquisition fails.
//
// The new backends open outside the change lock (an rbd open waits for the
// cluster, up to its timeouts), so a slow open of this group holds no
// reload, no ANA change of another group and no management change; only
// the swap is made under it, ordered with the daemon's reloads (a swap
// prepared while one ran is prepared again).
func (a applier) Reopen(group uint32) error {
	gs := a.gs
	_, enabled := a.groupImages(group)
	if len(enabled) == 0 {
		return nil
	}
	before := map[string]bool{}
	for _, c := range backend.CephClients() {
		before[c.Addrs] = true
	}
	if err := gs.t.ReopenNamespaces(group, gs.change); err != nil {
		if errors.Is(err, target.ErrReloadRefused) || errors.Is(err, target.ErrReopenStale) {
			return fmt.Errorf("reopen the rbd namespaces of ANA group %d: %w", group, err)
		}
		// Expected when the old clients were fenced: their flush at
		// close fails (ESHUTDOWN), after the swap. The check below says
		// whether new clients came of it.
		gs.log.Info("gateway: reopening the namespaces of a group: the old backends' close", zap.Uint32("group", group), zap.Error(err))
	}
	// A namespace that cannot open is not a reload error: check that
	// each image has a new client.
	fresh := map[string]bool{}
	for _, c := range backend.CephClients() {
		if !before[c.Addrs] {
			fresh[c.Image] = true
		}
	}
	for img := range enabled {
		if !fresh[img] {
			return fmt.Errorf("ANA group %d: image %s did not open on a new RADOS client (see the namespace's state)", group, img)
		}
	}
	return nil
}

// AnswerInFlight answers the group's commands still in the target's
// backends at once with ANA Inaccessible (target.Target.AnswerGroupInFlight;
// the runner calls it only when their clients are fenced or blocklisted:
// gateway.ActAnswerInFlight). A target without it answers nothing.
func (a applier) AnswerInFlight(group uint32) (int, error) {
	t, ok := a.gs.t.(interface {
		AnswerGroupInFlight(uint32) (int, error)
	})
	if !ok {
		return 0, nil
	}
	return t.AnswerGroupInFlight(group)
}

var _ gateway.InFlightAnswerer = applier{}

// retryNamespaces reloads the target, in the background and at most once
// per failback_delay (at least a lease apart), so that the namespaces
// that failed to open are tried again: a failed namespace is retried only
// by a reload, and a preferred owner that cannot serve its group does not
// ask for it (gateway/failback.go), which would otherwise be for ever
// after a transient failure at its start.
func (a applier) retryNamespaces() {
	gs := a.gs
	gs.mu.Lock()
	now := time.Now()
	if gs.retrying || now.Before(gs.retryAt) {
		gs.mu.Unlock()
		return
	}
	gs.retrying, gs.retryAt = true, now.Add(max(gs.cfg.FailbackDelay, gs.cfg.Lease))
	gs.mu.Unlock()
	go func() {
		defer func() {
			gs.mu.Lock()
			gs.retrying = false
			gs.mu.Unlock()
		}()
		gs.change.Lock()
		defer gs.change.Unlock()
		if err := gs.t.Reload(gs.targetConfig()); err != nil {
			gs.log.Warn("gateway: retrying the namespaces that failed to open", zap.Error(err))
		}
	}()
}

// newSession returns a lock cookie unique to this run.
func newSession(name string) string {
	var b [6]byte
	rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// Start connects to the cluster and starts the runner, acting on t:
// running returns the configuration the target runs (before the overlay;
// cfg is it now), change is held around every reload the gateway makes
// (the daemon's reloads hold it too). The target was started with every
// gateway group inaccessible (Overlay).
func (gs *Gateway) Start(t Target, running func() *target.Config, change sync.Locker, cfg *target.Config, log *zap.Logger) error {
	gs.t, gs.running, gs.change, gs.log = t, running, change, log
	g := gs.cfg
	ids := make([]uint32, 0, len(g.ANAGroups))
	for _, a := range g.ANAGroups {
		ids = append(ids, a.ID)
	}
	// From now on every configuration the target serves (SIGHUP, the
	// management API, ANA changes) keeps its namespaces in these groups
	// and its images exclusive-locked (target.GatewayGuard).
	if gg, ok := t.(interface {
		SetGatewayGuard(target.GatewayGuard) error
	}); ok {
		if err := gg.SetGatewayGuard(target.GatewayGuard{ANAGroups: ids}); err != nil {
			return err
		}
	}
	// The own discovery log entries give the addresses hosts must use
	// too (gateway.advertise), as the other gateways' logs do.
	if as, ok := t.(interface {
		SetAdvertisedAddresses(map[uint16]string) error
	}); ok && len(g.Advertise) > 0 {
		addrs := map[uint16]string{}
		for _, a := range g.Advertise {
			addrs[a.PortID] = a.Address
		}
		if err := as.SetAdvertisedAddresses(addrs); err != nil {
			return err
		}
	}
	member := member(g, cfg)
	gs.identity = member.Identity
	canonical := canonicalGroupConfig(g, cfg)
	gs.mu.Lock()
	cl := gs.cl
	gs.mu.Unlock()
	if cl != nil {
		// Bootstrap connected (the group's configuration in RADOS).
		cl.SetMember(&member)
		canonical = radosCanonical(g.Lease.String(), g.ANAGroups)
	} else {
		var err error
		if cl, err = gs.dial(&member); err != nil {
			return err
		}
	}
	session := newSession(g.Name)
	r, err := gateway.NewRunner(g.machineConfig(session), canonical, cl, applier{gs}, log.Named("gateway"))
	if err != nil {
		cl.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs.mu.Lock()
	gs.runner, gs.cl, gs.cancel = r, cl, cancel
	gs.mu.Unlock()
	// The version's preferred owners and drained state, before the
	// machine's first tick: a drained gateway stays out across its
	// restarts.
	gs.pushGroupState()
	log.Info("gateway: member of the group", zap.String("name", g.Name), zap.String("group", g.Group),
		zap.String("session", session), zap.String("client", cl.Addrs()), zap.Duration("lease", g.Lease))
	if note := faultInjectorNote(); note != "" {
		log.Warn("gateway: " + note)
	}
	go func() { gs.done <- r.Run(ctx, g.Lease/2) }()
	if v := gs.GroupVersion(); v != 0 {
		// The version Bootstrap loaded is served now: recorded as a
		// later one is when it is applied (Applied), so that the group's
		// status does not say this member runs none.
		gs.recordRunning(cl, v)
	}
	gs.syncStop, gs.syncDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(gs.syncDone)
		gs.followGroup(gs.syncStop)
	}()
	return nil
}

// Done delivers the runner's end (nil for a nil *Gateway: never): it
// ends on its own only when another gateway fenced this one.
func (gs *Gateway) Done() <-chan error {
	if gs == nil {
		return nil
	}
	return gs.done
}

// Fenced forgets the runner after it ended fenced: Stop has nothing left
// to release, and Status says it is not connected.
func (gs *Gateway) Fenced() {
	gs.mu.Lock()
	gs.runner = nil
	gs.mu.Unlock()
}

// Stop releases the groups this gateway owns (bounded) and closes its
// cluster client. Safe on a nil *Gateway, before Start and twice.
func (gs *Gateway) Stop() {
	if gs == nil {
		return
	}
	gs.mu.Lock()
	r := gs.runner
	gs.runner = nil
	gs.mu.Unlock()
	if r == nil {
		return
	}
	gs.cancel()
	if gs.syncStop != nil {
		close(gs.syncStop)
		<-gs.syncDone
	}
	gs.withdrawPorts()
	select {
	case err := <-gs.done:
		if err != nil {
			gs.log.Warn("gateway: stopped", zap.Error(err))
		}
	case <-time.After(gs.cfg.Lease + 5*time.Second):
		gs.log.Warn("gateway: did not stop within a lease")
		return
	}
	// A cluster operation still running would use the client after
	// Close: then leave it to the process's exit.
	if !r.Quiesce(5 * time.Second) {
		gs.log.Warn("gateway: cluster operations still running at exit; not closing the RADOS client")
		return
	}
	gs.cl.Close()
}

// Health of a gateway in Status (as the daemon's).
const (
	healthOK       = "ok"
	healthDegraded = "degraded"
)

// Status is the gateway section of `nvmetd status`.
type Status struct {
	Name   string `json:"name"`
	Group  string `json:"group"`
	Health string `json:"health"`
	// Degraded says why this gateway takes no ownership.
	Degraded string        `json:"degraded,omitempty"`
	Fences   int           `json:"fences"`
	Groups   []GroupStatus `json:"ana_groups"`
	// GroupConfigVersion is the version of the group's configuration
	// this gateway runs (held in RADOS); GroupConfigPending names a newer
	// stored one it could not apply, and why.
	GroupConfigVersion uint64 `json:"group_config_version,omitempty"`
	GroupConfigPending string `json:"group_config_pending,omitempty"`
	// Drained: this gateway is drained (nvmetctl gateway drain): it
	// owns no group until undrained.
	Drained bool `json:"drained,omitempty"`
	// DiscoveryPorts are the other gateways' ports this gateway's
	// discovery log lists ("gw-b 1 rdma 192.0.2.12:4420 NQN,...":
	// docs/rbd.md "Discovery across the group").
	DiscoveryPorts []string `json:"discovery_ports,omitempty"`
}

type GroupStatus struct {
	ID        uint32 `json:"id"`
	Role      string `json:"role"`
	Owned     bool   `json:"owned"`
	Preferred string `json:"preferred"`
	Holder    string `json:"holder,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Failbacks is the group's failback strike count (gateway.Record.Failbacks).
	Failbacks uint32 `json:"failbacks"`
	// FailbackWait says why this gateway, the group's preferred owner,
	// does not ask for it back now.
	FailbackWait string `json:"failback_wait,omitempty"`
}

// Status returns the gateway's status (nil for a nil *Gateway).
func (gs *Gateway) Status() *Status {
	if gs == nil {
		return nil
	}
	gs.mu.Lock()
	r := gs.runner
	gs.mu.Unlock()
	if r == nil {
		return &Status{Name: gs.cfg.Name, Group: gs.cfg.Group, Health: healthDegraded, Degraded: "not connected to the cluster"}
	}
	groups, degr := r.Status()
	st := &Status{Name: gs.cfg.Name, Group: gs.cfg.Group, Health: healthOK, Degraded: degr, Fences: r.Fences(), Drained: r.Drained()}
	gs.mu.Lock()
	for _, p := range gs.peers {
		st.DiscoveryPorts = append(st.DiscoveryPorts, fmt.Sprintf("%s %d %s %s %s", p.Gateway, p.PortID, p.Transport,
			net.JoinHostPort(p.Address, strconv.Itoa(p.ServiceID)), strings.Join(p.Subsystems, ",")))
	}
	if gs.grp != nil {
		st.GroupConfigVersion = gs.grp.version
		if gs.grp.pending != 0 {
			st.GroupConfigPending = fmt.Sprintf("version %d: %s", gs.grp.pending, gs.grp.pendingErr)
		}
	}
	gs.mu.Unlock()
	if degr != "" {
		st.Health = healthDegraded
	}
	for _, g := range groups {
		st.Groups = append(st.Groups, GroupStatus{ID: g.Group, Role: g.Role.String(), Owned: g.Role == gateway.Owner,
			Preferred: g.Preferred, Holder: g.Holder, LastError: g.LastError, Failbacks: g.Failbacks, FailbackWait: g.FailbackWait})
	}
	return st
}
