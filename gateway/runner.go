package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Cluster is where the group's state lives: one RADOS object per ANA
// group with an exclusive lock and the holder's record (see [DialRADOS]).
// Each method is bounded by the cluster's operation timeout. Errors match
// [ErrFenced] when this gateway's client is blocklisted, [ErrLockBusy]
// when the lock is another's.
type Cluster interface {
	// Read returns the group's lock holder and record.
	Read(group uint32) (Observed, error)
	// Acquire locks the group for one lease and writes rec as its record
	// (clearing the handover request).
	Acquire(group uint32, rec Record) error
	// Renew renews the lock for one lease, rewrites the record if rec
	// differs from the one written, and returns the handover request.
	Renew(group uint32, rec Record) (string, error)
	// Fence blocklists every address (address vectors as rados_getaddrs
	// gives them: each address inside is blocklisted).
	Fence(addrs []string) error
	// Release writes rec (Released, HandoverTo) and unlocks.
	Release(group uint32, rec Record) error
	// RequestHandover writes name as the group's handover request and
	// notifies the holder.
	RequestHandover(group uint32, name string) error
	// CheckConfig compares canonical, this gateway's group configuration,
	// with the one stored in the cluster (storing it if there is none):
	// ok, or the differences.
	CheckConfig(canonical string) (ok bool, diff string, err error)
	// Addrs returns the address vector of the Cluster's own RADOS client.
	Addrs() string
	// Changed is signalled when a group object is notified (watch), so
	// that the runner looks at once rather than at its next tick; nil if
	// there is no watch.
	Changed() <-chan struct{}
}

// Applier applies ownership to the gateway's target.
type Applier interface {
	// SetANA sets the group optimized or inaccessible on every port (an
	// ANA change to the hosts) and returns once applied.
	SetANA(group uint32, optimized bool) error
	// Flush flushes the group's namespaces (after SetANA inaccessible, so
	// that no new write comes in).
	Flush(group uint32) error
	// Addrs returns the address vectors of every RADOS client through
	// which the gateway may write to the group's images: the rbd backends
	// of the group's namespaces, closed ones included (see
	// backend.CephClients), and no client that serves another group, so
	// that fencing them leaves the gateway's other groups alone.
	Addrs(group uint32) []string
	// Reopen replaces the RADOS clients of the group's namespaces with
	// new ones (a new client has a new address nonce and is not
	// blocklisted): called before the gateway takes back a group that
	// another gateway held since, which fenced the old ones. The group is
	// inaccessible here meanwhile.
	Reopen(group uint32) error
	// WaitForLatestOSDMap makes the RADOS clients of the group's
	// namespaces (those that will carry its writes) wait for the
	// cluster's latest OSD map: their next operations carry its epoch, and
	// an OSD handles them only once it has that map, with the fence's
	// blocklist entries. Called before every acquisition.
	WaitForLatestOSDMap(group uint32) error
	// ServeUntil sets until when the target may serve the group's I/O
	// (target.Target.SetServingDeadline): every read and write past it is
	// refused, so that a gateway that ran late (frozen, or its renewals
	// stalled) serves nothing its lease no longer covers. It must not
	// block.
	ServeUntil(group uint32, until time.Time)
	// Readiness says whether the target can serve the group now and how
	// many hosts can use it here (it gates failback: failback.go). It is
	// called on every tick of the runner: it must not block or do I/O.
	Readiness(group uint32) Readiness
}

// InFlightAnswerer is an Applier that can answer the group's commands still
// in their backends at once with an ANA path error, keeping their buffers
// until the backends return (target.Target.AnswerGroupInFlight): the
// runner's ActAnswerInFlight, run off the runner's loop (the answers are
// socket writes). It returns how many commands it answered.
type InFlightAnswerer interface {
	AnswerInFlight(group uint32) (int, error)
}

// Event is an action the runner carried out, with its outcome, for
// tests, logs and metrics.
type Event struct {
	At     time.Time
	Action Action
	Err    error // the operation's result (cluster actions) or SetANA's
}

