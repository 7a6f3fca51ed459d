package gwtarget

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
)

// groupState is the group configuration this gateway runs (with
// gateway.group_config: rados). Guarded by Gateway.mu.
type groupState struct {
	version uint64
	doc     GroupDoc
	ranges  Ranges
	// pending: a stored version that could not be applied here, and why.
	pending    uint64
	pendingErr string
	// recorded is the version last recorded as running here
	// (running.<name>): the one Bootstrap loaded is recorded once the
	// gateway runs, and retried with every sync until it is.
	recorded uint64
	// apply applies a whole configuration to the target as a reload does
	// and makes it the running one; the change lock is held.
	apply func(*target.Config) error
}

// RADOSHeld reports whether the group's configuration is held in RADOS
// (false for a nil *Gateway).
func (gs *Gateway) RADOSHeld() bool { return gs != nil && gs.cfg.GroupConfig == GroupConfigRADOS }

// dial connects the gateway's RADOS client of the group's objects.
func (gs *Gateway) dial(member *gateway.Member) (*gateway.RADOS, error) {
	g := gs.cfg
	ids := make([]uint32, 0, len(g.ANAGroups))
	for _, a := range g.ANAGroups {
		ids = append(ids, a.ID)
	}
	// Each cluster operation gives up well before the lease can end.
	opTimeout := max(time.Second, (g.Lease-g.StepDownMargin)/2)
	return gateway.DialRADOS(gateway.RADOSOptions{CephConf: g.Cluster.CephConf, ClientID: g.Cluster.ClientID,
		Keyring: g.Cluster.Keyring, Pool: g.Cluster.Pool, RADOSNamespace: g.Cluster.RADOSNamespace, GroupName: g.Group,
		Groups: ids, Lease: g.Lease, OpTimeout: opTimeout, ConnectTimeout: 10 * time.Second, BlocklistExpire: g.BlocklistExpire,
		Member: member, WatchConfig: g.GroupConfig == GroupConfigRADOS})
}

// Bootstrap, for a gateway that holds the group's configuration in RADOS,
// connects to the cluster, reads the group's configuration (storing
// file's subsystems, hosts and ANA groups as version 1 if there is none)
// and returns the configuration to serve: file's own parts with the
// stored version's subsystems and hosts (MergeGroup). The stored ANA
// groups are the gateway's from then on. Otherwise it returns file.
// apply is how a later version is applied (see groupState.apply).
func (gs *Gateway) Bootstrap(file *target.Config, apply func(*target.Config) error, log *zap.Logger) (*target.Config, error) {
	if !gs.RADOSHeld() {
		return file, nil
	}
	g := gs.cfg
	cl, err := gs.dial(nil)
	if err != nil {
		return nil, err
	}
	seedDoc := SplitGroup(file, g.ANAGroups)
	seed, err := EncodeGroup(seedDoc)
	if err != nil {
		cl.Close()
		return nil, err
	}
	sc, err := cl.LoadGroupConfig(seed, radosCanonical(g.Lease.String(), seedDoc.ANAGroups), canonicalGroupConfig(g, file))
	if err != nil {
		cl.Close()
		if errors.Is(err, gateway.ErrLegacyConfig) {
			return nil, fmt.Errorf("%w; to hold it in RADOS, make every gateway's file agree (or remove the object: rados -p %s rm %s) "+
				"and start the gateways with gateway.group_config: rados: the first one stores its file's as version 1",
				err, g.Cluster.Pool, gateway.ConfigObjectName(g.Group))
		}
		return nil, err
	}
	doc, err := DecodeGroup(sc.Config)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("version %d in %s: %w", sc.Version, gateway.ConfigObjectName(g.Group), err)
	}
	if !reflect.DeepEqual(doc.ANAGroups, seedDoc.ANAGroups) {
		log.Warn("gateway: the group's stored ANA groups differ from this file's gateway.ana_groups: the stored ones are served",
			zap.Uint64("version", sc.Version), zap.Any("stored", doc.ANAGroups), zap.Any("file", seedDoc.ANAGroups))
	}
	g.ANAGroups = doc.ANAGroups
	if string(sc.Config) != string(seed) {
		log.Warn("gateway: this file's subsystems and hosts differ from the group's configuration, which is served: "+
			"with gateway.group_config: rados the file's only seed version 1 (change the group through the management API or nvmetctl)",
			zap.Uint64("version", sc.Version))
	}
	ranges := FileRanges(g, file)
	merged := MergeGroup(file, doc, ranges)
	merged.ApplyDefaults()
	if err := merged.Validate(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("version %d of the group configuration with this gateway's file: %w", sc.Version, err)
	}
	if err := g.Validate(merged); err != nil {
		cl.Close()
		return nil, fmt.Errorf("version %d of the group configuration: %w", sc.Version, err)
	}
	gs.mu.Lock()
	gs.cl = cl
	// The group's part as it runs (defaults spelled out), which a change
	// is compared with.
	run := SplitGroup(merged, doc.ANAGroups)
	run.Drained = doc.Drained
	run.Pinned = doc.Pinned
	gs.grp = &groupState{version: sc.Version, doc: run, ranges: ranges, apply: apply}
	gs.mu.Unlock()
	log.Info("gateway: serving the group's configuration from RADOS", zap.Uint64("version", sc.Version),
		zap.String("object", gateway.ConfigObjectName(g.Group)))
	return merged, nil
}

