package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// testConfig: lease 10 s, renew every 3 s, margin 2 s, failback 5 s; group
// 1 preferred by a, group 2 by b.
func testConfig(name string) Config {
	return Config{Name: name, Session: name + "-s1", Lease: 10 * time.Second, RenewInterval: 3 * time.Second,
		Margin: 2 * time.Second, FailbackDelay: 5 * time.Second, Groups: map[uint32]string{1: "a", 2: "b"}}
}

// step is one input and the actions it must produce (as Action.String).
type step struct {
	in   func(m *Machine) []Action
	want []string
}

func tick(ms int) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.Tick(at(ms)) }
}

// poke is a watch notification.
func poke(m *Machine) []Action {
	m.Notified()
	return nil
}

func read(g uint32, ms int, o Observed, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.ReadDone(g, at(ms), o, err) }
}

func acquired(g uint32, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.AcquireDone(g, err) }
}

func renewed(g uint32, req string, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.RenewDone(g, req, err) }
}

func fenceDone(g uint32, ms int, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.FenceDone(g, at(ms), err) }
}

func released(g uint32, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.ReleaseDone(g, err) }
}

func anaDone(g uint32, optimized bool, ms int, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.SetANADone(g, optimized, at(ms), err) }
}

func requested(g uint32, err error) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.RequestDone(g, err) }
}

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		got := []string{}
		for _, a := range s.in(m) {
			if a.Kind == ActServeUntil {
				continue // its own test: TestMachineServeUntil
			}
			got = append(got, a.String())
		}
		want := s.want
		if want == nil {
			want = []string{}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("step %d: actions\n  %s\nwant\n  %s", i, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// oneGroup is a machine with only group 1 (preferred by a).
func oneGroup(name string) *Machine {
	c := testConfig(name)
	c.Groups = map[uint32]string{1: "a"}
	m := NewMachine(c)
	m.ConfigChecked(true, "")
	return m
}

var free = Observed{}

func heldBy(name string) Observed {
	return Observed{Locked: true, LockerSession: name + "-s1", Record: Record{Name: name, Session: name + "-s1", Addrs: []string{name + "-addr"}, Epoch: 1}}
}

func expiredFrom(name string) Observed {
	return Observed{Record: Record{Name: name, Session: name + "-s1", Addrs: []string{name + "-conn", name + "-rbd"}, Epoch: 1}}
}

// ownedSteps brings a (preferred) to owner of group 1 at time 0.
var ownedSteps = []step{
	{tick(0), []string{"group 1: read"}},
	{read(1, 0, free, nil), []string{"group 1: acquire"}},
	{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	{anaDone(1, true, 0, nil), nil},
}

func TestMachineOwnerRenews(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{tick(2999), nil},
		step{tick(3000), []string{"group 1: renew"}},
		step{tick(4000), nil}, // one operation at a time
		step{renewed(1, "", nil), nil},
		step{tick(5999), nil},
		step{tick(6000), []string{"group 1: renew"}},
		step{renewed(1, "", nil), nil},
		// The lease now runs to 16 s: no step-down at 13.9 s.
		step{tick(9000), []string{"group 1: renew"}},
		step{renewed(1, "", nil), nil},
	))
	if st := m.Status()[0]; st.Role != Owner || st.Holder != "a" {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineRenewFailsStepsDown: renewals fail (the cluster is out of
// reach); the owner goes inaccessible at lease - margin after the last
// renewal it sent that succeeded, before the lease can end on the
// cluster's clock (which started it later).
func TestMachineRenewFailsStepsDown(t *testing.T) {
	m := oneGroup("a")
	timeout := errors.New("renew: connection timed out")
	run(t, m, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "", nil), nil}, // lease to 13 s (sent at 3 s)
		step{tick(6000), []string{"group 1: renew"}},
		step{renewed(1, "", timeout), nil},
		step{tick(9000), []string{"group 1: renew"}},
		// A renewal still out when the deadline comes does not save it.
		step{tick(10999), nil},
		step{tick(11000), []string{"group 1: set-ana inaccessible", "group 1: step-down (no successful renewal for 8s (lease 10s, margin 2s))"}},
		// Its late answer is ignored.
		step{renewed(1, "", nil), nil},
		step{tick(11001), []string{"group 1: read"}},
	))
	if st := m.Status()[0]; st.Role != Standby || st.LastError == "" {
		t.Fatalf("status %+v", st)
	}
}

func TestMachineLockLostStepsDown(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "", fmt.Errorf("renew: %w", ErrLockBusy)), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (the lock is no longer ours: renew: gateway: the group's lock is held by another gateway)"}},
	))
}