// Runner drives a [Machine] with a [Cluster] and an [Applier].
type Runner struct {
	cfg       Config
	canonical string
	cl        Cluster
	ap        Applier
	log       *zap.Logger
	// Tick is how often the machine is ticked: RenewInterval/4, at most
	// 250 ms.
	tick time.Duration
	// OnEvent, if set, is called (on the runner's goroutine) after each
	// action; it must not block.
	OnEvent func(Event)

	mu     sync.Mutex
	m      *Machine
	status []GroupStatus
	degr   string
	fences int

	// fencedOwn: this gateway's own clients (address vectors) that its
	// own fences blocklisted (ActFence Own) before it replaced them: they
	// can write no more, so its records leave them out, and so do its
	// next fences.
	fencedOwn map[string]bool

	results chan func() []Action
	ops     sync.WaitGroup // cluster operations on their goroutines

	// update is the group state a version of the group's configuration
	// set (SetGroupState), taken by the loop at its next turn; updated
	// signals it.
	update  *groupUpdate
	updated chan struct{}
	drained bool // as the machine last took it
}

// groupUpdate is SetGroupState's input.
type groupUpdate struct {
	preferred map[uint32]string
	drained   bool
}

// NewRunner returns a runner; canonical is this gateway's group
// configuration in canonical form (checked against the cluster's).
func NewRunner(cfg Config, canonical string, cl Cluster, ap Applier, log *zap.Logger) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := NewMachine(cfg)
	r := &Runner{cfg: cfg, canonical: canonical, cl: cl, ap: ap, log: log, m: m,
		tick:    min(cfg.RenewInterval/4, 250*time.Millisecond),
		results: make(chan func() []Action, len(cfg.Groups)+1),
		updated: make(chan struct{}, 1),
		status:  m.Status(), degr: m.Degraded()}
	return r, nil
}

// Status returns the groups' states and why the gateway does not take
// ownership ("" if it may).
func (r *Runner) Status() ([]GroupStatus, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.status), r.degr
}

// SetGroupState gives the machine the ANA groups' preferred owners (by
// group; groups it does not have are ignored) and whether this gateway is
// drained, as a version of the group's configuration says (drain.go). The
// loop applies them at its next turn (before its first tick, if it has
// not run yet). Safe from any goroutine.
func (r *Runner) SetGroupState(preferred map[uint32]string, drained bool) {
	r.mu.Lock()
	r.update = &groupUpdate{preferred: maps.Clone(preferred), drained: drained}
	r.mu.Unlock()
	select {
	case r.updated <- struct{}{}:
	default:
	}
}

// Drained reports whether the machine runs drained (SetGroupState taken).
func (r *Runner) Drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drained
}

// takeUpdate applies the last SetGroupState to the machine.
func (r *Runner) takeUpdate() {
	r.mu.Lock()
	u := r.update
	r.update = nil
	r.mu.Unlock()
	if u == nil {
		return
	}
	for id, name := range u.preferred {
		if _, ok := r.cfg.Groups[id]; ok {
			r.m.SetPreferred(id, name)
		}
	}
	if u.drained != r.m.Drained() {
		r.log.Info("gateway: drained state from the group's configuration", zap.Bool("drained", u.drained))
	}
	r.m.SetDrained(u.drained)
	r.mu.Lock()
	r.drained = u.drained
	r.mu.Unlock()
}

// Fences returns the number of fences this runner performed.
func (r *Runner) Fences() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fences
}

