package target

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// Hostile hosts against a target that requires authentication: a host
// that forged an allowed host NQN, one that takes another host's I/O queue
// IDs, one that stalls in the middle of a transaction. The hosts here
// speak through the binding's host side and drive nvmeof/auth's Host by
// hand, so that they can stop, lie or go wrong at any step.

func genKey(t testing.TB, nqn string) string {
	t.Helper()
	k, err := auth.GenerateKey(auth.KeyOptions{HMAC: 1, NQN: nqn}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// authTarget serves testSubNQN to testHostNQN only, with key, requiring
// authentication.
func authTarget(t *testing.T, key string) (*server, string) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	cfg.Subsystems[0].AllowAnyHost = false
	cfg.Subsystems[0].AllowedHosts = []string{testHostNQN}
	cfg.Subsystems[0].AuthRequired = true
	cfg.Hosts = []HostConfig{{NQN: testHostNQN, DHCHAPKey: key, DHCHAPDHGroup: "ffdhe2048"}}
	s := startServer(t, cfg)
	return s, portAddr(s, 1)
}

// authenticate runs a DH-HMAC-CHAP transaction on q with key; it returns
// the transaction's error (an *auth.Error), or a command's error.
func authenticate(t testing.TB, q *rdma.HostQueue, key string) error {
	t.Helper()
	sec, err := auth.ParseSecret(key)
	if err != nil {
		t.Fatal(err)
	}
	h, err := auth.NewHost(auth.HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: sec})
	if err != nil {
		t.Fatal(err)
	}
	step := h.Start(1)
	for {
		var r *rdma.HostRequest
		switch step.Action {
		case auth.HostSend:
			r = &rdma.HostRequest{Data: step.Data, Write: true}
			r.SQE.BuildAuthSend(uint32(len(step.Data)))
		case auth.HostReceive:
			r = &rdma.HostRequest{Data: make([]byte, step.AllocLen)}
			r.SQE.BuildAuthReceive(step.AllocLen)
		default:
			return step.Err
		}
		err := do(t, q, r)
		var st nvmeof.Status
		if err != nil && !errors.As(err, &st) {
			return err
		}
		step = h.Complete(st, r.Data)
	}
}

// readBlock reads LBA 0 of namespace 1 on q.
func readBlock(t testing.TB, q *rdma.HostQueue) error {
	return do(t, q, rw(false, 1, 0, make([]byte, 512), 512))
}

// waitClosed waits for the target to close q (a hang guard, not a bound).
func waitClosed(t testing.TB, q *rdma.HostQueue, what string) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(hang):
		t.Fatalf("%s: the target did not close the queue", what)
	}
}