// TestMachineTakeover: b sees a's lease expired: it fences every address
// of a's record, and only then acquires and goes optimized.
func TestMachineTakeover(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, heldBy("a"), nil), nil},
		{poke, nil},
		{tick(100), []string{"group 1: read"}},
		{read(1, 100, expiredFrom("a"), nil), []string{"group 1: fence [a-conn a-rbd] (lease of a (session a-s1) expired without release)"}},
		{tick(200), nil}, // fencing: no other operation
		{fenceDone(1, 300, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	})
	if st := m.Status()[0]; st.Role != Owner || st.Fences != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineFenceFailsNoTakeover: a failed blocklist never leads to an
// acquisition; the next tick starts over from a read.
func TestMachineFenceFailsNoTakeover(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, expiredFrom("a"), nil), []string{"group 1: fence [a-conn a-rbd] (lease of a (session a-s1) expired without release)"}},
		{fenceDone(1, 100, errors.New("osd blocklist add: EACCES")), nil},
		{poke, nil},
		{tick(200), []string{"group 1: read"}},
		{read(1, 200, expiredFrom("a"), nil), []string{"group 1: fence [a-conn a-rbd] (lease of a (session a-s1) expired without release)"}},
		{fenceDone(1, 300, nil), []string{"group 1: acquire"}},
		// Another survivor was faster: stay standby.
		{acquired(1, ErrLockBusy), nil},
		{poke, nil},
		{tick(400), []string{"group 1: read"}},
	})
	if st := m.Status()[0]; st.Role != Standby || !strings.Contains(st.LastError, "held by another") {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineNonPreferredWaits: a free group that was never held (or was
// released with no recipient) goes to its preferred owner at once, to
// another gateway only after a lease.
func TestMachineNonPreferredWaits(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), nil},
		{tick(1000), nil}, // standby reads every RenewInterval
		{tick(9999), []string{"group 1: read"}},
		{read(1, 9999, free, nil), nil},
		{poke, nil},
		{tick(10000), []string{"group 1: read"}},
		{read(1, 10000, free, nil), []string{"group 1: acquire"}},
	})
}