// Run runs until ctx ends (it then releases the groups it owns, bounded by
// release, and returns nil; with release <= 0 it abandons them: their
// leases expire and the next owner fences this gateway) or the gateway is fenced (it returns an error
// matching ErrFenced: the caller exits non-zero).
func (r *Runner) Run(ctx context.Context, release time.Duration) error {
	t := time.NewTicker(r.tick)
	defer t.Stop()
	checked, checking := false, false
	pending := 0
	for {
		now := time.Now()
		var acts []Action
		if !checked && !checking {
			checking = true
			pending++
			r.ops.Add(1)
			go func() {
				defer r.ops.Done()
				ok, diff, err := r.cl.CheckConfig(r.canonical)
				r.results <- func() []Action {
					checking = false
					if err != nil {
						r.log.Warn("gateway: cannot check the group configuration against the cluster's", zap.Error(err))
						if errors.Is(err, ErrFenced) {
							return []Action{{Kind: ActExitFenced, Reason: err.Error()}}
						}
						return nil
					}
					checked = true
					if !ok {
						r.log.Error("gateway: this gateway's group configuration differs from the one stored in the cluster: "+
							"it will not take ownership of any group (degraded)", zap.String("difference", diff))
					}
					r.m.ConfigChecked(ok, diff)
					return nil
				}
			}()
		}
		if ob, ok := r.ap.(BackendObserver); ok {
			// The group's backends' health: an input of the machine
			// like any result (Machine.BackendObserved).
			for id := range r.cfg.Groups {
				acts = append(acts, r.m.BackendObserved(id, now, ob.BackendHealth(id))...)
			}
		}
		for id := range r.cfg.Groups {
			r.m.SetReadiness(id, r.ap.Readiness(id))
		}
		r.takeUpdate()
		acts = append(acts, r.m.Tick(now)...)
		for len(acts) > 0 {
			var err error
			acts, err = r.do(acts, &pending)
			if err != nil {
				return err
			}
		}
		r.publish()
		select {
		case <-ctx.Done():
			return r.shutdown(release, pending)
		case <-t.C:
		case <-r.cl.Changed():
			r.m.Notified()
		case <-r.updated:
			// Taken at the top of the loop.
		case f := <-r.results:
			pending--
			acts = f()
			for len(acts) > 0 {
				var err error
				if acts, err = r.do(acts, &pending); err != nil {
					return err
				}
			}
		}
	}
}

func (r *Runner) publish() {
	st, d := r.m.Status(), r.m.Degraded()
	r.mu.Lock()
	r.status, r.degr = st, d
	r.mu.Unlock()
}

// record is this gateway's record of group g: only the clients of g's
// namespaces, never the Cluster's own (it serves every group).
//
// The record names the clients that may still write to the group's
// images: those the Applier has on them (open ones, and closed ones: one
// may have had a write in flight when it closed), less those this
// gateway fenced itself (its own old clients, blocklisted before it took
// the group back on new ones: ActFence Own). So a successor's fence is
// bounded by the clients in use, however many hand-overs came before.
func (r *Runner) record(g uint32, a Action) Record {
	return Record{Name: r.cfg.Name, Session: r.cfg.Session, Addrs: r.writers(g), Epoch: a.Epoch, Failbacks: a.Failbacks, BackendDowns: a.BackendDowns}
}

