package gwtarget

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/target"
)

const (
	nqnA = "nqn.2024-01.io.nvmetd:a"
	nqnB = "nqn.2024-01.io.nvmetd:b"
)

// local is one gateway's file: its port, its range on subsystem a, and
// the group's part (subsystem a with an rbd namespace, a host).
func local() *target.Config {
	c := &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: 4420, Subsystems: []string{nqnA}}},
		Subsystems: []target.SubsystemConfig{{NQN: nqnA, AllowAnyHost: true, CNTLIDMin: 1, CNTLIDMax: 100,
			Namespaces: []target.NamespaceConfig{{NSID: 1, ANAGroup: 1, Backend: target.BackendConfig{Kind: "memory", Size: "1MiB"}}}}},
		Hosts: []target.HostConfig{{NQN: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001", DHCHAPKey: "file:/etc/nvmetd/host1.key"}},
	}
	c.ApplyDefaults()
	return c
}

// TestGroupDocRoundTrip: the group's part of a configuration, stored as
// YAML, reads back the same; the gateway's own CNTLID range is not in it.
func TestGroupDocRoundTrip(t *testing.T) {
	d := SplitGroup(local(), []GroupConfig{{ID: 2, Preferred: "gw-b"}, {ID: 1, Preferred: "gw-a"}})
	if d.Subsystems[0].CNTLIDMin != 0 || d.Subsystems[0].CNTLIDMax != 0 || d.ANAGroups[0].ID != 1 {
		t.Fatalf("split: %+v", d)
	}
	b, err := EncodeGroup(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "cntlid") || strings.Contains(string(b), "firmware_revision") || !strings.Contains(string(b), "ana_groups:") || !strings.Contains(string(b), "file:/etc/nvmetd/host1.key") {
		t.Fatalf("stored:\n%s", b)
	}
	back, err := DecodeGroup(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := EncodeGroup(back)
	if string(b) != string(b2) || !reflect.DeepEqual(back.ANAGroups, d.ANAGroups) {
		t.Fatalf("read back differently:\n%s\n---\n%s", b, b2)
	}
	if _, err := DecodeGroup([]byte("subsystems: [{nqn: x, bogus: 1}]")); err == nil {
		t.Fatal("an unknown key decoded")
	}
}

// TestFileRangesDefaulted: a file's subsystem without a CNTLID range
// (after loading: the target's default, 1-65519) takes the gateway's
// cntlid_min/max when they are set, and keeps the default otherwise; an
// explicit range is kept.
func TestFileRangesDefaulted(t *testing.T) {
	l := local()
	l.Subsystems[0].CNTLIDMin, l.Subsystems[0].CNTLIDMax = 0, 0
	l.ApplyDefaults()
	g := &Config{CNTLIDMin: 1001, CNTLIDMax: 2000}
	m := MergeGroup(l, SplitGroup(l, []GroupConfig{{ID: 1, Preferred: "gw-a"}}), FileRanges(g, l))
	if got := [2]uint16{m.Subsystems[0].CNTLIDMin, m.Subsystems[0].CNTLIDMax}; got != [2]uint16{1001, 2000} {
		t.Fatalf("a defaulted subsystem with gateway.cntlid_min/max 1001-2000: %v", got)
	}
	if r := FileRanges(&Config{}, l); len(r.Subsystems) != 1 || r.Subsystems[nqnA] != [2]uint16{target.DefaultCNTLIDMin, target.DefaultCNTLIDMax} {
		t.Fatalf("without gateway.cntlid_min/max: %+v", r)
	}
	l.Subsystems[0].CNTLIDMin, l.Subsystems[0].CNTLIDMax = 1, 100
	if r := FileRanges(g, l); r.Subsystems[nqnA] != [2]uint16{1, 100} {
		t.Fatalf("an explicit range: %+v", r)
	}
}

// TestMergeGroup: a gateway serves the group's subsystems and hosts with
// its own ports and ranges: its file's range for a subsystem it lists,
// its default for the others; every port serves every subsystem.
func TestMergeGroup(t *testing.T) {
	l := local()
	d := SplitGroup(l, []GroupConfig{{ID: 1, Preferred: "gw-a"}})
	d.Subsystems = append(d.Subsystems, target.SubsystemConfig{NQN: nqnB, AllowAnyHost: true})
	g := &Config{CNTLIDMin: 1001, CNTLIDMax: 2000}
	m := MergeGroup(l, d, FileRanges(g, l))
	if len(m.Subsystems) != 2 || m.Subsystems[0].CNTLIDMin != 1 || m.Subsystems[0].CNTLIDMax != 100 ||
		m.Subsystems[1].CNTLIDMin != 1001 || m.Subsystems[1].CNTLIDMax != 2000 {
		t.Fatalf("ranges: %+v", m.Subsystems)
	}
	if !reflect.DeepEqual(m.Ports[0].Subsystems, []string{nqnA, nqnB}) || m.Ports[0].Address != "127.0.0.1" {
		t.Fatalf("port: %+v", m.Ports[0])
	}
	if len(l.Subsystems) != 1 || len(l.Ports[0].Subsystems) != 1 {
		t.Fatal("the local configuration was changed")
	}
	m.ApplyDefaults()
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestValidateGroup: a group configuration is refused as a whole, each
// problem a line: a namespace outside the ANA groups, an ANA group listed
// twice or without a preferred owner, a literal DH-HMAC-CHAP secret, two
// namespaces on one image, overlapping CNTLID ranges of two members.
func TestValidateGroup(t *testing.T) {
	l := local()
	members := []gateway.Member{
		{Name: "gw-a", CNTLIDs: map[string][2]uint16{nqnA: {1, 100}, gateway.DefaultCNTLIDKey: {1001, 2000}}},
		{Name: "gw-b", CNTLIDs: map[string][2]uint16{nqnA: {101, 200}, gateway.DefaultCNTLIDKey: {2001, 3000}}},
	}
	ok := SplitGroup(l, []GroupConfig{{ID: 1, Preferred: "gw-a"}})
	ok.Subsystems = append(ok.Subsystems, target.SubsystemConfig{NQN: nqnB, AllowAnyHost: true})
	if err := ValidateGroup(ok, MergeGroup(l, ok, Ranges{}), members); err != nil {
		t.Fatalf("a valid group: %v", err)
	}
	bad := SplitGroup(l, []GroupConfig{{ID: 1, Preferred: "gw-a"}, {ID: 1}})
	bad.Subsystems[0].Namespaces = append(bad.Subsystems[0].Namespaces,
		target.NamespaceConfig{NSID: 2, ANAGroup: 5, Backend: target.BackendConfig{Kind: "rbd", Pool: "rbd", Image: "img"}},
		target.NamespaceConfig{NSID: 3, ANAGroup: 1, Backend: target.BackendConfig{Kind: "rbd", Pool: "rbd", Image: "img"}})
	bad.Subsystems = append(bad.Subsystems, target.SubsystemConfig{NQN: nqnB, AllowAnyHost: true})
	bad.Hosts[0].DHCHAPKey = "DHHC-1:00:ia6zGodOr2SAAb2G3oEnVnYX/8C7s6nRIAKCqA5Qx5Myxk7E:"
	members[1].CNTLIDs[gateway.DefaultCNTLIDKey] = [2]uint16{1500, 2500}
	err := ValidateGroup(bad, MergeGroup(l, bad, Ranges{}), members)
	if !errors.Is(err, ErrGroupInvalid) {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{
		"an image can be one namespace only",
		"ana_groups[1].id: ANA group 1 is listed twice",
		"ana_groups[1].preferred: required",
		"subsystems[0].namespaces[1].ana_group: ANA group 5 is not one of the group's",
		"hosts[0].dhchap_key: a literal secret",
		"subsystem " + nqnB + ": cntlid 1001-2000 of gateway gw-a overlaps 1500-2500 of gateway gw-b",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in:\n%v", want, err)
		}
	}
}

func TestRADOSCanonical(t *testing.T) {
	got := radosCanonical("3s", []GroupConfig{{ID: 2, Preferred: "gw-b"}, {ID: 1, Preferred: "gw-a"}})
	if got != "ana_group 1 preferred gw-a\nana_group 2 preferred gw-b\nlease 3s\n" {
		t.Fatalf("%q", got)
	}
}
