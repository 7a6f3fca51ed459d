package gateway

import (
	"strings"
	"testing"
	"time"
)

// The failback rules (failback.go), one test each. testConfig: lease 10 s,
// renew every 3 s, margin 2 s, failback delay 5 s; group 1 preferred by a.

// heldWith is group 1 held by b, its record carrying n strikes.
func heldWith(n uint32) Observed {
	o := heldBy("b")
	o.Record.Failbacks = n
	return o
}

// do runs in and returns its actions (ActServeUntil left out).
func do(m *Machine, in func(*Machine) []Action) []Action {
	var out []Action
	for _, a := range in(m) {
		if a.Kind != ActServeUntil {
			out = append(out, a)
		}
	}
	return out
}

// only returns the one action of kind k in acts.
func only(t *testing.T, acts []Action, k ActionKind) Action {
	t.Helper()
	var found []Action
	for _, a := range acts {
		if a.Kind == k {
			found = append(found, a)
		}
	}
	if len(found) != 1 {
		t.Fatalf("actions %v: want one %s", acts, k)
	}
	return found[0]
}

func waitWhy(m *Machine) string { return m.Status()[0].FailbackWait }

// (b) No host connected to the preferred owner: it does not ask, past its
// delay, and says why; once a host is connected it asks.
func TestMachineFailbackWaitsForHost(t *testing.T) {
	a := oneGroup("a")
	a.SetReadiness(1, Readiness{})
	held := heldWith(0)
	run(t, a, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, held, nil), nil},
		{tick(6000), []string{"group 1: read"}},
		{read(1, 6000, held, nil), nil}, // past the 5 s delay
		{tick(30000), []string{"group 1: read"}},
		{read(1, 30000, held, nil), nil},
	})
	if w := waitWhy(a); !strings.Contains(w, "no host") {
		t.Fatalf("failback wait %q: want the missing host", w)
	}
	a.SetReadiness(1, Readiness{Hosts: 1})
	run(t, a, []step{
		{tick(33000), []string{"group 1: read"}},
		{read(1, 33000, held, nil), []string{"group 1: request-handover"}},
		{requested(1, nil), nil},
	})
	if w := waitWhy(a); w != "" {
		t.Fatalf("failback wait %q after the request", w)
	}
}

// (a) A preferred owner that cannot serve the group (a namespace not
// open), or whose target has not said, does not ask.
func TestMachineFailbackWaitsUntilServable(t *testing.T) {
	a := oneGroup("a")
	held := heldWith(0)
	run(t, a, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, held, nil), nil},
		{tick(6000), []string{"group 1: read"}},
		{read(1, 6000, held, nil), nil},
	})
	if w := waitWhy(a); !strings.Contains(w, "not reported") {
		t.Fatalf("failback wait %q: want the missing report", w)
	}
	a.SetReadiness(1, Readiness{Unservable: "namespace 1: image did not open", Hosts: 1})
	run(t, a, []step{
		{tick(9000), []string{"group 1: read"}},
		{read(1, 9000, held, nil), nil},
	})
	if w := waitWhy(a); !strings.Contains(w, "image did not open") {
		t.Fatalf("failback wait %q: want the reason it cannot serve", w)
	}
	a.SetReadiness(1, Readiness{Hosts: 2})
	run(t, a, []step{
		{tick(12000), []string{"group 1: read"}},
		{read(1, 12000, held, nil), []string{"group 1: request-handover"}},
	})
}

