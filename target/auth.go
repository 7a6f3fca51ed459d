package target

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// In-band authentication (DH-HMAC-CHAP, NVMe Base 2.0 §8.13) of the
// target's queues, driving the pure state machine of nvmeof/auth.
//
// A host must authenticate when the configuration has a dhchap_key for it
// (as nvmet), or when the subsystem or the port says auth_required (then a
// host without a key cannot get in). The Connect response of the admin
// queue and of every I/O queue then sets ATR (nvmet_connect_result), and
// until the queue is authenticated every command but the Fabrics ones
// (Connect, Property Get/Set, Authentication Send/Receive) is refused with
// Authentication Required (nvmet_check_ctrl_status).
//
// Where this target is stricter than nvmet:
//
//   - An I/O queue that requires authentication does not take its QID
//     until it has authenticated, and a failed authentication on it closes
//     that queue only, never the controller: a host that forged another
//     host's NQN can neither hold the real host's QIDs nor tear its
//     controller down by failing on purpose.
//   - A queue must authenticate within the authentication timeout of its
//     Connect, and a transaction whose host stalls is ended after it: an
//     unauthenticated queue is then dropped (the admin queue with its
//     controller). nvmet only ends the transaction.
//   - Re-authentication keeps the queue usable (its previous
//     authentication stands until a transaction fails).
//   - The deadline of an unauthenticated queue is set at its Connect and
//     nothing the peer sends moves it; its first failed transaction ends
//     it (a new AUTH_Negotiate does not wipe a failure whose AUTH_Failure1
//     was not fetched; nvmet restarts), and a refused command does not
//     feed the controller's keep-alive.
//   - Diffie-Hellman exponentiations (the costly steps, ffdhe8192 above
//     all) run at most dhSlots at a time: however many peers try, their
//     share of the CPU is bounded, and a queue waits for a slot no longer
//     than its deadline.

// maxAuthTimeout bounds the authentication timeout: the wait for a
// queue's first authentication after its Connect, and for each message of
// a transaction. It is the controller's keep-alive timeout (nvmet
// auth_expire_secs), at most this.
const maxAuthTimeout = auth.DefaultTimeout

// failureGrace is how long a queue whose authentication failed stays
// connected after the answer that says so (AUTH_Failure1, or the
// completion of the host's AUTH_Failure2), refusing every command: the
// host closes it itself once it has read the answer. nvmet tears the
// controller down asynchronously too; a Linux host (siw) that sees the
// connection end before it has processed the answer misses the failure
// and waits for its command timeout instead.
const failureGrace = 2 * time.Second

// dhSlots bounds the Diffie-Hellman exponentiations that run at once, so
// that peers without a key (who pay nothing for the target's work) get a
// bounded share of the CPU: half the CPUs the Go scheduler uses, at least
// one. A queue waits for a slot in arrival order (a channel's waiters are
// served first come, first served).
var dhSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))

// authTimeout is the authentication timeout of a controller with
// keep-alive timeout kato.
func authTimeout(kato time.Duration) time.Duration {
	if kato <= 0 || kato > maxAuthTimeout {
		return maxAuthTimeout
	}
	return kato
}

// hostAuth returns the keys of host and whether it must authenticate to
// sub through the port with configuration pc. The caller holds regMu.
func (s *server) hostAuth(sub *subsystem, pc *PortConfig, host string) (*hostKeys, bool) {
	if sub.disc {
		return nil, false
	}
	var k *hostKeys
	if keys := s.authKeys.Load(); keys != nil {
		k = (*keys)[host]
	}
	return k, k != nil || sub.cfg.Load().AuthRequired || pc.AuthRequired
}

// setAuthKeys installs the keys of a (re)loaded configuration. Queues keep
// their authentication; the new keys apply from their next transaction.
func (s *server) setAuthKeys(keys authKeys) {
	s.authKeys.Store(&keys)
	for _, sub := range s.subsystemList() {
		for _, c := range sub.controllers() {
			c.mu.Lock()
			queues := append([]*queue(nil), c.queues...)
			c.mu.Unlock()
			for _, q := range queues {
				if q == nil {
					continue
				}
				if a := q.auth.Load(); a != nil {
					a.setKeys(keys[c.hostNQN])
				}
			}
		}
	}
}

