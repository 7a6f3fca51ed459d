package gwtarget

import (
	"maps"
	"testing"
)

// TestRebalanced: the preferred owners spread evenly over the live
// members with the fewest moves; pinned groups stay and count; the groups
// of a member that is gone (or drained) go to the least loaded.
func TestRebalanced(t *testing.T) {
	g := func(pref ...string) []GroupConfig {
		out := []GroupConfig{}
		for i, p := range pref {
			out = append(out, GroupConfig{ID: uint32(i + 1), Preferred: p})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		ana    []GroupConfig
		pinned []uint32
		live   []string
		want   map[uint32]string
	}{
		{"balanced", g("a", "b", "a"), nil, []string{"a", "b"}, map[uint32]string{}},
		{"third joins", g("a", "b", "a"), nil, []string{"a", "b", "c"}, map[uint32]string{3: "c"}},
		{"third joins, four groups", g("a", "b", "a", "b"), nil, []string{"a", "b", "c"}, map[uint32]string{3: "c"}},
		{"third leaves", g("a", "b", "c"), nil, []string{"a", "b"}, map[uint32]string{3: "a"}},
		{"all on one", g("a", "a", "a", "a"), nil, []string{"a", "b"}, map[uint32]string{4: "b", 3: "b"}},
		{"pinned stays", g("a", "b", "a"), []uint32{3}, []string{"a", "b", "c"}, map[uint32]string{1: "c"}},
		{"all pinned", g("a", "a"), []uint32{1, 2}, []string{"a", "b"}, map[uint32]string{}},
		{"pinned on a gone member moves", g("a", "c"), []uint32{2}, []string{"a", "b"}, map[uint32]string{2: "b"}},
		{"nobody live", g("a", "b"), nil, nil, map[uint32]string{}},
	} {
		got := Rebalanced(tc.ana, tc.pinned, tc.live)
		if !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLivenessHoldDown: a member counts as joined or gone only after
// RebalanceHold probes in a row agree; a member that comes and goes moves
// nothing; nothing is settled until every member is.
func TestLivenessHoldDown(t *testing.T) {
	var l liveness
	members := []string{"a", "b", "c"}
	for i := 1; i < RebalanceHold; i++ {
		if _, settled := l.observe(members, []string{"a", "b"}); settled {
			t.Fatalf("probe %d: settled before %d probes", i, RebalanceHold)
		}
	}
	live, settled := l.observe(members, []string{"a", "b"})
	if !settled || len(live) != 2 {
		t.Fatalf("after %d probes: live %v settled %v, want a, b settled", RebalanceHold, live, settled)
	}
	// c flaps: alive for fewer probes than the hold-down, each time.
	for range 3 {
		for i := 1; i < RebalanceHold; i++ {
			if live, _ := l.observe(members, []string{"a", "b", "c"}); len(live) != 2 {
				t.Fatalf("c counted as joined after %d probes: %v", i, live)
			}
		}
		if live, _ := l.observe(members, []string{"a", "b"}); len(live) != 2 {
			t.Fatalf("flap: %v", live)
		}
	}
	for range RebalanceHold {
		live, _ = l.observe(members, []string{"a", "b", "c"})
	}
	if len(live) != 3 {
		t.Fatalf("c alive for %d probes: live %v", RebalanceHold, live)
	}
	// a goes: still live until the hold-down passed.
	for i := 1; i < RebalanceHold; i++ {
		if live, _ := l.observe(members, []string{"b", "c"}); len(live) != 3 {
			t.Fatalf("a counted as gone after %d probes: %v", i, live)
		}
	}
	if live, _ := l.observe(members, []string{"b", "c"}); len(live) != 2 || live[0] != "b" {
		t.Fatalf("a gone for %d probes: live %v", RebalanceHold, live)
	}
}

// TestPinEdit: pin and unpin keep the list sorted, nil when empty; an
// unknown ANA group is refused.
func TestPinEdit(t *testing.T) {
	d := GroupDoc{ANAGroups: []GroupConfig{{ID: 1, Preferred: "a"}, {ID: 2, Preferred: "b"}}}
	for _, step := range []struct {
		id  uint32
		pin bool
	}{{2, true}, {1, true}, {2, true}} {
		if err := PinEdit(step.id, step.pin)(&d, GroupView{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(d.Pinned) != 2 || d.Pinned[0] != 1 || d.Pinned[1] != 2 {
		t.Fatalf("pinned %v, want [1 2]", d.Pinned)
	}
	_ = PinEdit(1, false)(&d, GroupView{})
	_ = PinEdit(2, false)(&d, GroupView{})
	if d.Pinned != nil {
		t.Fatalf("pinned %v, want nil", d.Pinned)
	}
	if err := PinEdit(9, true)(&d, GroupView{}); err == nil {
		t.Fatal("pinning ANA group 9 (not the group's) was accepted")
	}
}