// (c) The delay after n strikes: FailbackDelay × 2^n, capped.
func TestMachineFailbackWait(t *testing.T) {
	c := testConfig("a")
	m := NewMachine(c)
	for n, want := range map[uint32]time.Duration{0: 5 * time.Second, 1: 10 * time.Second, 2: 20 * time.Second,
		9: 2560 * time.Second, 10: time.Hour, 64: time.Hour, 1 << 31: time.Hour} {
		if got := m.failbackWait(n); got != want {
			t.Errorf("wait after %d strikes: %s, want %s", n, got, want)
		}
	}
	c.FailbackMaxDelay = 30 * time.Second
	if got := NewMachine(c).failbackWait(3); got != 30*time.Second {
		t.Errorf("capped at 30 s: %s", got)
	}
	c.FailbackDelay = 0
	if got := NewMachine(c).failbackWait(5); got != 0 {
		t.Errorf("failback delay 0: %s", got)
	}
}

// (c) The record's strikes delay the request: 2 strikes, 20 s from the
// start. A new run of the preferred owner (a restart) reads them again
// and waits as long from its own start.
func TestMachineFailbackBackoffSurvivesRestart(t *testing.T) {
	for _, run0 := range []int{0, 100000} { // the first run, and a restart at 100 s
		c := testConfig("a")
		c.Groups = map[uint32]string{1: "a"}
		c.Session = "a-run" + time.Duration(run0).String()
		a := NewMachine(c)
		a.ConfigChecked(true, "")
		a.SetReadiness(1, Readiness{Hosts: 1})
		held := heldWith(2)
		run(t, a, []step{
			{tick(run0), []string{"group 1: read"}},
			{read(1, run0, held, nil), nil},
			{tick(run0 + 19999), []string{"group 1: read"}},
			{read(1, run0+19999, held, nil), nil},
		})
		if w := waitWhy(a); !strings.Contains(w, "backoff: 20s after 2 strike(s)") {
			t.Fatalf("failback wait %q", w)
		}
		if st := a.Status()[0]; st.Failbacks != 2 {
			t.Fatalf("status failbacks %d, want 2", st.Failbacks)
		}
		run(t, a, []step{
			{tick(run0 + 23000), []string{"group 1: read"}},
			{read(1, run0+23000, held, nil), []string{"group 1: request-handover"}},
		})
	}
}

