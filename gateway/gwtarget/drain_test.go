package gwtarget

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/internal/ctlclient"
	"github.com/nvmetd/nvmetd/target"
)

func view(running ...string) GroupView {
	v := GroupView{Ports: map[string][]gateway.Port{}}
	for _, n := range []string{"gw-a", "gw-b", "gw-c"} {
		v.Members = append(v.Members, gateway.Member{Name: n})
	}
	for _, n := range running {
		v.Ports[n] = []gateway.Port{{ID: 1, Transport: "tcp", Address: "127.0.0.1", ServiceID: 4420}}
	}
	return v
}

// TestDrainEdit: a drain adds the member (sorted, once); an undrain
// removes it (nil when none is left, so the stored text is the one of a
// group that never drained); draining the last member that could serve
// (the others drained, or stopped: no ports recorded) is refused, naming
// why; a name that is no member is refused.
func TestDrainEdit(t *testing.T) {
	d := GroupDoc{ANAGroups: []GroupConfig{{ID: 1, Preferred: "gw-a"}}}
	if err := DrainEdit("gw-b", true)(&d, view("gw-a", "gw-b", "gw-c")); err != nil {
		t.Fatal(err)
	}
	if err := DrainEdit("gw-a", true)(&d, view("gw-a", "gw-b", "gw-c")); err != nil {
		t.Fatal(err)
	}
	if err := DrainEdit("gw-a", true)(&d, view("gw-a", "gw-b", "gw-c")); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Drained, []string{"gw-a", "gw-b"}) {
		t.Fatalf("drained %v", d.Drained)
	}
	err := DrainEdit("gw-c", true)(&d, view("gw-a", "gw-b", "gw-c"))
	if !errors.Is(err, ErrLastServer) || !strings.Contains(err.Error(), "drained: gw-a, gw-b") {
		t.Fatalf("the last one: %v", err)
	}
	if err := DrainEdit("gw-b", false)(&d, view()); err != nil {
		t.Fatal(err)
	}
	err = DrainEdit("gw-c", true)(&d, view("gw-a", "gw-c"))
	if !errors.Is(err, ErrLastServer) || !strings.Contains(err.Error(), "stopped (no ports recorded): gw-b") {
		t.Fatalf("the other stopped: %v", err)
	}
	if err := DrainEdit("gw-x", true)(&d, view("gw-a")); !errors.Is(err, ErrNoSuchMember) {
		t.Fatalf("no member: %v", err)
	}
	if err := DrainEdit("gw-a", false)(&d, view()); err != nil || d.Drained != nil {
		t.Fatalf("undrained: %v %#v", err, d.Drained)
	}
	before, _ := EncodeGroup(GroupDoc{ANAGroups: d.ANAGroups})
	after, _ := EncodeGroup(d)
	if string(before) != string(after) || strings.Contains(string(after), "drained") {
		t.Fatalf("undrained text:\n%s\nwant\n%s", after, before)
	}
	d.Drained = []string{"gw-a"}
	b, err := EncodeGroup(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeGroup(b)
	if err != nil || !reflect.DeepEqual(back.Drained, []string{"gw-a"}) {
		t.Fatalf("round trip: %v %#v\n%s", err, back.Drained, b)
	}
}

// TestSetPreferredEdit: the preferred owner must be a member, the ANA
// group one of the group's.
func TestSetPreferredEdit(t *testing.T) {
	d := GroupDoc{ANAGroups: []GroupConfig{{ID: 1, Preferred: "gw-a"}, {ID: 2, Preferred: "gw-b"}}}
	if err := SetPreferredEdit(1, "gw-c")(&d, view()); err != nil || d.ANAGroups[0].Preferred != "gw-c" {
		t.Fatalf("%v %v", err, d.ANAGroups)
	}
	if err := SetPreferredEdit(1, "gw-x")(&d, view()); !errors.Is(err, ErrNoSuchMember) {
		t.Fatalf("no member: %v", err)
	}
	if err := SetPreferredEdit(3, "gw-a")(&d, view()); !errors.Is(err, ErrNoSuchANAGroup) || !strings.Contains(err.Error(), "1, 2") {
		t.Fatalf("no group: %v", err)
	}
}