// TestAuthForgedHost: a host that knows an allowed host NQN but not its
// key gets a controller whose every command but the Fabrics ones is
// refused with Authentication Required, and loses it when its
// authentication fails.
func TestAuthForgedHost(t *testing.T) {
	key := genKey(t, testHostNQN)
	s, addr := authTarget(t, key)
	q := mustDial(t, addr, 0)
	res, err := connectCmd(t, q, testSubNQN, testHostNQN, nvmeof.CNTLIDDynamic, testKATO)
	if err != nil || !nvmeof.ConnectResponse(res).ATR() {
		t.Fatalf("admin Connect: result %#x (%v), want ATR set", res, err)
	}
	h := &host{t: t, addr: addr, nqn: testHostNQN, subnqn: testSubNQN, admin: q, cntlid: uint16(res)}
	h.enable() // Property Get/Set are Fabrics commands: allowed
	_, err = h.identify(nvmeof.CNSController, 0, 0)
	wantStatus(t, "Identify before authentication", err, nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
	r := &rdma.HostRequest{}
	r.SQE.BuildKeepAlive()
	wantStatus(t, "Keep Alive before authentication", h.adminDo(r), nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
	_, err = h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(1, 1))
	wantStatus(t, "Set Features before authentication", err, nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
	// A wrong key: AUTH_Failure1, then the controller is gone.
	err = authenticate(t, h.admin, genKey(t, testHostNQN))
	var ae *auth.Error
	if !errors.As(err, &ae) || !ae.Remote || ae.Explanation != auth.ExplFailed {
		t.Fatalf("authentication with a wrong key: %v, want AUTH_Failure1 (failed)", err)
	}
	waitClosed(t, h.admin, "failed authentication")
	waitFor(t, "the controller torn down", hang, func() bool { return controllers(s) == 0 })
}

// authenticatedHost connects testHostNQN's admin queue, authenticates it
// with key, enables the controller and asks for n I/O queues.
func authenticatedHost(t *testing.T, addr, key string, kato uint32, n int) *host {
	t.Helper()
	h, err := connectHost(t, addr, testSubNQN, testHostNQN, kato)
	if err != nil {
		t.Fatal(err)
	}
	if err := authenticate(t, h.admin, key); err != nil {
		t.Fatal(err)
	}
	h.enable()
	if _, err := h.setFeature(nvmeof.FeatNumQueues, nvmeof.EncodeNumQueues(n, n)); err != nil {
		t.Fatal(err)
	}
	return h
}

// controllers counts the controllers of testSubNQN.
func controllers(s *server) int {
	s.regMu.RLock()
	sub := s.subsystems[testSubNQN]
	s.regMu.RUnlock()
	return len(sub.controllers())
}

// keepBusy sends Property Gets on h's admin queue until it closes: they
// keep the keep-alive timer going (every command restarts it), not the
// authentication deadline.
func keepBusy(h *host) {
	go func() {
		for {
			select {
			case <-h.admin.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := h.propGet(nvmeof.PropCSTS); err != nil {
				return
			}
		}
	}()
}

func mustDial(t testing.TB, addr string, qid uint16) *rdma.HostQueue {
	t.Helper()
	q, err := dial(t, addr, qid, rdma.AdminQueueSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// TestAuthQIDHijack: a host that forged the NQN of an authenticated host
// and connects I/O queues to its controller takes no QID (the real host
// connects them), can do nothing on them, and does not bring the
// controller down by failing its authentication; once the real host's
// queue has authenticated, its QID is refused to everyone else.
func TestAuthQIDHijack(t *testing.T) {
	key := genKey(t, testHostNQN)
	s, addr := authTarget(t, key)
	h := authenticatedHost(t, addr, key, testKATO, 2)
	// The attacker is first on QID 1.
	evil, err := dial(t, addr, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer evil.Close()
	res, err := connectCmd(t, evil, testSubNQN, testHostNQN, h.cntlid, 0)
	if err != nil || !nvmeof.ConnectResponse(res).ATR() {
		t.Fatalf("attacker's I/O Connect: %#x %v, want ATR", res, err)
	}
	wantStatus(t, "attacker's read", readBlock(t, evil), nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
	// The real host connects QID 1 all the same, and authenticates it.
	q, err := h.connectIO(1, 32)
	if err != nil {
		t.Fatalf("the real host's QID 1: %v", err)
	}
	wantStatus(t, "read before the queue's authentication", readBlock(t, q), nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
	if err := authenticate(t, q, key); err != nil {
		t.Fatal(err)
	}
	if err := readBlock(t, q); err != nil {
		t.Fatal(err)
	}
	// The attacker fails: its queue goes, the controller stays.
	if err := authenticate(t, evil, genKey(t, testHostNQN)); err == nil {
		t.Fatal("the attacker authenticated")
	}
	waitClosed(t, evil, "attacker's failed authentication")
	if err := readBlock(t, q); err != nil {
		t.Fatalf("the real host after the attack: %v", err)
	}
	if n := controllers(s); n != 1 {
		t.Fatalf("%d controllers, want 1", n)
	}
	// QID 1 is taken by an authenticated queue: refused.
	evil2, err := dial(t, addr, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer evil2.Close()
	_, err = connectCmd(t, evil2, testSubNQN, testHostNQN, h.cntlid, 0)
	wantStatus(t, "Connect of a QID an authenticated queue holds", err, nvmeof.StatusCommandSequenceError|nvmeof.StatusDNR)
	// Re-authentication on request keeps the queue usable.
	if err := authenticate(t, q, key); err != nil {
		t.Fatalf("re-authentication: %v", err)
	}
	if err := readBlock(t, q); err != nil {
		t.Fatal(err)
	}
}

// TestAuthStall: a host that stops answering, before or in the middle of
// a transaction, loses its queue after the authentication timeout (its
// keep-alive timeout, here the minimum of 1 s); an authenticated queue
// whose re-authentication stalls stays. The test waits for events, never
// for durations.
func TestAuthStall(t *testing.T) {
	key := genKey(t, testHostNQN)
	_, addr := authTarget(t, key)
	const kato = 1000 // ms: the authentication timeout is 1 s

	t.Run("never starts", func(t *testing.T) {
		h, err := connectHost(t, addr, testSubNQN, testHostNQN, kato)
		if err != nil {
			t.Fatal(err)
		}
		keepBusy(h)
		waitClosed(t, h.admin, "a host that never authenticates")
	})
	t.Run("stalls after the challenge", func(t *testing.T) {
		h, err := connectHost(t, addr, testSubNQN, testHostNQN, kato)
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := auth.ParseSecret(key)
		ah, _ := auth.NewHost(auth.HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: sec})
		step := ah.Start(7)
		r := &rdma.HostRequest{Data: step.Data, Write: true}
		r.SQE.BuildAuthSend(uint32(len(step.Data)))
		if err := h.adminDo(r); err != nil {
			t.Fatal(err)
		}
		r = &rdma.HostRequest{Data: make([]byte, 4096)}
		r.SQE.BuildAuthReceive(4096)
		if err := h.adminDo(r); err != nil {
			t.Fatal(err)
		}
		// No Reply.
		keepBusy(h)
		waitClosed(t, h.admin, "a host that stalls after the challenge")
	})
	t.Run("I/O queue stalls, controller stays", func(t *testing.T) {
		h := authenticatedHost(t, addr, key, kato, 1)
		q, err := h.connectIO(1, 32)
		if err != nil {
			t.Fatal(err)
		}
		// Keep Alives for the controller while the I/O queue stalls.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				r := &rdma.HostRequest{}
				r.SQE.BuildKeepAlive()
				if h.adminDo(r) != nil {
					return
				}
			}
		}()
		waitClosed(t, q, "an I/O queue that never authenticates")
		if _, err := h.identify(nvmeof.CNSController, 0, 0); err != nil {
			t.Fatalf("the controller after its I/O queue timed out: %v", err)
		}
	})
}
