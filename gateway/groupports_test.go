package gateway_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/gateway"
)

// TestPortsEntry: a member's ports entry (ports.<name>) round-trips, is
// the same text whatever the order, and one that is not a path a host
// can use (a wildcard, no transport, a bad service ID) is refused whole.
func TestPortsEntry(t *testing.T) {
	const a, b = "nqn.2024-01.io.nvmetd:a", "nqn.2024-01.io.nvmetd:b"
	ports := []gateway.Port{
		{ID: 2, Transport: "tcp", Address: "2001:db8::2", ServiceID: 4420, Subsystems: []string{b, a}},
		{ID: 1, Transport: "rdma", Address: "192.0.2.2", ServiceID: 4421},
	}
	enc := gateway.EncodePorts(ports)
	if enc != "port 1 rdma 192.0.2.2 4421 -\nport 2 tcp 2001:db8::2 4420 "+a+","+b+"\n" {
		t.Fatalf("entry %q", enc)
	}
	if gateway.EncodePorts([]gateway.Port{ports[1], ports[0]}) != enc {
		t.Fatal("the entry depends on the order of the ports")
	}
	got, err := gateway.ParsePorts("gw-b", enc)
	want := []gateway.Port{
		{ID: 1, Transport: "rdma", Address: "192.0.2.2", ServiceID: 4421},
		{ID: 2, Transport: "tcp", Address: "2001:db8::2", ServiceID: 4420, Subsystems: []string{a, b}},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParsePorts: %+v %v", got, err)
	}
	for _, bad := range []string{
		"port 1 rdma 0.0.0.0 4420 -\n",
		"port 1 rdma :: 4420 -\n",
		"port 1 fc 192.0.2.2 4420 -\n",
		"port 1 tcp 192.0.2.2 0 -\n",
		"port 0 tcp 192.0.2.2 4420 -\n",
		"port 1 tcp host.example 4420 -\n",
		"port 1 tcp 192.0.2.2 4420\n",
		"port 1 tcp 192.0.2.2 4420 -\nlistener x\n",
	} {
		if _, err := gateway.ParsePorts("gw-b", bad); err == nil || !strings.Contains(err.Error(), "ports of member gw-b") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
