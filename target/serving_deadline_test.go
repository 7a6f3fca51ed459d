package target

import (
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// TestServingDeadline: a group's reads and writes are refused with ANA
// Inaccessible (a path error) past its serving deadline, before the
// backend (the block keeps what it held), while another group's
// namespace is served; a deadline in the future, or none (zero), serves.
// Without Target.SetServingDeadline the gateway's ServeUntil did nothing
// (cmd/nvmetd type-asserted it): TestGatewayProcessFreezeBlocklistLapsed
// found the writes that had waited in a frozen gateway's sockets landing
// after its resume.
func TestServingDeadline(t *testing.T) {
	ns1, ns2 := memNS(1, "1MiB"), memNS(2, "1MiB")
	ns1.ANAGroup, ns2.ANAGroup = 1, 2
	s := startServer(t, testConfig(t, ns1, ns2))
	tg := &Target{s: s}
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)

	block := func(b byte) []byte {
		p := make([]byte, 4096)
		for i := range p {
			p[i] = b
		}
		return p
	}
	if err := do(t, h.io[0], rw(true, 1, 0, block(1), 512)); err != nil {
		t.Fatalf("write before any deadline: %v", err)
	}
	tg.SetServingDeadline(1, time.Now().Add(-time.Millisecond))
	wantStatus(t, "write past the deadline", do(t, h.io[0], rw(true, 1, 0, block(2), 512)), nvmeof.StatusANAInaccessible)
	wantStatus(t, "read past the deadline", do(t, h.io[0], rw(false, 1, 0, make([]byte, 4096), 512)), nvmeof.StatusANAInaccessible)
	if err := do(t, h.io[0], rw(true, 2, 0, block(3), 512)); err != nil {
		t.Fatalf("write to group 2 (no deadline): %v", err)
	}
	tg.SetServingDeadline(1, time.Now().Add(time.Hour))
	got := make([]byte, 4096)
	if err := do(t, h.io[0], rw(false, 1, 0, got, 512)); err != nil || got[0] != 1 || got[4095] != 1 {
		t.Fatalf("read before the deadline: %v, block holds %d (want 1: the refused write never reached the backend)", err, got[0])
	}
	tg.SetServingDeadline(1, time.Time{})
	if err := do(t, h.io[0], rw(true, 1, 0, block(4), 512)); err != nil {
		t.Fatalf("write with the deadline removed: %v", err)
	}
	tg.SetServingDeadline(0, time.Now().Add(-time.Hour))             // ignored
	tg.SetServingDeadline(MaxANAGroup+1, time.Now().Add(-time.Hour)) // ignored
	if err := do(t, h.io[0], rw(true, 1, 0, block(5), 512)); err != nil {
		t.Fatalf("write after deadlines of groups out of range: %v", err)
	}
}
