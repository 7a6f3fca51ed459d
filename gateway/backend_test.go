package gateway

import (
	"errors"
	"strings"
	"testing"
)

func sample(g uint32, ms int, h BackendHealth) func(*Machine) []Action {
	return func(m *Machine) []Action { return m.BackendObserved(g, at(ms), h) }
}

// releasedBy is the record of a group name released to nobody.
func releasedBy(name string) Observed {
	return Observed{Record: Record{Name: name, Session: name + "-s1", Addrs: []string{name + "-rbd"}, Released: true, Epoch: 1}}
}

// TestMachineBackendBlocklisted: the owner's backend client alone is
// blocklisted (its renewals go on): the first command that fails with
// EBLOCKLISTED steps the group down (inaccessible, then released to
// nobody so that a survivor fences and takes it); the group is neither
// taken back nor asked back for the backoff (two leases), and then only
// with its clients replaced (acquire reopen).
func TestMachineBackendBlocklisted(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	down := "group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): " +
		"write: ESHUTDOWN; released to a survivor, not taken again here for 20s, and only on new RADOS clients)"
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{Transferred: 4096}), nil},
		step{sample(1, 200, BackendHealth{Transferred: 8192}), nil},
		step{sample(1, 300, BackendHealth{Transferred: 8192, PathErrors: 1, Blocklisted: 1, LastError: "write: ESHUTDOWN"}),
			[]string{"group 1: set-ana inaccessible", down}},
		// More failures while it goes: nothing more.
		step{sample(1, 400, BackendHealth{Transferred: 8192, PathErrors: 5, Blocklisted: 5}), nil},
		step{anaDone(1, false, 500, nil), []string{"group 1: answer-in-flight (stepped down for its backends: their RADOS client is blocklisted)", "group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		// Its own released record: not taken again during the backoff.
		step{tick(1000), []string{"group 1: read"}},
		step{read(1, 1000, releasedBy("a"), nil), nil},
		// b took it; a is the preferred owner, up for longer than the
		// failback delay, but asks for nothing during the backoff.
		step{tick(6000), []string{"group 1: read"}},
		// (the backoff runs from the release, at 0.5 s, to 20.5 s)
		step{read(1, 6000, heldBy("b"), nil), nil},
		step{tick(20500), []string{"group 1: read"}},
		step{read(1, 20500, heldBy("b"), nil), []string{"group 1: request-handover"}},
		step{requested(1, nil), nil},
		step{tick(23500), []string{"group 1: read"}},
		// b handed it back: a takes it on new clients.
		step{read(1, 23500, Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-rbd"}, Released: true, HandoverTo: "a", Epoch: 2}}, nil),
			[]string{"group 1: fence [b-rbd a-rbd] and own clients (hand-over from b (session b-s1): its clients of the group are fenced before serving; " + ownReason + ")"}},
		step{fenceDone(1, 23600, nil), []string{"group 1: acquire (reopen)"}},
		step{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	))
	if st := m.Status()[0]; st.Role != Owner || !strings.Contains(st.LastError, "EBLOCKLISTED") {
		t.Fatalf("status %+v, want the owner, with the backend step-down as its last error", st)
	}
}

// TestMachineBackendReopenWithoutSuccessor: nobody took the group while
// its owner backed off (no survivor): the owner takes its own released
// record back after the backoff, and still replaces its clients first.
func TestMachineBackendReopenWithoutSuccessor(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{}), nil},
		step{sample(1, 200, BackendHealth{PathErrors: 1, Blocklisted: 1}), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): ; " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 300, nil), []string{"group 1: answer-in-flight (stepped down for its backends: their RADOS client is blocklisted)", "group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		step{tick(20199), []string{"group 1: read"}},
		step{read(1, 20199, releasedBy("a"), nil), nil},
		step{tick(20200 + 3000), []string{"group 1: read"}},
		step{read(1, 23200, releasedBy("a"), nil), []string{"group 1: fence [a-rbd] and own clients (" + ownReason + ")"}},
		step{fenceDone(1, 23200, nil), []string{"group 1: acquire (reopen)"}},
		step{acquired(1, nil), []string{"group 1: set-ana optimized"}},
	))
}

