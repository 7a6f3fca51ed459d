//go:build rbd

package gateway_test

import (
	"errors"
	"slices"
	"syscall"
	"testing"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/gateway"
)

func isANAOf(group uint32, optimized bool) func(gateway.Event) bool {
	return func(e gateway.Event) bool {
		return e.Action.Kind == gateway.ActSetANA && e.Action.Group == group && e.Action.Optimized == optimized && e.Err == nil
	}
}

// TestHandoverFencesOnlyItsGroup (issue 21.3): b holds ANA groups 1
// (preferred a) and 2 (preferred b), each with its own image and rbd
// client. a starts and takes group 1 back: the hand-over is graceful
// (b goes inaccessible, drains, releases), and a still fences b's client
// of group 1 before it serves, since b's drain cannot see every write in
// flight. Only that client: b's write to group 1's image is refused, while
// b's group 2 goes on (its write succeeds, its lease is renewed) and b's
// client of the group objects is untouched.
func TestHandoverFencesOnlyItsGroup(t *testing.T) {
	f := newFixture(t)
	f.groups = map[uint32]string{1: "a", 2: "b"}
	f.images = map[uint32]string{1: f.image, 2: f.c.CreateImage(t, 8<<20)}
	b := f.start(t, "b", "b-1", nil)
	b.waitEvent("b optimized on group 2", 0, isANAOf(2, true))
	b.waitEvent("b optimized on group 1", 0, isANAOf(1, true))
	b1, b2 := b.backendOf(1), b.backendOf(2)
	unblock(t, f.c, gateway.SplitAddrs(b1.CephClient().Addrs)...)

	a := f.start(t, "a", "a-1", nil)
	iOpt := a.waitEvent("a optimized on group 1", 0, isANAOf(1, true))
	iFence := a.waitEvent("a fences", 0, isAct(gateway.ActFence, true))
	if iFence > iOpt {
		t.Fatalf("a went optimized (event %d) before it fenced (event %d):\n%s", iOpt, iFence, a.dump())
	}
	a.mu.Lock()
	fence := a.events[iFence].Action
	a.mu.Unlock()
	t.Logf("a fenced %v; b's clients: group 1 %s, group 2 %s, group objects %s", fence.Addrs, b1.CephClient().Addrs, b2.CephClient().Addrs, b.cl.Addrs())
	if fence.Group != 1 || !slices.Equal(fence.Addrs, []string{b1.CephClient().Addrs}) {
		t.Errorf("a's fence: group %d %v, want group 1 [%s] (b's client of group 1 only)", fence.Group, fence.Addrs, b1.CephClient().Addrs)
	}
	// The OSD-map barrier ran on a's client of group 1 after the fence,
	// before a served (issue 21.5).
	a.mu.Lock()
	barrier := slices.IndexFunc(a.barriers, func(b [2]int) bool { return b[0] == 1 && b[1] > iFence && b[1] <= iOpt })
	a.mu.Unlock()
	if barrier < 0 {
		t.Errorf("no OSD-map barrier on a's group-1 client between its fence (event %d) and optimized (event %d): %v", iFence, iOpt, a.barriers)
	}
	// b's group 1 is inaccessible now, so its backend refuses writes
	// itself; one that tries to take the image's exclusive lock first (as
	// b would to serve again) meets the fence.
	_ = b1.SetWritable(true)
	if err := b1.WriteAt(block("b on group 1 after the hand-over"), 0, false); !errors.Is(err, syscall.ESHUTDOWN) {
		t.Errorf("b's write to group 1's image after the hand-over: %v, want ESHUTDOWN", err)
	}
	if err := b2.WriteAt(block("b on group 2 after the hand-over"), 0, false); err != nil {
		t.Errorf("b's write to group 2's image after group 1's hand-over: %v", err)
	}
	mark := b.nEvents()
	b.waitEvent("b renews group 2", mark, func(e gateway.Event) bool {
		return e.Action.Kind == gateway.ActRenew && e.Action.Group == 2 && e.Err == nil
	})
	st, _ := b.r.Status()
	for _, s := range st {
		if want := map[uint32]gateway.Role{1: gateway.Standby, 2: gateway.Owner}[s.Group]; s.Role != want {
			t.Errorf("b's group %d: %s, want %s", s.Group, s.Role, want)
		}
	}
	if _, err := b.cl.Read(2); err != nil {
		t.Errorf("b's client of the group objects: %v", err)
	}

	// a crashes: b takes group 1 back, and must first replace its
	// fenced client of group 1 (Reopen) to serve it.
	unblock(t, f.c, gateway.SplitAddrs(a.backendOf(1).CephClient().Addrs)...)
	a.stop()
	mark = b.nEvents()
	b.waitEvent("b optimized on group 1 again", mark, isANAOf(1, true))
	nb1 := b.backendOf(1)
	if nb1 == b1 {
		t.Fatalf("b serves group 1 again on its fenced client:\n%s", b.dump())
	}
	if err := nb1.WriteAt(block("b on group 1 again"), 0, false); err != nil {
		t.Errorf("b's write to group 1's image on its new client: %v", err)
	}
	b.mu.Lock()
	if b.reopen != 1 {
		t.Errorf("b reopened %d times, want 1", b.reopen)
	}
	b.mu.Unlock()
}

// TestOSDMapBarrierRegistry: backend.WaitForLatestOSDMap (what the daemon
// runs before it serves a group) reaches every open rbd backend of the
// group's images, names them in CephClients with their image, and skips
// closed ones.
func TestOSDMapBarrierRegistry(t *testing.T) {
	f := newFixture(t)
	b, err := backend.Open(backend.Config{Kind: backend.KindRBD, Pool: f.c.Pool, Image: f.image, CephConf: f.c.Conf,
		ClientID: f.c.ClientID, Keyring: f.c.Keyring})
	if err != nil {
		t.Fatal(err)
	}
	spec := f.c.Pool + "/" + f.image
	ci := b.(backend.CephClient).CephClient()
	if ci.Image != spec {
		t.Errorf("CephClient().Image %q, want %q", ci.Image, spec)
	}
	if !slices.Contains(backend.CephClients(), ci) {
		t.Errorf("%+v not in CephClients", ci)
	}
	if err := backend.WaitForLatestOSDMap(map[string]bool{spec: true}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := backend.WaitForLatestOSDMap(map[string]bool{spec: true}); err != nil {
		t.Fatalf("after the close: %v", err)
	}
}