// handedOver is group 1 released by b to a, carrying n strikes.
func handedOver(n uint32) Observed {
	return Observed{Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-addr"}, Released: true, HandoverTo: "a", Epoch: 1, Failbacks: n}}
}

// (c) A failback acquisition is a strike (n+1); its serve failure is not
// a second one; the group, released to nobody, is taken by b, which
// carries the count on; a's next request waits FailbackDelay × 2^(n+1)
// from the serve failure, not from its start.
func TestMachineFailbackStrikes(t *testing.T) {
	a := oneGroup("a")
	a.SetReadiness(1, Readiness{Hosts: 1})
	do(a, tick(100000))
	do(a, read(1, 100000, handedOver(1), nil)) // fence
	acq := only(t, do(a, fenceDone(1, 100100, nil)), ActAcquire)
	if acq.Failbacks != 2 {
		t.Fatalf("failback acquisition writes %d strikes, want 2", acq.Failbacks)
	}
	do(a, acquired(1, nil))
	acts := do(a, anaDone(1, true, 100200, errTest("reload: namespace 1 is not online")))
	only(t, acts, ActStepDown)
	rel := only(t, do(a, anaDone(1, false, 100300, nil)), ActRelease)
	if rel.Failbacks != 2 || rel.To != "" {
		t.Fatalf("release after the failback's serve failure: %+v, want 2 strikes (counted once), to nobody", rel)
	}
	do(a, released(1, nil))

	// b takes the group released to nobody: it carries the 2 strikes.
	b := oneGroup("b")
	do(b, tick(100400))
	do(b, read(1, 100400, Observed{Record: Record{Name: "a", Session: "a-s1", Addrs: []string{"a-rbd"}, Released: true, Epoch: 2, Failbacks: 2}}, nil))
	if acq := only(t, do(b, fenceDone(1, 100450, nil)), ActAcquire); acq.Failbacks != 2 || acq.Epoch != 3 {
		t.Fatalf("b's acquisition: %+v, want 2 strikes carried on, epoch 3", acq)
	}
	do(b, acquired(1, nil))
	do(b, anaDone(1, true, 100500, nil))
	if rn := only(t, do(b, tick(103500)), ActRenew); rn.Failbacks != 2 {
		t.Fatalf("b's renewal writes %d strikes, want 2 (only the preferred owner clears them)", rn.Failbacks)
	}

	// a waits 20 s from its serve failure (100.2 s), not 5 s from its start.
	held := Observed{Locked: true, LockerSession: "b-s1", Record: Record{Name: "b", Session: "b-s1", Addrs: []string{"b-addr"}, Epoch: 3, Failbacks: 2}}
	run(t, a, []step{
		{tick(119000), []string{"group 1: read"}},
		{read(1, 119000, held, nil), nil},
		{tick(122000), []string{"group 1: read"}},
		{read(1, 122000, held, nil), []string{"group 1: request-handover"}},
	})
}

type errTest string

func (e errTest) Error() string { return string(e) }

// (c) A serve failure after an acquisition that was not a failback (here a
// cold start) is a strike.
func TestMachineServeFailureStrike(t *testing.T) {
	a := oneGroup("a")
	do(a, tick(0))
	if acq := only(t, do(a, read(1, 0, free, nil)), ActAcquire); acq.Failbacks != 0 {
		t.Fatalf("cold acquisition: %+v", acq)
	}
	do(a, acquired(1, nil))
	do(a, anaDone(1, true, 100, errTest("refused")))
	if rel := only(t, do(a, anaDone(1, false, 200, nil)), ActRelease); rel.Failbacks != 1 {
		t.Fatalf("release after a serve failure: %d strikes, want 1", rel.Failbacks)
	}
}

// (c) The preferred owner that served the group for FailbackStable
// clears its strikes (its renewals write 0 from then on); an interrupted
// serving restarts the period.
func TestMachineFailbackStableClears(t *testing.T) {
	c := testConfig("a")
	c.Groups = map[uint32]string{1: "a"}
	c.FailbackStable = 8 * time.Second
	a := NewMachine(c)
	a.ConfigChecked(true, "")
	a.SetReadiness(1, Readiness{Hosts: 1})
	do(a, tick(0))
	do(a, read(1, 0, handedOver(3), nil))
	if acq := only(t, do(a, fenceDone(1, 10, nil)), ActAcquire); acq.Failbacks != 4 {
		t.Fatalf("acquisition: %d strikes, want 4", acq.Failbacks)
	}
	do(a, acquired(1, nil))
	do(a, anaDone(1, true, 1000, nil)) // serving from 1 s
	for ms := 3010; ms <= 12010; ms += 3000 {
		rn := only(t, do(a, tick(ms)), ActRenew)
		want := uint32(4)
		if ms >= 9000 {
			want = 0
		}
		if rn.Failbacks != want {
			t.Fatalf("renewal at %d ms: %d strikes, want %d", ms, rn.Failbacks, want)
		}
		do(a, renewed(1, "", nil))
	}
	if st := a.Status()[0]; st.Failbacks != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// The failback-related fields of a request stay out of the way of a
// non-preferred gateway: b never asks, whatever its readiness.
func TestMachineFailbackOnlyPreferred(t *testing.T) {
	b := oneGroup("b")
	b.SetReadiness(1, Readiness{Hosts: 3})
	held := Observed{Locked: true, LockerSession: "a-s1", Record: Record{Name: "a", Session: "a-s1", Epoch: 1}}
	run(t, b, []step{
		{tick(0), []string{"group 1: read"}},
		{read(1, 0, held, nil), nil},
		{tick(60000), []string{"group 1: read"}},
		{read(1, 60000, held, nil), nil},
	})
	if w := waitWhy(b); w != "" {
		t.Fatalf("b, not preferred, reports a failback wait %q", w)
	}
}