// TestMachineBackendCutFromOSDs: the owner is cut from the image's OSDs
// but not from the group object's: its commands time out (path errors)
// while its renewals succeed. It steps down once path errors came and no
// I/O completed for a whole window (one lease) from the first of them; a
// completion in between starts the window over. Each backend step-down in
// a row doubles the backoff.
func TestMachineBackendCutFromOSDs(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, append(ownedSteps,
		step{sample(1, 0, BackendHealth{Transferred: 100}), nil},
		step{sample(1, 1000, BackendHealth{Transferred: 100, PathErrors: 1}), nil}, // failing since 1 s
		step{sample(1, 4000, BackendHealth{Transferred: 200, PathErrors: 2}), nil}, // a completion: over
		step{sample(1, 5000, BackendHealth{Transferred: 200, PathErrors: 3}), nil}, // failing since 5 s
		step{sample(1, 9000, BackendHealth{Transferred: 200, PathErrors: 3}), nil}, // nothing new: still failing
		step{sample(1, 14999, BackendHealth{Transferred: 200, PathErrors: 9, LastError: "write: ETIMEDOUT"}), nil},
		step{sample(1, 15000, BackendHealth{Transferred: 200, PathErrors: 9, LastError: "write: ETIMEDOUT"}),
			[]string{"group 1: set-ana inaccessible", "group 1: step-down (backend: the group's I/O failed with path errors for 10s " +
				"and none completed (window 10s): write: ETIMEDOUT; released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 15100, nil), []string{"group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		step{tick(35100), []string{"group 1: read"}},
		step{read(1, 35100, releasedBy("a"), nil), []string{"group 1: fence [a-rbd] and own clients (" + ownReason + ")"}},
		// Not blocklisted by anyone: what was stuck in the old clients
		// is answered once this gateway fenced them itself.
		step{fenceDone(1, 35100, nil), []string{"group 1: answer-in-flight (this gateway fenced its own clients of the group before taking it back)",
			"group 1: acquire (reopen)"}},
		step{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		step{anaDone(1, true, 35100, nil), nil},
		// Still cut: the next step-down backs off twice as long.
		step{sample(1, 35200, BackendHealth{Transferred: 200, PathErrors: 10}), nil},
		step{sample(1, 45200, BackendHealth{Transferred: 200, PathErrors: 11, LastError: "read: ETIMEDOUT"}),
			[]string{"group 1: set-ana inaccessible", "group 1: step-down (backend: the group's I/O failed with path errors for 10s " +
				"and none completed (window 10s): read: ETIMEDOUT; released to a survivor, not taken again here for 40s, and only on new RADOS clients)"}},
	))
}

// TestMachineBackendQuiet: no I/O is no failure; path errors seen while
// standby (the group is not served here) are not held against a later
// ownership; the first sample of an ownership is its baseline.
func TestMachineBackendQuiet(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{sample(1, 0, BackendHealth{PathErrors: 7, Blocklisted: 7}), nil},
		{read(1, 0, free, nil), []string{"group 1: acquire"}},
		{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		{anaDone(1, true, 0, nil), nil},
		{sample(1, 100, BackendHealth{PathErrors: 7, Blocklisted: 7}), nil},
		{sample(1, 60000, BackendHealth{PathErrors: 7, Blocklisted: 7}), nil},
	})
	if st := m.Status()[0]; st.Role != Owner {
		t.Fatalf("status %+v", st)
	}
}

// TestMachineBackendReopenFails: the owner stepped down for its backends
// takes its group back after the backoff, but its new clients cannot open
// the images (still cut): the acquisition fails, and the group is neither
// taken nor asked for again for the next (doubled) backoff, so the
// survivor keeps serving it.
func TestMachineBackendReopenFails(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{}), nil},
		step{sample(1, 200, BackendHealth{PathErrors: 1, Blocklisted: 1}), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): ; " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 300, nil), []string{"group 1: answer-in-flight (stepped down for its backends: their RADOS client is blocklisted)", "group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		step{tick(20299), []string{"group 1: read"}},
		step{read(1, 20299, releasedBy("a"), nil), nil}, // the backoff runs from the release (0.3 s)
		step{tick(23300), []string{"group 1: read"}},
		step{read(1, 23300, releasedBy("a"), nil), []string{"group 1: fence [a-rbd] and own clients (" + ownReason + ")"}},
		step{fenceDone(1, 23300, nil), []string{"group 1: acquire (reopen)"}},
		step{acquired(1, errors.New("reopen the group's namespaces with new RADOS clients: timed out")), nil},
		// b took it meanwhile: a asks for nothing until 23.3 + 40 s.
		step{tick(26300), []string{"group 1: read"}},
		step{read(1, 26300, heldBy("b"), nil), nil},
		step{tick(63299), []string{"group 1: read"}},
		step{read(1, 63299, heldBy("b"), nil), nil},
		step{tick(66299), []string{"group 1: read"}},
		step{read(1, 66299, heldBy("b"), nil), []string{"group 1: request-handover"}},
	))
}