// writers returns the Applier's clients of group g (Applier.Addrs) that
// this gateway did not fence itself, each once. (An acquisition calls it
// off the loop, after its reopen.)
func (r *Runner) writers(g uint32) []string {
	all := r.ap.Addrs(g)
	r.mu.Lock()
	defer r.mu.Unlock()
	var addrs []string
	for _, a := range all {
		if !r.fencedOwn[a] && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

func (r *Runner) event(a Action, err error) {
	if r.OnEvent != nil {
		r.OnEvent(Event{At: time.Now(), Action: a, Err: err})
	}
}

// do carries out acts: local ones now, cluster ones on a goroutine whose
// result comes back through r.results. It returns the actions that local
// ones produced (a group given up when the target refused to serve it) or
// ErrFenced.
func (r *Runner) do(acts []Action, pending *int) ([]Action, error) {
	var more []Action
	for _, a := range acts {
		g := a.Group
		async := func(op func() error, done func(error) []Action) {
			*pending++
			r.ops.Add(1)
			go func() {
				defer r.ops.Done()
				err := op()
				r.results <- func() []Action {
					r.event(a, err)
					switch {
					case err != nil && a.Kind != ActRead:
						r.log.Warn("gateway: "+a.String()+" failed", zap.Error(err))
					case err == nil && a.Kind != ActRead && a.Kind != ActRenew:
						r.log.Info("gateway: " + a.String() + ": done")
					}
					return done(err)
				}
			}()
		}
		switch a.Kind {
		case ActSetANA:
			report := func(err error) []Action {
				r.event(a, err)
				if err != nil {
					r.log.Error("gateway: "+a.String()+" failed", zap.Error(err))
				} else {
					r.log.Info("gateway: " + a.String())
				}
				return r.m.SetANADone(g, a.Optimized, time.Now(), err)
			}
			if r.m.Exited() {
				// On the way out (fenced): at once, before the exit.
				report(r.ap.SetANA(g, a.Optimized))
				continue
			}
			// Off the loop: a slow reload must not delay renewals.
			*pending++
			r.ops.Add(1)
			go func() {
				defer r.ops.Done()
				err := r.ap.SetANA(g, a.Optimized)
				r.results <- func() []Action { return report(err) }
			}()
		case ActAnswerInFlight:
			an, ok := r.ap.(InFlightAnswerer)
			if !ok {
				continue
			}
			report := func(n int, err error) []Action {
				r.event(a, err)
				if err != nil {
					r.log.Warn("gateway: "+a.String()+" failed", zap.Error(err))
				} else {
					r.log.Info("gateway: "+a.String(), zap.Int("answered", n))
				}
				return nil
			}
			if r.m.Exited() {
				// On the way out (fenced): at once, before the exit.
				report(an.AnswerInFlight(g))
				continue
			}
			// Off the loop: an answer is a socket write, which a host
			// that does not read can hold up to the write timeout, and
			// nothing may delay renewals. Nothing waits for it.
			*pending++
			r.ops.Add(1)
			go func() {
				defer r.ops.Done()
				n, err := an.AnswerInFlight(g)
				r.results <- func() []Action { return report(n, err) }
			}()
		case ActServeUntil:
			// At once, on the loop: before the ActSetANA optimized that
			// may follow, and before anything is served past it.
			r.ap.ServeUntil(g, a.Until)
		case ActStepDown:
			r.event(a, nil)
			r.log.Warn("gateway: stepped down from group", zap.Uint32("group", g), zap.String("reason", a.Reason))
		case ActExitFenced:
			r.event(a, nil)
			r.log.Error("gateway: this gateway was fenced by another: it stops serving and exits", zap.String("reason", a.Reason))
			r.publish()
			if err := r.m.FenceErr(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s", ErrFenced, a.Reason)
		case ActExitStepDownFailed:
			r.event(a, nil)
			r.log.Error("gateway: a group could not be made inaccessible: this gateway stops serving and exits", zap.String("reason", a.Reason))
			r.publish()
			return nil, fmt.Errorf("%w: %s", ErrStepDownFailed, a.Reason)
		case ActRead:
			var o Observed
			async(func() (err error) { o, err = r.cl.Read(g); return err },
				func(err error) []Action { return r.m.ReadDone(g, time.Now(), o, err) })
		case ActAcquire:
			async(func() error {
				if a.Reopen {
					if err := r.ap.Reopen(g); err != nil {
						return fmt.Errorf("reopen the group's namespaces with new RADOS clients: %w", err)
					}
				}
				// The OSD-map barrier on the clients that will write (a
				// fence's own wait is on the Cluster's client, which
				// writes nothing to the images).
				if err := r.ap.WaitForLatestOSDMap(g); err != nil {
					return fmt.Errorf("OSD-map barrier on the group's clients: %w", err)
				}
				// After the reopen: the record names the new clients.
				return r.cl.Acquire(g, r.record(g, a))
			},
				func(err error) []Action { return r.m.AcquireDone(g, err) })
		case ActRenew:
			rec := r.record(g, a)
			var req string
			async(func() (err error) { req, err = r.cl.Renew(g, rec); return err },
				func(err error) []Action { return r.m.RenewDone(g, req, err) })
		case ActFence:
			addrs := slices.Clone(a.Addrs)
			msg := "gateway: fencing the previous holder before taking the group"
			var own []string
			if a.Own {
				// Every client this gateway has on the group's images
				// that may still write (closed ones included, not those
				// it fenced already: writers): the acquisition that
				// follows replaces them all (ActAcquire Reopen), so the
				// new ones, opened after this, are not among them.
				own = r.writers(g)
				for _, v := range own {
					if !slices.Contains(addrs, v) {
						addrs = append(addrs, v)
					}
				}
				msg = "gateway: fencing the previous holder (this gateway's own old clients of the group included) before taking the group on new clients"
			}
			r.log.Warn(msg, zap.Uint32("group", g), zap.Strings("addrs", addrs), zap.String("reason", a.Reason))
			// The event names what was fenced.
			a.Addrs = addrs
			async(func() error { return r.cl.Fence(addrs) },
				func(err error) []Action {
					if err == nil {
						r.mu.Lock()
						r.fences++
						if r.fencedOwn == nil {
							r.fencedOwn = map[string]bool{}
						}
						for _, v := range own {
							r.fencedOwn[v] = true
						}
						r.mu.Unlock()
					}
					return r.m.FenceDone(g, time.Now(), err)
				})
		case ActRelease:
			rec := r.record(g, a)
			rec.Released, rec.HandoverTo = true, a.To
			noDrain := a.NoDrain
			async(func() error {
				if noDrain {
					return r.cl.Release(g, rec)
				}
				if err := r.ap.Flush(g); err != nil {
					return fmt.Errorf("flush before the release: %w", err)
				}
				return r.cl.Release(g, rec)
			}, func(err error) []Action { return r.m.ReleaseDone(g, err) })
		case ActRequestHandover:
			async(func() error { return r.cl.RequestHandover(g, r.cfg.Name) },
				func(err error) []Action { return r.m.RequestDone(g, err) })
		}
	}
	return more, nil
}

// Quiesce waits up to d for the cluster operations still running after Run
// returned (a fence can take the monitor's timeout) and reports whether
// none is left: only then may the Cluster be closed.
func (r *Runner) Quiesce(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		r.ops.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// shutdown waits for the operations out, then releases what this gateway
// owns (inaccessible, flush, release to nobody), within d.
func (r *Runner) shutdown(d time.Duration, pending int) error {
	if d <= 0 {
		return nil
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for ; pending > 0; pending-- {
		select {
		case f := <-r.results:
			f() // results are applied, actions dropped
		case <-deadline.C:
			return nil
		}
	}
	acts := r.m.Shutdown()
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		switch a.Kind {
		case ActSetANA:
			err := r.ap.SetANA(a.Group, a.Optimized)
			r.event(a, err)
			if err != nil {
				r.log.Warn("gateway: inaccessible at shutdown failed: not released; the next owner fences this gateway", zap.Uint32("group", a.Group), zap.Error(err))
			}
			// The release follows once the group is inaccessible.
			acts = append(acts, r.m.SetANADone(a.Group, a.Optimized, time.Now(), err)...)
		case ActRelease:
			rec := r.record(a.Group, a)
			rec.Released = true
			done := make(chan error, 1)
			r.ops.Add(1)
			go func() {
				defer r.ops.Done()
				if err := r.ap.Flush(a.Group); err != nil {
					done <- err
					return
				}
				done <- r.cl.Release(a.Group, rec)
			}()
			select {
			case err := <-done:
				r.event(a, err)
				if err != nil {
					r.log.Warn("gateway: release at shutdown failed: the next owner fences this gateway", zap.Uint32("group", a.Group), zap.Error(err))
				} else {
					r.log.Info("gateway: released group at shutdown", zap.Uint32("group", a.Group))
				}
			case <-deadline.C:
				return nil
			}
		}
	}
	r.publish()
	return nil
}
