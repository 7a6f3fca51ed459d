package gateway

import "testing"

// The drain and the move of a preferred owner (drain.go): testConfig's
// lease 10 s, renew 3 s, margin 2 s, failback delay 5 s; group 1
// preferred by a.

func drained(on bool) func(*Machine) []Action {
	return func(m *Machine) []Action { m.SetDrained(on); return nil }
}

func preferred(g uint32, name string) func(*Machine) []Action {
	return func(m *Machine) []Action { m.SetPreferred(g, name); return nil }
}

// TestMachineDrainReleases: a drained owner makes its group inaccessible,
// then releases it to nobody (the release of a clean stop: the first live
// member fences its clients of the group and takes it), renewing
// meanwhile; released, it takes nothing: not the group released by itself,
// not a free one past a lease, not its own lock, and fences nobody; it
// asks for no failback although it is the preferred owner. Undrained, it
// asks for its group back by the failback path once the failback delay
// after its release has passed.
func TestMachineDrainReleases(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1})
	relByA := Observed{Record: Record{Name: "a", Session: "a-s1", Addrs: []string{"a-addr"}, Released: true, Epoch: 1}}
	ownLock := Observed{Locked: true, LockerSession: "a-s1", Record: Record{Name: "a", Session: "a-s1", Epoch: 1}}
	run(t, m, append(ownedSteps,
		step{drained(true), nil},
		step{tick(100), []string{"group 1: set-ana inaccessible"}},
		step{tick(200), nil},
		step{anaDone(1, false, 300, nil), []string{"group 1: release to "}},
		step{tick(400), nil},
		step{released(1, nil), nil},
		step{tick(500), []string{"group 1: read"}},
		step{read(1, 500, relByA, nil), nil},
		step{tick(20000), []string{"group 1: read"}},
		step{read(1, 20000, free, nil), nil},
		step{tick(23000), []string{"group 1: read"}},
		step{read(1, 23000, expiredFrom("b"), nil), nil},
		step{tick(26000), []string{"group 1: read"}},
		step{read(1, 26000, ownLock, nil), nil},
		step{tick(29000), []string{"group 1: read"}},
		step{read(1, 29000, heldBy("b"), nil), nil},
		step{drained(false), nil},
		step{tick(32000), []string{"group 1: read"}},
		step{read(1, 32000, heldBy("b"), nil), []string{"group 1: request-handover"}},
	))
	if m.Status()[0].Role != Standby {
		t.Fatalf("role %s", m.Status()[0].Role)
	}
}

// TestMachineDrainedFromStart: a gateway that starts drained (its
// restart during the maintenance) takes no group, even one never held
// whose preferred owner it is, and its status says why it does not ask.
func TestMachineDrainedFromStart(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1})
	m.SetDrained(true)
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), nil},
		{tick(15000), []string{"group 1: read"}},
		{read(1, 15000, free, nil), nil},
		{tick(18000), []string{"group 1: read"}},
		{read(1, 18000, heldBy("b"), nil), nil},
	})
	if w := waitWhy(m); w != "this gateway is drained (nvmetctl gateway undrain)" {
		t.Fatalf("failback wait %q", w)
	}
}

// TestMachineDrainDuringFence: drained while it fences an expired holder:
// the fence completes (idempotent for whoever takes the group), the
// group is not taken.
func TestMachineDrainDuringFence(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, expiredFrom("a"), nil), []string{"group 1: fence [a-conn a-rbd] (lease of a (session a-s1) expired without release)"}},
		{drained(true), nil},
		{fenceDone(1, 100, nil), nil},
		{tick(3100), []string{"group 1: read"}},
		{read(1, 3100, expiredFrom("a"), nil), nil},
	})
}

// TestMachineSetPreferredMoves: a version makes b the preferred owner of
// group 1, held by a. b (standby) asks for it by the failback path; a
// honours b's request only once it applied the version too: a request
// read before is ignored, the same request read at a later renewal is
// honoured (inaccessible, then released to b).
func TestMachineSetPreferredMoves(t *testing.T) {
	b := oneGroup("b")
	b.SetReadiness(1, Readiness{Hosts: 1})
	run(t, b, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, heldBy("a"), nil), nil}, // a is the preferred owner
		{preferred(1, "b"), nil},
		{tick(3000), []string{"group 1: read"}},
		{read(1, 3000, heldBy("a"), nil), nil}, // failback delay (5 s from its start)
		{tick(6000), []string{"group 1: read"}},
		{read(1, 6000, heldBy("a"), nil), []string{"group 1: request-handover"}},
	})
	a := oneGroup("a")
	run(t, a, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "b", nil), nil}, // b is not the preferred owner a knows
		step{preferred(1, "b"), nil},
		step{tick(6000), []string{"group 1: renew"}},
		step{renewed(1, "b", nil), []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 6100, nil), []string{"group 1: release to b"}},
	))
}