// TestMachineBackendStuck: the owner is cut from the image's OSDs and its
// commands hang in the backend (librbd waits for the OSD until its
// op_timeout, longer than the window here): no path error yet, but
// commands in flight and none ended between two samples start the window
// at the first of them, so the step-down comes one window after the
// commands got stuck, not op_timeout + window. A command that succeeds
// starts it over; commands that keep ending (here write zeroes, no bytes
// transferred) are no stall.
func TestMachineBackendStuck(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	h := func(completed, ended uint64, inFlight int64) BackendHealth {
		return BackendHealth{Transferred: 4096, Completed: completed, Ended: ended, InFlight: inFlight}
	}
	run(t, m, append(ownedSteps,
		step{sample(1, 100, h(10, 10, 2)), nil},
		// Commands that keep ending, and succeeding: no stall.
		step{sample(1, 200, h(20, 20, 3)), nil},
		step{sample(1, 300, h(30, 30, 3)), nil},
		// Nothing ended since 300: stuck since 300.
		step{sample(1, 400, h(30, 30, 8)), nil},
		step{sample(1, 5000, h(30, 30, 8)), nil},
		// One succeeds: over.
		step{sample(1, 5100, h(31, 31, 8)), nil},
		// Stuck again from 5100 (seen at 5200).
		step{sample(1, 5200, h(31, 31, 8)), nil},
		step{sample(1, 15099, h(31, 31, 8)), nil},
		step{sample(1, 15100, h(31, 31, 8)), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: the group's I/O stood still in the backend (commands in flight, none ended since " +
				at(5100).Format("15:04:05.000") + ") for 10s and none completed (window 10s); " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		// Not blocklisted: the commands stuck in the backend are not
		// answered early yet (a write of theirs could still land).
		step{anaDone(1, false, 15100, nil), []string{"group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		step{tick(16000), []string{"group 1: read"}},
		// Its own released record: nobody fenced its clients yet.
		step{read(1, 16000, releasedBy("a"), nil), nil},
		step{tick(19000), []string{"group 1: read"}},
		// b holds the group (a later record): it fenced a's clients
		// before it took it; the stuck commands are answered now, once.
		step{read(1, 19000, takenBy("b", 2), nil), []string{"group 1: answer-in-flight (b holds the group (epoch 2): it fenced this gateway's clients of the group)"}},
		step{tick(22000), []string{"group 1: read"}},
		step{read(1, 22000, takenBy("b", 2), nil), nil},
	))
}

// ownReason is the reason of an ActFence Own.
const ownReason = "taken on new clients: a write of this gateway's old ones may still be in flight"

// takenBy is group 1 locked by name with a record of epoch epoch.
func takenBy(name string, epoch uint64) Observed {
	o := heldBy(name)
	o.Record.Epoch = epoch
	return o
}

// TestMachineBackendBackoffFromRelease: a backend step-down whose ANA
// change took long (here 7 s) releases without waiting for the drain and
// is not taken back for the whole backoff from that release (before, the
// backoff ran from the decision, and the gateway took the group back at
// once after its late release, before a survivor could: seen in
// TestGatewayProcessOSDCut).
func TestMachineBackendBackoffFromRelease(t *testing.T) {
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{}), nil},
		step{sample(1, 200, BackendHealth{PathErrors: 1, Blocklisted: 1}), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): ; " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 7200, nil), []string{"group 1: answer-in-flight (stepped down for its backends: their RADOS client is blocklisted)", "group 1: release to  (no drain)"}},
		step{released(1, nil), nil},
		step{tick(20200), []string{"group 1: read"}},
		step{read(1, 20200, releasedBy("a"), nil), nil},
		step{tick(27199), []string{"group 1: read"}},
		step{read(1, 27199, releasedBy("a"), nil), nil},
		step{tick(30200), []string{"group 1: read"}},
		step{read(1, 30200, releasedBy("a"), nil), []string{"group 1: fence [a-rbd] and own clients (" + ownReason + ")"}},
		step{fenceDone(1, 30200, nil), []string{"group 1: acquire (reopen)"}},
	))
}

