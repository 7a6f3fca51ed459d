package gwtarget

import (
	"strings"
	"testing"

	"github.com/nvmetd/nvmetd/target"
)

// TestGroupReadiness: the failback gate's input (gateway/failback.go):
// a group is servable when every enabled namespace of it is online, and a
// host counts when one of its controllers, with I/O queues, is connected
// to a subsystem with a namespace of the group that the host may see.
func TestGroupReadiness(t *testing.T) {
	const sub1, sub2, h1, h2 = "nqn.s1", "nqn.s2", "nqn.h1", "nqn.h2"
	cfg := &target.Config{Subsystems: []target.SubsystemConfig{
		{NQN: sub1, Namespaces: []target.NamespaceConfig{{NSID: 1, ANAGroup: 1}, {NSID: 2, ANAGroup: 2, Hosts: []string{h2}}}},
		{NQN: sub2, Namespaces: []target.NamespaceConfig{{NSID: 1, ANAGroup: 3}}},
	}}
	st := target.Status{
		Subsystems: []target.SubsystemStatus{
			{NQN: sub1, Namespaces: []target.NamespaceStatus{
				{NSID: 1, ANAGroup: 1, Enabled: true, State: target.NamespaceOnline},
				{NSID: 2, ANAGroup: 2, Enabled: true, State: target.NamespaceFailed, Error: "connect to the cluster: permission denied"},
			}},
			{NQN: sub2, Namespaces: []target.NamespaceStatus{{NSID: 1, ANAGroup: 3, Enabled: false, State: target.NamespaceDisabled}}},
		},
		Controllers: []target.ControllerStatus{
			{Subsystem: sub1, HostNQN: h1, IOQueues: 2},
			{Subsystem: sub1, HostNQN: h2, IOQueues: 0}, // admin queue only
			{Subsystem: "nqn.2014-08.org.nvmexpress.discovery", Discovery: true, HostNQN: h2},
		},
	}
	if r := groupReadiness(1, st, cfg); r.Unservable != "" || r.Hosts != 1 {
		t.Errorf("group 1: %+v, want servable with one host", r)
	}
	// Group 2's namespace failed, and only h2 may see it (h2 has no I/O queue).
	if r := groupReadiness(2, st, cfg); !strings.Contains(r.Unservable, "namespace 2 is failed: connect to the cluster") || r.Hosts != 0 {
		t.Errorf("group 2: %+v, want unservable (the failed namespace) and no host", r)
	}
	st.Controllers[1].IOQueues = 2
	if r := groupReadiness(2, st, cfg); r.Hosts != 1 {
		t.Errorf("group 2 with h2's I/O queues: %+v, want one host", r)
	}
	// Group 3: a disabled namespace does not count; no controller on its subsystem.
	if r := groupReadiness(3, st, cfg); r.Unservable != "" || r.Hosts != 0 {
		t.Errorf("group 3: %+v, want servable with no host", r)
	}
	// A group with no namespace: any host controller.
	if r := groupReadiness(9, st, cfg); r.Unservable != "" || r.Hosts != 2 {
		t.Errorf("group 9 (empty): %+v, want servable with two hosts", r)
	}
}