// TestMachineFailback: b holds group 1 (preferred a); a, once up for the
// failback delay, asks for it; b goes inaccessible, releases to a; a takes
// it without fencing.
func TestMachineFailback(t *testing.T) {
	a, b := oneGroup("a"), oneGroup("b")
	a.SetReadiness(1, Readiness{Hosts: 1})
	// b owns the group (a was down: b waited a lease, then took it).
	run(t, b, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), nil},
		{tick(10000), []string{"group 1: read"}},
		{read(1, 10000, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{anaDone(1, true, 10000, nil), nil},
	})
	held := heldBy("b")
	run(t, b, []step{
		{tick(13000), []string{"group 1: renew"}},
		{renewed(1, "", nil), nil},
	})
	run(t, a, []step{
		{tick(11000), []string{"group 1: read"}},
		{read(1, 11000, held, nil), nil}, // up for 0 s
		{tick(15999), []string{"group 1: read"}},
		{read(1, 15999, held, nil), nil},
		{poke, nil},
		{tick(16000), []string{"group 1: read"}},
		{read(1, 16000, held, nil), []string{"group 1: request-handover"}},
		{requested(1, nil), nil},
		{poke, nil},
		{tick(16100), []string{"group 1: read"}},
	})
	held.HandoverRequest = "a"
	run(t, a, []step{{read(1, 16100, held, nil), nil}}) // asked already
	run(t, b, []step{
		{tick(16200), []string{"group 1: renew"}},
		{renewed(1, "a", nil), []string{"group 1: set-ana inaccessible"}},
		{anaDone(1, false, 16250, nil), []string{"group 1: release to a"}},
		{tick(16300), nil},
		{released(1, nil), nil},
		{tick(16400), []string{"group 1: read"}},
	})
	rel := Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-addr"}, Released: true, HandoverTo: "a", Epoch: 1}}
	run(t, a, []step{
		{poke, nil},
		{tick(16500), []string{"group 1: read"}},
		// Released or not, b's clients of the group are fenced first
		// (issue 21.3: the drain does not cover every write in flight).
		{read(1, 16500, rel, nil), []string{"group 1: fence [b-addr] (hand-over from b (session b-s1): its clients of the group are fenced before serving)"}},
		{fenceDone(1, 16550, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	})
	// b, seeing the group released to a, does not race it.
	run(t, b, []step{{read(1, 16600, rel, nil), nil}})
	if st := a.Status()[0]; st.Fences != 1 || st.Role != Owner {
		t.Fatalf("a: %+v", st)
	}
	// a dies: b fences it and takes the group back, with new clients
	// (a fenced b's old ones; b fences them again with its own, as
	// every acquisition that replaces them does: its released record
	// named b-addr).
	run(t, b, []step{
		{poke, nil},
		{tick(30000), []string{"group 1: read"}},
		{read(1, 30000, Observed{Record: Record{Name: "a", Session: "a-s1", Addrs: []string{"a-rbd"}, Epoch: 2}}, nil),
			[]string{"group 1: fence [a-rbd b-addr] and own clients (lease of a (session a-s1) expired without release; " + ownReason + ")"}},
		{fenceDone(1, 30100, nil), []string{"group 1: acquire (reopen)"}},
	})
}

// TestMachineHandoverOnlyToPreferred: a request from a gateway that is not
// the group's preferred owner is ignored.
func TestMachineHandoverOnlyToPreferred(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "c", nil), nil},
	))
}

// TestMachineFencedExits: an operation that finds this gateway fenced
// (ESHUTDOWN) makes it go inaccessible on what it owns and exit.
func TestMachineFencedExits(t *testing.T) {
	c := testConfig("a")
	m := NewMachine(c)
	m.ConfigChecked(true, "")
	fenced := fmt.Errorf("renew: %w", ErrFenced)
	run(t, m, []step{
		{tick(0), []string{"group 1: read", "group 2: read"}},
		{read(1, 0, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{read(2, 0, heldBy("b"), nil), nil},
		{tick(3000), []string{"group 1: renew", "group 2: read"}},
		{renewed(1, "", fenced), []string{"group 1: set-ana inaccessible", "group 1: answer-in-flight (this gateway was fenced)",
			"exit-fenced (renew: gateway: this gateway was fenced (its RADOS client is blocklisted))"}},
		{read(2, 3000, free, nil), nil},
		{tick(4000), nil},
	})
	if !m.Exited() {
		t.Fatal("not exited")
	}
}

// TestMachineFrozenOwner: the owner was frozen (SIGSTOP) past its lease;
// when it runs again its first tick steps down before anything else, and
// the renewal it then sends finds it fenced.
func TestMachineFrozenOwner(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{tick(60000), []string{"group 1: set-ana inaccessible", "group 1: step-down (no successful renewal for 1m0s (lease 10s, margin 2s))"}},
		step{anaDone(1, false, 60000, nil), nil},
		step{tick(60001), []string{"group 1: read"}},
		// Fenced: what may still be stuck in its backends is answered
		// before the exit (the renewal step-down answered nothing).
		step{read(1, 60001, heldBy("b"), fmt.Errorf("read: %w", ErrFenced)), []string{"group 1: answer-in-flight (this gateway was fenced)",
			"exit-fenced (read: gateway: this gateway was fenced (its RADOS client is blocklisted))"}},
	))
}

// TestMachineConfigMismatch: a gateway whose group configuration differs
// from the cluster's never takes a group, even a free one.
func TestMachineConfigMismatch(t *testing.T) {
	c := testConfig("a")
	c.Groups = map[uint32]string{1: "a"}
	m := NewMachine(c)
	m.ConfigChecked(false, "group 1 preferred: a here, b in the cluster")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), nil},
		{tick(60000), []string{"group 1: read"}},
		{read(1, 60000, expiredFrom("b"), nil), nil},
	})
	if !strings.Contains(m.Degraded(), "b in the cluster") {
		t.Fatalf("degraded %q", m.Degraded())
	}
}

