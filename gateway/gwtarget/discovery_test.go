package gwtarget

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
	"github.com/nvmetd/nvmetd/target"
)

// TestAdvertise: a gateway's ports as the other gateways list them: the
// listen address, or the advertised one; a wildcard port needs one (a
// clear error naming the key otherwise), of its address family, never a
// wildcard itself.
func TestAdvertise(t *testing.T) {
	g, cfg := exampleGateway(t)
	cfg.Ports = append(cfg.Ports, target.PortConfig{ID: 2, Address: "0.0.0.0", ServiceID: 4420, Transport: target.TransportTCP,
		Subsystems: cfg.Ports[0].Subsystems})
	err := g.Validate(cfg)
	if err == nil || !strings.Contains(err.Error(), "gateway.advertise: port 2 listens on 0.0.0.0") {
		t.Fatalf("a wildcard port without an advertised address: %v", err)
	}
	for _, tc := range []struct {
		adv  []AdvertiseConfig
		want string
	}{
		{[]AdvertiseConfig{{PortID: 2, Address: "0.0.0.0"}}, "advertise[0].address"},
		{[]AdvertiseConfig{{PortID: 2, Address: "2001:db8::1"}}, "not of the address family of port 2"},
		{[]AdvertiseConfig{{PortID: 3, Address: "192.0.2.1"}}, "advertise[0].port_id: no port has ID 3"},
		{[]AdvertiseConfig{{PortID: 2, Address: "gw-a.example"}}, "advertise[0].address"},
	} {
		g.Advertise = tc.adv
		if err := g.Validate(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("advertise %+v: %v, want %q", tc.adv, err, tc.want)
		}
	}
	g.Advertise = []AdvertiseConfig{{PortID: 2, Address: "192.0.2.11"}, {PortID: 1, Address: "192.0.2.12"}}
	if err := g.Validate(cfg); err != nil {
		t.Fatal(err)
	}
	sub := cfg.Ports[0].Subsystems
	want := []gateway.Port{
		{ID: 1, Transport: "rdma", Address: "192.0.2.12", ServiceID: 4420, Subsystems: sub},
		{ID: 2, Transport: "tcp", Address: "192.0.2.11", ServiceID: 4420, Subsystems: sub},
	}
	if got := g.advertised(cfg); !reflect.DeepEqual(got, want) {
		t.Fatalf("advertised\n got %+v\nwant %+v", got, want)
	}
	// Every member's ports but self's, to the target.
	peers := PeerPorts("gw-a", map[string][]gateway.Port{"gw-a": want, "gw-c": want[1:], "gw-b": want[:1]})
	if len(peers) != 2 || peers[0].Gateway != "gw-b" || peers[0].Address != "192.0.2.12" || peers[1].Gateway != "gw-c" || peers[1].Transport != "tcp" {
		t.Fatalf("peer ports %+v", peers)
	}
}
