package gateway_test

import (
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
)

// TestMemberConflicts: the members of a group must serve each shared
// subsystem with disjoint CNTLID ranges and have unique names; every
// conflict is one line naming both sides. An entry under this gateway's
// name from the same identity is its own (a restart), not a conflict.
func TestMemberConflicts(t *testing.T) {
	const nqn, other = "nqn.2024-01.io.nvmetd:gw", "nqn.2024-01.io.nvmetd:solo"
	a := gateway.Member{Name: "gw-a", Identity: "host-a 10.0.0.1:4420", CNTLIDs: map[string][2]uint16{nqn: {1, 1000}}}
	entry := func(m gateway.Member) string { return m.Encode() }
	b := gateway.Member{Name: "gw-b", Identity: "host-b 10.0.0.2:4420", CNTLIDs: map[string][2]uint16{nqn: {1001, 2000}, other: {1, 0xFFEF}}}
	if c := gateway.MemberConflicts(a, map[string]string{"gw-a": entry(a), "gw-b": entry(b)}); len(c) != 0 {
		t.Fatalf("disjoint ranges, own entry: %q", c)
	}
	for _, tc := range []struct {
		name    string
		entries map[string]string
		want    []string
	}{
		{"overlap", map[string]string{"gw-b": entry(gateway.Member{Name: "gw-b", Identity: "host-b",
			CNTLIDs: map[string][2]uint16{nqn: {1000, 2000}}})},
			[]string{"subsystem " + nqn + ": cntlid 1-1000 here overlaps 1000-2000 of gateway gw-b"}},
		{"default ranges", map[string]string{"gw-b": entry(gateway.Member{Name: "gw-b", Identity: "host-b",
			CNTLIDs: map[string][2]uint16{nqn: {1, 0xFFEF}}})},
			[]string{"cntlid 1-1000 here overlaps 1-65519 of gateway gw-b"}},
		{"same name elsewhere", map[string]string{"gw-a": entry(gateway.Member{Name: "gw-a", Identity: "host-c 10.0.0.3:4420",
			CNTLIDs: map[string][2]uint16{nqn: {3001, 4000}}})},
			[]string{`name gw-a: already a member of the group from "host-c 10.0.0.3:4420"`}},
		{"unreadable", map[string]string{"gw-b": "cntlid x\n"}, []string{"member gw-b"}},
	} {
		c := gateway.MemberConflicts(a, tc.entries)
		if len(c) != len(tc.want) {
			t.Fatalf("%s: %q, want %d conflicts", tc.name, c, len(tc.want))
		}
		for i, w := range tc.want {
			if !strings.Contains(c[i], w) {
				t.Errorf("%s: %q, want %q", tc.name, c[i], w)
			}
		}
	}
	// Round trip.
	got, err := gateway.ParseMember("gw-b", b.Encode())
	if err != nil || got.Identity != b.Identity || got.CNTLIDs[nqn] != b.CNTLIDs[nqn] || got.CNTLIDs[other] != b.CNTLIDs[other] {
		t.Fatalf("ParseMember: %+v %v", got, err)
	}
}