// TestMachineOwnLockAgain: after stepping down, a gateway that finds its
// own session still holding the lock takes it again without fencing
// itself; an expired record of its own session likewise.
func TestMachineOwnLockAgain(t *testing.T) {
	m := oneGroup("b")
	own := heldBy("b")
	mine := expiredFrom("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, own, nil), []string{"group 1: acquire"}},
		{acquired(1, errors.New("timeout")), nil},
		{poke, nil},
		{tick(100), []string{"group 1: read"}},
		{read(1, 100, mine, nil), []string{"group 1: acquire"}},
	})
}

func TestConfigValidate(t *testing.T) {
	good := testConfig("a")
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func(*Config){
		func(c *Config) { c.Name = "" },
		func(c *Config) { c.Margin = c.Lease },
		func(c *Config) { c.RenewInterval = 8 * time.Second },
		func(c *Config) { c.Groups = nil },
	} {
		c := testConfig("a")
		f(&c)
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
}

func TestMachineShutdownReleases(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{func(m *Machine) []Action { return m.Shutdown() }, []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 10, nil), []string{"group 1: release to "}},
		step{tick(1000), nil},
	))
}

// TestMachineReleasedToNobody: a group its holder released at a clean stop
// is taken at once by a gateway that is not its preferred owner, after it
// fenced the holder's clients of the group (issue 21.3); one whose record
// names no client (no rbd namespace) needs no fence.
func TestMachineReleasedToNobody(t *testing.T) {
	m := oneGroup("b")
	rel := Observed{Record: Record{Name: "a", Session: "a-s1", Addrs: []string{"a-addr"}, Released: true}}
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, rel, nil), []string{"group 1: fence [a-addr] (hand-over from a (session a-s1): its clients of the group are fenced before serving)"}},
		{fenceDone(1, 10, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	})
	m = oneGroup("b")
	rel.Record.Addrs = nil
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, rel, nil), []string{"group 1: acquire"}},
	})
}

// TestMachineServeFailed: the target refuses to make an acquired group
// optimized: the gateway releases it to nobody instead of holding it down
// (once the group is back to inaccessible here), and does not take it
// again for one lease (a survivor takes it meanwhile).
func TestMachineServeFailed(t *testing.T) {
	m := oneGroup("a")
	refused := errors.New("reload: port 1: address in use")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{anaDone(1, true, 100, refused), []string{
			"group 1: set-ana inaccessible",
			"group 1: step-down (the target could not serve it: reload: port 1: address in use)"}},
		{anaDone(1, false, 150, nil), []string{"group 1: release to "}},
		{tick(1000), nil}, // the release is out
		{released(1, nil), nil},
		// Released to nobody and free: not taken again within the lease.
		{tick(2000), []string{"group 1: read"}},
		{read(1, 2000, Observed{Record: Record{Name: "a", Session: "a-s1", Released: true, Epoch: 1}}, nil), nil},
		// Nor is its own lock, if the release had not gone through.
		{tick(5000), []string{"group 1: read"}},
		{read(1, 5000, heldBy("a"), nil), nil},
		// After the lease it may serve it again, on new clients: what
		// failed may have been its clients (its own are fenced first).
		{tick(10100), []string{"group 1: read"}},
		{read(1, 10100, free, nil), []string{"group 1: fence [a-addr] and own clients (taken on new clients: a write of this gateway's old ones may still be in flight)"}},
		{fenceDone(1, 10200, nil), []string{"group 1: acquire (reopen)"}},
	})
	if st := m.Status()[0]; st.LastError != refused.Error() {
		t.Fatalf("status %+v: want the refusal as the last error", st)
	}
	// A result reported for a group with no change out changes nothing.
	if acts := m.SetANADone(2, true, at(0), refused); acts != nil {
		t.Fatalf("SetANADone of an unknown group: %v", acts)
	}
}

// epochOf runs in and returns the epoch of the ActAcquire it emits (it
// must emit one).
func epochOf(t *testing.T, m *Machine, in func(*Machine) []Action) uint64 {
	t.Helper()
	for _, a := range in(m) {
		if a.Kind == ActAcquire {
			return a.Epoch
		}
	}
	t.Fatal("no acquire")
	return 0
}

