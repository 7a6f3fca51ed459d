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
	down := "group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): " +
		"write: ESHUTDOWN; released to a survivor, not taken again here for 20s, and only on new RADOS clients)"
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{Transferred: 4096}), nil},
		step{sample(1, 200, BackendHealth{Transferred: 8192}), nil},
		step{sample(1, 300, BackendHealth{Transferred: 8192, PathErrors: 1, Blocklisted: 1, LastError: "write: ESHUTDOWN"}),
			[]string{"group 1: set-ana inaccessible", down}},
		// More failures while it goes: nothing more.
		step{sample(1, 400, BackendHealth{Transferred: 8192, PathErrors: 5, Blocklisted: 5}), nil},
		step{anaDone(1, false, 500, nil), []string{"group 1: release to "}},
		step{released(1, nil), nil},
		// Its own released record: not taken again during the backoff.
		step{tick(1000), []string{"group 1: read"}},
		step{read(1, 1000, releasedBy("a"), nil), nil},
		// b took it; a is the preferred owner, up for longer than the
		// failback delay, but asks for nothing during the backoff.
		step{tick(6000), []string{"group 1: read"}},
		step{read(1, 6000, heldBy("b"), nil), nil},
		step{tick(20300), []string{"group 1: read"}},
		step{read(1, 20300, heldBy("b"), nil), []string{"group 1: request-handover"}},
		step{requested(1, nil), nil},
		step{tick(23300), []string{"group 1: read"}},
		// b handed it back: a takes it on new clients.
		step{read(1, 23300, Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-rbd"}, Released: true, HandoverTo: "a", Epoch: 2}}, nil),
			[]string{"group 1: fence [b-rbd] (hand-over from b (session b-s1): its clients of the group are fenced before serving)"}},
		step{fenceDone(1, 23400, nil), []string{"group 1: acquire (reopen)"}},
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
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{}), nil},
		step{sample(1, 200, BackendHealth{PathErrors: 1, Blocklisted: 1}), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): ; " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 300, nil), []string{"group 1: release to "}},
		step{released(1, nil), nil},
		step{tick(20199), []string{"group 1: read"}},
		step{read(1, 20199, releasedBy("a"), nil), nil},
		step{tick(20200 + 3000), []string{"group 1: read"}},
		step{read(1, 23200, releasedBy("a"), nil), []string{"group 1: acquire (reopen)"}},
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
		step{anaDone(1, false, 15100, nil), []string{"group 1: release to "}},
		step{released(1, nil), nil},
		step{tick(35100), []string{"group 1: read"}},
		step{read(1, 35100, releasedBy("a"), nil), []string{"group 1: acquire (reopen)"}},
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
	run(t, m, append(ownedSteps,
		step{sample(1, 100, BackendHealth{}), nil},
		step{sample(1, 200, BackendHealth{PathErrors: 1, Blocklisted: 1}), []string{"group 1: set-ana inaccessible",
			"group 1: step-down (backend: a RADOS client of the group's backends is blocklisted (EBLOCKLISTED): ; " +
				"released to a survivor, not taken again here for 20s, and only on new RADOS clients)"}},
		step{anaDone(1, false, 300, nil), []string{"group 1: release to "}},
		step{released(1, nil), nil},
		step{tick(20200), []string{"group 1: read"}},
		step{read(1, 20200, releasedBy("a"), nil), []string{"group 1: acquire (reopen)"}},
		step{acquired(1, errors.New("reopen the group's namespaces with new RADOS clients: timed out")), nil},
		// b took it meanwhile: a asks for nothing until 20.2 + 40 s.
		step{tick(23200), []string{"group 1: read"}},
		step{read(1, 23200, heldBy("b"), nil), nil},
		step{tick(60199), []string{"group 1: read"}},
		step{read(1, 60199, heldBy("b"), nil), nil},
		step{tick(63199), []string{"group 1: read"}},
		step{read(1, 63199, heldBy("b"), nil), []string{"group 1: request-handover"}},
	))
}