// TestMachineBackendDownsSurviveRestart: the backend step-down count is
// in the group's record (Record.BackendDowns), written on by every
// holder: a gateway that restarts after two backend step-downs in a row
// neither takes nor asks for the group until the backoff of the second
// (2 × BackendBackoff) has passed since its start, and then on new
// clients; the holder carries the other gateways' entries on.
func TestMachineBackendDownsSurviveRestart(t *testing.T) {
	held := heldBy("b")
	held.Record.BackendDowns = map[string]uint32{"a": 2}
	m := oneGroup("a")
	m.SetReadiness(1, Readiness{Hosts: 1}) // failback gates (failback.go) open
	run(t, m, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, held, nil), nil},
		// Failback delay (5 s) long past, the backoff (2 × 20 s) not.
		{tick(37000), []string{"group 1: read"}},
		{read(1, 37000, held, nil), nil},
		{tick(40000), []string{"group 1: read"}},
		{read(1, 40000, held, nil), []string{"group 1: request-handover"}},
		{requested(1, nil), nil},
		{tick(43000), []string{"group 1: read"}},
		{read(1, 43000, Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-rbd"}, Released: true, HandoverTo: "a",
			Epoch: 2, BackendDowns: map[string]uint32{"a": 2}}}, nil),
			[]string{"group 1: fence [b-rbd] and own clients (hand-over from b (session b-s1): its clients of the group are fenced before serving; " + ownReason + ")"}},
	})
	acts := m.FenceDone(1, at(43100), nil)
	if len(acts) != 1 || acts[0].String() != "group 1: acquire (reopen)" || acts[0].BackendDowns["a"] != 2 {
		t.Fatalf("after the fence: %v (downs %v), want an acquisition on new clients that writes a's 2 step-downs on", acts, acts[0].BackendDowns)
	}

	// The holder (b) writes a's entry on in its renewals.
	mb := NewMachine(testConfig("b"))
	mb.ConfigChecked(true, "")
	mb.Tick(at(0))
	rel := releasedBy("a")
	rel.Record.BackendDowns = map[string]uint32{"a": 3}
	acts = mb.ReadDone(1, at(0), rel, nil)
	for _, a := range acts {
		if a.Kind == ActFence {
			acts = mb.FenceDone(1, at(100), nil)
		}
	}
	if len(acts) != 1 || acts[0].Kind != ActAcquire || acts[0].BackendDowns["a"] != 3 {
		t.Fatalf("b's acquisition: %v, want a's 3 step-downs written on", acts)
	}
	mb.AcquireDone(1, nil)
	var renew *Action
	for _, a := range mb.Tick(at(3100)) {
		if a.Kind == ActRenew {
			renew = &a
		}
	}
	if renew == nil || renew.BackendDowns["a"] != 3 || len(renew.BackendDowns) != 1 {
		t.Fatalf("b's renewal: %+v, want a's 3 step-downs written on", renew)
	}
}