// TestMachineEpochs: each acquisition writes one more than the highest
// epoch seen; renewals and the release write the same epoch.
func TestMachineEpochs(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{{tick(0), []string{"group 1: read"}}})
	exp := expiredFrom("a")
	exp.Record.Epoch = 5
	run(t, m, []step{{read(1, 0, exp, nil), []string{"group 1: fence [a-conn a-rbd] (lease of a (session a-s1) expired without release)"}}})
	if e := epochOf(t, m, fenceDone(1, 100, nil)); e != 6 {
		t.Fatalf("acquire epoch %d, want 6", e)
	}
	run(t, m, []step{{acquired(1, nil), []string{"group 1: set-ana optimized"}}, {anaDone(1, true, 150, nil), nil}})
	if acts := m.Tick(at(3100)); len(acts) != 1 || acts[0].Kind != ActRenew || acts[0].Epoch != 6 {
		t.Fatalf("renew %+v, want one with epoch 6", acts)
	}
	run(t, m, []step{{renewed(1, "a", nil), []string{"group 1: set-ana inaccessible"}}})
	acts := m.SetANADone(1, false, at(3200), nil)
	if len(acts) != 1 || acts[0].Kind != ActRelease || acts[0].Epoch != 6 {
		t.Fatalf("release %+v, want epoch 6", acts)
	}
}

// TestMachineRecordLostFences (issue 21.7): a standby saw a hold group 1;
// the group object is then removed (`rados rm`: lock and record gone)
// while a may still write. The standby must not take the group as one
// never held: it fences a (its last known record) first, and writes a
// higher epoch.
func TestMachineRecordLostFences(t *testing.T) {
	m := oneGroup("b")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, heldBy("a"), nil), nil},
		{tick(3000), []string{"group 1: read"}},
		{read(1, 3000, free, nil), []string{"group 1: fence [a-addr] (the group's record went from epoch 1 (a, session a-s1) to 0: the last known holder may still write)"}},
	})
	if e := epochOf(t, m, fenceDone(1, 3100, nil)); e != 2 {
		t.Fatalf("acquire epoch %d, want 2", e)
	}
	if st := m.Status()[0]; st.Fences != 1 {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineRecordRolledBackFences: the record goes back to a lower epoch
// (rewritten by a gateway that did not see the higher one, after the
// object was removed): both its holder and the last known one are fenced.
func TestMachineRecordRolledBackFences(t *testing.T) {
	m := oneGroup("b")
	held := heldBy("a")
	held.Record.Epoch = 3
	c := expiredFrom("c")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, held, nil), nil},
		{tick(3000), []string{"group 1: read"}},
		// c took the removed object (epoch 1) and holds it: nothing to do.
		{read(1, 3000, heldBy("c"), nil), nil},
		{tick(6000), []string{"group 1: read"}},
		{read(1, 6000, c, nil), []string{"group 1: fence [a-addr c-conn c-rbd] (the group's record went from epoch 3 (a, session a-s1) to 1: the last known holder may still write)"}},
	})
	if e := epochOf(t, m, fenceDone(1, 6100, nil)); e != 4 {
		t.Fatalf("acquire epoch %d, want 4", e)
	}
}

// TestMachineOwnRecordLost: the group object is removed while this
// gateway holds it: its renewal fails (the lock is gone), it steps down,
// and, the last record known being its own, takes the group again
// without fencing itself.
func TestMachineOwnRecordLost(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "", fmt.Errorf("renew: %w (it expired)", ErrLockBusy)), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (the lock is no longer ours: renew: gateway: the group's lock is held by another gateway (it expired))"}},
		step{tick(3001), []string{"group 1: read"}},
	))
	if e := epochOf(t, m, read(1, 3001, free, nil)); e != 2 {
		t.Fatalf("acquire epoch %d, want 2", e)
	}
}