// queueAuth is the authentication state of one queue.
type queueAuth struct {
	q *queue
	c *controller
	// ok is whether the queue may carry commands other than Fabrics ones:
	// authenticated, or not required to.
	ok atomic.Bool

	mu      sync.Mutex
	ac      *auth.Controller
	timeout time.Duration
	timer   *time.Timer
	gen     uint64 // bumped whenever the timer is re-armed or stopped
	// deadline is when an unauthenticated queue is dropped: its Connect
	// plus the authentication timeout. Nothing the peer sends moves it;
	// zero for a queue that need not authenticate.
	deadline time.Time
	done     bool // the queue has ended
	failed   bool // the authentication failed: the queue is being dropped
	// ioSize is the size of an I/O queue, recorded when it takes its QID.
	ioSize int
}

// controllerConfig is what the state machine knows of the host.
func (c *controller) authConfig(k *hostKeys, timeout time.Duration) auth.ControllerConfig {
	cfg := auth.ControllerConfig{SubNQN: c.sub.nqn, HostNQN: c.hostNQN, Timeout: timeout}
	if k != nil {
		cfg.HostSecret, cfg.CtrlSecret, cfg.Hash, cfg.DHGroup = k.host, k.ctrl, k.hash, k.group
	}
	return cfg
}

// newQueueAuth gives q its authentication state. When required, the queue
// must authenticate within the timeout or be dropped.
func newQueueAuth(q *queue, c *controller, k *hostKeys, required bool, timeout time.Duration) (*queueAuth, error) {
	ac, err := auth.NewController(c.authConfig(k, timeout))
	if err != nil {
		return nil, err
	}
	a := &queueAuth{q: q, c: c, ac: ac, timeout: timeout}
	a.ok.Store(!required)
	if required {
		a.deadline = time.Now().Add(timeout)
		a.mu.Lock()
		a.armLocked(timeout)
		a.mu.Unlock()
	}
	return a, nil
}

// setKeys replaces the keys (from the next transaction on).
func (a *queueAuth) setKeys(k *hostKeys) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ac.SetConfig(a.c.authConfig(k, a.timeout)); err != nil {
		a.c.log.Warn("keys not applied to a queue", zap.Uint16("qid", a.q.qid), zap.Error(err))
	}
}

// armLocked (re)starts the timer, never beyond the deadline of a queue
// not yet authenticated. The caller holds mu.
func (a *queueAuth) armLocked(d time.Duration) {
	if !a.ok.Load() && !a.deadline.IsZero() {
		d = min(d, max(time.Until(a.deadline), 0))
	}
	a.gen++
	gen := a.gen
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timer = time.AfterFunc(d, func() { a.expired(gen) })
}