// TestMachineBackendOwnClientsFenced (issue 21): a group stepped down for
// its backends (here its commands stood still in librbd: cut from the
// image's OSDs, nobody blocklisted the client) that no other gateway took
// meanwhile is taken back by the same gateway after its backoff, on new
// clients: its old clients, whose writes may still be stuck in librbd or
// an OSD's queue and land later, are fenced first (the addresses its
// record named, and the driver adds every client it has on the group:
// ActFence Own), and only then is the group acquired (the reopen and the
// OSD-map barrier on the new clients, then the lock). Before, the
// acquisition came at once, without a fence: a late write of the old
// client could land after newer writes through the new one. The same
// when the release failed and the lock is still this gateway's.
func TestMachineBackendOwnClientsFenced(t *testing.T) {
	stuck := func(completed, ended uint64, inFlight int64) BackendHealth {
		return BackendHealth{Transferred: 4096, Completed: completed, Ended: ended, InFlight: inFlight}
	}
	down := []step{
		step{sample(1, 100, stuck(10, 10, 4)), nil},
		step{sample(1, 200, stuck(10, 10, 4)), nil},
		step{sample(1, 10100, stuck(10, 10, 4)), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: the group's I/O stood still in the backend (commands in flight, none ended since " +
				at(100).Format("15:04:05.000") + ") for 10s and none completed (window 10s); " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 10100, nil), []string{"group 1: release to  (no drain)"}},
	}
	own := releasedBy("a")
	own.Record.Addrs = []string{"a-rbd-old"}
	fence := "group 1: fence [a-rbd-old] and own clients (" + ownReason + ")"

	t.Run("released", func(t *testing.T) {
		m := oneGroup("a")
		m.SetReadiness(1, Readiness{Hosts: 1})
		var acts []Action
		run(t, m, append(append(ownedSteps, down...),
			step{released(1, nil), nil},
			step{tick(30100), []string{"group 1: read"}},
			// Its own released record, nobody since: its old clients
			// are fenced before it takes the group back.
			step{read(1, 30100, own, nil), []string{fence}},
			step{func(m *Machine) []Action { acts = m.FenceDone(1, at(30200), nil); return acts },
				[]string{"group 1: answer-in-flight (this gateway fenced its own clients of the group before taking it back)",
					"group 1: acquire (reopen)"}},
			step{acquired(1, nil), []string{"group 1: set-ana optimized"}},
		))
		if a := acts[len(acts)-1]; a.Kind != ActAcquire || !a.Reopen {
			t.Fatalf("after its own fence: %+v, want an acquisition on new clients", a)
		}
	})

	t.Run("lock still held", func(t *testing.T) {
		m := oneGroup("a")
		m.SetReadiness(1, Readiness{Hosts: 1})
		held := heldBy("a")
		held.Record.Addrs = []string{"a-rbd-old"}
		run(t, m, append(append(ownedSteps, down...),
			// The release failed: the lock stays this gateway's until
			// it expires.
			step{released(1, errors.New("release: timed out")), nil},
			step{tick(30100), []string{"group 1: read"}},
			step{read(1, 30100, held, nil), []string{fence}},
			step{fenceDone(1, 30200, nil), []string{"group 1: answer-in-flight (this gateway fenced its own clients of the group before taking it back)",
				"group 1: acquire (reopen)"}},
		))
	})

	t.Run("fence fails", func(t *testing.T) {
		m := oneGroup("a")
		m.SetReadiness(1, Readiness{Hosts: 1})
		run(t, m, append(append(ownedSteps, down...),
			step{released(1, nil), nil},
			step{tick(30100), []string{"group 1: read"}},
			step{read(1, 30100, own, nil), []string{fence}},
			// No fence, no acquisition: the next read starts over.
			step{fenceDone(1, 30200, errors.New("osd blocklist add: timed out")), nil},
			step{tick(33100), []string{"group 1: read"}},
			step{read(1, 33100, own, nil), []string{fence}},
		))
	})
}