// GroupVersion is the version of the group's configuration this gateway
// runs (0: not held in RADOS).
func (gs *Gateway) GroupVersion() uint64 {
	if gs == nil {
		return 0
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.grp == nil {
		return 0
	}
	return gs.grp.version
}

// MergeLocal is file's own parts with the group's configuration this
// gateway runs (a reload of the file: SIGHUP); file itself when the group's
// configuration is not in RADOS. It warns when file's group part differs
// (ignored).
func (gs *Gateway) MergeLocal(file *target.Config) *target.Config {
	if !gs.RADOSHeld() {
		return file
	}
	gs.mu.Lock()
	st := *gs.grp
	gs.mu.Unlock()
	c := MergeGroup(file, st.doc, st.ranges)
	c.ApplyDefaults()
	return c
}

// GroupConflict is a change refused because the group's configuration
// changed since its base (HTTP 409): Current is the stored version.
type GroupConflict = gateway.VersionConflictError

// PrepareChange checks a change of the group's configuration, nc (the
// running configuration edited), before it is applied here: its base
// version must be the stored one and the one this gateway runs (else a
// *gateway.VersionConflictError, or an error saying this gateway is
// behind), and nc's group part must be valid for the whole group
// (ValidateGroup against the members' CNTLID ranges; ErrGroupInvalid,
// nothing is stored). It returns nc's group part as stored, or nil if it
// is the running one (nothing to store), and the configuration this
// gateway must apply: nc merged as every other gateway merges the stored
// version (MergeGroup: each subsystem with this gateway's CNTLID range,
// every port serving every subsystem of the group). Applying nc as
// edited left a subsystem added through this gateway on none of its
// ports, with the target's default CNTLID range. The change lock is held.
func (gs *Gateway) PrepareChange(base uint64, nc *target.Config) ([]byte, *target.Config, error) {
	gs.mu.Lock()
	st, cl := *gs.grp, gs.cl
	gs.mu.Unlock()
	sc, err := cl.ReadGroupConfig()
	if err != nil {
		return nil, nil, err
	}
	if sc.Version != base {
		return nil, nil, &gateway.VersionConflictError{Base: base, Current: sc.Version}
	}
	if base != st.version {
		return nil, nil, fmt.Errorf("gateway: %s runs version %d of the group configuration, not the stored %d (%s): make the change through another gateway",
			gs.cfg.Name, st.version, sc.Version, st.pendingErr)
	}
	doc := SplitGroup(nc, st.doc.ANAGroups)
	doc.Drained = st.doc.Drained
	doc.Pinned = st.doc.Pinned
	members, err := cl.Members()
	if err != nil {
		return nil, nil, err
	}
	merged := MergeGroup(nc, doc, st.ranges)
	merged.ApplyDefaults()
	if err := ValidateGroup(doc, merged, members); err != nil {
		return nil, nil, err
	}
	b, err := EncodeGroup(doc)
	if err != nil {
		return nil, nil, err
	}
	if cur, err := EncodeGroup(st.doc); err == nil && string(cur) == string(b) {
		return nil, merged, nil // the group's part did not change
	}
	return b, merged, nil
}

// StoreChange stores doc (from PrepareChange) as the version after base:
// one compare-and-set; a lost race is a *gateway.VersionConflictError and
// stores nothing. The caller applied it here already and calls Applied.
func (gs *Gateway) StoreChange(base uint64, doc []byte) (uint64, error) {
	gs.mu.Lock()
	cl := gs.cl
	gs.mu.Unlock()
	return cl.WriteGroupConfig(base, doc, "")
}

// Applied records that version v, whose group part is nc's, runs here
// (its running.<name> entry on the config object).
func (gs *Gateway) Applied(v uint64, nc *target.Config) {
	gs.mu.Lock()
	gs.applied(v, nc, gs.grp.doc.ANAGroups, gs.grp.doc.Drained, gs.grp.doc.Pinned)
}

// applied is Applied with the version's ANA groups and drained members,
// which it gives the machine (a preferred owner changed, a drain); gs.mu
// is held and is unlocked.
func (gs *Gateway) applied(v uint64, nc *target.Config, ana []GroupConfig, drained []string, pinned []uint32) {
	st := gs.grp
	st.doc = SplitGroup(nc, ana)
	st.doc.Drained = slices.Clone(drained)
	st.doc.Pinned = slices.Clone(pinned)
	st.version = v
	if st.pending <= v {
		st.pending, st.pendingErr = 0, ""
	}
	cl := gs.cl
	gs.mu.Unlock()
	gs.pushGroupState()
	gs.recordRunning(cl, v)
}

// recordRunning records version v as the one this gateway runs
// (running.<name>), unless a newer one was recorded meanwhile. A failure
// is logged and retried at the next sync (every lease).
func (gs *Gateway) recordRunning(cl *gateway.RADOS, v uint64) {
	if err := cl.SetRunning(gs.cfg.Name, v); err != nil {
		gs.log.Warn("gateway: cannot record the running version of the group configuration", zap.Uint64("version", v), zap.Error(err))
		return
	}
	gs.mu.Lock()
	if gs.grp != nil && gs.grp.recorded < v {
		gs.grp.recorded = v
	}
	gs.mu.Unlock()
}

// syncOnce applies the stored version if it is newer than the one that
// runs: merged with the running configuration's own parts and applied
// through the same path as a reload (the target's validation, the
// gateway guard, the ANA overlay, the images' claims), under the change
// lock.
func (gs *Gateway) syncOnce() {
	sc, err := gs.cl.ReadGroupConfig()
	if err != nil {
		gs.log.Warn("gateway: cannot read the group configuration", zap.Error(err))
		return
	}
	gs.change.Lock()
	defer gs.change.Unlock()
	gs.mu.Lock()
	st := *gs.grp
	gs.mu.Unlock()
	if sc.Version <= st.version {
		if st.recorded != st.version {
			// The version loaded at the start (or one whose record
			// failed) runs and is not recorded yet.
			gs.recordRunning(gs.cl, st.version)
		}
		return
	}
	fail := func(err error) {
		gs.mu.Lock()
		again := gs.grp.pending == sc.Version && gs.grp.pendingErr == err.Error()
		gs.grp.pending, gs.grp.pendingErr = sc.Version, err.Error()
		gs.mu.Unlock()
		if again {
			// Retried every lease: said once.
			return
		}
		gs.log.Error("gateway: cannot apply the group configuration's new version: this gateway keeps running the one before",
			zap.Uint64("version", sc.Version), zap.Uint64("running", st.version), zap.Error(err))
	}
	doc, err := DecodeGroup(sc.Config)
	if err != nil {
		fail(err)
		return
	}
	// The group's own state (preferred owners, drained members) needs no
	// reload and reaches the machine even when the target cannot apply
	// this version: a drained gateway must never stay an owner because
	// an image of another change does not open here.
	failTarget := func(err error) {
		fail(err)
		gs.pushState(doc.ANAGroups, doc.Drained)
	}
	nc := MergeGroup(gs.running(), doc, st.ranges)
	nc.ApplyDefaults()
	if err := nc.Validate(); err != nil {
		failTarget(err)
		return
	}
	if err := st.apply(nc); err != nil {
		failTarget(err)
		return
	}
	gs.log.Info("gateway: applied the group configuration", zap.Uint64("version", sc.Version), zap.Uint64("was", st.version))
	gs.mu.Lock()
	gs.applied(sc.Version, nc, doc.ANAGroups, doc.Drained, doc.Pinned)
}

// GroupStatus reads the group's state (GET /v1/group, nvmetctl group):
// its members, the stored version of its configuration and the version
// each member runs (held in RADOS), the holder of each ANA group as this
// gateway reads their records, and the problems an operator must see.
func (gs *Gateway) GroupStatus() (*ctlclient.GroupStatus, error) {
	if gs == nil {
		return nil, errors.New("gateway: not a member of a gateway group")
	}
	gs.mu.Lock()
	cl, st := gs.cl, gs.grp
	var running uint64
	var pending string
	var pinned []uint32
	if st != nil {
		pinned = slices.Clone(st.doc.Pinned)
		running = st.version
		if st.pending != 0 {
			pending = fmt.Sprintf("version %d: %s", st.pending, st.pendingErr)
		}
	}
	gs.mu.Unlock()
	if cl == nil {
		return nil, errors.New("gateway: not connected to the cluster")
	}
	out := &ctlclient.GroupStatus{Group: gs.cfg.Group, Object: gateway.ConfigObjectName(gs.cfg.Group),
		Gateway: gs.cfg.Name, Running: running, Pending: pending, Members: []ctlclient.GroupMember{},
		ANAGroups: []ctlclient.GroupANA{}, Problems: []string{}}
	var stored map[string]uint64
	if st != nil {
		sc, err := cl.ReadGroupConfig()
		if err != nil {
			return nil, err
		}
		out.Version, stored = sc.Version, sc.Running
	}
	members, err := cl.Members()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, m := range members {
		seen[m.Name] = true
		out.Members = append(out.Members, ctlclient.GroupMember{Name: m.Name, Running: stored[m.Name]})
	}
	for name, v := range stored {
		if !seen[name] {
			out.Members = append(out.Members, ctlclient.GroupMember{Name: name, Running: v})
		}
	}
	drained := gs.drainedOf()
	for _, name := range drained {
		if !seen[name] {
			out.Members = append(out.Members, ctlclient.GroupMember{Name: name, Running: stored[name]})
		}
	}
	gs.mu.Lock()
	live, settled := slices.Clone(gs.live), gs.liveSettled
	gs.mu.Unlock()
	for i := range out.Members {
		out.Members[i].Drained = slices.Contains(drained, out.Members[i].Name)
		if settled {
			alive := slices.Contains(live, out.Members[i].Name)
			out.Members[i].Alive = &alive
		}
	}
	slices.SortFunc(out.Members, func(a, b ctlclient.GroupMember) int { return strings.Compare(a.Name, b.Name) })
	if s := gs.Status(); s != nil {
		if s.Degraded != "" {
			out.Problems = append(out.Problems, fmt.Sprintf("%s is degraded: %s", gs.cfg.Name, s.Degraded))
		}
		for _, g := range s.Groups {
			out.ANAGroups = append(out.ANAGroups, ctlclient.GroupANA{ID: g.ID, Preferred: g.Preferred, Holder: g.Holder,
				Pinned: slices.Contains(pinned, g.ID)})
		}
	}
	out.Problems = append(out.Problems, groupProblems(out)...)
	out.Draining = draining(out, drained)
	return out, nil
}

// groupProblems names what an operator must see in a group's status:
// an ANA group nobody holds (its hosts have no optimized path), a member
// that does not answer the liveness probe (the group has lost a failover
// target), a running member behind the stored version of the
// configuration (a skew) and the answering gateway's pending version. A
// member that is not alive runs no version: it is not called behind (it
// starts on the stored version).
func groupProblems(st *ctlclient.GroupStatus) []string {
	var p []string
	for _, g := range st.ANAGroups {
		if g.Holder == "" {
			p = append(p, fmt.Sprintf("ANA group %d has no holder: no gateway serves it optimized", g.ID))
		}
	}
	if st.Version != 0 {
		for _, m := range st.Members {
			switch {
			case m.Alive != nil && !*m.Alive:
				p = append(p, fmt.Sprintf("%s is not alive (stopped, crashed or cut off from the cluster): no ANA group can fail over to it", m.Name))
			case m.Running == 0:
				p = append(p, fmt.Sprintf("%s records no version of the group's configuration", m.Name))
			case m.Running < st.Version:
				p = append(p, fmt.Sprintf("%s runs version %d of %d", m.Name, m.Running, st.Version))
			}
		}
	}
	if st.Pending != "" {
		p = append(p, fmt.Sprintf("%s cannot apply %s", st.Gateway, st.Pending))
	}
	return p
}

// draining names each drained gateway that still holds ANA groups (its
// drain is in progress: their hand-overs are not done).
func draining(st *ctlclient.GroupStatus, drained []string) []string {
	var out []string
	for _, name := range drained {
		var ids []string
		for _, g := range st.ANAGroups {
			if g.Holder == name {
				ids = append(ids, fmt.Sprint(g.ID))
			}
		}
		if len(ids) > 0 {
			out = append(out, fmt.Sprintf("%s is drained and still holds ANA group(s) %s: their hand-over is in progress", name, strings.Join(ids, ",")))
		}
	}
	return out
}