// ownedByB: b (not preferred) takes group 1 after a lease with nobody
// there and serves it from 10 s.
var ownedByB = []step{
	{tick(0), []string{"group 1: read"}},
	{read(1, 0, free, nil), nil},
	{tick(10000), []string{"group 1: read"}},
	{read(1, 10000, free, nil), []string{"group 1: acquire"}},
	{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	{anaDone(1, true, 10000, nil), nil},
}

// TestMachineReleaseWaitsForANA (issue 21.4): at failback the holder
// writes no release until the group is inaccessible on its ports: a
// failed ANA change is retried, the lease renewed meanwhile, and the
// release follows the first change that applies.
func TestMachineReleaseWaitsForANA(t *testing.T) {
	m := oneGroup("b")
	refused := errors.New("reload: key file unreadable")
	run(t, m, append(ownedByB,
		step{tick(13000), []string{"group 1: renew"}},
		step{renewed(1, "a", nil), []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 13100, refused), nil}, // no release
		step{tick(14000), nil},
		// Retried after RenewInterval; the lease is renewed too.
		step{tick(16100), []string{"group 1: set-ana inaccessible", "group 1: renew"}},
		step{renewed(1, "a", nil), nil},
		step{anaDone(1, false, 16200, nil), []string{"group 1: release to a"}},
	))
	if st := m.Status()[0]; st.Role != Releasing {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineStepDownANAFailsExits (issue 21.4): renewals fail and the
// owner steps down, but the target refuses to make the group
// inaccessible: the change is retried every RenewInterval and, failing
// for a whole lease, the gateway exits (stops serving by other means;
// no release was written, so the next owner fences it).
func TestMachineStepDownANAFailsExits(t *testing.T) {
	m := oneGroup("a")
	refused := errors.New("reload: key file unreadable")
	timeout := errors.New("renew: timed out")
	run(t, m, append(ownedSteps,
		step{tick(3000), []string{"group 1: renew"}},
		step{renewed(1, "", timeout), nil},
		step{tick(8000), []string{"group 1: set-ana inaccessible", "group 1: step-down (no successful renewal for 8s (lease 10s, margin 2s))"}},
		step{anaDone(1, false, 8000, refused), nil},
		step{tick(11000), []string{"group 1: set-ana inaccessible", "group 1: read"}},
		step{anaDone(1, false, 11000, refused), nil},
		step{tick(14000), []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 14000, refused), nil},
		step{tick(17999), []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 17999, refused), nil},
		step{tick(18000), []string{"exit-step-down-failed (group 1 could not be made inaccessible for 10s: reload: key file unreadable)"}},
		step{tick(19000), nil},
	))
	if !m.Exited() {
		t.Fatal("not exited")
	}
}

// TestMachineShutdownANAFails: at a clean stop a group whose inaccessible
// change fails is not released (its lease ends; the next owner fences).
func TestMachineShutdownANAFails(t *testing.T) {
	m := oneGroup("a")
	run(t, m, append(ownedSteps,
		step{func(m *Machine) []Action { return m.Shutdown() }, []string{"group 1: set-ana inaccessible"}},
		step{anaDone(1, false, 10, errors.New("reload failed")), nil},
		step{tick(1000), nil},
	))
}

// TestMachineANAOneAtATime: a step-down while the optimized change is
// still out waits for it, then makes the group inaccessible.
func TestMachineANAOneAtATime(t *testing.T) {
	m := oneGroup("a")
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{tick(3000), []string{"group 1: renew"}},
		{renewed(1, "", ErrLockBusy), []string{"group 1: step-down (the lock is no longer ours: gateway: the group's lock is held by another gateway)"}},
		{anaDone(1, true, 3100, nil), []string{"group 1: set-ana inaccessible"}},
	})
}