// TestSpreadANAGroup: a namespace added without an ANA group goes to the
// group's ANA group with the fewest namespaces (across subsystems), the
// lowest ID among equals; a stand-alone target (nil gateway) keeps the
// default.
func TestSpreadANAGroup(t *testing.T) {
	c := local()
	ns := func(nsid, group uint32) target.NamespaceConfig {
		return target.NamespaceConfig{NSID: nsid, ANAGroup: group, Backend: target.BackendConfig{Kind: "memory", Size: "1MiB"}}
	}
	ids := []uint32{3, 1, 2}
	if g := spread(ids, c); g != 2 { // group 1 has namespace 1
		t.Fatalf("spread: %d, want 2", g)
	}
	c.Subsystems[0].Namespaces = append(c.Subsystems[0].Namespaces, ns(2, 2))
	if g := spread(ids, c); g != 3 {
		t.Fatalf("spread: %d, want 3", g)
	}
	c.Subsystems = append(c.Subsystems, target.SubsystemConfig{NQN: nqnB, Namespaces: []target.NamespaceConfig{ns(1, 3), ns(2, 3)}})
	if g := spread(ids, c); g != 1 {
		t.Fatalf("spread across subsystems: %d, want 1", g)
	}
	var gs *Gateway
	if g := gs.SpreadANAGroup(c); g != 0 {
		t.Fatalf("stand-alone: %d", g)
	}
	g := New(&Config{Name: "gw-a", ANAGroups: []GroupConfig{{ID: 1, Preferred: "gw-a"}, {ID: 2, Preferred: "gw-b"}}})
	if got := g.SpreadANAGroup(local()); got != 2 {
		t.Fatalf("gateway: %d, want 2", got)
	}
}

// TestDrainLivenessOverPorts: a member that crashed keeps its ports
// recorded; with the liveness probe known, it cannot serve, and the drain
// of the last live member is refused naming it; without a probe answer
// (an older member), the recorded ports stand in.
func TestDrainLivenessOverPorts(t *testing.T) {
	v := GroupView{Members: []gateway.Member{{Name: "a"}, {Name: "b"}},
		Ports: map[string][]gateway.Port{"a": {{}}, "b": {{}}}, Alive: []string{"a"}, AliveKnown: true}
	d := GroupDoc{}
	err := DrainEdit("a", true)(&d, v)
	if !errors.Is(err, ErrLastServer) || !strings.Contains(err.Error(), "not alive (its watch of the group's config object does not answer): b") {
		t.Fatalf("drain of the last live member: %v", err)
	}
	v.AliveKnown = false
	if err := DrainEdit("a", true)(&d, v); err != nil || len(d.Drained) != 1 {
		t.Fatalf("liveness unknown, b's ports recorded: %v %v", err, d.Drained)
	}
}

// TestGroupProblemsNotAlive: a member whose probes settled it as gone is
// named as not alive, never as behind the stored version (it runs no
// version: it starts on the stored one); a live member behind is a skew.
func TestGroupProblemsNotAlive(t *testing.T) {
	no, yes := false, true
	st := &ctlclient.GroupStatus{Version: 4, Members: []ctlclient.GroupMember{
		{Name: "gw-a", Running: 4, Alive: &yes},
		{Name: "gw-b", Running: 3, Alive: &yes},
		{Name: "gw-c", Running: 3, Alive: &no},
	}, ANAGroups: []ctlclient.GroupANA{{ID: 1, Holder: "gw-a"}}}
	got := strings.Join(groupProblems(st), "\n")
	want := "gw-b runs version 3 of 4\ngw-c is not alive (stopped, crashed or cut off from the cluster): no ANA group can fail over to it"
	if got != want {
		t.Fatalf("problems:\n%s\nwant:\n%s", got, want)
	}
}