// stopLocked stops the timer. The caller holds mu.
func (a *queueAuth) stopLocked() {
	a.gen++
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// closed stops the timer for good (the queue has ended). A failure the
// host did not stay to fetch is logged and counted all the same.
func (a *queueAuth) closed() {
	a.mu.Lock()
	a.done = true
	a.stopLocked()
	pending := a.ac.Failed()
	failed := a.failed
	a.mu.Unlock()
	if pending != nil && !failed {
		a.fail(pending, "auth_failed", 0)
	}
}

// expired is the timer's end: a queue not yet authenticated is dropped; an
// authenticated queue whose re-authentication stalled only ends the
// transaction (nvmet_auth_expired_work).
func (a *queueAuth) expired(gen uint64) {
	a.mu.Lock()
	if a.done || gen != a.gen {
		a.mu.Unlock()
		return
	}
	a.timer = nil
	pending := a.ac.Failed()
	busy := a.ac.Expire()
	authenticated := a.ac.Authenticated()
	a.mu.Unlock()
	if authenticated {
		if busy {
			a.c.log.Info("re-authentication timed out; the queue stays authenticated", zap.Uint16("qid", a.q.qid))
		}
		return
	}
	if pending != nil {
		// The host did not fetch its AUTH_Failure1 in time.
		a.fail(pending, "auth_failed", 0)
		return
	}
	a.fail(&auth.Error{Detail: "no authentication within " + a.timeout.String(), Err: auth.ErrTimeout}, "auth_timeout", 0)
}

// fail logs a failed authentication (one line, rate-limited: a peer can
// cause it in bulk), counts it on the subsystem's series and drops the
// queue, at once or after failureGrace: the admin queue takes its
// controller along, and gives back the host's controller slot at once.
func (a *queueAuth) fail(err error, reason string, grace time.Duration) {
	a.ok.Store(false)
	a.mu.Lock()
	if a.failed {
		a.mu.Unlock()
		return
	}
	a.failed = true
	a.stopLocked()
	a.mu.Unlock()
	q, c := a.q, a.c
	lf := append(q.fields(), zap.String("host_nqn", c.hostNQN), zap.String("subsystem", c.sub.nqn),
		zap.Uint16("cntlid", c.cntlid), zap.Error(err))
	q.s.adm.Log(zap.WarnLevel, reason, "authentication failed", lf...)
	q.s.metricAuthFailed(c.sub.nqn)
	if q.qid == 0 {
		// The controller is as good as gone: it no longer counts
		// against limits.max_controllers_per_host, so that the real host
		// gets in while the failed peer reads its answer.
		c.releaseHostSlot()
	}
	drop := func() {
		if q.qid == 0 {
			c.teardown("authentication failed")
			return
		}
		q.close()
	}
	if grace <= 0 {
		drop()
		return
	}
	time.AfterFunc(grace, drop)
}

// handleAuth serves an Authentication Send or Receive on a connected queue
// (nvmet_execute_auth_send, nvmet_execute_auth_receive).
func (q *queue) handleAuth(c *controller, r request) {
	a := q.auth.Load()
	if a == nil {
		if c.sub.disc {
			// The discovery controller does not authenticate.
			q.respond(r, nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)
			return
		}
		// A host that authenticates unasked: it gets the keys configured
		// for it, if any (without, the transaction fails). Only the
		// engine goroutine sets q.auth.
		q.s.regMu.RLock()
		k, _ := q.s.hostAuth(c.sub, &q.port.cfg, c.hostNQN)
		q.s.regMu.RUnlock()
		var err error
		if a, err = newQueueAuth(q, c, k, false, authTimeout(c.ka.get())); err != nil {
			c.log.Warn("authentication state", zap.Error(err))
			q.respond(r, nvmeof.StatusInternalError|nvmeof.StatusDNR)
			return
		}
		q.auth.Store(a)
	}
	a.mu.Lock()
	failed := a.failed
	a.mu.Unlock()
	if failed {
		// Nothing more: the queue is being dropped.
		q.respond(r, nvmeof.StatusAuthRequired|nvmeof.StatusDNR)
		return
	}
	if r.SQE().FCType() == nvmeof.FCTypeAuthSend {
		q.cmd(r).kind = cmdAuth
		r.FetchData() // DataReady calls authSend
		return
	}
	a.run(r, false, func() auth.Result {
		res := a.ac.Receive(r.SQE(), uint32(len(r.Data())))
		if res.Status == nvmeof.StatusSuccess {
			d := r.Data()
			n := copy(d, res.Data)
			clear(d[n:])
		}
		return res
	})
}

// authSend continues an Authentication Send whose data has arrived.
func (q *queue) authSend(r request) {
	a := q.auth.Load()
	a.run(r, true, func() auth.Result { return a.ac.Send(r.SQE(), r.Data()) })
}

// run runs step (an Authentication Send or Receive on the state machine,
// under mu) and finishes r with its result. A step that computes a
// Diffie-Hellman exponentiation runs on its own goroutine once it holds
// one of dhSlots; a queue that gets none before its deadline (the Connect's,
// or the transaction's) is answered Command Interrupted and left to its
// timer.
func (a *queueAuth) run(r request, send bool, step func() auth.Result) {
	a.mu.Lock()
	dh := a.ac.NeedsDH(send)
	a.mu.Unlock()
	if !dh {
		a.mu.Lock()
		res := step()
		a.mu.Unlock()
		a.finish(r, res)
		return
	}
	wait := a.timeout
	if !a.ok.Load() && !a.deadline.IsZero() {
		wait = time.Until(a.deadline)
	}
	var done <-chan struct{}
	if conn := a.q.link(); conn != nil {
		done = conn.Done()
	}
	go func() {
		t := time.NewTimer(max(wait, 0))
		defer t.Stop()
		select {
		case dhSlots <- struct{}{}:
		case <-t.C:
			a.q.respond(r, nvmeof.StatusCommandInterrupted)
			return
		case <-done:
			a.q.respond(r, nvmeof.StatusCommandInterrupted) // only releases: the queue is gone
			return
		}
		a.mu.Lock()
		res := step()
		a.mu.Unlock()
		<-dhSlots
		a.finish(r, res)
	}()
}

// finish carries out a Result: the timer, the queue's state, the answer,
// then the failure (after the answer, so AUTH_Failure1 reaches the host).
func (a *queueAuth) finish(r request, res auth.Result) {
	q, c := a.q, a.c
	a.mu.Lock()
	switch res.Timer {
	case auth.TimerArm:
		d := res.Timeout
		if a.ac.Failed() != nil {
			// A failed transaction: the host has failureGrace to fetch
			// its AUTH_Failure1, then the queue is dropped.
			d = min(d, failureGrace)
		}
		a.armLocked(d)
	case auth.TimerStop:
		if res.Authenticated || res.Fatal {
			a.stopLocked()
		}
		// Not yet authenticated: the deadline of the Connect runs on.
	}
	a.mu.Unlock()
	first := res.Authenticated && !a.ok.Load()
	if first && q.qid != 0 && !c.installQueue(q) {
		// Another queue of the host took the QID meanwhile.
		res.Fatal, res.Err = true, errors.New("QID already connected by an authenticated queue")
	} else if err := a.admit(first); err != nil {
		res.Fatal, res.Err, res.Status = true, err, nvmeof.StatusInternalError
	} else if first {
		a.ok.Store(true)
		if q.qid == 0 {
			// The keep-alive counts from here: nothing before
			// authentication fed it.
			c.ka.reset()
		}
		h, g := a.ac.Negotiated()
		if q.qid == 0 {
			c.log.Info("host authenticated", zap.Stringer("hash", h), zap.Stringer("dhgroup", g))
		} else {
			c.log.Debug("I/O queue authenticated", zap.Uint16("qid", q.qid), zap.Stringer("hash", h), zap.Stringer("dhgroup", g))
		}
	}
	q.respond(r, res.Status)
	switch {
	case res.Fatal:
		err := res.Err
		if err == nil {
			err = errors.New("authentication failed")
		}
		a.fail(err, "auth_failed", failureGrace)
	case res.Err != nil && res.Status != nvmeof.StatusSuccess:
		lf := append(q.fields(), zap.String("host_nqn", c.hostNQN), zap.String("subsystem", c.sub.nqn), zap.Error(res.Err))
		q.s.adm.Log(zap.WarnLevel, "auth_command_refused", "authentication command refused", lf...)
	}
}

// admit gives a queue that has just authenticated (first) its full
// resources, before the answer that tells its host: until then it had only
// what authentication needs (connectDone).
func (a *queueAuth) admit(first bool) error {
	if !first {
		return nil
	}
	conn := a.q.link()
	if conn == nil {
		return nil
	}
	if err := conn.Admit(); err != nil {
		return fmt.Errorf("queue resources unavailable: %w", err)
	}
	return nil
}

// authorized reports whether the queue may carry commands other than
// Fabrics ones.
func (q *queue) authorized() bool {
	a := q.auth.Load()
	return a == nil || a.ok.Load()
}

// installQueue gives an I/O queue that has just authenticated its QID,
// unless another queue holds it.
func (c *controller) installQueue(q *queue) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead.Load() || int(q.qid) > c.maxQID || c.queues[q.qid] != nil {
		return false
	}
	delete(c.unauth, q)
	c.queues[q.qid] = q
	c.ioQueues++
	c.ioSize = q.auth.Load().ioSize
	return true
}

// setupAuth decides at Connect whether q must authenticate and returns the
// Connect response (ATR set when it must). It runs before the queue is
// published to its controller.
func (q *queue) setupAuth(c *controller, k *hostKeys, required bool, ioSize int) (nvmeof.ConnectResponse, error) {
	resp := nvmeof.NewConnectResponse(c.cntlid)
	if !required {
		return resp, nil
	}
	a, err := newQueueAuth(q, c, k, true, authTimeout(c.ka.get()))
	if err != nil {
		return 0, err
	}
	a.ioSize = ioSize
	q.auth.Store(a)
	return resp | nvmeof.ConnectATR, nil
}
