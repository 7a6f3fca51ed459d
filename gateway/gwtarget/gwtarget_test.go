package gwtarget

import (
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/target"
)

// exampleGateway is configs/nvmetd-gateway.yaml's gateway section and
// target configuration (target/daemon's TestGatewayExampleConfig loads
// the file itself).
func exampleGateway(t *testing.T) (*Config, *target.Config) {
	t.Helper()
	const sub = "nqn.2024-01.com.example:ceph.gateway"
	rbd := func(img string) target.BackendConfig {
		return target.BackendConfig{Kind: "rbd", Pool: "rbd", Image: img}
	}
	cfg := &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: 4420, Subsystems: []string{sub}}},
		Subsystems: []target.SubsystemConfig{{NQN: sub, AllowAnyHost: true, Namespaces: []target.NamespaceConfig{
			{NSID: 1, ANAGroup: 1, Backend: rbd("vol1")},
			{NSID: 2, ANAGroup: 2, Backend: rbd("vol2")},
		}}},
	}
	g := &Config{Name: "gw-a", Cluster: ClusterConfig{Pool: "rbd"}, ANAGroups: []GroupConfig{{ID: 1, Preferred: "gw-a"}, {ID: 2, Preferred: "gw-b"}}}
	g.ApplyDefaults()
	if err := g.Validate(cfg); err != nil {
		t.Fatalf("the example's gateway section: %v", err)
	}
	return g, cfg
}

// TestOverlay: the gateway groups' ANA states on every port follow
// ownership (optimized where owned, inaccessible elsewhere), whatever the
// file says, and the overlaid configuration is valid.
func TestOverlay(t *testing.T) {
	g, cfg := exampleGateway(t)
	cfg.Ports[0].ANAGroups = []target.ANAGroupConfig{{ID: 2, State: "optimized"}}
	gs := New(g)
	gs.owned[1] = true
	out := gs.Overlay(cfg.Clone())
	states := map[uint32]string{}
	for _, a := range out.Ports[0].ANAGroups {
		states[a.ID] = a.State
	}
	if len(states) != 2 || states[1] != "optimized" || states[2] != "inaccessible" {
		t.Errorf("ANA states with group 1 owned: %v", states)
	}
	if err := out.Validate(); err != nil {
		t.Errorf("overlaid configuration: %v", err)
	}
}

// TestCanonicalGroupConfig: what every gateway of the group must agree
// on, one fact a line.
func TestCanonicalGroupConfig(t *testing.T) {
	g, cfg := exampleGateway(t)
	canon := canonicalGroupConfig(g, cfg)
	for _, want := range []string{"ana_group 1 preferred gw-a", "namespace nqn.2024-01.com.example:ceph.gateway 2 ana_group 2 rbd rbd//vol2", "lease 10s"} {
		if !strings.Contains(canon, want+"\n") {
			t.Errorf("canonical configuration lacks %q:\n%s", want, canon)
		}
	}
}

// TestGroupConfigDefault: a gateway section that does not say where the
// group's configuration is held keeps it in RADOS, versioned (issue 27:
// the group's configuration once, in the cluster; a gateway's file keeps
// only what is local); "file" stays selectable.
func TestGroupConfigDefault(t *testing.T) {
	g := &Config{}
	g.ApplyDefaults()
	if g.GroupConfig != GroupConfigRADOS {
		t.Fatalf("default group_config %q, want %q", g.GroupConfig, GroupConfigRADOS)
	}
	g = &Config{GroupConfig: GroupConfigFile}
	g.ApplyDefaults()
	if g.GroupConfig != GroupConfigFile {
		t.Fatalf("group_config file became %q", g.GroupConfig)
	}
}