// TestMachineServeUntil: the serving deadline is the moment the machine
// would step down for want of a renewal (the lease's earliest end less the
// margin): emitted on an acquisition before its set-ana optimized, and
// after every renewal, moved from the renewal's send time; a failed
// renewal moves nothing, and the tick steps down exactly at it.
func TestMachineServeUntil(t *testing.T) {
	m := oneGroup("a")
	cfg := testConfig("a")
	var acts []Action
	acts = append(acts, m.Tick(at(0))...)
	acts = append(acts, m.ReadDone(1, at(10), Observed{}, nil)...)
	var acq bool
	for _, a := range acts {
		acq = acq || a.Kind == ActAcquire
	}
	if !acq {
		t.Fatalf("no acquisition: %v", acts)
	}
	acts = m.AcquireDone(1, nil)
	if len(acts) < 2 || acts[0].Kind != ActServeUntil || acts[1].Kind != ActSetANA || !acts[1].Optimized {
		t.Fatalf("acquired: %v, want serve-until then set-ana optimized", acts)
	}
	first := acts[0].Until
	// The acquisition was issued at 10 ms (the read's result time).
	if want := at(10).Add(cfg.Lease - cfg.Margin); !first.Equal(want) {
		t.Fatalf("serve until %v, want %v (issued + lease - margin)", first.Sub(t0), want.Sub(t0))
	}
	m.SetANADone(1, true, at(20), nil)
	// A renewal sent at the renew interval moves the deadline.
	renewAt := 10 + int(cfg.RenewInterval/time.Millisecond)
	var renew bool
	for _, a := range m.Tick(at(renewAt)) {
		renew = renew || a.Kind == ActRenew
	}
	if !renew {
		t.Fatal("no renewal at the renew interval")
	}
	acts = m.RenewDone(1, "", nil)
	if len(acts) == 0 || acts[0].Kind != ActServeUntil || !acts[0].Until.Equal(at(renewAt).Add(cfg.Lease-cfg.Margin)) {
		t.Fatalf("renewed: %v, want serve-until renewal + lease - margin", acts)
	}
	second := acts[0].Until
	// A failed renewal moves nothing; the tick steps down at the deadline.
	for _, a := range m.Tick(at(renewAt + int(cfg.RenewInterval/time.Millisecond))) {
		if a.Kind == ActServeUntil {
			t.Fatalf("a tick moved the deadline: %v", a)
		}
	}
	for _, a := range m.RenewDone(1, "", errors.New("timed out")) {
		if a.Kind == ActServeUntil {
			t.Fatalf("a failed renewal moved the deadline: %v", a)
		}
	}
	var down bool
	for _, a := range m.Tick(second) {
		down = down || (a.Kind == ActSetANA && !a.Optimized)
	}
	if !down {
		t.Fatalf("no step-down at the serving deadline %v", second.Sub(t0))
	}
	_ = first
}

// TestMachineOwnReleaseTakenBackOnNewClients (issue 21, s8): a gateway
// that released a group (here handed over to a, which does not take it)
// takes its own released record back only on new clients, after fencing
// its old ones: the recipient fences them before it takes the group and
// may be doing so now (its fence outlasted a lease in TestFailbackBackoff
// with the self-fence: the releaser took the group back on the clients
// being blocklisted under it and livelocked). Before: "acquire" on the old
// clients. And an acquisition refused because a gateway held the group
// since the read (ErrHolderSince) reads the group again at the next tick,
// not a renew interval later, and counts no backend backoff.
func TestMachineOwnReleaseTakenBackOnNewClients(t *testing.T) {
	m := oneGroup("b")
	rel := Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-addr"}, Epoch: 1, Released: true, HandoverTo: "a"}}
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, free, nil), nil},
		{tick(10000), []string{"group 1: read"}},
		{read(1, 10000, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{anaDone(1, true, 10000, nil), nil},
		{tick(13000), []string{"group 1: renew"}},
		{renewed(1, "a", nil), []string{"group 1: set-ana inaccessible"}},
		{anaDone(1, false, 13000, nil), []string{"group 1: release to a"}},
		{released(1, nil), nil},
		{tick(13100), []string{"group 1: read"}},
		{read(1, 13100, rel, nil), nil}, // a's, for a lease
		{tick(23100), []string{"group 1: read"}},
		{read(1, 23100, rel, nil), []string{"group 1: fence [b-addr] and own clients (taken on new clients: a write of this gateway's old ones may still be in flight)"}},
		{fenceDone(1, 23200, nil), []string{"group 1: acquire (reopen)"}},
		{acquired(1, fmt.Errorf("acquire: %w (a, session a-s1, epoch 2): %w", ErrHolderSince, ErrLockBusy)), nil},
		{tick(23300), []string{"group 1: read"}},
	})
	if st := m.Status()[0]; st.Role != Standby {
		t.Fatalf("status %+v: want standby", st)
	}
}
